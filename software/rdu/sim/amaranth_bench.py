"""Amaranth-simulator backend of :class:`rdu.sim.bench.Bench`."""

import time

from amaranth import ClockDomain, Module, Value
from amaranth.sim import Simulator

from .bench import Bench

__all__ = ["AmaranthBench", "RunStats"]


class RunStats:
    """What a run cost: ``cycles`` simulated in ``seconds`` of wall time."""

    def __init__(self, cycles, seconds):
        self.cycles = cycles
        self.seconds = seconds

    @property
    def cycles_per_second(self):
        return self.cycles / self.seconds if self.seconds else float("inf")

    def __repr__(self):
        return (f"RunStats(cycles={self.cycles}, seconds={self.seconds:.3f}, "
                f"cycles_per_second={self.cycles_per_second:.0f})")


class AmaranthBench(Bench):
    """Runs a test body on ``component`` in the Amaranth Python simulator.

    Parameters
    ----------
    component : wiring.Component
        The design; its ``sync`` domain is clocked by the bench.
    """

    tier = "amaranth"

    def __init__(self, component, **kwargs):
        super().__init__(**kwargs)
        self.component = component
        self._ctx = None
        self._resolved = {}
        self._edges = 0            # edges the body has awaited
        self._read_at = -1         # value of _edges at the body's last read

    def _resolve(self, path, field=None):
        key = (path, field)
        if key not in self._resolved:
            obj = self.component
            for part in path.split("."):
                obj = obj[int(part)] if part.isdigit() else getattr(obj, part)
            if field is not None:
                obj = getattr(obj, field)
            self._resolved[key] = Value.cast(obj)
        return self._resolved[key]

    async def cycles(self, count=1):
        for _ in range(count):
            await self._ctx.tick()
            self._edges += 1

    def set(self, path, value):
        if self._read_at == self._edges:
            # cocotb cannot write after its ReadOnly phase: keep both tiers to one contract
            raise RuntimeError(f"set({path!r}) after read() in the same cycle: advance with "
                               f"cycles() first (the Verilator tier cannot do this)")
        self._ctx.set(self._resolve(path), value)

    async def read(self, path):
        self._read_at = self._edges
        return self._ctx.get(self._resolve(path))

    async def reset(self, cycles=2):
        self._ctx.set(self._domain.rst, 1)
        await self.cycles(cycles)
        self._ctx.set(self._domain.rst, 0)

    def run(self, body, *, vcd=None):
        """Simulate until ``body(self)`` returns; return :class:`RunStats`.

        ``vcd`` names a VCD file to write (the Amaranth simulator writes VCD, not FST).
        """
        # the sync domain is declared here (as Amaranth would) so that reset() can drive it
        top = Module()
        top.domains.sync = self._domain = ClockDomain("sync")
        top.submodules.dut = self.component
        sim = Simulator(top)
        sim.add_clock(1e-8)
        agents = self.agents

        async def agent_loop(ctx):
            await ctx.tick()
            agents.skip_edge()
            while True:
                for (path, field), value in agents.drive().items():
                    ctx.set(self._resolve(path, field), value)
                keys = agents.watched()
                sampled = await ctx.tick().sample(*(self._resolve(p, f) for p, f in keys))
                agents.edge(dict(zip(keys, sampled[2:], strict=True)))

        async def main(ctx):
            self._ctx = ctx
            await body(self)

        sim.add_testbench(agent_loop, background=True)
        sim.add_testbench(main)
        start = time.perf_counter()
        if vcd:
            with sim.write_vcd(vcd):
                sim.run()
        else:
            sim.run()
        return RunStats(agents.cycle, time.perf_counter() - start)

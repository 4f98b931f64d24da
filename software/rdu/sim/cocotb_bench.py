"""cocotb backend of :class:`rdu.sim.bench.Bench` (runs inside the Verilator process)."""

import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ReadOnly, RisingEdge

from .bench import Bench

__all__ = ["CocotbBench"]


class CocotbBench(Bench):
    """Runs a test body on a cocotb ``dut`` built from Amaranth Verilog.

    The design's clock is ``clk`` and its synchronous reset ``rst`` (Amaranth's names).
    """

    tier = "verilator"

    def __init__(self, dut, **kwargs):
        super().__init__(**kwargs)
        self.dut = dut
        self._handles = {}
        self._started = None
        self._body_edges = 0          # edges the body has awaited
        self._read_only_at = -1       # value of _body_edges when it last entered ReadOnly

    def _handle(self, path, field=None):
        key = (path, field)
        if key not in self._handles:
            name = path.replace(".", "__") + (f"__{field}" if field else "")
            try:
                self._handles[key] = getattr(self.dut, name)
            except AttributeError:
                raise AttributeError(f"design {self.dut._name!r} has no port {name!r} "
                                     f"(path {path!r})") from None
        return self._handles[key]

    async def start(self, reset_cycles=2):
        """Start the clock, hold reset for ``reset_cycles`` and start the agents."""
        Clock(self.dut.clk, 10, unit="ns").start()
        self.dut.rst.value = 1
        for _ in range(reset_cycles):
            await RisingEdge(self.dut.clk)
        self.dut.rst.value = 0
        cocotb.start_soon(self._agent_loop())
        self._started = time.perf_counter()

    @property
    def elapsed(self):
        return time.perf_counter() - self._started

    async def _agent_loop(self):
        agents = self.agents
        clk = self.dut.clk
        await RisingEdge(clk)
        agents.skip_edge()
        while True:
            for (path, field), value in agents.drive().items():
                self._handle(path, field).value = value
            await ReadOnly()
            sampled = {key: int(self._handle(*key).value) for key in agents.watched()}
            await RisingEdge(clk)
            agents.edge(sampled)

    async def cycles(self, count=1):
        for _ in range(count):
            await RisingEdge(self.dut.clk)
            self._body_edges += 1

    async def reset(self, cycles=2):
        self.dut.rst.value = 1
        await self.cycles(cycles)
        self.dut.rst.value = 0

    def set(self, path, value):
        if self._read_only_at == self._body_edges:
            raise RuntimeError(f"set({path!r}) after read() in the same cycle: advance with "
                               f"cycles() first (the simulator is in its read-only phase)")
        self._handle(path).value = value

    async def read(self, path):
        if self._read_only_at != self._body_edges:
            await ReadOnly()
            self._read_only_at = self._body_edges
        return int(self._handle(path).value)

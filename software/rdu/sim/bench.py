"""One test body, two simulators.

A test body is an ``async def body(bench)`` written against :class:`Bench`. The same
body runs in the Amaranth simulator (:class:`rdu.sim.amaranth_bench.AmaranthBench`, fast
to start, for unit tests) and under cocotb + Verilator on the generated Verilog
(:class:`rdu.sim.cocotb_bench.CocotbBench`, fast per cycle, for long randomised runs).

Signals are named by their path on the component: ``"level"``, ``"cfg.write"``; a
stream by the path of the interface (``"i"``); an element of an interface array by
its index (``"lane_out.3"``). In Verilog the same path is spelled with double
underscores (``cfg__write``, ``lane_out__3``), as Amaranth names ports.

Timing contract, identical in both tiers: :meth:`Bench.set` drives a value from the
current cycle on; :meth:`Bench.cycles` advances past clock edges; :meth:`Bench.read`
returns the settled value in the current cycle (after it, do not :meth:`set` again
before the next edge).
"""

import random
import zlib

from .agents import AgentGroup, HarnessError, StreamSink, StreamSource
from .seed import get_seed
from .stalls import StallPattern, stall_pattern

__all__ = ["Bench"]


class Bench:
    """Backend-independent test API (see module docstring).

    Parameters
    ----------
    seed : int, optional
        Master seed; taken from ``SEED`` in the environment, else drawn and printed.
    watchdog : int
        Cycles without any stream transfer (while streams still have work) before the
        test fails with a report of the stalled interfaces.
    """

    tier = None

    def __init__(self, *, seed=None, watchdog=2000):
        self.seed = get_seed() if seed is None else seed
        self.rng = random.Random(self.seed)
        self.agents = AgentGroup(watchdog=watchdog)

    # -- agents ------------------------------------------------------------------------

    def _stall(self, stall, path, role):
        if isinstance(stall, StallPattern):
            return stall
        return stall_pattern(stall, seed=self.seed ^ zlib.crc32(f"{role}:{path}".encode()))

    def source(self, path, stall="none"):
        """Attach a :class:`StreamSource` to the stream at ``path`` (the design's input)."""
        return self.agents.add_source(StreamSource(path, self._stall(stall, path, "source")))

    def sink(self, path, stall="none"):
        """Attach a :class:`StreamSink` to the stream at ``path`` (the design's output)."""
        return self.agents.add_sink(StreamSink(path, self._stall(stall, path, "sink")))

    def memory_system(self, system):
        """The memory system that serves this bench's AXI ports: ``system`` itself (a
        :class:`rdu.sim.memory_system.MemorySystem` on Python stream agents); a bench
        with its own memory models returns its copy of it (:mod:`rdu.sim.native`)."""
        return system

    @property
    def cycle(self):
        """Clock edges seen since the end of reset."""
        return self.agents.cycle

    # -- backend primitives ------------------------------------------------------------

    async def cycles(self, count=1):
        raise NotImplementedError

    def set(self, path, value):
        raise NotImplementedError

    async def read(self, path):
        raise NotImplementedError

    async def reset(self, cycles=2):
        """Hold the design's synchronous reset for ``cycles`` clock edges (the agents
        keep running: reset what they model yourself, e.g.
        :meth:`rdu.sim.memory_system.MemorySystem.reset_ports`)."""
        raise NotImplementedError

    # -- composite helpers -------------------------------------------------------------

    async def advance_until_change(self, paths, limit):
        """Advance at least one cycle and at most ``limit``, stopping at the first cycle
        in which one of the signals ``paths`` reads other than it reads now; return the
        cycles advanced.

        A wait loop that reads its signals every cycle can skip the cycles in which
        none of them changes: a bench that runs cycles natively (:mod:`rdu.sim.native`)
        does that without Python per cycle; here it is the same loop."""
        start = [await self.read(path) for path in paths]
        for advanced in range(1, limit + 1):
            await self.cycles(1)
            if advanced == limit:
                break
            for path, value in zip(paths, start, strict=True):
                if await self.read(path) != value:
                    return advanced
        return max(1, limit)

    async def streams_done(self, timeout=100_000):
        """Wait until every source is drained and every sink has its expected items.

        Fails on a watchdog stall, on ``timeout`` cycles, and on leftovers.
        """
        start = self.cycle
        while not self.agents.idle:
            if self.cycle - start >= timeout:
                raise HarnessError(self.agents.stall_report(
                    f"timeout: streams not done after {timeout} cycles"))
            await self.cycles(1)
        # a few more cycles: anything extra arriving now is an unexpected item
        await self.cycles(4)
        self.agents.check_done()

    async def wait_for(self, path, value=1, timeout=10_000, what=None):
        """Advance until signal ``path`` reads ``value``; fail after ``timeout`` cycles."""
        for _ in range(timeout):
            if await self.read(path) == value:
                return self.cycle
            await self.cycles(1)
        raise HarnessError(f"timeout: {what or path} did not become {value} within "
                           f"{timeout} cycles (cycle {self.cycle})")

"""Deliberately broken designs: each must FAIL its proof (tests/test_formal.py), which
shows that the harnesses can fail and produce a counterexample trace.

They wrap or patch the real units; nothing here is used outside the formal self-tests.
"""

import contextlib

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

import hdl.switch as switch_module
from hdl.agcu import AGCU
from hdl.agcu_engines import AffineBurstGenerator, ReadEngine, WriteEngine
from hdl.pmu import AffineAddressGenerator
from hdl.stream_fifo import StreamFIFO

__all__ = ["BufferGatedReadAGCU", "DroppingFIFO", "EarlyLastAGCU", "LateCorruptingFIFO",
           "PageCrossingGenerator", "RunOnAddressGenerator", "UnstableFIFO",
           "broken_merge_order"]


class _FIFOMutant(wiring.Component):
    def __init__(self, shape, depth):
        self._shape = shape
        self._depth = depth
        super().__init__({
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        })


class DroppingFIFO(_FIFOMutant):
    """A ``StreamFIFO`` whose ``i.ready`` is always high: an item offered while the FIFO
    is full is acknowledged and dropped."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = StreamFIFO(self._shape, self._depth)
        m.d.comb += [
            fifo.i.valid.eq(self.i.valid),
            fifo.i.payload.eq(self.i.payload),
            self.i.ready.eq(1),
            self.level.eq(fifo.level),
        ]
        wiring.connect(m, fifo.o, wiring.flipped(self.o))
        return m


class UnstableFIFO(_FIFOMutant):
    """A ``StreamFIFO`` whose output payload changes (bit 0 inverted) from the second
    cycle of a stall on: the item is the same when finally taken, but a consumer that
    samples it early sees another one."""

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = StreamFIFO(self._shape, self._depth)
        wiring.connect(m, wiring.flipped(self.i), fifo.i)
        stalled = Signal()
        m.d.sync += stalled.eq(fifo.o.valid & ~fifo.o.ready)
        m.d.comb += [
            self.o.valid.eq(fifo.o.valid),
            self.o.payload.eq(fifo.o.payload ^ stalled),
            fifo.o.ready.eq(self.o.ready),
            self.level.eq(fifo.level),
        ]
        return m


class LateCorruptingFIFO(StreamFIFO):
    """A ``StreamFIFO`` that stores input item number 100 (counted from reset, modulo
    256) with bit 0 inverted. Every trace shorter than 100 cycles is correct, so a BMC
    proof of depth 10 passes it; the induction proof must not."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        pushes = Signal(8)
        with m.If(driven["push"]):
            m.d.sync += pushes.eq(pushes + 1)
        # a later assignment in the same module overrides the FIFO's own
        m.d.comb += driven["write_port__data"].eq(self.i.payload ^ (pushes == 100))
        return m


@contextlib.contextmanager
def broken_merge_order():
    """While active, ``hdl.switch`` elaborates merges whose "next input" is always the
    first listed input instead of the next one in N, E, S, W, local order (so counts
    ``N 2, S 1, L 3`` give ``N N S N N S ...``: the inputs after the second are
    starved)."""
    original = switch_module._next_listed

    def first_listed(listed, after):
        return original(listed, len(listed) - 1)

    switch_module._next_listed = first_listed
    try:
        yield
    finally:
        switch_module._next_listed = original


class EarlyLastWriteEngine(WriteEngine):
    """A ``WriteEngine`` whose ``w.last`` comes one beat early on bursts of two or more
    beats (the ``w`` sender then starts the next burst's beats in the middle of this one)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        length = m._named_submodules["write_lengths"][0].o.payload
        beat = driven["w_beat"]
        m.d.comb += self.w.payload.last.eq((beat == length) | (beat + 1 == length))
        return m


class EarlyLastAGCU(AGCU):
    """An ``AGCU`` with an :class:`EarlyLastWriteEngine`."""
    write_engine_class = EarlyLastWriteEngine


class BufferGatedReadEngine(ReadEngine):
    """A ``ReadEngine`` that withdraws ``ar.valid`` while its read buffer is full (a
    plausible flow-control shortcut that breaks the rule that ``valid`` stays up until
    ``ready``)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        read_gen = m._named_submodules["read_gen"][0]
        read_fifo = m._named_submodules["read_fifo"][0]
        m.d.comb += self.ar.valid.eq(
            read_gen.bursts.valid & (driven["reads_in_flight"] < self.max_outstanding) &
            read_fifo.i.ready)
        return m


class BufferGatedReadAGCU(AGCU):
    """An ``AGCU`` with a :class:`BufferGatedReadEngine`."""
    read_engine_class = BufferGatedReadEngine


class UnwindowedWriteEngine(WriteEngine):
    """A ``WriteEngine`` that queues every burst whatever its windows say (the check
    left out of the write side)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        m.d.comb += driven["allowed"].eq(1)
        return m


class PageCrossingGenerator(AffineBurstGenerator):
    """An ``AffineBurstGenerator`` that merges a run into the open burst without checking
    that both are in the same 4 KiB page."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        m.d.comb += driven["merge"].eq(
            driven["open_valid"] & (driven["addr"] == driven["open_end"]) &
            (driven["open_beats"] + driven["run"] <= self._max_burst))
        return m


class RunOnAddressGenerator(AffineAddressGenerator):
    """A PMU ``AffineAddressGenerator`` that starts a new row at the current address
    plus ``stride[1]`` instead of at the row's base plus ``stride[1]`` (right only
    while ``bound[0]`` is 1)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        cfg = self.config
        at_end = [driven[f"i{k}"] == cfg.bound[k] - 1 for k in range(3)]
        offset = driven["offset"]
        with m.If(~self.clear & self.advance & at_end[0] & ~at_end[1]):
            m.d.sync += offset.eq(offset + cfg.stride[1])
        return m

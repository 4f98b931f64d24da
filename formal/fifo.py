"""``hdl.stream_fifo.StreamFIFO``: stream rules, no item created, lost or reordered.

Tracked-item ("magic value") argument: the solver picks a sequence number ``N`` (any
value) and the environment offers arbitrary items and stalls. The item accepted as
input number ``N`` is remembered; the harness asserts that output number ``N`` is
that item. As ``N`` and the payloads are arbitrary, every output item is the input
item with the same sequence number: nothing is created, dropped, duplicated or
reordered. Besides, ``level`` is the number of items in minus out (and within
``depth``), ``o.valid`` is high exactly when an item is held, and the output keeps
``valid`` and ``payload`` while stalled.
"""

from amaranth import Elaboratable, Module, Signal

from formal.common import AnyConst, AnySeq, Assert, Assume, no_reset, stream_stable
from hdl.stream_fifo import StreamFIFO

__all__ = ["FIFOHarness"]

#: Width of the sequence counters (wider than any BMC depth used here).
SEQ_BITS = 8


class FIFOHarness(Elaboratable):
    """Parameters: ``width`` (payload bits), ``depth`` (FIFO depth); ``fifo`` builds the
    design under test (``StreamFIFO`` by default, a mutant in the self-tests)."""

    def __init__(self, width=2, depth=3, fifo=StreamFIFO):
        self.width = width
        self.depth = depth
        self.fifo = fifo

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        m.submodules.dut = dut = self.fifo(self.width, self.depth)
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), dut.i.payload.eq(AnySeq(self.width)),
                     dut.o.ready.eq(AnySeq(1))]
        push = dut.i.valid & dut.i.ready
        pop = dut.o.valid & dut.o.ready

        count_in = Signal(SEQ_BITS)
        count_out = Signal(SEQ_BITS)
        m.d.sync += [count_in.eq(count_in + push), count_out.eq(count_out + pop)]
        held = Signal(SEQ_BITS)
        m.d.comb += held.eq(count_in - count_out)
        # the counters never wrap within the depths proven
        m.d.comb += Assume(count_in != 2 ** SEQ_BITS - 1)

        # the tracked item
        magic = Signal(SEQ_BITS)
        m.d.comb += magic.eq(AnyConst(SEQ_BITS))
        magic_in = Signal()
        magic_value = Signal(self.width)
        with m.If(push & (count_in == magic)):
            m.d.sync += [magic_in.eq(1), magic_value.eq(dut.i.payload)]
        with m.If(pop & (count_out == magic)):
            m.d.comb += [Assert(magic_in, "an item left before it entered (created)"),
                         Assert(dut.o.payload == magic_value,
                                "output N is not input N (lost, duplicated or reordered)")]

        m.d.comb += [
            Assert(dut.level <= self.depth, "level beyond depth"),
            Assert(held <= self.depth, "more items accepted than the depth holds"),
            Assert(dut.level == held, "level is not items in minus items out"),
            Assert(dut.o.valid == (held != 0), "o.valid is not 'an item is held'"),
            Assert(dut.i.ready == (held != self.depth), "i.ready is not 'room left'"),
        ]
        stream_stable(m, dut.o, "o")
        return m

"""``hdl.stream_fifo.StreamFIFO``: stream rules, no item created, lost or reordered.

Tracked-item ("magic value") argument: the solver picks a sequence number ``N`` (any
value) and the environment offers arbitrary items and stalls. The item accepted as
input number ``N`` is remembered; the harness asserts that output number ``N`` is
that item. As ``N`` and the payloads are arbitrary, every output item is the input
item with the same sequence number: nothing is created, dropped, duplicated or
reordered. The counters wrap (modulo 256): "number ``N``" is every number congruent to
``N``, which is one item at a time in a FIFO shallower than 256, so no trace length is
excluded. Besides, ``level`` is the number of items in minus out (and within
``depth``), ``o.valid`` is high exactly when an item is held, and the output keeps
``valid`` and ``payload`` while stalled.

With ``invariants=True`` the harness also asserts what the FIFO's state must be, read
from its internal signals (``write_ptr``, ``read_ptr``, the storage through an extra
read port; ``formal.common.elaborate_open``): both pointers inside ``[0, depth)``,
``write_ptr == (read_ptr + level) mod depth``, the tracked item, once accepted and
not yet out, in the slot ``(read_ptr + N - items out) mod depth``, and while stalled
the held payload in slot ``read_ptr``. These make the properties inductive: the proof
closes by k-induction (``mode prove``), so they hold on every cycle, not only to a
depth.
"""

from amaranth import Elaboratable, Module, Signal

from formal.common import (
    AnyConst,
    AnySeq,
    Assert,
    elaborate_open,
    fifo_invariants,
    no_reset,
    stream_stable,
)
from hdl.stream_fifo import StreamFIFO

__all__ = ["FIFOHarness"]

#: Width of the sequence counters (wider than any BMC depth used here).
SEQ_BITS = 8


class FIFOHarness(Elaboratable):
    """Parameters: ``width`` (payload bits), ``depth`` (FIFO depth); ``fifo`` builds the
    design under test (``StreamFIFO`` by default, a mutant in the self-tests);
    ``invariants``: also assert the internal invariants (the design must have
    ``StreamFIFO``'s internals)."""

    def __init__(self, width=2, depth=3, fifo=StreamFIFO, invariants=False):
        self.width = width
        self.depth = depth
        self.fifo = fifo
        self.invariants = invariants

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        dut = self.fifo(self.width, self.depth)
        if self.invariants:
            m.submodules.dut, internals = elaborate_open(dut, platform)
        else:
            m.submodules.dut = dut
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), dut.i.payload.eq(AnySeq(self.width)),
                     dut.o.ready.eq(AnySeq(1))]
        push = dut.i.valid & dut.i.ready
        pop = dut.o.valid & dut.o.ready

        count_in = Signal(SEQ_BITS)
        count_out = Signal(SEQ_BITS)
        m.d.sync += [count_in.eq(count_in + push), count_out.eq(count_out + pop)]
        held = Signal(SEQ_BITS)
        m.d.comb += held.eq(count_in - count_out)     # modulo 2**SEQ_BITS: counters wrap

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
        stalled, stalled_payload = stream_stable(m, dut.o, "o")
        if self.invariants:
            self.assert_invariants(m, dut, internals, count_out, magic, magic_in,
                                   magic_value, stalled, stalled_payload, count_in)
        return m

    def assert_invariants(self, m, dut, internals, count_out, magic, magic_in, magic_value,
                          stalled, stalled_payload, count_in):
        slots, head = fifo_invariants(m, dut, internals)
        offset = Signal(SEQ_BITS)       # position of the tracked item in the FIFO
        m.d.comb += [
            offset.eq(magic - count_out),
            Assert(~(offset < dut.level) | magic_in, "tracked item held but not recorded"),
            Assert(~stalled | (dut.level != 0), "stalled without an item"),
            Assert(~stalled | (head == stalled_payload),
                   "the stalled item is not in slot read_ptr"),
        ]
        for data, position, held in slots:
            with m.If(held & (position == offset)):
                m.d.comb += Assert(data == magic_value,
                                   "tracked item not in slot read_ptr + N - items out")

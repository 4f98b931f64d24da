"""``hdl.agcu.AffineBurstGenerator``: the bursts behind the AGCU's ``ar`` and ``aw``.

The pattern (base, counts, signed strides) and the ``start`` pulses are arbitrary (a
restart may come at any time), except that base and strides are multiples of the beat
(the AGCU rejects anything else with ``MISALIGNED``) and counts are non-zero (else
``BAD_CONFIG``). The consumer's ``ready`` is arbitrary. Asserted on every burst offered:
it does not cross a 4 KiB boundary (first and last byte in the same page, and the
burst does not run past the end of the address space), its length is 1..``max_burst``
beats, and ``valid``/``payload`` are held until ``ready``. The AGCU drives ``ar``
directly from the read generator's ``bursts`` (gated only by its outstanding-burst
limit) and ``aw`` through a FIFO from the write generator's, so these are the
properties of the ``ar``/``aw`` bursts.
"""

from amaranth import Elaboratable, Module, Signal

from formal.common import AnySeq, Assert, Assume, no_reset, stream_stable
from hdl.agcu import BURST_BOUNDARY, AffineBurstGenerator

__all__ = ["BurstGeneratorHarness"]


class BurstGeneratorHarness(Elaboratable):
    """Parameters: ``addr_width`` (at least 13, so that 4 KiB pages exist), ``beat_bytes``
    and ``max_burst`` as for the generator."""

    def __init__(self, addr_width=14, beat_bytes=64, max_burst=4):
        self.addr_width = addr_width
        self.beat_bytes = beat_bytes
        self.max_burst = max_burst

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        aw = self.addr_width
        beat_shift = self.beat_bytes.bit_length() - 1
        m.submodules.dut = dut = AffineBurstGenerator(
            addr_width=aw, beat_bytes=self.beat_bytes, max_burst=self.max_burst)
        pattern = dut.pattern
        m.d.comb += [dut.start.eq(AnySeq(1)), dut.bursts.ready.eq(AnySeq(1)),
                     pattern.base.eq(AnySeq(aw)),
                     Assume(pattern.base[:beat_shift] == 0)]
        for k in range(3):
            m.d.comb += [pattern.count[k].eq(AnySeq(32)), Assume(pattern.count[k] != 0),
                         pattern.stride[k].eq(AnySeq(32)),
                         Assume(pattern.stride[k].as_unsigned()[:beat_shift] == 0)]

        burst = dut.bursts.payload
        beats = Signal(9)
        last_byte = Signal(aw + 1)
        m.d.comb += [beats.eq(burst.len + 1),
                     last_byte.eq(burst.addr + (beats << beat_shift) - 1)]
        page_bits = BURST_BOUNDARY.bit_length() - 1
        with m.If(dut.bursts.valid):
            m.d.comb += [
                Assert(last_byte[page_bits:] == burst.addr[page_bits:],
                       "burst crosses a 4 KiB boundary"),
                Assert(beats <= self.max_burst, "burst longer than max_burst"),
                Assert(burst.addr[:beat_shift] == 0, "burst address not beat aligned"),
            ]
        stream_stable(m, dut.bursts, "bursts")
        return m

"""``hdl.pmu.AffineAddressGenerator``: every address is an iteration of the configured
loop nest and stays inside the buffer.

The configuration is symbolic and constant: ``start``, strides and bounds arbitrary
except that bounds are 1..``max_bound`` (the PMU raises ``BAD_CONFIG`` on a zero
bound) and the pattern fits in a buffer of ``buffer_words`` (symbolic) words starting
at ``start``: strides ``< 2**stride_bits`` with ``sum((bound[k] - 1) * stride[k]) <
buffer_words`` and no 20-bit wrap. ``advance`` and ``clear`` are arbitrary. The harness
counts the iteration ``(i2, i1, i0)`` itself and asserts ``address == start + i0*stride[0]
+ i1*stride[1] + i2*stride[2]``, ``start <= address < start + buffer_words`` and
``last`` exactly on the final iteration.
"""

from amaranth import Elaboratable, Module, Mux, Signal, unsigned

from formal.common import AnyConst, AnySeq, Assert, Assume, no_reset
from hdl.pmu import ADDRESS_BITS, BOUND_BITS, AffineAddressGenerator

__all__ = ["AddressGeneratorHarness"]


#: Bits of an iteration index the harness multiplies (bounds are at most 3).
INDEX_BITS = 2


def _times(small, value):
    """``small * value`` for ``small < 2**INDEX_BITS``, as shifts and adds (a multiplier
    slows the SMT solver down by orders of magnitude)."""
    total = 0
    for bit in range(INDEX_BITS):
        total = total + Mux(small[bit], value << bit, 0)
    return total


class AddressGeneratorHarness(Elaboratable):
    """``max_bound`` (at most 3): largest loop bound considered; strides are below
    ``2**stride_bits`` (the start address and the buffer size are any 20-bit values)."""

    def __init__(self, max_bound=3, stride_bits=4):
        assert 1 <= max_bound < 2 ** INDEX_BITS
        self.stride_bits = stride_bits
        self.max_bound = max_bound

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        m.submodules.dut = dut = AffineAddressGenerator()
        cfg = dut.config
        buffer_words = Signal(ADDRESS_BITS)
        m.d.comb += [
            cfg.start.eq(AnyConst(ADDRESS_BITS)),
            buffer_words.eq(AnyConst(ADDRESS_BITS)),
            dut.advance.eq(AnySeq(1)),
            dut.clear.eq(AnySeq(1)),
        ]
        extent = 0
        for k in range(3):
            m.d.comb += [cfg.stride[k].eq(AnyConst(ADDRESS_BITS)),
                         cfg.bound[k].eq(AnyConst(BOUND_BITS)),
                         Assume((cfg.bound[k] >= 1) & (cfg.bound[k] <= self.max_bound)),
                         Assume(cfg.stride[k] < 2 ** self.stride_bits)]
            extent = extent + _times(cfg.bound[k] - 1, cfg.stride[k])  # exact (wide) sum
        m.d.comb += [Assume(extent < buffer_words),
                     Assume(cfg.start + buffer_words < 2 ** ADDRESS_BITS)]

        index = [Signal(BOUND_BITS, name=f"ref_i{k}") for k in range(3)]
        final = [index[k] + 1 == cfg.bound[k] for k in range(3)]
        with m.If(dut.clear):
            m.d.sync += [i.eq(0) for i in index]
        with m.Elif(dut.advance):
            carry = 1
            for k in range(3):
                # level k steps when every inner level is at its end
                with m.If(carry):
                    m.d.sync += index[k].eq(Mux(final[k], 0, index[k] + 1))
                carry = carry & final[k]
        expected = Signal(unsigned(ADDRESS_BITS + 24))
        m.d.comb += expected.eq(cfg.start + _times(index[0], cfg.stride[0]) +
                                _times(index[1], cfg.stride[1]) +
                                _times(index[2], cfg.stride[2]))
        m.d.comb += [
            Assert(dut.address == expected, "address is not the affine iteration"),
            Assert((dut.address >= cfg.start) & (dut.address < cfg.start + buffer_words),
                   "address outside the buffer"),
            Assert(dut.last == (final[0] & final[1] & final[2]),
                   "last not on the final iteration"),
        ]
        for k in range(3):
            m.d.comb += Assert(index[k] < cfg.bound[k])
        return m






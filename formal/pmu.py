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

from formal.common import AnyConst, AnySeq, Assert, Assume, elaborate_open, no_reset
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
    ``2**stride_bits`` (the start address and the buffer size are any 20-bit values).

    With ``invariants=True`` the harness also asserts the generator's state (read from
    its internal signals, ``formal.common.elaborate_open``): its indices are the
    harness's, and its running offsets are ``base2 = i2*stride[2]``, ``base1 = base2 +
    i1*stride[1]`` and ``offset = base1 + i0*stride[0]`` (modulo ``2**ADDRESS_BITS``);
    the proof then closes by induction."""

    def __init__(self, max_bound=3, stride_bits=4, invariants=False,
                 generator=AffineAddressGenerator):
        self.generator = generator
        assert 1 <= max_bound < 2 ** INDEX_BITS
        self.stride_bits = stride_bits
        self.max_bound = max_bound
        self.invariants = invariants

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        dut = self.generator()
        if self.invariants:
            m.submodules.dut, internals = elaborate_open(dut, platform)
        else:
            m.submodules.dut = dut
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
        if self.invariants:
            parts = [_times(index[k], cfg.stride[k]) for k in range(3)]
            m.d.comb += [
                Assert(internals["base2"] == parts[2][:ADDRESS_BITS], "base2 is not i2*stride2"),
                Assert(internals["base1"] == (parts[2] + parts[1])[:ADDRESS_BITS],
                       "base1 is not i2*stride2 + i1*stride1"),
                Assert(internals["offset"] == (parts[2] + parts[1] + parts[0])[:ADDRESS_BITS],
                       "offset is not the iteration's"),
            ]
            for k in range(3):
                m.d.comb += Assert(internals[f"i{k}"] == index[k],
                                   f"generator index {k} is not the iteration's")
        return m






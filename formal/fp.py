"""The FP products, each equal to the general one it replaces, for every input.

``BF16ProductHarness``: :func:`hdl.fp.bf16_mul`, the systolic MAC's 8 x 8 product, is
the FP32 product.

Equivalence of two combinational circuits for every input: the solver picks any two
BF16 words ``a`` and ``b``; the harness asserts that :func:`hdl.fp.bf16_mul` gives the
same 32 bits as :func:`hdl.fp.fp32_mul` of the words widened to FP32 (``a << 16``, the
unit the systolic MAC used before: the arithmetic of the reference model). One cycle
of BMC covers every input (there is no state). ``broken=True`` builds the self-test:
a product that forgets to flush results below 2**-126.

``FP32ProductHarness``: :func:`hdl.fp.fp32_mul`, whose product is normalised by one
bit (:func:`hdl.fp.pack_product`), gives the same 32 bits as the general
normalisation of :func:`hdl.fp.round_pack` (leading-zero count and shift) that every
FP32 multiplier used before; ``broken=True``: rounding that ignores the sticky bit.

``AlignHarness``: :func:`hdl.fp.align_sticky`, the adder's alignment (a 27-bit shifter
and a mask for the sticky bit), equals the 54-bit shift that keeps the bits shifted out,
for every significand an unpacked operand can have (0 or normal) and every shift;
``broken=True``: the sticky bit from one bit too few.

``BF16RoundHarness``: :func:`hdl.fp.fp32_to_bf16`, which rounds at bit 16 without
normalising, gives the same 32 bits as :func:`hdl.fp.round_pack` at precision 8;
``broken=True``: truncation instead of rounding.
"""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal, signed

from formal.common import AnySeq, Assert, Assume, no_reset
from hdl.fp import (
    CANONICAL_NAN,
    MUL_STEPS,
    POS_INF,
    align_sticky,
    bf16_mul,
    fp32_mul,
    fp32_to_bf16,
    round_pack,
    run_steps,
    unpack,
)

__all__ = ["AlignHarness", "BF16ProductHarness", "BF16RoundHarness", "FP32ProductHarness"]


def general_fp32_mul(m, a, b):
    """The FP32 multiplier as it was: the product through :func:`round_pack`."""
    x, y = unpack(m, a, "ref_a"), unpack(m, b, "ref_b")
    sign = x.sign ^ y.sign
    # the significand product of fp32_mul's first three steps (its four partial
    # products: the solver does not close the equality of two multiplier structures)
    product = run_steps(m, MUL_STEPS[:3], {"a": a, "b": b}, "ref")["product"]
    exponent = Signal(signed(12), name="ref_exponent")
    m.d.comb += exponent.eq(x.exp + y.exp - 126)
    packed = round_pack(m, sign, exponent, product, 48, name="ref_rp")
    result = Signal(32, name="ref_result")
    with m.If(x.is_nan | y.is_nan | (x.is_inf & y.is_zero) | (x.is_zero & y.is_inf)):
        m.d.comb += result.eq(CANONICAL_NAN)
    with m.Elif(x.is_inf | y.is_inf):
        m.d.comb += result.eq(Cat(Const(POS_INF, 31), sign))
    with m.Else():
        m.d.comb += result.eq(packed)
    return result


class BF16ProductHarness(Elaboratable):
    def __init__(self, broken=False):
        self.broken = broken

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        a, b = Signal(16), Signal(16)
        m.d.comb += [a.eq(AnySeq(16)), b.eq(AnySeq(16))]
        product = bf16_mul(m, a, b)
        if self.broken:
            # mutant: results below 2**-126 are not flushed (the exponent field wraps)
            exponent = a[7:15] + b[7:15] - 127
            tiny = (a[7:15] != 0) & (b[7:15] != 0) & (exponent < 0) & (a[7:15] != 0xFF) & \
                (b[7:15] != 0xFF)
            product = Mux(tiny, Cat(product[:31] | 1, product[31]), product)
        reference = fp32_mul(m, Cat(Const(0, 16), a), Cat(Const(0, 16), b))
        m.d.comb += Assert(product == reference, "bf16_mul differs from fp32_mul")
        return m


class FP32ProductHarness(Elaboratable):
    def __init__(self, broken=False):
        self.broken = broken

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        a, b = Signal(32), Signal(32)
        m.d.comb += [a.eq(AnySeq(32)), b.eq(AnySeq(32))]
        if self.broken:
            # mutant: round half up (the sticky bit and the tie rule ignored)
            x, y = unpack(m, a, "mut_a"), unpack(m, b, "mut_b")
            product = Signal(48)
            m.d.comb += product.eq(x.mant * y.mant)
            tie = Mux(product[47], product[:24] == (1 << 23), product[:23] == (1 << 22))
            even = Mux(product[47], ~product[24], ~product[23])
            result = fp32_mul(m, a, b)
            result = Mux(tie & even & (result[23:31] != 0) & (result[23:31] != 0xFF),
                         result + 1, result)
        else:
            result = fp32_mul(m, a, b)
        m.d.comb += Assert(result == general_fp32_mul(m, a, b),
                           "fp32_mul differs from the general normalisation")
        return m


def general_fp32_to_bf16(m, a):
    """FP32 -> BF16 as it was: the significand through :func:`round_pack`."""
    x = unpack(m, a, "ref_a")
    exponent = Signal(signed(12), name="ref_exponent")
    m.d.comb += exponent.eq(x.exp)
    packed = round_pack(m, x.sign, exponent, Cat(Const(0, 2), x.mant), 26, precision=8,
                        name="ref_rp")
    result = Signal(32, name="ref_result")
    with m.If(x.is_nan):
        m.d.comb += result.eq(CANONICAL_NAN)
    with m.Elif(x.is_inf):
        m.d.comb += result.eq(Cat(Const(POS_INF, 31), x.sign))
    with m.Else():
        m.d.comb += result.eq(packed)
    return result


class BF16RoundHarness(Elaboratable):
    def __init__(self, broken=False):
        self.broken = broken

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        a = Signal(32)
        m.d.comb += a.eq(AnySeq(32))
        if self.broken:
            # mutant: truncation (the low 16 bits dropped, no rounding)
            result = Mux(a[23:31] == 0, a & 0x80000000, a & 0xFFFF0000)
            result = Mux((a[23:31] == 0xFF) & (a[:23] != 0), CANONICAL_NAN, result)
        else:
            result = fp32_to_bf16(m, a)
        m.d.comb += Assert(result == general_fp32_to_bf16(m, a),
                           "fp32_to_bf16 differs from round_pack")
        return m


class AlignHarness(Elaboratable):
    def __init__(self, broken=False):
        self.broken = broken

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        mant, shift = Signal(24), Signal(5)
        m.d.comb += [mant.eq(AnySeq(24)), shift.eq(AnySeq(5)),
                     # what unpack gives: 0 or a normal significand (the 54-bit shift
                     # drops the lowest bit at shift 31, so for other values they differ)
                     Assume((mant == 0) | mant[23])]
        if self.broken:
            # mutant: the sticky bit misses the last bit shifted out
            missed = Cat(*(shift > bit + 1 for bit in range(3, 27)))
            aligned = (Cat(Const(0, 3), mant) >> shift) | ((mant & missed) != 0)
        else:
            aligned = align_sticky(m, mant, shift)
        # as the adder did it: shift 54 bits, keep the low 27 as the bits shifted out
        wide = Signal(54)
        m.d.comb += wide.eq(Cat(Const(0, 27), Const(0, 3), mant) >> shift)
        m.d.comb += Assert(aligned == (wide[27:] | (wide[:27] != 0)),
                           "align_sticky differs from the 54-bit shift")
        return m

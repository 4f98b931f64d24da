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

``PipelineHarness``: each pipelined operator of :mod:`hdl.fp_pipelined` at its default
latency ``L`` gives, on cycle ``t + L``, the result of the combinational operator of
:mod:`hdl.fp` on the operands of cycle ``t``, and ``o.valid`` is ``i.valid`` of cycle
``t``, for every input sequence (BMC of depth ``L + 1`` from reset: the pipeline has no
feedback, so its result on cycle ``L`` depends on the operands of cycle 0 alone, as on
cycle ``t + L`` on those of ``t``); ``broken=True``: one value skips its first register.
"""

from amaranth import Cat, Const, Elaboratable, Module, Mux, Signal, Value, signed

from formal.common import AnySeq, Assert, Assume, no_reset
from hdl.fp import (
    CANONICAL_NAN,
    MUL_STEPS,
    POS_INF,
    align_sticky,
    bf16_mul,
    bf16_to_fp32,
    fp32_add,
    fp32_compare,
    fp32_max,
    fp32_min,
    fp32_mul,
    fp32_to_bf16,
    round_pack,
    run_steps,
    unpack,
)
from hdl.fp_latency import FPKind
from hdl.fp_pipelined import PIPELINED_OPERATORS, StagePipeline

__all__ = ["AlignHarness", "BF16ProductHarness", "BF16RoundHarness", "FP32ProductHarness",
           "PipelineHarness", "REFERENCES", "SkewedPipeline"]


def general_fp32_mul(m, a, b):
    """The FP32 multiplier as it was: the product through :func:`round_pack`."""
    x, y = unpack(m, a, "ref_a"), unpack(m, b, "ref_b")
    sign = x.sign ^ y.sign
    # the significand product of fp32_mul's first three steps (its four partial
    # products: the solver does not close the equality of two multiplier structures)
    # (of the significands 1.frac: zero when either operand is)
    raw = run_steps(m, MUL_STEPS[:3], {"a": a, "b": b}, "ref")["product"]
    product = Mux(x.is_zero | y.is_zero, 0, raw)
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


# -- the pipelined operators equal the combinational ones ----------------------------------

def _compare_reference(m, p):
    lt, le, eq = fp32_compare(m, p.a, p.b, "ref_cmp")
    return Cat(fp32_max(m, p.a, p.b, "ref_max"), fp32_min(m, p.a, p.b, "ref_min"), lt, le, eq)


#: The combinational operator of :mod:`hdl.fp` that each pipelined one must equal, on
#: the operands (a view of ``i.payload``); for the comparison, its payload's five
#: fields in order.
REFERENCES = {
    FPKind.ADD: lambda m, p: fp32_add(m, p.a, p.b, "ref_add"),
    FPKind.MUL: lambda m, p: fp32_mul(m, p.a, p.b, "ref_mul"),
    FPKind.MADD: lambda m, p: fp32_add(m, fp32_mul(m, p.a, p.b, "ref_mul"), p.c, "ref_add"),
    FPKind.COMPARE: _compare_reference,
    FPKind.TO_BF16: lambda m, p: fp32_to_bf16(m, p.a, "ref_to_bf16"),
    FPKind.FROM_BF16: lambda m, p: bf16_to_fp32(m, p.a, "ref_from_bf16"),
    FPKind.BF16_MUL: lambda m, p: bf16_mul(m, p.a, p.b, "ref_bf16_mul"),
}


class SkewedPipeline(StagePipeline):
    """Mutant: at the first register, one value (``nan``, or the first in the bundle)
    skips it, so that it meets the other values of the next operands."""

    def register_bundle(self, m, bundle, number, name):
        registered = super().register_bundle(m, bundle, number, name)
        if number == self.cuts[0]:
            key = "nan" if "nan" in bundle else next(iter(bundle))
            registered[key] = bundle[key]
        return registered


class PipelineHarness(Elaboratable):
    """The pipelined operator of ``kind`` (:data:`hdl.fp_pipelined.PIPELINED_OPERATORS`)
    at ``latency`` (default: its kind's) against the combinational reference.

    The solver picks any operands and ``valid`` on every cycle; the harness delays them
    by ``latency`` cycles and asserts that ``o.valid`` is the delayed ``valid`` and, when
    set, ``o.payload`` the reference operator of the delayed operands. ``broken=True``:
    the operator built by a :class:`SkewedPipeline` (a value one stage early).
    """

    def __init__(self, kind, latency=None, broken=False):
        self.kind, self.latency, self.broken = kind, latency, broken

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        cls = PIPELINED_OPERATORS[self.kind]
        if self.broken:
            cls = type(f"Skewed{cls.__name__}", (cls,), {"pipeline_class": SkewedPipeline})
        dut = m.submodules.dut = cls(self.latency)
        layout = dut.i.payload.shape()
        m.d.comb += [dut.i.valid.eq(AnySeq(1)), dut.i.payload.eq(AnySeq(layout.size))]
        valid, payload = dut.i.valid, dut.i.payload
        for stage in range(dut.latency):
            delayed_valid, delayed = Signal(name=f"valid_{stage}"), Signal(layout)
            m.d.sync += [delayed_valid.eq(valid), delayed.eq(payload)]
            valid, payload = delayed_valid, delayed
        reference = REFERENCES[self.kind](m, payload)
        m.d.comb += Assert(dut.o.valid == valid, "o.valid is not i.valid of latency cycles before")
        with m.If(valid):
            m.d.comb += Assert(Value.cast(dut.o.payload) == reference,
                               "pipelined result differs from the combinational operator")
        return m

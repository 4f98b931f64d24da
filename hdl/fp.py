"""FP32 / BF16 / INT32 arithmetic as reusable Amaranth building blocks.

The functions here build combinational logic into a module ``m`` and return a
32-bit ``Signal``; each operator is a list of steps (``ADD_STEPS``, ``MUL_STEPS``, ...)
that the function runs back to back and :mod:`hdl.fp_pipelined` separates by
registers (the latencies: :mod:`hdl.fp_latency`); :class:`FPALU` puts the functions
behind an operation code, and :class:`FPLanes` is a streamed, one-register-stage array
of ALUs (the building block of a SIMD stage, and the unit the randomised bit-exact tests
drive).

Number policy (identical in :mod:`rdu.models.fp`, described in ``docs/pcu.md``):
denormal inputs are read as zero (DAZ), results whose rounded magnitude is below
2**-126 are flushed to a zero of the result's sign (FTZ), rounding is to nearest
even, overflow gives infinity, every NaN result is ``0x7FC00000``. Multiply-add is
unfused (two roundings).

See also: the special-function units built of these (:mod:`hdl.special_function`), the
PCU that uses them (:mod:`hdl.pcu`), the reference ``software/rdu/models/fp.py``, the
formal proofs ``formal/fp.py``, tests ``tests/test_fp.py``.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Op", "OP_BITS", "CANONICAL_NAN", "POS_INF", "unpack", "round_pack", "pack_product",
           "pack_rounded", "leading_zeros", "align_sticky", "fp32_add", "fp32_mul", "fp32_max",
           "fp32_min", "fp32_compare", "fp32_to_bf16", "bf16_to_fp32", "bf16_mul",
           "SPECIALS", "PRODUCT_SPLIT", "run_steps", "keep", "ADD_STEPS", "MUL_STEPS",
           "COMPARE_STEPS", "TO_BF16_STEPS", "FROM_BF16_STEPS", "BF16_MUL_STEPS",
           "ROUND_PACK_STEPS",
           "MAC_SIGNATURE", "FPALU_SIGNATURE", "BF16MultiplyAccumulate", "FPALU", "FPLanes",
           "fp_lanes_payload"]

CANONICAL_NAN = 0x7FC00000
POS_INF = 0x7F800000


#: Width of an operation code.
OP_BITS = 5


class Op(enum.IntEnum, shape=OP_BITS):
    """Operation codes of a SIMD stage (the ``op`` field of its configuration)."""
    PASS = 0        #: a
    ADD = 1         #: a + b
    SUB = 2         #: a - b
    MUL = 3         #: a * b
    MADD = 4        #: (a * b) + c, two roundings
    MAX = 5         #: max(a, b)
    MIN = 6         #: min(a, b)
    LT = 7          #: 1 if a < b else 0
    LE = 8          #: 1 if a <= b else 0
    EQ = 9          #: 1 if a == b else 0
    SELECT = 10     #: b if a != 0 else c (raw words)
    TO_BF16 = 11    #: FP32 -> BF16 (RNE), BF16 in the high half
    FROM_BF16 = 12  #: BF16 in the high half -> FP32
    IADD = 13       #: a + b, INT32 wrapping
    ISUB = 14       #: a - b, INT32 wrapping
    ILT = 15        #: 1 if signed a < b else 0
    IEQ = 16        #: 1 if a == b else 0


class _Unpacked:
    """Fields of one FP32 operand after denormals-are-zero."""

    def __init__(self, m, word, name):
        self.sign = Signal(name=f"{name}_sign")
        self.exp = Signal(8, name=f"{name}_exp")
        self.frac = Signal(23, name=f"{name}_frac")
        self.is_zero = Signal(name=f"{name}_zero")
        self.is_inf = Signal(name=f"{name}_inf")
        self.is_nan = Signal(name=f"{name}_nan")
        self.mant = Signal(24, name=f"{name}_mant")        # 1.frac, 0 for zero
        raw_exp = word[23:31]
        m.d.comb += [
            self.sign.eq(word[31]),
            self.exp.eq(raw_exp),
            self.frac.eq(Mux(raw_exp == 0, 0, word[:23])),
            self.is_zero.eq(raw_exp == 0),
            self.is_inf.eq((raw_exp == 0xFF) & (word[:23] == 0)),
            self.is_nan.eq((raw_exp == 0xFF) & (word[:23] != 0)),
            self.mant.eq(Mux(raw_exp == 0, 0, Cat(word[:23], Const(1, 1)))),
        ]

    @property
    def magnitude(self):
        """31-bit magnitude (exponent and fraction) after DAZ, for ordering."""
        return Cat(self.frac, self.exp)


def unpack(m, word, name="op"):
    """Split FP32 ``word`` into DAZ-ed fields (``sign``, ``exp``, ``frac``, ``mant``,
    ``is_zero``, ``is_inf``, ``is_nan``, ``magnitude``)."""
    return _Unpacked(m, word, name)


# -- steps: the operators as sequences of combinational steps ------------------------------
#
# Each operator below is a list of steps ``step(m, s, name) -> dict``: ``s`` maps the
# names of the values computed so far to Amaranth values, the step returns the values
# the next step needs. The combinational functions run the steps back to back
# (:func:`run_steps`); :mod:`hdl.fp_pipelined` puts registers between them.

#: Bundle keys of the special results carried beside the datapath to the last step.
SPECIALS = ("nan", "inf", "inf_sign")


def run_steps(m, steps, bundle, name):
    """Run ``steps`` one after the other on ``bundle`` (a dict of values), no registers;
    returns the last step's dict."""
    for step in steps:
        bundle = step(m, bundle, name)
    return bundle


def keep(s, *keys):
    """The entries ``keys`` of bundle ``s`` (those that exist)."""
    return {key: s[key] for key in keys if key in s}


def leading_zeros(value, width):
    """Number of leading zero bits of the ``width``-bit ``value`` (``width`` for 0)."""
    count = Const(width, range(width + 1))
    for bit in range(width):
        count = Mux(value[bit], width - 1 - bit, count)
    return count


def step_count_zeros(m, s, name):
    """Normalisation, first half: the leading zeros of ``s["mant"]``."""
    width = len(s["mant"])
    lz = Signal(range(width + 1), name=f"{name}_lz")
    m.d.comb += lz.eq(leading_zeros(s["mant"], width))
    return {**s, "lz": lz}


def step_normalise(m, s, name):
    """Normalisation, second half: ``mant`` shifted left by the count, ``exponent`` less it."""
    width = len(s["mant"])
    norm = Signal(width, name=f"{name}_norm")
    exp_norm = Signal(signed(12), name=f"{name}_exp_norm")
    m.d.comb += [norm.eq(s["mant"] << s["lz"]), exp_norm.eq(s["exponent"] - s["lz"])]
    return {**keep(s, "sign", "zero", *SPECIALS), "mant": norm, "exponent": exp_norm}


def step_round(m, s, name, precision=24):
    """Round a normalised ``mant`` to nearest even at ``precision`` bits: ``exp_final``
    and the 23-bit ``frac`` (the low ``24 - precision`` bits zero)."""
    norm = s["mant"]
    width = len(norm)
    kept = norm[width - precision:]
    guard = norm[width - precision - 1]
    sticky = norm[:width - precision - 1] != 0
    round_up = guard & (sticky | kept[0])
    rounded = Signal(precision + 1, name=f"{name}_rounded")
    exp_final = Signal(signed(12), name=f"{name}_exp_final")
    frac = Signal(23, name=f"{name}_frac")
    m.d.comb += [
        rounded.eq(kept + round_up),
        exp_final.eq(s["exponent"] + rounded[precision]),
        # with a carry out the significand is 1.000..., its fraction is zero
        frac.eq(Mux(rounded[precision], 0, rounded[:precision - 1] << (24 - precision))),
    ]
    return {**keep(s, "sign", "zero", *SPECIALS), "exp_final": exp_final, "frac": frac}


def pack_rounded(m, sign, zero, exp_final, frac, name):
    """The FP32 word of a rounded result: a signed zero for a ``zero`` significand or an
    exponent ``exp_final`` of 0 or below (FTZ), infinity from 255 on."""
    result = Signal(32, name=f"{name}_result")
    with m.If(zero):
        m.d.comb += result.eq(Cat(Const(0, 31), sign))
    with m.Elif(exp_final >= 255):
        m.d.comb += result.eq(Cat(Const(POS_INF, 31), sign))
    with m.Elif(exp_final <= 0):
        m.d.comb += result.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += result.eq(Cat(frac, exp_final[:8], sign))
    return result


def step_pack(m, s, name):
    """The last step: :func:`pack_rounded`, or the special result (``nan``: the canonical
    NaN, ``inf``: an infinity of sign ``inf_sign``) when the bundle has one."""
    packed = pack_rounded(m, s["sign"], s["zero"], s["exp_final"], s["frac"], f"{name}_rp")
    if "nan" not in s:
        return {"result": packed}
    result = Signal(32, name=f"{name}_result")
    m.d.comb += result.eq(Mux(s["nan"], CANONICAL_NAN,
                              Mux(s["inf"], Cat(Const(POS_INF, 31), s["inf_sign"]), packed)))
    return {"result": result}


#: Normalise, round to nearest even and pack (:func:`round_pack`).
ROUND_PACK_STEPS = [step_count_zeros, step_normalise, step_round, step_pack]


def round_pack(m, sign, exponent, mant, width, precision=24, name="rp"):
    """Normalise, round to nearest even and pack a finite non-NaN result.

    Parameters
    ----------
    sign : Value
        Sign of the result (also of a zero result).
    exponent : Value
        Signed biased exponent ``E``: a ``mant`` whose MSB (bit ``width - 1``) is set
        has the value ``1.xxx * 2**(E - 127)``.
    mant : Value
        Unsigned significand of ``width`` bits (need not be normalised; 0 gives zero).
    precision : int
        Significand bits kept: 24 for FP32, 8 for BF16 (then the low 16 bits are zero).

    Returns a 32-bit ``Signal``: infinity on overflow, a signed zero when the rounded
    magnitude is below 2**-126 (FTZ).
    """
    assert width >= precision + 2
    wide = Signal(width, name=f"{name}_mant")
    m.d.comb += wide.eq(mant)

    def rounding(m, s, name):
        return step_round(m, s, name, precision)
    steps = [step_count_zeros, step_normalise, rounding, step_pack]
    return run_steps(m, steps, {"sign": sign, "exponent": exponent, "mant": wide,
                                "zero": mant == 0}, name)["result"]


def step_product_bits(m, s, name):
    """Rounding of a 48-bit ``product`` that is 0 or has its MSB at bit 47 or 46: the
    24 bits ``kept``, ``high`` (MSB at 47) and whether to round up; ``zero`` (a zero
    result) is ``product == 0`` unless the bundle has it."""
    product = s["product"]
    high = product[47]
    kept = Signal(24, name=f"{name}_kept")
    guard = Signal(name=f"{name}_guard")
    sticky = Signal(name=f"{name}_sticky")
    m.d.comb += [
        kept.eq(Mux(high, product[24:], product[23:47])),
        guard.eq(Mux(high, product[23], product[22])),
        sticky.eq(Mux(high, product[:23] != 0, product[:22] != 0)),
    ]
    return {**keep(s, "sign", "exponent", *SPECIALS), "high": high, "kept": kept,
            "round_up": guard & (sticky | kept[0]),
            "zero": s["zero"] if "zero" in s else product == 0}


def step_product_round(m, s, name):
    """The rounded product of :func:`step_product_bits`: ``exp_final`` and ``frac``."""
    rounded = Signal(25, name=f"{name}_rounded")
    exp_final = Signal(signed(12), name=f"{name}_exp_final")
    m.d.comb += [
        rounded.eq(s["kept"] + s["round_up"]),
        exp_final.eq(s["exponent"] - ~s["high"] + rounded[24]),
    ]
    # with a carry out the significand is 1.000..., its fraction is zero
    return {**keep(s, "sign", "zero", *SPECIALS), "exp_final": exp_final,
            "frac": Mux(rounded[24], 0, rounded[:23])}


def pack_product(m, sign, exponent, product, name="pp"):
    """:func:`round_pack` of a 48-bit ``product`` that is 0 or has its MSB at bit 47 or
    46 (the product of two DAZ-ed FP32 significands), with ``exponent`` as there."""
    steps = [step_product_bits, step_product_round, step_pack]
    return run_steps(m, steps, {"sign": sign, "exponent": exponent, "product": product},
                     name)["result"]


def align_sticky(m, mant, shift, name="aligned"):
    """The 24-bit ``mant`` (0 or normal: bit 23 set) with three extra low bits (27
    bits), shifted right by ``shift`` (5 bits), its lowest bit ORed with every bit
    shifted out (the sticky bit).

    A 27-bit shifter and a mask of the positions below ``shift``, not a 54-bit shifter
    that keeps the bits shifted out (``formal/fp.py`` proves them equal).
    """
    shifted_out = Signal(24, name=f"{name}_shifted_out")     # mant bit i: i + 3 < shift
    m.d.comb += shifted_out.eq(Cat(*(shift > bit for bit in range(3, 27))))
    aligned = Signal(27, name=name)
    m.d.comb += aligned.eq((Cat(Const(0, 3), mant) >> shift) | ((mant & shifted_out) != 0))
    return aligned


# -- FP32 addition: 8 steps ---------------------------------------------------------------

def step_add_order(m, s, name):
    """Addition 1: unpack ``a`` and ``b``, which is larger in magnitude, special results."""
    x, y = unpack(m, s["a"], f"{name}_a"), unpack(m, s["b"], f"{name}_b")
    swap = Signal(name=f"{name}_swap")
    # the raw words' magnitudes, not the DAZ-ed ones (no zeroing before the comparator):
    # they differ only when both exponent fields are 0, and then both significands are
    # 0 and the sum is a zero of sign both_negative, whichever is taken as the larger
    m.d.comb += swap.eq(s["b"][:31] > s["a"][:31])
    return {"swap": swap, "x_sign": x.sign, "x_exp": x.exp, "x_mant": x.mant,
            "y_sign": y.sign, "y_exp": y.exp, "y_mant": y.mant,
            # an exact zero is -0 only if both operands are -0 (round to nearest)
            "both_negative": x.sign & y.sign,
            "nan": x.is_nan | y.is_nan | (x.is_inf & y.is_inf & (x.sign != y.sign)),
            "inf": x.is_inf | y.is_inf, "inf_sign": Mux(x.is_inf, x.sign, y.sign)}


def step_add_select(m, s, name):
    """Addition 2: the larger and the smaller operand, the alignment shift (clamped at 31)."""
    swap = s["swap"]
    small_exp = Mux(swap, s["x_exp"], s["y_exp"])
    big_exp = Mux(swap, s["y_exp"], s["x_exp"])
    shift = Signal(8, name=f"{name}_shift")
    m.d.comb += shift.eq(big_exp - small_exp)
    return {**keep(s, "both_negative", *SPECIALS), "big_exp": big_exp,
            "big_mant": Mux(swap, s["y_mant"], s["x_mant"]),
            "big_sign": Mux(swap, s["y_sign"], s["x_sign"]),
            "small_mant": Mux(swap, s["x_mant"], s["y_mant"]),
            "shift": Mux(shift > 31, 31, shift)[:5], "subtract": s["x_sign"] != s["y_sign"]}


def step_add_align(m, s, name):
    """Addition 3: the smaller significand aligned to the larger (:func:`align_sticky`)."""
    aligned = align_sticky(m, s["small_mant"], s["shift"], name=f"{name}_aligned")
    return {**keep(s, "big_exp", "big_mant", "big_sign", "subtract", "both_negative",
                   *SPECIALS), "aligned": aligned}


def step_add_sum(m, s, name):
    """Addition 4: the 28-bit sum or difference of the significands, its sign and exponent."""
    big_ext = Cat(Const(0, 3), s["big_mant"])
    total = Signal(28, name=f"{name}_total")
    m.d.comb += total.eq(Mux(s["subtract"], big_ext - s["aligned"], big_ext + s["aligned"]))
    zero = Signal(name=f"{name}_zero")
    sign = Signal(name=f"{name}_sign")
    exponent = Signal(signed(12), name=f"{name}_exponent")
    m.d.comb += [zero.eq(total == 0), sign.eq(Mux(zero, s["both_negative"], s["big_sign"])),
                 exponent.eq(s["big_exp"] + 1)]
    return {**keep(s, *SPECIALS), "sign": sign, "zero": zero, "exponent": exponent,
            "mant": total}


#: :func:`fp32_add` step by step: order | select | align | add | count leading zeros |
#: normalise | round | pack.
ADD_STEPS = [step_add_order, step_add_select, step_add_align, step_add_sum,
             step_count_zeros, step_normalise, step_round, step_pack]


def fp32_add(m, a, b, name="add"):
    """FP32 ``a + b`` (use ``b ^ 0x80000000`` for a subtraction)."""
    return run_steps(m, ADD_STEPS, {"a": a, "b": b}, name)["result"]


# -- FP32 multiplication: 6 steps -----------------------------------------------------------

#: The significands' split for the 18 x 18 multipliers (MULT18X18D on an ECP5).
PRODUCT_SPLIT = 18


def step_mul_partial(m, s, name):
    """Multiplication 1: unpack, the four partial products of the 24-bit significands
    (18 x 18, 18 x 6, 6 x 18, 6 x 6), the exponent sum, the special results.

    The significands go to the multipliers as ``1.frac`` without DAZ's zeroing (no logic
    before them); a zero operand sets ``zero`` instead, which makes the result a zero."""
    x, y = unpack(m, s["a"], f"{name}_a"), unpack(m, s["b"], f"{name}_b")
    a_mant, b_mant = Cat(s["a"][:23], Const(1, 1)), Cat(s["b"][:23], Const(1, 1))
    lo = PRODUCT_SPLIT
    sign = Signal(name=f"{name}_sign")
    exponent = Signal(signed(12), name=f"{name}_exponent")
    m.d.comb += [sign.eq(x.sign ^ y.sign), exponent.eq(x.exp + y.exp - 126)]
    return {"sign": sign, "exponent": exponent, "zero": x.is_zero | y.is_zero,
            "pp_ll": a_mant[:lo] * b_mant[:lo], "pp_lh": a_mant[:lo] * b_mant[lo:],
            "pp_hl": a_mant[lo:] * b_mant[:lo], "pp_hh": a_mant[lo:] * b_mant[lo:],
            "nan": x.is_nan | y.is_nan | (x.is_inf & y.is_zero) | (x.is_zero & y.is_inf),
            "inf": x.is_inf | y.is_inf, "inf_sign": sign}


def step_mul_middle(m, s, name):
    """Multiplication 2: the sum of the two middle partial products."""
    return {**keep(s, "sign", "exponent", "zero", "pp_ll", "pp_hh", *SPECIALS),
            "pp_mid": s["pp_lh"] + s["pp_hl"]}


def step_mul_sum(m, s, name):
    """Multiplication 3: the 48-bit significand product (the outer partial products do
    not overlap: they are concatenated, the middle sum added at bit 18)."""
    product = Signal(48, name=f"{name}_product")
    m.d.comb += product.eq(Cat(s["pp_ll"], s["pp_hh"]) + (s["pp_mid"] << PRODUCT_SPLIT))
    return {**keep(s, "sign", "exponent", "zero", *SPECIALS), "product": product}


#: :func:`fp32_mul` step by step: partial products | middle sum | product | rounding
#: bits | round | pack.
MUL_STEPS = [step_mul_partial, step_mul_middle, step_mul_sum, step_product_bits,
             step_product_round, step_pack]


def fp32_mul(m, a, b, name="mul"):
    """FP32 ``a * b``.

    After denormals-are-zero both significands are 0 or in ``[2**23, 2**24)``, so the
    product is 0 or in ``[2**46, 2**48)``: normalising it is a one-bit shift, not the
    leading-zero count and shifter of :func:`round_pack` (whose result this is, bit for
    bit: ``formal/fp.py`` proves it). The significand product is the sum of four
    partial products (:data:`PRODUCT_SPLIT`), as an ECP5's 18 x 18 multipliers take it.
    """
    return run_steps(m, MUL_STEPS, {"a": a, "b": b}, name)["result"]


# -- comparisons, minimum and maximum: 2 steps -------------------------------------------------

def _ordered_less(m, a, b, x, y, name):
    """``x < y`` for the non-NaN DAZ-ed operands ``x``, ``y`` of the words ``a``, ``b``,
    with -0 == +0. The magnitudes compared are the raw words' (no zeroing before the
    comparators): they differ from the DAZ-ed ones only when an exponent field is 0,
    and then the order is the same unless both are, which is the case of two zeros."""
    less = Signal(name=name)
    both_zero = x.is_zero & y.is_zero
    with m.If(both_zero):
        m.d.comb += less.eq(0)
    with m.Elif(x.sign != y.sign):
        m.d.comb += less.eq(x.sign)
    with m.Elif(x.sign):
        m.d.comb += less.eq(a[:31] > b[:31])
    with m.Else():
        m.d.comb += less.eq(a[:31] < b[:31])
    return less


def _daz_word(x):
    return Cat(x.frac, x.exp, x.sign)


def step_compare_order(m, s, name):
    """Comparison 1: unpack ``a`` and ``b``, ``less`` and ``equal`` (-0 == +0), NaN."""
    x, y = unpack(m, s["a"], f"{name}_a"), unpack(m, s["b"], f"{name}_b")
    less = _ordered_less(m, s["a"], s["b"], x, y, f"{name}_less")
    equal = Signal(name=f"{name}_equal")
    # raw words: unequal DAZ-ed words are unequal raw ones, equal raw ones equal DAZ-ed
    # ones, and equal DAZ-ed words from unequal raw ones are two zeros
    m.d.comb += equal.eq((x.is_zero & y.is_zero) | (s["a"] == s["b"]))
    return {"x": _daz_word(x), "y": _daz_word(y), "x_sign": x.sign, "y_sign": y.sign,
            "both_zero": x.is_zero & y.is_zero, "less": less, "equal": equal,
            "nan": x.is_nan | y.is_nan}


def step_compare_select(m, s, name):
    """Comparison 2: ``max`` and ``min`` (NaN if either is NaN, max(-0, +0) = +0,
    min(-0, +0) = -0) and the one-bit ``lt``, ``le``, ``eq`` (0 with a NaN)."""
    nan, both_zero, less = s["nan"], s["both_zero"], s["less"]
    out = {}
    for key, is_max in (("max", True), ("min", False)):
        zero_sign = (s["x_sign"] & s["y_sign"]) if is_max else (s["x_sign"] | s["y_sign"])
        out[key] = Signal(32, name=f"{name}_{key}")
        with m.If(nan):
            m.d.comb += out[key].eq(CANONICAL_NAN)
        with m.Elif(both_zero):
            m.d.comb += out[key].eq(Cat(Const(0, 31), zero_sign))
        with m.Elif(less ^ (not is_max)):
            m.d.comb += out[key].eq(s["y"])
        with m.Else():
            m.d.comb += out[key].eq(s["x"])
    for key, value in (("lt", less), ("le", less | s["equal"]), ("eq", s["equal"])):
        out[key] = Signal(name=f"{name}_{key}")
        m.d.comb += out[key].eq(~nan & value)
    return out


#: :func:`fp32_max`, :func:`fp32_min` and :func:`fp32_compare` at once: order | select.
COMPARE_STEPS = [step_compare_order, step_compare_select]


def fp32_max(m, a, b, name="max"):
    """FP32 maximum: NaN if either operand is NaN, max(-0, +0) = +0."""
    return run_steps(m, COMPARE_STEPS, {"a": a, "b": b}, name)["max"]


def fp32_min(m, a, b, name="min"):
    """FP32 minimum: NaN if either operand is NaN, min(-0, +0) = -0."""
    return run_steps(m, COMPARE_STEPS, {"a": a, "b": b}, name)["min"]


def fp32_compare(m, a, b, name="cmp"):
    """Return ``(lt, le, eq)`` one-bit signals; any NaN operand makes all three 0."""
    out = run_steps(m, COMPARE_STEPS, {"a": a, "b": b}, name)
    return out["lt"], out["le"], out["eq"]


# -- BF16 conversions and product ---------------------------------------------------------------

def step_to_bf16_round(m, s, name):
    """FP32 -> BF16 1: unpack, round the significand at bit 16 and carry into the exponent."""
    x = unpack(m, s["a"], f"{name}_a")
    # a DAZ-ed significand is 0 or normal: rounding at bit 16 needs no normalisation
    # (the result of round_pack at precision 8, bit for bit: formal/fp.py)
    rounded = Signal(9, name=f"{name}_rounded")
    m.d.comb += rounded.eq(x.mant[16:] + (x.mant[15] & ((x.mant[:15] != 0) | x.mant[16])))
    exponent = Signal(9, name=f"{name}_exponent")       # 255 on overflow
    m.d.comb += exponent.eq(x.exp + rounded[8])
    return {"sign": x.sign, "zero": x.is_zero, "rounded": rounded, "exponent": exponent,
            "nan": x.is_nan, "inf": x.is_inf}


def step_to_bf16_pack(m, s, name):
    """FP32 -> BF16 2: the packed BF16 (high half), or zero, infinity, NaN."""
    sign, rounded, exponent = s["sign"], s["rounded"], s["exponent"]
    result = Signal(32, name=f"{name}_result")
    with m.If(s["nan"]):
        m.d.comb += result.eq(CANONICAL_NAN)
    with m.Elif(s["inf"]):
        m.d.comb += result.eq(Cat(Const(POS_INF, 31), sign))
    with m.Elif(s["zero"]):
        m.d.comb += result.eq(Cat(Const(0, 31), sign))
    with m.Elif(exponent >= 255):
        m.d.comb += result.eq(Cat(Const(POS_INF, 31), sign))
    with m.Else():
        m.d.comb += result.eq(Cat(Const(0, 16), Mux(rounded[8], 0, rounded[:7]),
                                  exponent[:8], sign))
    return {"result": result}


#: :func:`fp32_to_bf16` step by step: round | pack.
TO_BF16_STEPS = [step_to_bf16_round, step_to_bf16_pack]


def fp32_to_bf16(m, a, name="to_bf16"):
    """FP32 -> BF16 (round to nearest even), the BF16 in the high 16 bits."""
    return run_steps(m, TO_BF16_STEPS, {"a": a}, name)["result"]


def step_from_bf16(m, s, name):
    """BF16 -> FP32: the one step (DAZ, canonical NaN)."""
    x = unpack(m, Cat(Const(0, 16), s["a"][16:]), f"{name}_a")
    result = Signal(32, name=f"{name}_result")
    m.d.comb += result.eq(Mux(x.is_nan, CANONICAL_NAN, _daz_word(x)))
    return {"result": result}


#: :func:`bf16_to_fp32`: one step.
FROM_BF16_STEPS = [step_from_bf16]


def bf16_to_fp32(m, a, name="from_bf16"):
    """BF16 in the high 16 bits -> FP32 (exact; DAZ, canonical NaN)."""
    return run_steps(m, FROM_BF16_STEPS, {"a": a}, name)["result"]


def step_bf16_product(m, s, name):
    """BF16 product 1: the fields, the 8 x 8 significand product, the exponent sum."""
    def fields(word, which):
        exp = word[7:15]
        mant = Signal(8, name=f"{name}_{which}_mant")       # 1.frac, 0 for zero (DAZ)
        m.d.comb += mant.eq(Mux(exp == 0, 0, Cat(word[:7], Const(1, 1))))
        return word[15], exp, mant, exp == 0, (exp == 0xFF) & (word[:7] == 0), \
            (exp == 0xFF) & (word[:7] != 0)
    a_sign, a_exp, a_mant, a_zero, a_inf, a_nan = fields(s["a"], "a")
    b_sign, b_exp, b_mant, b_zero, b_inf, b_nan = fields(s["b"], "b")
    product = Signal(16, name=f"{name}_product")      # value product * 2**-14
    exp_sum = Signal(signed(12), name=f"{name}_exp_sum")
    m.d.comb += [product.eq(a_mant * b_mant), exp_sum.eq(a_exp + b_exp - 127)]
    return {"sign": a_sign ^ b_sign, "product": product, "exp_sum": exp_sum,
            "zero": a_zero | b_zero, "inf": a_inf | b_inf,
            "nan": a_nan | b_nan | (a_inf & b_zero) | (a_zero & b_inf)}


def step_bf16_pack(m, s, name):
    """BF16 product 2: normalise by one bit (no rounding), flush, saturate, pack."""
    product, sign = s["product"], s["sign"]
    exponent = Signal(signed(12), name=f"{name}_exponent")
    frac = Signal(23, name=f"{name}_frac")
    m.d.comb += [
        # a product in [2, 4) has its MSB at bit 15, one in [1, 2) at bit 14
        exponent.eq(s["exp_sum"] + product[15]),
        frac.eq(Mux(product[15], product[:15] << 8, product[:14] << 9)),
    ]
    result = Signal(32, name=f"{name}_result")
    with m.If(s["nan"]):
        m.d.comb += result.eq(CANONICAL_NAN)
    with m.Elif(s["inf"] | (~s["zero"] & (exponent >= 255))):
        m.d.comb += result.eq(Cat(Const(POS_INF, 31), sign))
    with m.Elif(s["zero"] | (exponent <= 0)):
        m.d.comb += result.eq(Cat(Const(0, 31), sign))
    with m.Else():
        m.d.comb += result.eq(Cat(frac, exponent[:8], sign))
    return {"result": result}


#: :func:`bf16_mul` step by step: product | pack.
BF16_MUL_STEPS = [step_bf16_product, step_bf16_pack]


def bf16_mul(m, a, b, name="bf16_mul"):
    """Exact FP32 product of the BF16 words ``a`` and ``b`` (16 bits each).

    Bit for bit :func:`fp32_mul` of the two values widened to FP32 (``a << 16``), with
    an 8 x 8 significand product instead of 24 x 24: two 8-bit significands give at
    most 16 bits, so the product needs no rounding, only a one-bit normalisation
    (flush to zero below 2**-126, infinity from 2**128, as :func:`round_pack`).
    """
    return run_steps(m, BF16_MUL_STEPS, {"a": a, "b": b}, name)["result"]


#: The ports of :class:`BF16MultiplyAccumulate` (a systolic processing element).
MAC_SIGNATURE = wiring.Signature({
    "a": In(16), "b": In(16), "acc": In(32), "first": In(1),
    "result": Out(32),
})

#: The ports of :class:`FPALU` (a SIMD lane's ALU).
FPALU_SIGNATURE = wiring.Signature({
    "op": In(OP_BITS),
    "a": In(32), "b": In(32), "c": In(32),
    "result": Out(32),
})


class BF16MultiplyAccumulate(wiring.Component):
    """Combinational processing element of the systolic array.

    ``result = a * b`` when ``first`` is set, ``acc + a * b`` otherwise, with ``a`` and
    ``b`` BF16 and ``acc`` and ``result`` FP32 (the product of two BF16 values is exact
    in FP32; the addition rounds to nearest even, then flushes denormals).

    Attributes
    ----------
    a, b : In(16)
    acc : In(32)
    first : In(1)
    result : Out(32)
    """
    def __init__(self):
        super().__init__(MAC_SIGNATURE)

    def elaborate(self, platform):
        m = Module()
        product = bf16_mul(m, self.a, self.b)
        total = fp32_add(m, self.acc, product)
        m.d.comb += self.result.eq(Mux(self.first, product, total))
        return m


class FPALU(wiring.Component):
    """Combinational ALU of one lane: every :class:`Op` on 32-bit words.

    Attributes
    ----------
    op : In(5)
        Operation code (:class:`Op`); unknown codes give 0.
    a, b, c : In(32)
        Operands (``c`` is used by ``MADD`` and ``SELECT``).
    result : Out(32)
    """
    def __init__(self):
        super().__init__(FPALU_SIGNATURE)

    def elaborate(self, platform):
        m = Module()
        a, b, c = self.a, self.b, self.c
        sub = self.op == Op.SUB
        madd = self.op == Op.MADD
        product = fp32_mul(m, a, b)
        # one adder serves ADD, SUB and the second half of MADD
        add_lhs = Mux(madd, product, a)
        add_rhs = Mux(madd, c, Mux(sub, b ^ 0x80000000, b))
        total = fp32_add(m, add_lhs, add_rhs)
        maximum = fp32_max(m, a, b)
        minimum = fp32_min(m, a, b)
        lt, le, eq = fp32_compare(m, a, b)
        to_bf16 = fp32_to_bf16(m, a)
        from_bf16 = bf16_to_fp32(m, a)
        with m.Switch(self.op):
            with m.Case(Op.PASS):
                m.d.comb += self.result.eq(a)
            with m.Case(Op.ADD, Op.SUB, Op.MADD):
                m.d.comb += self.result.eq(total)
            with m.Case(Op.MUL):
                m.d.comb += self.result.eq(product)
            with m.Case(Op.MAX):
                m.d.comb += self.result.eq(maximum)
            with m.Case(Op.MIN):
                m.d.comb += self.result.eq(minimum)
            with m.Case(Op.LT):
                m.d.comb += self.result.eq(lt)
            with m.Case(Op.LE):
                m.d.comb += self.result.eq(le)
            with m.Case(Op.EQ):
                m.d.comb += self.result.eq(eq)
            with m.Case(Op.SELECT):
                m.d.comb += self.result.eq(Mux(a != 0, b, c))
            with m.Case(Op.TO_BF16):
                m.d.comb += self.result.eq(to_bf16)
            with m.Case(Op.FROM_BF16):
                m.d.comb += self.result.eq(from_bf16)
            with m.Case(Op.IADD):
                m.d.comb += self.result.eq(a + b)
            with m.Case(Op.ISUB):
                m.d.comb += self.result.eq(a - b)
            with m.Case(Op.ILT):
                m.d.comb += self.result.eq(a.as_signed() < b.as_signed())
            with m.Case(Op.IEQ):
                m.d.comb += self.result.eq(a == b)
        return m


def fp_lanes_payload(lanes):
    """Input payload of :class:`FPLanes`: an op code and three operand vectors."""
    return data.StructLayout({
        "op": unsigned(OP_BITS),
        "a": data.ArrayLayout(unsigned(32), lanes),
        "b": data.ArrayLayout(unsigned(32), lanes),
        "c": data.ArrayLayout(unsigned(32), lanes),
    })


def check_lane_count(lanes):
    """Raise unless ``lanes`` is an integer of at least 1 (the FP units take any lane
    count; a vector beat's must also be a power of two, :func:`hdl.interfaces.check_lanes`)."""
    if not isinstance(lanes, int) or isinstance(lanes, bool):
        raise TypeError(f"Lane count must be an integer, not {lanes!r}")
    if lanes < 1:
        raise ValueError(f"Lane count must be at least 1, not {lanes}")


class FPLanes(wiring.Component):
    """``lanes`` :class:`FPALU` in parallel behind one output register (a pipeline stage).

    Parameters
    ----------
    lanes : int
        Number of ALUs, at least 1.

    Attributes
    ----------
    i : In(stream.Signature(fp_lanes_payload(lanes)))
        Operation and operands.
    o : Out(stream.Signature(ArrayLayout(32, lanes)))
        Results, one beat per input beat, one cycle later at the earliest.
    """
    def __init__(self, lanes=4):
        check_lane_count(lanes)
        self._lanes = lanes
        super().__init__({
            "i": In(stream.Signature(fp_lanes_payload(lanes))),
            "o": Out(stream.Signature(data.ArrayLayout(unsigned(32), lanes))),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.o.valid | self.o.ready)
        with m.If(self.o.ready):
            m.d.sync += self.o.valid.eq(0)
        for lane in range(self._lanes):
            alu = m.submodules[f"alu{lane}"] = FPALU()
            m.d.comb += [
                alu.op.eq(self.i.payload.op),
                alu.a.eq(self.i.payload.a[lane]),
                alu.b.eq(self.i.payload.b[lane]),
                alu.c.eq(self.i.payload.c[lane]),
            ]
            with m.If(self.i.valid & self.i.ready):
                m.d.sync += self.o.payload[lane].eq(alu.result)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += self.o.valid.eq(1)
        return m

"""Bit-exact reference arithmetic of the PCU datapath (numpy + ml_dtypes).

Every function takes and returns ``numpy.uint32`` arrays of raw 32-bit words (FP32
bit patterns, BF16 values as FP32 patterns with the low 16 bits zero, or INT32 in
two's complement) and agrees bit for bit with :mod:`hdl.fp`.

Number policy (documented in ``docs/pcu.md``):

* **Denormals are zero on input** (DAZ): an input with exponent field 0 is a zero of
  the same sign.
* **Flush to zero on output** (FTZ): the result is first rounded to nearest even
  with an unbounded exponent range; if its magnitude is then below 2**-126 it
  becomes a zero with the sign of the exact result.
* **Rounding**: round to nearest, ties to even; overflow gives an infinity.
* **NaN**: every NaN result is the canonical quiet NaN ``0x7FC00000``.
* **Signed zero**: IEEE 754 rules (x + (-x) = +0, -0 + -0 = -0, sign of a product
  is the XOR of the signs).
* **Multiply-add** is *not* fused: ``madd(a, b, c) = add(mul(a, b), c)``, two roundings.

The computations here go through float64 (exact for products of two FP32 numbers;
for sums the float64 rounding followed by the float32 rounding is innocuous, since
53 >= 2 * 24 + 2), an implementation independent of the RTL's integer datapath.
"""

import ml_dtypes
import numpy as np

__all__ = [
    "CANONICAL_NAN", "daz", "ftz_round",
    "add", "sub", "mul", "madd", "fmax", "fmin", "cmp_lt", "cmp_le", "cmp_eq", "select",
    "to_bf16", "from_bf16", "iadd", "isub", "ilt", "ieq", "OPS", "apply",
    "exp", "reciprocal", "rsqrt", "scale_exponent",
]

CANONICAL_NAN = np.uint32(0x7FC00000)
#: -inf (the start of a running maximum).
NEG_INF = np.uint32(0xFF800000)
_SIGN = np.uint32(0x80000000)
_TINY = 2.0 ** -126


def _u32(x):
    return np.asarray(x, dtype=np.uint64).astype(np.uint32)


def daz(bits):
    """Denormals-are-zero: replace denormal inputs by a zero of the same sign."""
    bits = _u32(bits)
    denormal = (bits & np.uint32(0x7F800000)) == 0
    return np.where(denormal, bits & _SIGN, bits).astype(np.uint32)


def _f64(bits):
    with np.errstate(invalid="ignore"):
        return daz(bits).view(np.float32).astype(np.float64)


def _is_nan(bits):
    bits = _u32(bits)
    return ((bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)) & \
        ((bits & np.uint32(0x007FFFFF)) != 0)


def ftz_round(value, sign_hint=None):
    """Round float64 ``value`` to FP32 (RNE, unbounded exponent), flush tiny results.

    ``sign_hint`` (bool array) gives the sign of zero results that float64 cannot
    carry (exact zeros keep the float64 sign otherwise).
    """
    value = np.asarray(value, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        normal = value.astype(np.float32).view(np.uint32)
        # tiny region: scale up, round in the normal range, test against 2**-126
        scaled = (value * 2.0 ** 100).astype(np.float32)
    flush = np.abs(scaled.astype(np.float64)) < _TINY * 2.0 ** 100
    tiny = np.abs(value) < 2.0 ** -120
    signbit = np.signbit(value)
    zero = np.where(signbit, _SIGN, np.uint32(0)).astype(np.uint32)
    scaled_back = (scaled.astype(np.float64) * 2.0 ** -100).astype(np.float32).view(np.uint32)
    out = np.where(tiny, np.where(flush, zero, scaled_back), normal)
    out = np.where(np.isnan(value), CANONICAL_NAN, out)
    if sign_hint is not None:
        is_zero = (out & np.uint32(0x7FFFFFFF)) == 0
        out = np.where(is_zero & (value == 0), np.where(sign_hint, _SIGN, 0), out)
    return out.astype(np.uint32)


def add(a, b):
    """FP32 addition ``a + b``."""
    fa, fb = _f64(a), _f64(b)
    with np.errstate(invalid="ignore"):
        total = fa + fb
    # exact zero result: -0 only when both operands are -0
    both_neg = np.signbit(fa) & np.signbit(fb)
    return ftz_round(total, sign_hint=both_neg)


def sub(a, b):
    """FP32 subtraction ``a - b``."""
    return add(a, _u32(b) ^ _SIGN)


def mul(a, b):
    """FP32 multiplication ``a * b`` (the float64 product is exact)."""
    fa, fb = _f64(a), _f64(b)
    with np.errstate(invalid="ignore", over="ignore"):
        product = fa * fb
    sign = np.signbit(fa) ^ np.signbit(fb)
    return ftz_round(product, sign_hint=sign)


def madd(a, b, c):
    """Unfused multiply-add ``(a * b) + c``: two roundings."""
    return add(mul(a, b), c)


def _zero_fix(result, a, b, use_and):
    a, b = daz(a), daz(b)
    both_zero = ((a & np.uint32(0x7FFFFFFF)) == 0) & ((b & np.uint32(0x7FFFFFFF)) == 0)
    sa, sb = (a & _SIGN) != 0, (b & _SIGN) != 0
    sign = (sa & sb) if use_and else (sa | sb)
    return np.where(both_zero, np.where(sign, _SIGN, np.uint32(0)), result).astype(np.uint32)


def fmax(a, b):
    """Maximum; NaN if either is NaN; max(-0, +0) = +0."""
    fa, fb = _f64(a), _f64(b)
    out = np.where(fa >= fb, daz(a), daz(b))
    out = _zero_fix(out, a, b, use_and=True)
    return np.where(_is_nan(a) | _is_nan(b), CANONICAL_NAN, out).astype(np.uint32)


def fmin(a, b):
    """Minimum; NaN if either is NaN; min(-0, +0) = -0."""
    fa, fb = _f64(a), _f64(b)
    out = np.where(fa <= fb, daz(a), daz(b))
    out = _zero_fix(out, a, b, use_and=False)
    return np.where(_is_nan(a) | _is_nan(b), CANONICAL_NAN, out).astype(np.uint32)


def _bool(x):
    return np.asarray(x).astype(np.uint32)


def cmp_lt(a, b):
    """1 if ``a < b`` else 0 (NaN compares false, -0 == +0)."""
    with np.errstate(invalid="ignore"):
        return _bool(_f64(a) < _f64(b))


def cmp_le(a, b):
    """1 if ``a <= b`` else 0."""
    with np.errstate(invalid="ignore"):
        return _bool(_f64(a) <= _f64(b))


def cmp_eq(a, b):
    """1 if ``a == b`` else 0."""
    with np.errstate(invalid="ignore"):
        return _bool(_f64(a) == _f64(b))


def select(a, b, c):
    """``b`` where word ``a`` is non-zero, else ``c`` (raw words, no FP processing)."""
    return np.where(_u32(a) != 0, _u32(b), _u32(c)).astype(np.uint32)


def to_bf16(a):
    """FP32 -> BF16, round to nearest even; the BF16 is returned in the high 16 bits."""
    value = daz(a).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        bf = value.astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32) << 16
    return np.where(_is_nan(a), CANONICAL_NAN, bf).astype(np.uint32)


def from_bf16(a):
    """BF16 (in the high 16 bits) -> FP32: exact, with DAZ and NaN canonicalisation."""
    high = _u32(a) & np.uint32(0xFFFF0000)
    value = daz(high)
    return np.where(_is_nan(high), CANONICAL_NAN, value).astype(np.uint32)


def iadd(a, b):
    """INT32 addition, wrapping."""
    return ((_u32(a).astype(np.uint64) + _u32(b).astype(np.uint64)) & 0xFFFFFFFF
            ).astype(np.uint32)


def isub(a, b):
    """INT32 subtraction, wrapping."""
    return ((_u32(a).astype(np.uint64) - _u32(b).astype(np.uint64)) & 0xFFFFFFFF
            ).astype(np.uint32)


def ilt(a, b):
    """1 if signed ``a < b`` else 0."""
    return _bool(_u32(a).view(np.int32) < _u32(b).view(np.int32))


def ieq(a, b):
    """1 if ``a == b`` else 0."""
    return _bool(_u32(a) == _u32(b))


def _pass(a, b, c):
    return _u32(a)


#: Operation table: code -> (name, function(a, b, c)). The codes are the ``op`` field
#: of a SIMD stage (``hdl.fp.Op``).
OPS = {
    0: ("pass", _pass),
    1: ("add", lambda a, b, c: add(a, b)),
    2: ("sub", lambda a, b, c: sub(a, b)),
    3: ("mul", lambda a, b, c: mul(a, b)),
    4: ("madd", madd),
    5: ("max", lambda a, b, c: fmax(a, b)),
    6: ("min", lambda a, b, c: fmin(a, b)),
    7: ("lt", lambda a, b, c: cmp_lt(a, b)),
    8: ("le", lambda a, b, c: cmp_le(a, b)),
    9: ("eq", lambda a, b, c: cmp_eq(a, b)),
    10: ("select", select),
    11: ("to_bf16", lambda a, b, c: to_bf16(a)),
    12: ("from_bf16", lambda a, b, c: from_bf16(a)),
    13: ("iadd", lambda a, b, c: iadd(a, b)),
    14: ("isub", lambda a, b, c: isub(a, b)),
    15: ("ilt", lambda a, b, c: ilt(a, b)),
    16: ("ieq", lambda a, b, c: ieq(a, b)),
}


def apply(op, a, b, c):
    """Apply operation code ``op`` element-wise to raw words ``a``, ``b``, ``c``."""
    if op not in OPS:
        raise ValueError(f"Unknown PCU operation code {op}")
    return OPS[op][1](_u32(a), _u32(b), _u32(c)).astype(np.uint32)


# -- special functions of the PCU tail ------------------------------------------------------
# All are written with the unfused multiply-add above, in the order the hardware's
# iterative unit executes them (see docs/pcu.md, "Tail special functions").

#: Constants of the exp algorithm (FP32 words).
EXP_LOG2E = 0x3FB8AA3B       # log2(e)
EXP_MAGIC = 0x4B400000       # 1.5 * 2**23: adding it rounds to an integer (RNE)
EXP_LN2_HI = 0x3F317200      # ln 2, high part (16 significant bits: n * hi is exact)
EXP_LN2_LO = 0x35BFBE8E      # ln 2 - hi
EXP_LOW, EXP_HIGH = 0xC2D00000, 0x42B20000     # input clamp: -104.0, 89.0
#: Taylor coefficients 1/k!, k = 7 .. 0, rounded to FP32.
EXP_COEFFS = [0x39500D01, 0x3AB60B61, 0x3C088889, 0x3D2AAAAB, 0x3E2AAAAB, 0x3F000000,
              0x3F800000, 0x3F800000]
#: Initial reciprocal estimate y0 = 48/17 - 32/17 * m for m in [0.5, 1).
RCP_A, RCP_B = 0xBFF0F0F1, 0x4034B4B5     # -32/17, 48/17
#: rsqrt's seed: minimax quadratic of 1/sqrt(2 h), h in [1/8, 1/2): h**2, h, 1 terms.
RSQ_C2, RSQ_C1, RSQ_C0 = 0x40D1BC98, 0xC0D24348, 0x402AEEF8
ONE, HALF, NEG_ZERO = 0x3F800000, 0x3F000000, 0x80000000


def _w(value):
    return np.uint32(value)


def scale_exponent(p, n):
    """``p * 2**n`` for positive normal ``p`` by integer exponent arithmetic: a field
    <= 0 gives +0 (FTZ), >= 255 gives +inf."""
    p = _u32(p)
    field = ((p >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64) + np.asarray(n, np.int64)
    scaled = (p & np.uint32(0x807FFFFF)) | (np.clip(field, 0, 255).astype(np.uint32)
                                           << np.uint32(23))
    out = np.where(field <= 0, p & _SIGN, scaled)
    out = np.where(field >= 255, (p & _SIGN) | np.uint32(0x7F800000), out)
    return out.astype(np.uint32)


def exp(x):
    """FP32 e**x: clamp, Cody-Waite range reduction x = n ln2 + r, degree-7 Taylor
    polynomial of r by Horner, scale by 2**n. Max error: see docs/pcu.md."""
    x = daz(x)
    nan = _is_nan(x)
    clamped = fmin(fmax(x, _w(EXP_LOW)), _w(EXP_HIGH))
    t = madd(clamped, _w(EXP_LOG2E), _w(NEG_ZERO))
    s = madd(t, _w(ONE), _w(EXP_MAGIC))
    nf = madd(s, _w(ONE), _w(EXP_MAGIC) ^ _SIGN)
    r = madd(nf, _w(EXP_LN2_HI) ^ _SIGN, clamped)
    r = madd(nf, _w(EXP_LN2_LO) ^ _SIGN, r)
    p = madd(_w(EXP_COEFFS[0]), r, _w(EXP_COEFFS[1]))
    for coeff in EXP_COEFFS[2:]:
        p = madd(p, r, _w(coeff))
    n = (s & np.uint32(0x7FFFFF)).astype(np.int64) - 0x400000
    return np.where(nan, CANONICAL_NAN, scale_exponent(p, n)).astype(np.uint32)


def reciprocal(x):
    """FP32 1/x: x = m * 2**(e - 126) with m in [0.5, 1); linear estimate of 1/m, three
    Newton steps y += y * (1 - m * y), scale by 2**(126 - e). Max error: docs/pcu.md."""
    x = daz(x)
    sign = x & _SIGN
    field = ((x >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    m = (x & np.uint32(0x007FFFFF)) | np.uint32(126 << 23)
    neg_m = m | _SIGN
    y = madd(m, _w(RCP_A), _w(RCP_B))
    for _ in range(3):
        e = madd(y, neg_m, _w(ONE))
        y = madd(y, e, y)
    out = scale_exponent(y, 126 - field) | sign
    out = np.where(field == 0, sign | np.uint32(0x7F800000), out)          # 1/+-0 = +-inf
    inf = (x & np.uint32(0x7FFFFFFF)) == np.uint32(0x7F800000)
    out = np.where(inf, sign, out)                                         # 1/+-inf = +-0
    return np.where(_is_nan(x), CANONICAL_NAN, out).astype(np.uint32)


def rsqrt(x):
    """FP32 1/sqrt(x): x = m * 2**(2k) with m in [1/4, 1) (the exponent's parity goes
    into m); h = m / 2; quadratic estimate y of 1/sqrt(m) by Horner; three Newton steps
    y += y * (1/2 - h * y * y); scale by 2**-k. 1/sqrt(+-0) = +-inf, 1/sqrt(+inf) = +0,
    x < 0 (and -inf) NaN; never flushes or overflows otherwise. Max error: docs/pcu.md."""
    x = daz(x)
    sign = x & _SIGN
    field = ((x >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64)
    odd = field & 1
    h = (x & np.uint32(0x007FFFFF)) | ((125 - odd).astype(np.uint32) << np.uint32(23))
    neg_h = h | _SIGN
    y = madd(h, _w(RSQ_C2), _w(RSQ_C1))
    y = madd(y, h, _w(RSQ_C0))
    for _ in range(3):
        e = madd(neg_h, y, _w(NEG_ZERO))
        e = madd(e, y, _w(HALF))
        y = madd(y, e, y)
    out = scale_exponent(y, (126 - odd - field) // 2)
    out = np.where(field == 0xFF, np.uint32(0), out)                       # +inf -> +0
    out = np.where((sign != 0) | _is_nan(x), CANONICAL_NAN, out)           # x < 0, NaN
    out = np.where(field == 0, sign | np.uint32(0x7F800000), out)          # +-0 -> +-inf
    return out.astype(np.uint32)

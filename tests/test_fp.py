"""FP32/BF16/INT32 building blocks (hdl.fp) bit-exact against rdu.models.fp, and the
model itself against numpy float32 / ml_dtypes where IEEE and the FTZ policy agree."""

import ml_dtypes
import numpy as np
import pytest
from rdu.models import fp as fpmodel
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.fp import FPLanes, Op
from tb.suites.pcu import edge_words, fp_lanes_ops, random_operands

ALL_OPS = [int(op) for op in Op]


# -- the reference model against numpy's IEEE float32 ----------------------------------

def _normal(bits):
    exp = (bits >> np.uint32(23)) & np.uint32(0xFF)
    return (exp != 0) & (exp != 0xFF)


def _close_to_ieee(model, ieee):
    """Equal, or IEEE gave a denormal that FTZ made a signed zero."""
    ieee = ieee.view(np.uint32)
    denormal = ((ieee & np.uint32(0x7F800000)) == 0) & ((ieee & np.uint32(0x7FFFFF)) != 0)
    same = model == ieee
    flushed = denormal & (model == (ieee & np.uint32(0x80000000)))
    # IEEE rounds tiny values at denormal precision, which can carry them up to
    # 2**-126; the FTZ policy rounds at full precision first, then flushes
    min_normal = (ieee & np.uint32(0x7FFFFFFF)) == np.uint32(0x00800000)
    carried = min_normal & (model == (ieee & np.uint32(0x80000000)))
    nan = np.isnan(ieee.view(np.float32)) & (model == fpmodel.CANONICAL_NAN)
    return same | flushed | carried | nan


@pytest.mark.parametrize("name", ["add", "sub", "mul"])
def test_model_matches_numpy_float32(name):
    rng = np.random.default_rng(1)
    a, b, _ = random_operands(rng, 200_000)
    keep = _normal(a) & _normal(b)
    a, b = a[keep], b[keep]
    fa, fb = a.view(np.float32), b.view(np.float32)
    with np.errstate(all="ignore"):
        ieee = {"add": fa + fb, "sub": fa - fb, "mul": fa * fb}[name]
    model = getattr(fpmodel, name)(a, b)
    assert _close_to_ieee(model, ieee).all()


def test_model_casts_match_ml_dtypes():
    rng = np.random.default_rng(2)
    a, _, _ = random_operands(rng, 100_000)
    a = a[_normal(a)]
    ref = a.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint32) << 16
    assert (fpmodel.to_bf16(a) == ref).all()
    back = fpmodel.from_bf16(ref)
    finite = (ref & np.uint32(0x7F800000)) != np.uint32(0x7F800000)
    assert (back[finite] == ref[finite]).all()


def test_model_policy_cases():
    f = fpmodel
    one, neg_zero, tiny = np.uint32(0x3F800000), np.uint32(0x80000000), np.uint32(0x00000001)
    assert f.add(one, one ^ np.uint32(0x80000000)) == 0                # x - x = +0
    assert f.add(neg_zero, neg_zero) == 0x80000000                     # -0 + -0 = -0
    assert f.add(tiny, 0) == 0                                          # DAZ
    assert f.mul(np.uint32(0x1F800000), np.uint32(0x1F800000)) == 0    # 2**-128: FTZ
    assert f.mul(np.uint32(0x9F800000), np.uint32(0x1F800000)) == 0x80000000
    assert f.mul(np.uint32(0x7F000000), np.uint32(0x40000000)) == 0x7F800000   # overflow
    assert f.mul(np.uint32(0x7F800000), np.uint32(0)) == 0x7FC00000    # inf * 0 = NaN
    assert f.fmax(neg_zero, np.uint32(0)) == 0 and f.fmin(np.uint32(0), neg_zero) == 0x80000000
    # 1 + 2**-24 is a tie: rounds to even (1.0); 1 + 3 * 2**-24 rounds up
    assert f.add(one, np.uint32(0x33800000)) == 0x3F800000
    assert f.add(one, np.uint32(0x34400000)) == 0x3F800002
    # 2**-126 * (1 - 2**-24) is exact at full precision, below 2**-126: flushed
    # (IEEE gradual underflow would round it up to 2**-126)
    assert f.mul(np.uint32(0x00800000), np.uint32(0x3F7FFFFF)) == 0
    # (1 - 2**-13) * 2**-63 * (1 + 2**-13) * 2**-63 = (1 - 2**-26) * 2**-126 rounds up
    # to 2**-126 at full precision: kept
    assert f.mul(np.uint32(0x1FFFF800), np.uint32(0x20000400)) == 0x00800000
    with pytest.raises(ValueError, match="Unknown PCU operation code 99"):
        f.apply(99, 0, 0, 0)


# -- RTL against the model ----------------------------------------------------------------

@pytest.mark.parametrize("ops", [ALL_OPS[:6], ALL_OPS[6:12], ALL_OPS[12:]])
def test_fp_ops_amaranth(ops, seed):
    """Fast subset: every op, all edge-case pairs, 60 random vectors, random stalls."""
    stats = run_amaranth(FPLanes(4), fp_lanes_ops, seed=seed, lanes=4, ops=ops, count=60,
                         edge_cases=True)
    assert stats.result["checked"] >= len(ops) * (len(edge_words()) ** 2 + 240)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_fp_lanes_rejects_bad_lanes():
    with pytest.raises(ValueError, match="Lane count must be at least 1, not 0"):
        FPLanes(0)
    with pytest.raises(TypeError, match="Lane count must be an integer, not '4'"):
        FPLanes("4")


@pytest.mark.verilator
def test_fp_ops_verilator(sim_dir, seed):
    """Full set: 10,000 random 4-lane vectors per op plus all edge-case pairs, random
    stalls on both ports."""
    built = build(FPLanes, lanes=4)
    stats = run_verilator(built, fp_lanes_ops, sim_dir, seed=seed, lanes=4, ops=ALL_OPS,
                          count=10_000, edge_cases=True)
    assert stats.result["checked"] >= len(ALL_OPS) * 40_000


# -- exp, reciprocal and rsqrt: accuracy of the documented algorithms ------------------------

#: Documented bounds (docs/pcu.md), in units in the last place of the FP32 result.
EXP_MAX_ULP = 1.5
RECIPROCAL_MAX_ULP = 1.5
RSQRT_MAX_ULP = 1.5


def _ulp_error(result_bits, reference):
    ulp = np.spacing(np.abs(reference.astype(np.float32))).astype(np.float64)
    return np.abs(result_bits.view(np.float32).astype(np.float64) - reference) / ulp


def test_exp_error_bound():
    """exp over its useful range [-87.33, 88.72] (normal results): max error vs float64."""
    rng = np.random.default_rng(11)
    x = np.concatenate([np.linspace(-87.33, 88.72, 1_000_001),
                        rng.uniform(-87.33, 88.72, 1_000_000),
                        rng.uniform(-1, 1, 500_000)]).astype(np.float32)
    error = _ulp_error(fpmodel.exp(x.view(np.uint32)), np.exp(x.astype(np.float64)))
    assert error.max() <= EXP_MAX_ULP, f"exp max error {error.max():.3f} ulp at {x[error.argmax()]}"
    assert error.max() > 0.5      # the measurement is real (not correctly rounded)


def test_reciprocal_error_bound():
    """1/x over every normal x with a normal result: max error vs float64."""
    rng = np.random.default_rng(12)
    x = rng.integers(0x00800000, 0x7E800001, size=2_000_000, dtype=np.uint64).astype(np.uint32)
    x |= (rng.integers(0, 2, size=x.size).astype(np.uint32) << np.uint32(31))
    mantissas = np.arange(0, 1 << 23, 7, dtype=np.uint32) | np.uint32(0x3F800000)
    x = np.concatenate([x, mantissas])
    error = _ulp_error(fpmodel.reciprocal(x), 1.0 / x.view(np.float32).astype(np.float64))
    assert error.max() <= RECIPROCAL_MAX_ULP, f"reciprocal max error {error.max():.3f} ulp"


def test_rsqrt_error_bound():
    """1/sqrt(x) over every 16th mantissa of both exponent parities (the result depends on
    nothing else but a power of two) and random positive normals: max error vs float64
    (the exhaustive sweep: benchmarks/special_accuracy.py)."""
    rng = np.random.default_rng(13)
    mantissas = np.arange(0, 1 << 23, 16, dtype=np.uint32)
    x = np.concatenate([mantissas | np.uint32(0x3F000000), mantissas | np.uint32(0x3F800000),
                        rng.integers(0x00800000, 0x7F800000, size=500_000,
                                     dtype=np.uint64).astype(np.uint32)])
    error = _ulp_error(fpmodel.rsqrt(x), 1.0 / np.sqrt(x.view(np.float32).astype(np.float64)))
    assert error.max() <= RSQRT_MAX_ULP, f"rsqrt max error {error.max():.3f} ulp"
    assert error.max() > 0.5      # the measurement is real (not correctly rounded)


def test_special_function_edge_cases():
    words = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                      0x00000001, 0x3F800000, 0x42B20000, 0xC2D00000], dtype=np.uint32)
    assert list(fpmodel.exp(words)) == [0x3F800000, 0x3F800000, 0x7F800000, 0, 0x7FC00000,
                                        0x3F800000, 0x402DF854, 0x7F800000, 0]
    assert list(fpmodel.reciprocal(words)) == [0x7F800000, 0xFF800000, 0, 0x80000000,
                                               0x7FC00000, 0x7F800000, 0x3F800000,
                                               0x3C381703, 0xBC1D89D9]
    # +-0 (and a denormal, DAZ) -> +-inf, +inf -> +0, x < 0 and -inf -> NaN, rsqrt(1) = 1
    assert list(fpmodel.rsqrt(words)) == [0x7F800000, 0xFF800000, 0, 0x7FC00000,
                                          0x7FC00000, 0x7F800000, 0x3F800000, 0x3DD9166B,
                                          0x7FC00000]
    powers = np.array([0x00800000, 0x3E800000, 0x40800000, 0x7E800000], np.uint32)
    assert list(fpmodel.rsqrt(powers)) == [0x5F000000, 0x40000000, 0x3F000000, 0x20000000]

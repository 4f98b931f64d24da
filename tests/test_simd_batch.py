"""pcu_reference.SimdState.block (the batched SIMD pipeline) against SimdState.step (one
iteration at a time, the reference), bit for bit: random configurations of every op,
source, reduce and tail, edge-case words, scalar_in, IN1, COUNTER, counter chains."""


import numpy as np
import pytest
from rdu.models import fp, pcu_reference

from hdl.fp import Op
from hdl.pcu_config import Source

EDGE_WORDS = [
    0x00000000, 0x80000000,                    # +-0
    0x7F800000, 0xFF800000,                    # +-inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF, 0xFFFFFFFF,   # NaNs
    0x00000001, 0x807FFFFF, 0x00400000,        # denormals
    0x00800000, 0x80800000, 0x00800001,        # smallest normals
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,        # largest normals
    0x3F800000, 0xBF800000, 0x3F800001, 0x33800000, 0x4B400000,   # 1, ulp, tie makers
    0x1F800000, 0x20000000, 0x5F800000, 0x42B20000, 0xC2D00000,   # under/overflow makers
    0x00000003, 0x00000010, 0xFFFFFFFE,        # small integers, -2
]


def random_words(rng, shape, edge_fraction=0.25):
    """Random FP32 words: normal values of several scales, raw words, edge cases."""
    count = int(np.prod(shape))
    kind = rng.random(count)
    normal = (rng.standard_normal(count) *
              np.exp2(rng.integers(-8, 9, count))).astype(np.float32).view(np.uint32)
    raw = rng.integers(0, 1 << 32, count, dtype=np.uint64).astype(np.uint32)
    edge = np.array(EDGE_WORDS, dtype=np.uint32)[rng.integers(0, len(EDGE_WORDS), count)]
    small = rng.integers(0, 8, count).astype(np.uint32)
    out = np.where(kind < edge_fraction, edge,
                   np.where(kind < edge_fraction + 0.1, raw,
                            np.where(kind < edge_fraction + 0.15, small, normal)))
    return out.astype(np.uint32).reshape(shape)


def random_config(rng, stages, max_beats=400):
    """A random SIMD configuration: every op and source (REG often), counters with
    min / stride, reduce, tail, emit_every, scalar_in, vector_out."""
    def counter(top):
        lo = int(rng.integers(0, 4))
        stride = int(rng.integers(1, 4))
        trips = int(rng.integers(1, top + 1))
        return {"min": lo, "max": lo + stride * (trips - 1) + 1 + int(rng.integers(0, stride)),
                "stride": stride}
    while True:
        counters = [counter(int(rng.choice([1, 3, 9, 40]))), counter(6), counter(3)]
        if np.prod([pcu_reference.trip_count(c) for c in counters]) <= max_beats:
            break
    sources = [int(s) for s in Source]
    stage_list = []
    for _ in range(stages):
        src = [int(rng.choice([Source.REG] * 3 + sources)) for _ in range(3)]
        stage_list.append({"op": int(rng.integers(0, len(Op))), "src_a": src[0],
                           "src_b": src[1], "src_c": src[2],
                           "constant": int(random_words(rng, (1,))[0])})
    return {"mode": 0, "counters": counters, "stages": stage_list,
            "scalar_in": int(rng.integers(0, 2)), "emit_every": int(rng.integers(0, 2)),
            "vector_out": int(rng.integers(0, 2)), "reduce": int(rng.integers(0, 3)),
            "tail": int(rng.integers(0, 3)), "emit_outer": int(rng.integers(0, 2)),
            "tail_bf16": int(rng.integers(0, 2)),
            "acc_stage": int(rng.choice([0, 0, 0, *range(1, stages + 1)])),
            "row_pad": int(rng.choice([0, 0, *range(1, 8)]))}


def reference(config, lanes, in0, in1, scalars):
    """SimdState.step per iteration: (vectors, reductions, final state)."""
    state = pcu_reference.SimdState(config, lanes)
    vectors, reductions = [], []
    taken = iter(scalars)
    for beat, ((v0, v1, _), first, last_inner, _) in enumerate(pcu_reference.iterations(config)):
        scalar = next(taken) if config["scalar_in"] and first else None
        vector, reduction = state.step(v0, first, last_inner, in0[beat],
                                       in1[beat] if state.uses_in1 else None, scalar,
                                       *pcu_reference.outer_flags(config, v1))
        if vector is not None:
            vectors.append(vector)
        if reduction is not None:
            reductions.append(reduction)
    return (np.array(vectors, dtype=np.uint32).reshape(-1, lanes),
            np.array(reductions, dtype=np.uint32), state)


def batched(config, lanes, in0, in1, scalars, cuts=()):
    """SimdState.block over the iterations, split at ``cuts`` (several calls: the
    registers and the scalar carry over)."""
    state = pcu_reference.SimdState(config, lanes)
    steps = pcu_reference.iterations(config)
    counter0 = np.array([v[0] for v, _, _, _ in steps])
    first = np.array([f for _, f, _, _ in steps])
    last_inner = np.array([last for _, _, last, _ in steps])
    first_outer, last_outer = pcu_reference.outer_flags(config, [v[1] for v, _, _, _ in steps])
    bounds = [0, *sorted(cuts), len(steps)]
    vectors, reductions = [], []
    used_scalars = 0
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        count = int(first[lo:hi].sum()) if config["scalar_in"] else 0
        v, r = state.block(counter0[lo:hi], first[lo:hi], last_inner[lo:hi], in0[lo:hi],
                           in1[lo:hi] if state.uses_in1 else None,
                           scalars[used_scalars:used_scalars + count],
                           first_outer[lo:hi], last_outer[lo:hi])
        used_scalars += count
        if v is not None:
            vectors.append(v)
        if r is not None:
            reductions.append(r)
    vectors = np.concatenate(vectors) if vectors else np.zeros((0, lanes), np.uint32)
    reductions = np.concatenate(reductions) if reductions else np.zeros(0, np.uint32)
    return vectors, reductions, state


def compare(config, lanes, rng, cuts=(), edge_fraction=0.25):
    beats = len(pcu_reference.iterations(config))
    in0 = random_words(rng, (beats, lanes), edge_fraction)
    in1 = random_words(rng, (beats, lanes), edge_fraction)
    scalars = random_words(rng, (beats,), edge_fraction)
    want_v, want_r, want_state = reference(config, lanes, in0, in1, scalars)
    got_v, got_r, got_state = batched(config, lanes, in0, in1, scalars, cuts)
    assert got_v.shape == want_v.shape and np.array_equal(got_v, want_v), \
        f"vector_out differs for {config}"
    assert np.array_equal(got_r, want_r), f"scalar_out differs for {config}"
    for index, (got, want) in enumerate(zip(got_state.registers, want_state.registers,
                                            strict=True)):
        assert np.array_equal(got, want), f"register of stage {index} differs for {config}"
    assert int(got_state.scalar) == int(want_state.scalar)


@pytest.mark.parametrize("lanes,stages", [(4, 4), (8, 2), (2, 6)])
def test_block_matches_step_random(lanes, stages, seed):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        config = random_config(rng, stages)
        beats = len(pcu_reference.iterations(config))
        cuts = sorted({int(x) for x in rng.integers(1, beats, int(rng.integers(0, 4)))}) \
            if beats > 1 else []
        compare(config, lanes, rng, cuts, edge_fraction=float(rng.choice([0.0, 0.05, 0.3])))


@pytest.mark.parametrize("op", [Op.ADD, Op.SUB, Op.MUL, Op.MAX, Op.MIN, Op.IADD, Op.ISUB,
                                Op.MADD, Op.SELECT, Op.LT])
@pytest.mark.parametrize("reg_first", [False, True])
def test_block_register_recurrences(op, reg_first, seed, monkeypatch):
    """Each accumulator recurrence (the scans and the position loop), with long and
    short inner loops, chunks smaller than an inner loop, and data that drives sums and
    products into the flush-to-zero range and overflow (the scans' fallback)."""
    monkeypatch.setattr(pcu_reference, "BLOCK_BEATS", 37)
    rng = np.random.default_rng(seed * 31 + int(op) * 2 + reg_first)
    for inner, outer in ((50, 3), (1, 40), (7, 9)):
        for scale_words in (None, [0x00800000, 0x80800000, 0x00800001, 0x01000000],
                            [0x7F000000, 0xFF000000, 0x3F000000, 0x20000000]):
            reg, other = Source.REG, int(rng.choice([Source.PREV, Source.IN1, Source.SCALAR,
                                                     Source.COUNTER, Source.CONST]))
            a, b = (reg, other) if reg_first else (other, reg)
            config = {"mode": 0, "counters": [{"min": 0, "max": inner, "stride": 1},
                                              {"min": 0, "max": outer, "stride": 1},
                                              {"min": 0, "max": 1, "stride": 1}],
                      "stages": [{"op": 3, "src_a": 0, "src_b": 0},
                                 {"op": int(op), "src_a": a, "src_b": b,
                                  "src_c": int(rng.choice([0, 1, 3])),
                                  "constant": int(rng.choice(EDGE_WORDS))}],
                      "scalar_in": 1, "emit_every": 1, "vector_out": 1,
                      "reduce": int(rng.integers(0, 3)), "tail": 0}
            beats = inner * outer
            if scale_words is None:
                compare(config, 4, rng, cuts=[beats // 3], edge_fraction=0.02)
                continue
            in0 = np.array(scale_words, np.uint32)[rng.integers(0, 4, (beats, 4))]
            in0 ^= rng.integers(0, 2, (beats, 4)).astype(np.uint32) << np.uint32(31)
            config["stages"][0] = {"op": 0, "src_a": 0}
            want = reference(config, 4, in0, in0, in0[:, 0])
            got = batched(config, 4, in0, in0, in0[:, 0], cuts=[beats // 2])
            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


def test_scans_reach_their_fallback():
    """The float32 add / multiply scans decline exactly where IEEE gradual underflow
    differs from flush-to-zero (the position loop then computes the stage)."""
    init = np.zeros((1, 2), np.uint32)
    tiny_sum = np.array([[[0x00800001, 0x3F800000]], [[0x80800000, 0x3F800000]]],
                        np.uint32).transpose(1, 0, 2)
    assert pcu_reference._scan_accumulate("add", init, tiny_sum) is None
    ones = np.full((1, 2), 0x3F800000, np.uint32)
    tiny_product = np.array([[[0x20000000, 0x3F800000]], [[0x1F000000, 0x3F800000]]],
                            np.uint32).transpose(1, 0, 2)
    assert pcu_reference._scan_accumulate("mul", ones, tiny_product) is None
    fine = np.array([[[0x3F800000, 0x40000000]], [[0x3F800000, 0xFF800000]]],
                    np.uint32).transpose(1, 0, 2)
    out = pcu_reference._scan_accumulate("add", init, fine)
    assert out.tolist() == [[[0x3F800000, 0x40000000], [0x40000000, 0xFF800000]]]


def test_block_softmax_runs(seed):
    """The five softmax runs of docs/pcu.md over long rows, in uneven chunks."""
    rng = np.random.default_rng(seed)
    lanes, row, rows = 8, 33, 12
    counters = [{"min": 0, "max": row, "stride": 1}, {"min": 0, "max": rows, "stride": 1},
                {"min": 0, "max": 1, "stride": 1}]
    runs = [([{"op": 5, "src_a": 0, "src_b": 1, "constant": 0xFF800000}], {"reduce": 2}),
            ([{"op": 2, "src_a": 0, "src_b": 2}],
             {"scalar_in": 1, "tail": 1, "emit_every": 1, "vector_out": 1}),
            ([{"op": 1, "src_a": 0, "src_b": 1, "constant": 0}], {"reduce": 1}),
            ([{"op": 0, "src_a": 2}], {"scalar_in": 1, "tail": 2, "vector_out": 1}),
            ([{"op": 3, "src_a": 0, "src_b": 2}],
             {"scalar_in": 1, "emit_every": 1, "vector_out": 1})]
    for stages, fields in runs:
        config = {"mode": 0, "counters": counters, "scalar_in": 0, "emit_every": 0,
                  "vector_out": 0, "reduce": 0, "tail": 0,
                  "stages": [{"src_a": 0, "src_b": 0, "src_c": 0, "constant": 0, **s}
                             for s in stages] + [{"op": 0}] * 3, **fields}
        compare(config, lanes, rng, cuts=[5, 40, 41, 200], edge_fraction=0.02)


def test_comparison_catches_a_wrong_batch(seed, monkeypatch):
    """The comparison fails when the batched path is wrong: a sum scan in float64
    (one rounding at the end instead of one per step), a max scan that ignores the
    sign of zero, an exp tail one ulp off."""
    rng = np.random.default_rng(seed)
    config = {"mode": 0, "counters": [{"min": 0, "max": 64, "stride": 1},
                                      {"min": 0, "max": 4, "stride": 1},
                                      {"min": 0, "max": 1, "stride": 1}],
              "stages": [{"op": 1, "src_a": 0, "src_b": 1, "constant": 0}],
              "scalar_in": 0, "emit_every": 1, "vector_out": 1, "reduce": 0, "tail": 0}
    compare(config, 4, rng, edge_fraction=0.0)          # the real one agrees

    def sum_in_float64(op, init, x):
        words = np.concatenate([init[:, None, :], x], axis=1)
        with np.errstate(invalid="ignore", over="ignore"):     # NaN and inf words
            acc = np.cumsum(fp.daz(words).view(np.float32).astype(np.float64), axis=1)
            return fp.ftz_round(acc[:, 1:])
    with monkeypatch.context() as patch:
        patch.setattr(pcu_reference, "_scan_accumulate", sum_in_float64)
        with pytest.raises(AssertionError, match="differs"):
            compare(config, 4, rng, edge_fraction=0.0)

    max_config = dict(config, stages=[{"op": 5, "src_a": 1, "src_b": 0,
                                         "constant": 0x80000000}])
    with monkeypatch.context() as patch:
        patch.setattr(pcu_reference, "_order_keys",
                      lambda w: np.where(w.astype(np.int64) & 0x80000000,
                                         -(w.astype(np.int64) & 0x7FFFFFFF),
                                         w.astype(np.int64)))
        with pytest.raises(AssertionError, match="differs"):
            for _ in range(20):
                compare(max_config, 4, rng, edge_fraction=0.5)

    exp_config = dict(config, stages=[{"op": 0, "src_a": 0}], tail=1)
    real_exp = fp.exp
    state = {"calls": 0}

    def exp_off_by_one(x):
        state["calls"] += 1
        out = real_exp(x)
        return out + np.uint32(1) if np.ndim(x) == 2 else out
    with monkeypatch.context() as patch:
        patch.setattr(fp, "exp", exp_off_by_one)
        with pytest.raises(AssertionError, match="differs"):
            compare(exp_config, 4, rng, edge_fraction=0.0)
    assert state["calls"]


# --------------------------------------------------------------------------------------
# The functional model: batched SIMD PCUs against the one-beat path
# --------------------------------------------------------------------------------------

def _chain_bitstream(lanes, config_a, config_b, extra=()):
    """2x2 array: PCU A (0,0) takes vector_in0 / scalar_in / start from west edge 0 and
    vector_in1 from east edge 2; its vectors feed PCU B (1,1)'s vector_in0 and its
    reductions B's scalar_in; B takes vector_in1 and its start from east edge 3, its
    vectors leave at west edge 1, its reductions and DONE at east edge 3; A's DONE at
    west edge 0."""
    from rdu.bitstream import Geometry, Record, UnitKind, write_bitstream
    from rdu.unitconfig import pack_config

    from hdl.pcu_config import pcu_config_layout
    from hdl.switch import Port
    from hdl.switch import Source as Sel
    from tb.suites.array import EAST, LOCAL0, SOUTH, WEST, switch_records
    routes = [((0, 0, "vector", LOCAL0), Sel.WEST), ((0, 0, "vector", LOCAL0 + 1), Sel.EAST),
              ((0, 1, "vector", WEST), Sel.EAST),
              ((0, 0, "vector", EAST), Sel.LOCAL), ((0, 1, "vector", SOUTH), Sel.WEST),
              ((1, 1, "vector", LOCAL0), Sel.NORTH), ((1, 1, "vector", LOCAL0 + 1), Sel.EAST),
              ((1, 1, "vector", WEST), Sel.LOCAL), ((1, 0, "vector", WEST), Sel.EAST),
              ((0, 0, "scalar", Port.LOCAL), Sel.WEST), ((0, 0, "scalar", Port.EAST), Sel.LOCAL),
              ((0, 1, "scalar", Port.SOUTH), Sel.WEST), ((1, 1, "scalar", Port.LOCAL), Sel.NORTH),
              ((1, 1, "scalar", Port.EAST), Sel.LOCAL),
              ((0, 0, "control", Port.LOCAL), Sel.WEST), ((0, 0, "control", Port.WEST), Sel.LOCAL),
              ((1, 1, "control", Port.LOCAL), Sel.EAST), ((1, 1, "control", Port.EAST), Sel.LOCAL)]
    routes += list(extra)
    layout = pcu_config_layout(lanes, 4)
    records = [Record(UnitKind.PCU, 0, 0, pack_config(layout, config_a)),
               Record(UnitKind.PCU, 1, 1, pack_config(layout, config_b))]
    return write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, routes))


def _run_both(lanes, words, inputs):
    """The model run with batched SIMD and with the one-beat path: identical results
    (outputs, counters, transfers), or identical errors."""
    from rdu.models.array import FunctionalArray
    from rdu.models.shared import ModelError
    results = []
    for batch in (True, False):
        model = FunctionalArray(2, 2, lanes, compute=True, capacity_bytes=1024,
                                simd_batch=batch)
        model.load(words)
        try:
            result = model.run(edge_inputs=inputs)
        except ModelError as error:
            results.append(("error", str(error)))
            continue
        outputs = {key: np.asarray(value, dtype=np.uint32).tolist()
                   for key, value in result.edge_outputs.items()}
        results.append((outputs, result.counters, result.done_tokens, result.items_moved,
                        result.leftovers))
    assert results[0] == results[1]
    return results[0]


def _pad_stages(config, stages=4):
    config["stages"] = (config["stages"] + [{"op": 0}] * stages)[:stages]
    for stage in config["stages"]:
        for field in ("src_a", "src_b", "src_c", "constant"):
            stage.setdefault(field, 0)
    return config


def test_model_chain_batched_matches_per_beat(seed):
    """Random configurations on two chained PCUs (A's lazy results are B's inputs),
    two runs each: the batched model == the one-beat model == run_simd chained."""
    rng = np.random.default_rng(seed)
    lanes = 4
    for case in range(12):
        config_a = _pad_stages(random_config(rng, int(rng.integers(1, 5)), max_beats=120))
        config_a.update(emit_every=1, vector_out=1, reduce=int(rng.integers(1, 3)))
        beats = len(pcu_reference.iterations(config_a))
        config_b = _pad_stages(random_config(rng, int(rng.integers(1, 5))))
        config_b.update(scalar_in=1, vector_out=1,
                        counters=[{"min": 0, "max": 1, "stride": 1},
                                  {"min": 0, "max": beats, "stride": 1},
                                  {"min": 0, "max": 1, "stride": 1}])
        words = _chain_bitstream(lanes, config_a, config_b)
        runs = 2
        edge = 0.02 if case % 2 else 0.2
        in0 = random_words(rng, (runs * beats, lanes), edge)
        in1_a = random_words(rng, (runs * beats, lanes), edge)
        in1_b = random_words(rng, (runs * beats, lanes), edge)
        scalars = random_words(rng, (runs * beats,), edge)
        count_a = sum(first for _, first, _, _ in pcu_reference.iterations(config_a)) \
            if config_a["scalar_in"] else 0
        inputs = {("vector", 0): in0.tolist(), ("control", 0): [0] * runs,
                  ("control", 3): [0] * runs}
        if pcu_reference.uses_in1(config_a):
            inputs["vector", 2] = in1_a.tolist()
        if pcu_reference.uses_in1(config_b):
            inputs["vector", 3] = in1_b.tolist()
        if count_a:
            inputs["scalar", 0] = scalars[:runs * count_a].tolist()
        outputs, counters, done, _, _ = _run_both(lanes, words, inputs)
        assert done == 2 * runs
        want_v, want_s = [], []
        for run in range(runs):
            part = slice(run * beats, (run + 1) * beats)
            ref_a = pcu_reference.run_simd(config_a, lanes, in0[part], in1_a[part],
                                       scalars[run * count_a:(run + 1) * count_a])
            ref_b = pcu_reference.run_simd(config_b, lanes, ref_a["vector_out"], in1_b[part],
                                       ref_a["scalar_out"])
            want_v += [list(map(int, v)) for v in ref_b["vector_out"]]
            want_s += [int(x) for x in ref_b["scalar_out"]]
        assert outputs.get(("vector", 1), []) == want_v
        assert outputs.get(("scalar", 3), []) == want_s
        assert counters["PCU(0,0)"]["runs"] == counters["PCU(1,1)"]["runs"] == runs


def test_model_batched_errors_and_deadlocks_match(seed):
    """Short inputs (a deadlock naming the iteration), a bad counter on the second
    start token: the same errors, counters and outputs in both paths."""
    rng = np.random.default_rng(seed)
    lanes = 4
    for _ in range(6):
        config_a = _pad_stages(random_config(rng, 3, max_beats=60))
        config_a.update(emit_every=1, vector_out=1, reduce=1)
        beats = len(pcu_reference.iterations(config_a))
        config_b = _pad_stages(random_config(rng, 2))
        config_b.update(scalar_in=1, vector_out=1,
                        counters=[{"min": 0, "max": 1, "stride": 1},
                                  {"min": 0, "max": beats, "stride": 1},
                                  {"min": 0, "max": 1, "stride": 1}])
        words = _chain_bitstream(lanes, config_a, config_b)
        short = int(rng.integers(0, beats))
        inputs = {("vector", 0): random_words(rng, (short, lanes)).tolist(),
                  ("vector", 2): random_words(rng, (beats, lanes)).tolist(),
                  ("vector", 3): random_words(rng, (beats, lanes)).tolist(),
                  ("scalar", 0): random_words(rng, (beats,)).tolist(),
                  ("control", 0): [0], ("control", 3): [0]}
        outcome = _run_both(lanes, words, inputs)
        assert outcome[0] == "error" and "deadlock" in outcome[1]


def test_model_feedback_pcu_steps_per_beat():
    """A PCU whose results can return to its own inputs steps one beat at a time (a
    batch would wait on itself); a PCU fed by it still batches."""
    from rdu.models.array import FunctionalArray
    lanes = 4
    config = _pad_stages({"mode": 0, "counters": [{"min": 0, "max": 2, "stride": 1}] * 3,
                          "stages": [{"op": 1, "src_a": 0, "src_b": 4}], "vector_out": 1,
                          "emit_every": 1, "scalar_in": 0, "reduce": 0, "tail": 0})
    words = _chain_bitstream(lanes, config, config)
    model = FunctionalArray(2, 2, lanes, compute=True, capacity_bytes=1024)
    model.load(words)
    _, _, _, units, _ = model.build_run(None, [])
    assert [unit.batch for unit in units if unit.name.startswith("PCU")] == [True, True]
    # B's vectors back to A's vector_in1: (1,1) north <- local, (0,1) west <- south
    from hdl.switch import Source as Sel
    from tb.suites.array import NORTH, WEST
    words = _chain_bitstream(lanes, config, config, extra=[
        ((1, 1, "vector", NORTH), Sel.LOCAL), ((0, 1, "vector", WEST), Sel.SOUTH)])
    model.load(words)
    _, _, _, units, _ = model.build_run(None, [])
    assert [unit.batch for unit in units if unit.name.startswith("PCU")] == [False, False]
    outcome = _run_both(lanes, words, {("vector", 0): [[1, 2, 3, 4]] * 8,
                                       ("control", 0): [0], ("control", 3): [0]})
    assert outcome[0] == "error" and "PCU(0,0) waits on vector_in1" in outcome[1]


def test_model_pcu_into_pmu_batched_matches_per_beat(seed):
    """A SIMD PCU's lazy results written into a PMU (double-buffered, transposing
    read): the writes wait until the SRAM is read, then land in order; outputs and
    SRAM contents equal the one-beat path's and run_simd's."""
    from rdu.bitstream import Geometry, Record, UnitKind, write_bitstream
    from rdu.models.array import FunctionalArray
    from rdu.unitconfig import pack_config

    from hdl.pcu_config import pcu_config_layout
    from hdl.pmu import pmu_config_layout
    from hdl.switch import Port
    from hdl.switch import Source as Sel
    from tb.suites.array import EAST, LOCAL0, switch_records
    from tb.suites.pmu import pattern, pmu_config
    rng = np.random.default_rng(seed)
    lanes, size, passes = 4, 8, 3
    beats = passes * size * size // lanes
    for _ in range(4):
        config = _pad_stages(random_config(rng, int(rng.integers(1, 5))))
        inner = int(rng.choice([1, 2, 8]))
        config.update(emit_every=1, vector_out=1, scalar_in=0,
                      counters=[{"min": 0, "max": inner, "stride": 1},
                                {"min": 0, "max": beats // inner, "stride": 1},
                                {"min": 0, "max": 1, "stride": 1}])
        pmu = pmu_config(lanes, write=pattern("row_major", lanes, size, size),
                         read=pattern("column_major", lanes, size, size), buffers=2,
                         buffer_words=size * size, skew_shift=size.bit_length() - 1,
                         read_passes=passes)
        routes = [((0, 0, "vector", LOCAL0), Sel.WEST), ((0, 0, "vector", EAST), Sel.LOCAL),
                  ((0, 1, "vector", LOCAL0), Sel.WEST),
                  ((0, 1, "vector", EAST), Sel.LOCAL),
                  ((0, 0, "control", Port.LOCAL), Sel.WEST),
                  ((0, 0, "control", Port.WEST), Sel.LOCAL),
                  ((0, 0, "scalar", Port.WEST), Sel.LOCAL)]
        if pcu_reference.uses_in1(config):           # vector_in0 multicast to vector_in1
            routes.append(((0, 0, "vector", LOCAL0 + 1), Sel.WEST))
        words = write_bitstream(Geometry(2, 2, lanes), [
            Record(UnitKind.PCU, 0, 0, pack_config(pcu_config_layout(lanes, 4), config)),
            Record(UnitKind.PMU, 0, 1, pack_config(pmu_config_layout(), pmu))]
            + switch_records(2, 2, {}, routes))
        in0 = random_words(rng, (beats, lanes), 0.1)
        inputs = {("vector", 0): in0.tolist(), ("control", 0): [0]}
        got = []
        for batch in (True, False):
            model = FunctionalArray(2, 2, lanes, compute=True, capacity_bytes=1024,
                                    simd_batch=batch)
            model.load(words)
            result = model.run(edge_inputs=inputs)
            got.append((result.edge_outputs["vector", 2].tolist(), result.counters,
                        model.pmu_memory(0, 1).tolist(),
                        result.edge_outputs.get(("scalar", 0))))
        assert got[0] == got[1]
        reference = np.array(pcu_reference.run_simd(config, lanes, in0, in0)["vector_out"],
                             dtype=np.uint32).reshape(passes, size, size)
        # column-major read: per pass, per block of `lanes` rows, per column
        expected = [reference[p, block:block + lanes, column].tolist()
                    for p in range(passes) for block in range(0, size, lanes)
                    for column in range(size)]
        assert got[0][0] == expected

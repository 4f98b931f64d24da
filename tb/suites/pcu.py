"""Test bodies for the FP building blocks (:mod:`hdl.fp`) and the PCU, shared by both tiers."""

import numpy as np
from rdu.models import fp as fpmodel

from hdl.fp import fp_lanes_payload

from .common import configure, pack_vector

__all__ = ["edge_words", "random_operands", "pack_fields", "fp_lanes_ops"]

#: Special FP32 words every operation is checked on (pairwise in the edge-case run).
EDGE_WORDS = [
    0x00000000, 0x80000000,                     # +-0
    0x7F800000, 0xFF800000,                     # +-inf
    0x7FC00000, 0xFFC00000, 0x7F800001, 0x7FBFFFFF,   # NaNs (quiet, signalling)
    0x00000001, 0x807FFFFF, 0x00400000,         # denormals
    0x00800000, 0x80800000, 0x00800001,         # smallest normals
    0x7F7FFFFF, 0xFF7FFFFF, 0x7F7FFFFE,         # largest finite
    0x3F800000, 0xBF800000, 0x3F800001, 0x3F7FFFFF,   # around 1
    0x33800000, 0x33800001, 0x4B000000, 0x4B000001,   # 2**-24, 2**23 (tie makers)
    0x1F800000, 0x20000000, 0x5F800000, 0x60000000,   # product under/overflow edges
    0x3F808000, 0x3F818000, 0x00000002, 0xFFFFFFFF, 0x7FFFFFFF,
]


def edge_words():
    """The edge-case operand list as a uint32 array."""
    return np.array(EDGE_WORDS, dtype=np.uint32)


def random_operands(rng, count):
    """``count`` (a, b, c) uint32 triples mixing uniform bits, specials, close
    exponents (cancellation, alignment), short significands (rounding ties) and
    extreme exponents (overflow, FTZ underflow)."""
    kind = rng.integers(0, 6, size=count)
    a = rng.integers(0, 2 ** 32, size=count, dtype=np.uint64).astype(np.uint32)
    b = rng.integers(0, 2 ** 32, size=count, dtype=np.uint64).astype(np.uint32)
    c = rng.integers(0, 2 ** 32, size=count, dtype=np.uint64).astype(np.uint32)
    edges = edge_words()
    # 1: an edge word in a random position
    pick = kind == 1
    a = np.where(pick & (rng.random(count) < 0.5), edges[rng.integers(0, len(edges), count)], a)
    b = np.where(pick & (rng.random(count) < 0.5), edges[rng.integers(0, len(edges), count)], b)
    # 2: b's exponent near a's (alignment shifts 0..30, cancellation)
    near = kind == 2
    exp_a = (a >> np.uint32(23)) & np.uint32(0xFF)
    delta = rng.integers(-30, 31, size=count)
    exp_b = np.clip(exp_a.astype(np.int64) + delta, 1, 254).astype(np.uint32)
    b_near = (b & np.uint32(0x807FFFFF)) | (exp_b << np.uint32(23))
    b_near = np.where(rng.random(count) < 0.3, (b_near & np.uint32(0x7FFFFFFF)) |
                      ((a ^ np.uint32(0x80000000)) & np.uint32(0x80000000)), b_near)
    b = np.where(near, b_near, b)
    # 3: short significands: products and sums land on rounding ties
    short = kind == 3
    keep = np.uint32(0xFFFFFFFF) << rng.integers(8, 23, size=count).astype(np.uint32)
    a = np.where(short, a & keep, a)
    b = np.where(short, b & (np.uint32(0xFFFFFFFF) << rng.integers(8, 23, size=count)
                             .astype(np.uint32)), b)
    # 4: moderate exponents (ordinary arithmetic) with a tie-making b in half the cases
    mod = kind == 4
    exps = rng.integers(100, 155, size=(3, count)).astype(np.uint32) << np.uint32(23)
    a = np.where(mod, (a & np.uint32(0x807FFFFF)) | exps[0], a)
    b = np.where(mod, (b & np.uint32(0x807FFFFF)) | exps[1], b)
    c = np.where(mod, (c & np.uint32(0x807FFFFF)) | exps[2], c)
    tie = mod & (rng.random(count) < 0.5)
    exp_tie = np.clip(((a >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64) - 24, 1, 254)
    b = np.where(tie, (b & np.uint32(0x80000000)) | (exp_tie.astype(np.uint32) << np.uint32(23)),
                 b)
    # 5: extreme exponents: overflow and underflow of products and sums
    ext = kind == 5
    lo = rng.integers(1, 40, size=count)
    hi = rng.integers(215, 255, size=count)
    e_pick = np.where(rng.random(count) < 0.5, lo, hi).astype(np.uint32) << np.uint32(23)
    a = np.where(ext, (a & np.uint32(0x807FFFFF)) | e_pick, a)
    e_pick = np.where(rng.random(count) < 0.5, lo, hi).astype(np.uint32) << np.uint32(23)
    b = np.where(ext, (b & np.uint32(0x807FFFFF)) | e_pick, b)
    return a.astype(np.uint32), b.astype(np.uint32), c.astype(np.uint32)


def pack_fields(layout, values):
    """Pack ``{field: int or list of ints}`` into an integer following ``layout``.

    List values fill an ``ArrayLayout`` field element by element.
    """
    word = 0
    for name, field in layout:
        value = values.get(name, 0)
        shape = field.shape
        if isinstance(value, (list, tuple, np.ndarray)):
            elem = shape.elem_shape
            width = elem.width if hasattr(elem, "width") else elem.size
            packed = 0
            for index, item in enumerate(value):
                packed |= (int(item) & ((1 << width) - 1)) << (index * width)
            value = packed
        word |= (int(value) & ((1 << field.width) - 1)) << field.offset
    return word


async def fp_lanes_ops(bench, *, lanes, ops, count, edge_cases=True, in_stall="random",
                       out_stall="random"):
    """Drive ``count`` random operand vectors per op (and every edge-case pair) through
    :class:`hdl.fp.FPLanes`; compare every result word with :mod:`rdu.models.fp`."""
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = fp_lanes_payload(lanes)
    source = bench.source("i", in_stall)
    sink = bench.sink("o", out_stall)
    edges = edge_words()
    checked = 0
    for op in ops:
        a, b, c = random_operands(rng, count * lanes)
        if edge_cases:
            ea, eb = np.meshgrid(edges, edges)
            ea, eb = ea.ravel(), eb.ravel()
            ec = np.resize(edges, ea.size)
            a, b, c = np.concatenate([ea, a]), np.concatenate([eb, b]), np.concatenate([ec, c])
        pad = (-a.size) % lanes
        a, b, c = (np.concatenate([x, x[:pad]]) for x in (a, b, c))
        expected = fpmodel.apply(op, a, b, c)
        for beat in range(a.size // lanes):
            lane_slice = slice(beat * lanes, (beat + 1) * lanes)
            source.send(pack_fields(layout, {"op": op, "a": a[lane_slice],
                                             "b": b[lane_slice], "c": c[lane_slice]}))
            sink.expect(pack_vector(expected[lane_slice]))
        checked += a.size
    await bench.streams_done(timeout=40 * checked + 1000)
    return {"checked": checked}


# -- PCU ----------------------------------------------------------------------------------

async def write_config(bench, layout, config):
    """Write ``config`` word by word through the ``cfg`` port, then check the readback."""
    await configure(bench, layout, config)


def random_bf16_matrix(rng, shape, scale=1.0):
    """Random normal values rounded to BF16, as uint32 words (BF16 in the high half)."""
    from rdu.models.pcu_reference import bf16_words
    return bf16_words(rng.standard_normal(shape) * scale)


async def systolic_matmuls(bench, *, lanes, stages, shapes, in_stall="random",
                           out_stall="random", group=1, group_rows=False):
    """For each (M, K, N): tile A @ B onto the systolic mode, stream it under stalls,
    check every result word against the model and the model against numpy float32.
    ``group``: column tiles per tile (a PCU with ``fp_latency``:
    ``hdl.fp_latency.systolic_group``), row tiles with ``group_rows`` (mode
    ``SYSTOLIC_ROWS``)."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.pcu_config import Mode, pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, stages)
    in0 = bench.source("vector_in0", in_stall)
    in1 = bench.source("vector_in1", in_stall)
    ctrl_in = bench.source("control_in", in_stall)
    out = bench.sink("vector_out", out_stall)
    ctrl_out = bench.sink("control_out", out_stall)
    worst = 0.0
    for m_len, k_len, n_len in shapes:
        a = random_bf16_matrix(rng, (m_len, k_len))
        b = random_bf16_matrix(rng, (k_len, n_len))
        counters, beats0, beats1, _ = pcu_model.matmul_streams(a, b, lanes, group,
                                                               group_rows)
        config = {"mode": Mode.SYSTOLIC_ROWS if group_rows else Mode.SYSTOLIC,
                  "counters": counters}
        expected = pcu_model.run_systolic(config, lanes, beats0, beats1, group)
        result = pcu_model.matmul_from_stream(expected["vector_out"], (m_len, n_len), lanes,
                                              group, group_rows)
        reference = a.view(np.float32) @ b.view(np.float32)
        magnitude = np.abs(a.view(np.float32).astype(np.float64)) @ \
            np.abs(b.view(np.float32).astype(np.float64))
        error = np.abs(result.view(np.float32) - reference) / np.maximum(magnitude, 1e-30)
        worst = max(worst, float(error.max()))
        assert error.max() < k_len * 2.0 ** -22, f"model differs from numpy: {error.max()}"
        await write_config(bench, layout, config)
        in0.send_all(pack_vector(beat) for beat in beats0)
        in1.send_all(pack_vector(beat) for beat in beats1)
        out.expect_all(pack_vector(row) for row in expected["vector_out"])
        ctrl_out.expect(1)
        ctrl_in.send(0)
        await bench.streams_done(timeout=20 * (len(beats0) + len(beats1)) + 2000)
        assert await bench.read("busy") == 0
        await bench.cycles(1)
    return {"worst_relative_error": worst}


async def systolic_throughput(bench, *, lanes, stages, size, group=1):
    """Stream a size^3 product without stalls; return cycles from start token to DONE
    (``group`` as :func:`systolic_matmuls`)."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.pcu_config import pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, stages)
    a = random_bf16_matrix(rng, (size, size))
    b = random_bf16_matrix(rng, (size, size))
    counters, beats0, beats1, _ = pcu_model.matmul_streams(a, b, lanes, group)
    config = {"mode": 1, "counters": counters}
    expected = pcu_model.run_systolic(config, lanes, beats0, beats1, group)
    await write_config(bench, layout, config)
    in0 = bench.source("vector_in0")
    in1 = bench.source("vector_in1")
    ctrl_in = bench.source("control_in")
    out = bench.sink("vector_out")
    ctrl_out = bench.sink("control_out")
    in0.send_all(pack_vector(beat) for beat in beats0)
    in1.send_all(pack_vector(beat) for beat in beats1)
    out.expect_all(pack_vector(row) for row in expected["vector_out"])
    ctrl_out.expect(1)
    marks = {}
    ctrl_in.on_transfer = lambda item, cycle: marks.setdefault("start", cycle)
    ctrl_out.on_transfer = lambda item, cycle: marks.setdefault("done", cycle)
    ctrl_in.send(0)
    await bench.streams_done(timeout=20 * len(beats1) + 2000)
    cycles = marks["done"] - marks["start"]
    macs = size ** 3
    return {"cycles": cycles, "macs": macs, "macs_per_cycle": macs / cycles,
            "utilisation": macs / cycles / lanes ** 2}


def random_simd_config(rng, stages, max_trips=(4, 3, 2), lanes=None):
    """A random valid SIMD configuration (ops, sources, counters, reduce, emit; with
    ``lanes``, a row padding ``row_pad`` one time in two)."""
    counters = []
    for trips in max_trips:
        lo = int(rng.integers(0, 5))
        stride = int(rng.integers(1, 4))
        count = int(rng.integers(1, trips + 1))
        counters.append({"min": lo, "max": lo + stride * (count - 1) + 1, "stride": stride})
    stage_list = []
    for _ in range(stages):
        stage_list.append({
            "op": int(rng.integers(0, 17)),
            "src_a": int(rng.choice([0, 0, 1, 2, 3, 4, 5, 6, 7])),
            "src_b": int(rng.choice([0, 1, 1, 2, 3, 4, 6, 7])),
            "src_c": int(rng.choice([0, 1, 2, 3, 4])),
            "constant": int(random_operands(rng, 1)[0][0]),
        })
    return {"mode": 0, "counters": counters, "scalar_in": int(rng.integers(0, 2)),
            "emit_every": int(rng.integers(0, 2)), "vector_out": int(rng.integers(0, 4) > 0),
            "reduce": int(rng.integers(0, 3)), "tail": int(rng.choice([0, 0, 0, 1, 2, 3])),
            "emit_outer": int(rng.integers(0, 2)), "tail_bf16": int(rng.integers(0, 2)),
            "acc_stage": int(rng.choice([0, 0, *range(1, stages + 1)])),
            "row_pad": int(rng.integers(1, 2 * lanes)) if lanes and rng.integers(0, 2) else 0,
            "stages": stage_list}


async def run_simd_config(bench, ports, layout, lanes, config, rng):
    """Feed one SIMD configuration random inputs; queue the model's outputs."""
    from rdu.models import pcu_reference as pcu_model
    in0, in1, scalar_in, ctrl_in, vec_out, scalar_out, ctrl_out = ports
    beats = len(pcu_model.iterations(config))
    inner = pcu_model.trip_count(config["counters"][0])
    a, b, _ = random_operands(rng, beats * lanes)
    vec0, vec1 = a.reshape(beats, lanes), b.reshape(beats, lanes)
    scalars = random_operands(rng, beats // inner)[2]
    expected = pcu_model.run_simd(config, lanes, vec0, vec1, scalars)
    await write_config(bench, layout, config)
    uses_in1 = any(stage[src] == 4 for stage in config["stages"]
                   for src in ("src_a", "src_b", "src_c"))
    in0.send_all(pack_vector(beat) for beat in vec0)
    if uses_in1:
        in1.send_all(pack_vector(beat) for beat in vec1)
    if config["scalar_in"]:
        scalar_in.send_all(int(word) for word in scalars)
    vec_out.expect_all(pack_vector(v) for v in expected["vector_out"])
    scalar_out.expect_all(expected["scalar_out"])
    ctrl_out.expect(1)
    ctrl_in.send(0)
    await bench.streams_done(timeout=40 * beats + 2000)
    return beats


async def simd_random_configs(bench, *, lanes, stages, configs, stall="random"):
    """Run ``configs`` random SIMD configurations, stalls on every port, against the model."""
    from hdl.pcu_config import pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, stages)
    ports = (bench.source("vector_in0", stall), bench.source("vector_in1", stall),
             bench.source("scalar_in", stall), bench.source("control_in", stall),
             bench.sink("vector_out", stall), bench.sink("scalar_out", stall),
             bench.sink("control_out", stall))
    total = 0
    for _ in range(configs):
        total += await run_simd_config(bench, ports, layout, lanes,
                                       random_simd_config(rng, stages, lanes=lanes), rng)
        assert await bench.read("busy") == 0
        await bench.cycles(1)
    return {"beats": total}


async def simd_op_sweep(bench, *, lanes, stages, ops, beats, stall="random"):
    """Every op in ``ops`` on ``beats`` random vectors through stage 0 (sources in0, in1,
    scalar), the other stages passing through; reduce alternating sum/max."""
    from hdl.pcu_config import pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, stages)
    ports = (bench.source("vector_in0", stall), bench.source("vector_in1", stall),
             bench.source("scalar_in", stall), bench.source("control_in", stall),
             bench.sink("vector_out", stall), bench.sink("scalar_out", stall),
             bench.sink("control_out", stall))
    total = 0
    for index, op in enumerate(ops):
        passthrough = {"op": 0, "src_a": 0, "src_b": 0, "src_c": 0, "constant": 0}
        config = {
            "mode": 0, "scalar_in": 1, "emit_every": 1, "vector_out": 1,
            "reduce": 1 + index % 2, "tail": 0,
            "counters": [{"min": 0, "max": beats, "stride": 1},
                         {"min": 0, "max": 1, "stride": 1}, {"min": 0, "max": 1, "stride": 1}],
            "stages": [{"op": op, "src_a": 0, "src_b": 4, "src_c": 2, "constant": 0}] +
                      [passthrough] * (stages - 1),
        }
        total += await run_simd_config(bench, ports, layout, lanes, config, rng)
    return {"beats": total}


async def config_errors(bench, *, lanes, stages):
    """Bad configurations raise the documented error code and never start or hang."""
    from hdl.pcu_config import PCUError, acc_stage_bits, pcu_config_layout
    layout = pcu_config_layout(lanes, stages)
    ctrl_in = bench.source("control_in")
    ctrl_out = bench.sink("control_out")
    good = {"mode": 0, "counters": [{"min": 0, "max": 1, "stride": 1}] * 3,
            "stages": [{"op": 0}] * stages}
    cases = [
        ({**good, "mode": 3}, PCUError.BAD_MODE),
        ({**good, "counters": [{"min": 0, "max": 4, "stride": 0}] * 3}, PCUError.BAD_COUNTER),
        ({**good, "counters": [{"min": 5, "max": 5, "stride": 1}] * 3}, PCUError.BAD_COUNTER),
        ({**good, "stages": [{"op": 30}] * stages}, PCUError.BAD_OP),
        ({**good, "reduce": 3}, PCUError.BAD_REDUCE),
    ]           # (every 2-bit tail code is a function since RSQRT: no BAD_TAIL case)
    if stages + 1 < 2 ** acc_stage_bits(stages):
        cases.append(({**good, "acc_stage": stages + 1}, PCUError.BAD_ACC_STAGE))
    for config, code in cases:
        await write_config(bench, layout, config)
        assert await bench.read("error") == 0
        await bench.cycles(1)
        ctrl_in.send(0)
        await bench.streams_done(timeout=200)
        await bench.cycles(2)
        error, busy = await bench.read("error"), await bench.read("busy")
        assert error == code, f"config {config}: error {error}, expected {int(code)}"
        assert busy == 0, "a rejected configuration started a run"
        await bench.cycles(1)
    assert not ctrl_out.items, "a rejected configuration emitted a token"
    # a configuration write during a run is dropped and flagged; the run completes
    from rdu.models import pcu_reference as pcu_model
    vec_in = bench.source("vector_in0")
    vec_out = bench.sink("vector_out")
    config = {"mode": 0, "emit_every": 1, "vector_out": 1,
              "counters": [{"min": 0, "max": 3, "stride": 1}] + [{"min": 0, "max": 1,
                                                                   "stride": 1}] * 2,
              "stages": [{"op": 1, "src_a": 0, "src_b": 3, "constant": 0x3F800000}] +
                        [{"op": 0}] * (stages - 1)}
    await write_config(bench, layout, config)
    ctrl_in.send(0)
    await bench.cycles(4)
    assert await bench.read("busy") == 1, "the run did not start"
    await bench.cycles(1)
    bench.set("cfg.write", 1)
    bench.set("cfg.index", 0)
    bench.set("cfg.data", 0xFFFFFFFF)
    await bench.cycles(1)
    bench.set("cfg.write", 0)
    await bench.cycles(1)
    assert await bench.read("error") == PCUError.WRITE_WHILE_BUSY
    await bench.cycles(1)
    words = [[1, 2, 3, 4], [0x40000000] * 4, [0xBF800000] * 4]
    words = [w[:lanes] + [0] * (lanes - len(w[:lanes])) for w in words]
    expected = pcu_model.run_simd(config, lanes, np.array(words, np.uint32))
    vec_in.send_all(pack_vector(w) for w in words)
    vec_out.expect_all(pack_vector(v) for v in expected["vector_out"])
    ctrl_out.expect(1)
    await bench.streams_done(timeout=500)
    return {"cases": len(cases) + 1}


def special_operands(rng, count, func):
    """Inputs for exp (1), reciprocal (2) or rsqrt (3): the generic mix plus values
    spread over the function's useful range."""
    a, b, _ = random_operands(rng, count)
    if func == 1:
        spread = (rng.random(count) * 176.1 - 87.35).astype(np.float32).view(np.uint32)
    elif func == 3:         # every positive normal
        spread = rng.integers(0x00800000, 0x7F800000, size=count,
                              dtype=np.uint64).astype(np.uint32)
    else:
        spread = rng.integers(0x00800000, 0x7F000000, size=count, dtype=np.uint64)
        spread = (spread.astype(np.uint32) | (b & np.uint32(0x80000000)))
    return np.where(rng.random(count) < 0.5, a, spread).astype(np.uint32)


async def special_function_sweep(bench, *, lanes, stages, funcs, beats, stall="random"):
    """exp / reciprocal / rsqrt in the tail on ``beats`` random vectors each (plus the edge-case
    words), every stage passing through; results and lane sums against the model."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.pcu_config import pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, stages)
    in0 = bench.source("vector_in0", stall)
    ctrl_in = bench.source("control_in", stall)
    vec_out = bench.sink("vector_out", stall)
    scalar_out = bench.sink("scalar_out", stall)
    ctrl_out = bench.sink("control_out", stall)
    passthrough = {"op": 0, "src_a": 0, "src_b": 0, "src_c": 0, "constant": 0}
    for func in funcs:
        words = np.concatenate([edge_words(), special_operands(rng, beats * lanes, func)])
        words = np.resize(words, (words.size + lanes - 1) // lanes * lanes)
        vectors = words.reshape(-1, lanes)
        config = {
            "mode": 0, "scalar_in": 0, "emit_every": 1, "vector_out": 1, "reduce": 1,
            "tail": func, "stages": [passthrough] * stages,
            "counters": [{"min": 0, "max": len(vectors), "stride": 1},
                         {"min": 0, "max": 1, "stride": 1}, {"min": 0, "max": 1, "stride": 1}],
        }
        expected = pcu_model.run_simd(config, lanes, vectors)
        await write_config(bench, layout, config)
        in0.send_all(pack_vector(v) for v in vectors)
        vec_out.expect_all(pack_vector(v) for v in expected["vector_out"])
        scalar_out.expect_all(expected["scalar_out"])
        ctrl_out.expect(1)
        ctrl_in.send(0)
        await bench.streams_done(timeout=60 * len(vectors) + 2000)
    return {"beats": beats * len(funcs)}


async def softmax_rows(bench, *, lanes, stages, rows, beats_per_row, stall="random"):
    """Softmax of ``rows`` rows of ``beats_per_row * lanes`` values as five PCU runs
    (row max; exp(x - max); row sum; 1 / sum; scale), each run's outputs checked against
    the model and fed to the next run; the result against numpy float64 softmax."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.fp import Op
    from hdl.pcu_config import Reduce, Source, Tail, pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, stages)
    ports = (bench.source("vector_in0", stall), bench.source("vector_in1", stall),
             bench.source("scalar_in", stall), bench.source("control_in", stall),
             bench.sink("vector_out", stall), bench.sink("scalar_out", stall),
             bench.sink("control_out", stall))
    x = (rng.standard_normal((rows, beats_per_row * lanes)) * 4).astype(np.float32)
    vectors = x.view(np.uint32).reshape(rows * beats_per_row, lanes)
    passthrough = {"op": Op.PASS, "src_a": Source.PREV}

    def config(stage0, *, inner, scalar_in=0, emit_every=0, vector_out=0, reduce=0, tail=0):
        return {"mode": 0, "scalar_in": scalar_in, "emit_every": emit_every,
                "vector_out": vector_out, "reduce": reduce, "tail": tail,
                "counters": [{"min": 0, "max": inner, "stride": 1},
                             {"min": 0, "max": rows, "stride": 1},
                             {"min": 0, "max": 1, "stride": 1}],
                "stages": [stage0] + [passthrough] * (stages - 1)}

    async def run(cfg, in0, scalars=None):
        expected = pcu_model.run_simd(cfg, lanes, in0, None, scalars)
        await drive(cfg, in0, scalars, expected)
        return expected

    async def drive(cfg, in0, scalars, expected):
        source0, _, scalar_src, ctrl_in, vec_out, scalar_out, ctrl_out = ports
        await write_config(bench, layout, cfg)
        source0.send_all(pack_vector(v) for v in in0)
        if scalars is not None:
            scalar_src.send_all(int(s) for s in scalars)
        vec_out.expect_all(pack_vector(v) for v in expected["vector_out"])
        scalar_out.expect_all(expected["scalar_out"])
        ctrl_out.expect(1)
        ctrl_in.send(0)
        await bench.streams_done(timeout=100 * len(in0) + 2000)

    # 1: running max over the row (REG starts at -inf), reduced across lanes
    row_max = (await run(config({"op": Op.MAX, "src_a": Source.PREV, "src_b": Source.REG,
                                 "constant": 0xFF800000}, inner=beats_per_row,
                                reduce=Reduce.MAX), vectors))["scalar_out"]
    # 2: exp(x - max): one scalar (the row max) per row
    exps = (await run(config({"op": Op.SUB, "src_a": Source.PREV, "src_b": Source.SCALAR},
                             inner=beats_per_row, scalar_in=1, emit_every=1, vector_out=1,
                             tail=Tail.EXP), vectors, row_max))["vector_out"]
    # 3: row sum: running lane sums (REG starts at +0), reduced across lanes
    row_sum = (await run(config({"op": Op.ADD, "src_a": Source.PREV, "src_b": Source.REG},
                                inner=beats_per_row, reduce=Reduce.SUM), exps))["scalar_out"]
    # 4: 1 / sum, the scalar broadcast to a vector (the input beat only paces the run)
    inverse = (await run(config({"op": Op.PASS, "src_a": Source.SCALAR}, inner=1,
                                scalar_in=1, vector_out=1, tail=Tail.RECIPROCAL),
                         np.zeros((rows, lanes), np.uint32), row_sum))["vector_out"]
    # 5: scale every exp by its row's 1 / sum
    probs = (await run(config({"op": Op.MUL, "src_a": Source.PREV, "src_b": Source.SCALAR},
                              inner=beats_per_row, scalar_in=1, emit_every=1,
                              vector_out=1), exps, [int(v[0]) for v in inverse]))["vector_out"]
    result = np.array(probs, dtype=np.uint32).view(np.float32).reshape(x.shape)
    shifted = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    reference = shifted / shifted.sum(axis=1, keepdims=True)
    relative = np.abs(result - reference) / reference
    # FP32 error budget per element: rounding of x - max (an absolute error of up to
    # |x - max| * 2^-24 in the exponent of exp), exp and reciprocal within 1.5 ulp
    # each, the row sum (n - 1 roundings) and the final multiply.
    row_length = x.shape[1]
    budget = (np.abs(x.astype(np.float64) - x.max(axis=1, keepdims=True)) * 2.0 ** -24
              + 2 * 1.5 * 2.0 ** -23 + (row_length - 1) * 2.0 ** -24 + 2.0 ** -24)
    worst = float(np.max(relative / budget))
    assert worst <= 1.0, (f"softmax error exceeds its FP32 budget by {worst:.2f}x "
                          f"(max relative error {float(relative.max()):.3g})")
    return {"max_relative_error": float(relative.max()), "error_over_budget": worst}


async def simd_timing(bench, *, lanes, stages, tail, beats):
    """Port-to-port cycle numbers of a pass-through SIMD run without stalls: returns
    the cycles at which each input beat and each output beat crossed the ports."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.pcu_config import pcu_config_layout
    layout = pcu_config_layout(lanes, stages)
    config = {"mode": 0, "emit_every": 1, "vector_out": 1, "tail": tail,
              "counters": [{"min": 0, "max": beats, "stride": 1}] +
                          [{"min": 0, "max": 1, "stride": 1}] * 2,
              "stages": [{"op": 0}] * stages}
    vectors = np.full((beats, lanes), 0x3F800000, dtype=np.uint32)
    expected = pcu_model.run_simd(config, lanes, vectors)
    await write_config(bench, layout, config)
    source, sink = bench.source("vector_in0"), bench.sink("vector_out")
    ctrl_in, ctrl_out = bench.source("control_in"), bench.sink("control_out")
    marks = {"in": [], "out": []}
    source.on_transfer = lambda item, cycle: marks["in"].append(cycle)
    sink.on_transfer = lambda item, cycle: marks["out"].append(cycle)
    ctrl_in.send(0)
    await bench.cycles(3)
    source.send_all(pack_vector(v) for v in vectors)
    sink.expect_all(pack_vector(v) for v in expected["vector_out"])
    ctrl_out.expect(1)
    await bench.streams_done(timeout=50 * beats + 500)
    return marks


async def run_one(bench, layout, config, expected, in0, in1=None, *, stall):
    """One SIMD run of ``config`` on ``in0`` (and ``in1``) beats, random stalls on every
    port: ``expected`` on ``vector_out``, then the ``DONE`` token."""
    await write_config(bench, layout, config)
    source0 = bench.source("vector_in0", stall)
    source1 = bench.source("vector_in1", stall) if in1 is not None else None
    sink = bench.sink("vector_out", stall)
    ctrl_in, ctrl_out = bench.source("control_in", stall), bench.sink("control_out", stall)
    source0.send_all(pack_vector(v) for v in in0)
    if source1 is not None:
        source1.send_all(pack_vector(v) for v in in1)
    sink.expect_all(pack_vector(v) for v in expected)
    ctrl_out.expect(1)
    ctrl_in.send(0)
    await bench.streams_done(timeout=100 * len(in0) + 2000)


async def causal_mask(bench, *, lanes, keys, base, stall="random"):
    """Scores masked causally with the LANE and COUNTER sources: beat ``j`` (counter 0)
    is key ``j``, lane ``i`` is query ``i``; the key is masked (``-inf``) when
    ``j - i > base``. Stages: ``ISUB(COUNTER, LANE)``, ``ILT(CONST base, PREV)``,
    ``SELECT(PREV, CONST -inf, IN1)``. Expects the masked scores computed here with numpy
    (and checks the model gives the same); returns them."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.fp import Op
    from hdl.pcu_config import Source, pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, 4)
    neg_inf = 0xFF800000
    config = {"mode": 0, "emit_every": 1, "vector_out": 1,
              "counters": [{"min": 0, "max": keys, "stride": 1}] +
                          [{"min": 0, "max": 1, "stride": 1}] * 2,
              "stages": [{"op": Op.ISUB, "src_a": Source.COUNTER, "src_b": Source.LANE},
                         {"op": Op.ILT, "src_a": Source.CONST, "src_b": Source.PREV,
                          "constant": base & 0xFFFFFFFF},
                         {"op": Op.SELECT, "src_a": Source.PREV, "src_b": Source.CONST,
                          "src_c": Source.IN1, "constant": neg_inf},
                         {"op": Op.PASS, "src_a": Source.PREV}]}
    scores = rng.standard_normal((keys, lanes)).astype(np.float32).view(np.uint32)
    key, query = np.meshgrid(np.arange(keys), np.arange(lanes), indexing="ij")
    expected = np.where(key - query > base, np.uint32(neg_inf), scores).astype(np.uint32)
    model = pcu_model.run_simd(config, lanes, np.zeros((keys, lanes), np.uint32), scores)
    assert np.array_equal(model["vector_out"], expected), "model differs from numpy"
    await run_one(bench, layout, config, expected, np.zeros((keys, lanes), np.uint32),
                  scores, stall=stall)
    return int((expected == neg_inf).sum())


async def running_max_step(bench, *, lanes, beats, rows, stall="random"):
    """The LAST source: stage 0 is a running max over each row (``MAX(PREV, REG)``,
    ``-inf`` first), stage 1 ``SUB(LAST, PREV)`` = the max before this beat minus the max
    after it (``-inf`` on a row's first beat), the rescale exponent of online softmax.
    Expects what numpy float32 computes (and checks the model agrees); returns the
    number of beats whose max rose."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.fp import Op
    from hdl.pcu_config import Source, pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, 4)
    neg_inf = 0xFF800000
    config = {"mode": 0, "emit_every": 1, "vector_out": 1,
              "counters": [{"min": 0, "max": beats, "stride": 1},
                           {"min": 0, "max": rows, "stride": 1},
                           {"min": 0, "max": 1, "stride": 1}],
              "stages": [{"op": Op.MAX, "src_a": Source.PREV, "src_b": Source.REG,
                          "constant": neg_inf},
                         {"op": Op.SUB, "src_a": Source.LAST, "src_b": Source.PREV,
                          "constant": neg_inf},
                         {"op": Op.PASS, "src_a": Source.PREV},
                         {"op": Op.PASS, "src_a": Source.PREV}]}
    x = rng.standard_normal((rows, beats, lanes)).astype(np.float32)
    running = np.maximum.accumulate(x, axis=1)
    before = np.concatenate([np.full((rows, 1, lanes), -np.inf, np.float32),
                             running[:, :-1]], axis=1)
    expected = (before - running).astype(np.float32).view(np.uint32).reshape(-1, lanes)
    words = x.view(np.uint32).reshape(-1, lanes)
    model = pcu_model.run_simd(config, lanes, words)
    assert np.array_equal(model["vector_out"], expected), "model differs from numpy"
    await run_one(bench, layout, config, expected, words, stall=stall)
    return int((before < running).sum())


async def rescaled_accumulator(bench, *, lanes, dims, chunks, groups, stall="random"):
    """The accumulator memory (``acc_stage``) and ``emit_outer``: online softmax's merge
    ``O = O * alpha + O_c`` with ``O`` a vector per beat (``dims`` beats, counter 0 from 3
    by 2, so the memory is addressed by counter 0's value) held across ``chunks``
    (counter 1), restarted per group (counter 2). Stage 0 doubles the chunk's beat,
    stage 1 is the accumulator (``MADD(REG, IN1, PREV)``, ``alpha`` per beat on
    ``vector_in1``), stage 2 a plain ``REG`` running sum over the beats of a chunk; only
    the last chunk's beats leave. Expects numpy float32 (and checks the model agrees)."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.fp import Op
    from hdl.pcu_config import Source, pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, 4)
    config = {"mode": 0, "vector_out": 1, "emit_outer": 1, "acc_stage": 2,
              "counters": [{"min": 3, "max": 3 + 2 * dims, "stride": 2},
                           {"min": 0, "max": chunks, "stride": 1},
                           {"min": 0, "max": groups, "stride": 1}],
              "stages": [{"op": Op.MUL, "src_a": Source.PREV, "src_b": Source.CONST,
                          "constant": 0x40000000},
                         {"op": Op.MADD, "src_a": Source.REG, "src_b": Source.IN1,
                          "src_c": Source.PREV, "constant": 0},
                         {"op": Op.ADD, "src_a": Source.PREV, "src_b": Source.REG,
                          "constant": 0},
                         {"op": Op.PASS, "src_a": Source.PREV}]}
    x = rng.standard_normal((groups, chunks, dims, lanes)).astype(np.float32)
    alpha = rng.uniform(0.25, 1.0, (groups, chunks, dims, lanes)).astype(np.float32)
    expected = []
    for g in range(groups):
        o = 2 * x[g, 0]
        for c in range(1, chunks):
            o = o * alpha[g, c] + 2 * x[g, c]
        expected.append(np.add.accumulate(o, axis=0, dtype=np.float32))
    expected = np.concatenate(expected).view(np.uint32)
    words = x.view(np.uint32).reshape(-1, lanes)
    others = alpha.view(np.uint32).reshape(-1, lanes)
    model = pcu_model.run_simd(config, lanes, words, others)
    assert np.array_equal(model["vector_out"], expected), "model differs from numpy"
    await run_one(bench, layout, config, expected, words, others, stall=stall)
    return len(expected)


async def exp_to_bf16(bench, *, lanes, beats, stall="random"):
    """``tail_bf16`` after the exp tail: probabilities rounded to BF16 (nearest even) on
    their way to a systolic PCU. Expects the model's words (checked against float64 exp:
    low halves zero, within one BF16 rounding plus the exp's own error)."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.fp import Op
    from hdl.pcu_config import Source, Tail, pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, 4)
    config = {"mode": 0, "emit_every": 1, "vector_out": 1, "tail": Tail.EXP, "tail_bf16": 1,
              "counters": [{"min": 0, "max": beats, "stride": 1},
                           {"min": 0, "max": 1, "stride": 1},
                           {"min": 0, "max": 1, "stride": 1}],
              "stages": [{"op": Op.PASS, "src_a": Source.PREV}] * 4}
    x = rng.uniform(-20.0, 4.0, (beats, lanes)).astype(np.float32)
    words = x.view(np.uint32)
    expected = np.asarray(pcu_model.run_simd(config, lanes, words)["vector_out"], np.uint32)
    assert not np.any(expected & 0xFFFF), "tail_bf16 left low bits"
    error = np.abs(expected.view(np.float32) / np.exp(x.astype(np.float64)) - 1)
    assert error.max() <= 2.0 ** -8 + 2.0 ** -21, f"relative error {error.max():.3g}"
    await run_one(bench, layout, config, expected, words, stall=stall)
    return float(error.max())

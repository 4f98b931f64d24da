"""The PCU's components, each simulated alone (amaranth.sim), against references that do
not use the RTL: the counter chain against nested loops, the systolic array against
rdu.pcu_model / rdu.fpmodel and numpy, the SIMD pipeline against rdu.pcu_model.run_simd,
the shared ALU and the special-function units against rdu.fpmodel."""

import itertools
import random

import numpy as np
import pytest
from amaranth.sim import Simulator
from rdu.models import fp as fpmodel
from rdu.models import pcu_reference as pcu_model

from hdl.fp import Op
from hdl.fp_alu_pipelined import PipelinedFPALU
from hdl.fp_latency import DEFAULT_LATENCY, FPKind, op_latency, systolic_group, systolic_pe_latency
from hdl.pcu_config import COUNTERS, Mode, Source, pcu_config_layout
from hdl.pcu_counters import CounterChain, chain_status_layout
from hdl.pcu_simd import SIMDPipeline
from hdl.pcu_systolic import SharedALU, SystolicArray
from hdl.pcu_systolic_pipelined import PipelinedMAC, PipelinedSystolicArray
from hdl.special_function import (
    PROGRAMS,
    SpecialFunction,
    SpecialFunctionIterative,
    SpecialFunctionPipeline,
)
from tb.suites.pcu import random_bf16_matrix, random_operands, random_simd_config

MASK16 = 0xFFFF


def _simulate(dut, testbench, clock=True):
    sim = Simulator(dut)
    if clock:
        sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()


def _vector(words):
    return sum(int(word) << (32 * lane) for lane, word in enumerate(words))


def _words(value, lanes):
    return [(value >> (32 * lane)) & 0xFFFFFFFF for lane in range(lanes)]


def _reference_chain(counters):
    """The chain's iterations by nested loops: ``(values, last bits, first_inner,
    first_outer, last_all)``, counter 0 innermost."""
    ranges = [range(c["min"], c["max"], c["stride"]) for c in counters]
    steps = []
    for v2, v1, v0 in itertools.product(*reversed(ranges)):
        values = (v0, v1, v2)
        last = [values[n] == ranges[n][-1] for n in range(COUNTERS)]
        steps.append((values, sum(bit << n for n, bit in enumerate(last)),
                      v0 == counters[0]["min"], v1 == counters[1]["min"], all(last)))
    return steps


def _status_word(step):
    values, last, first_inner, first_outer, last_all = step
    return chain_status_layout().const({
        "values": list(values), "last": last, "first_inner": first_inner,
        "first_outer": first_outer, "last_all": last_all}).as_value().value


def _random_counters(rng, trips=(5, 4, 3), top=MASK16):
    counters = []
    for most in trips:
        stride = rng.randrange(1, 5)
        count = rng.randrange(1, most + 1)
        room = top - stride * count      # the largest min; near it with top = MASK16
        lo = rng.randrange(0, room) if top < MASK16 else room - rng.randrange(0, 32)
        # max anywhere in (last value, last value + stride]: a partial last stride too
        counters.append({"min": lo, "stride": stride,
                         "max": lo + stride * (count - 1) + rng.randrange(1, stride + 1)})
    return counters


# -- counter chain ----------------------------------------------------------------------

@pytest.mark.parametrize("top", [64, MASK16])
def test_counter_chain_sequence(top, seed):
    """Random trip counts, strides and partial last strides (near the 16-bit top too):
    after ``load`` the chain shows the nested loops' iterations in order, one per
    ``step`` (random gaps hold it), ``last_all`` on the last only, then wraps to the
    first; ``load`` wins over ``step``; ``bad`` for a zero stride or ``max <= min``."""
    rng = random.Random(seed)
    dut = CounterChain()
    layout = dut.config.shape()

    async def bench(ctx):
        for _ in range(6):
            counters = _random_counters(rng, top=top)
            expected = _reference_chain(counters)
            ctx.set(dut.config.as_value(), layout.const(counters).as_value().value)
            ctx.set(dut.load, 1)
            ctx.set(dut.step, 1)        # load wins
            await ctx.tick()
            ctx.set(dut.load, 0)
            assert ctx.get(dut.bad) == 0
            seen = []
            while len(seen) < len(expected) + 2:      # and two more: the wrap
                step = rng.random() < 0.7
                ctx.set(dut.step, step)
                status = ctx.get(dut.status)
                if step:
                    seen.append((tuple(status.values[n] for n in range(COUNTERS)),
                                 status.last, status.first_inner, status.first_outer,
                                 status.last_all))
                await ctx.tick()
            wrapped = (expected * 3)[:len(expected) + 2]     # a one-iteration chain too
            assert [tuple(int(x) for x in s[1:]) for s in seen] == \
                [tuple(int(x) for x in s[1:]) for s in wrapped]
            assert [s[0] for s in seen] == [s[0] for s in wrapped]
        for bad in ({"stride": 0}, {"max": 3}, {"max": 2}):
            counters = [{"min": 3, "max": 9, "stride": 2} for _ in range(COUNTERS)]
            counters[rng.randrange(COUNTERS)].update(bad)
            ctx.set(dut.config.as_value(), layout.const(counters).as_value().value)
            assert ctx.get(dut.bad) == 1

    _simulate(dut, bench)


# -- systolic array ---------------------------------------------------------------------

def _run_systolic(dut, lanes, config, beats0, beats1, rng, stall, group=1):
    """Play the counter chain and run control around ``dut``; return the drained rows,
    the cycles of each issue (a step of the chain), of each beat taken on the grouped
    stream (``in1``; ``in0`` in mode ``SYSTOLIC_ROWS``) and of the DONE token.
    ``group``: beats of the grouped stream per step (``PipelinedSystolicArray``)."""
    steps = _reference_chain(config["counters"])
    result = {"rows": [], "issues": [], "takes": [], "done": []}
    group_rows = config["mode"] == Mode.SYSTOLIC_ROWS

    async def bench(ctx):
        ctx.set(dut.active, 1)
        ctx.set(dut.group_rows, group_rows)
        index = sent0 = sent1 = 0
        cycle = 0
        while not result["done"]:
            assert cycle < 20 * group * len(steps) + 400, "systolic array hangs"
            running = index < len(steps)
            ctx.set(dut.running, running)
            ctx.set(dut.finishing, not running)
            ctx.set(dut.chain.as_value(), _status_word(steps[min(index, len(steps) - 1)]))
            valid0 = sent0 < len(beats0) and rng.random() >= stall
            valid1 = sent1 < len(beats1) and rng.random() >= stall
            ctx.set(dut.in0.valid, valid0)
            ctx.set(dut.in1.valid, valid1)
            if valid0:
                ctx.set(dut.in0.payload.as_value(), _vector(beats0[sent0]))
            if valid1:
                ctx.set(dut.in1.payload.as_value(), _vector(beats1[sent1]))
            ready = rng.random() >= stall
            ctx.set(dut.vector_out.ready, ready)
            ctx.set(dut.control_out.ready, ready)
            took0, took1 = ctx.get(dut.in0.ready), ctx.get(dut.in1.ready)
            assert (not took0 or valid0) and (not took1 or valid1)
            grouped, held = (took0, took1) if group_rows else (took1, took0)
            if ctx.get(dut.issue):
                assert grouped and (group > 1 or held)
                result["issues"].append(cycle)
                index += 1
            if grouped:
                result["takes"].append(cycle)
            sent0, sent1 = sent0 + took0, sent1 + took1
            if ctx.get(dut.vector_out.valid) and ready:
                result["rows"].append(_words(ctx.get(dut.vector_out.payload.as_value()),
                                             lanes))
            if ctx.get(dut.done):
                assert ctx.get(dut.control_out.valid) and ctx.get(dut.control_out.payload)
                result["done"].append(cycle)
            await ctx.tick()
            cycle += 1

    _simulate(dut, bench)
    return result


@pytest.mark.parametrize("lanes,shape", [(4, (9, 7, 6)), (2, (3, 1, 4))])
def test_systolic_array_products(lanes, shape, seed):
    """Random BF16 tiles under random stalls: every drained row bit-exact against
    rdu.pcu_model.run_systolic (rdu.fpmodel arithmetic) and the product within
    rounding of numpy's float32 matmul; the DONE token only after the last row."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    m_len, k_len, n_len = shape
    a = random_bf16_matrix(nrng, (m_len, k_len))
    b = random_bf16_matrix(nrng, (k_len, n_len))
    counters, beats0, beats1, _ = pcu_model.matmul_streams(a, b, lanes)
    config = {"mode": 1, "counters": counters}
    result = _run_systolic(SystolicArray(lanes), lanes, config, beats0, beats1, rng, 0.3)
    expected = pcu_model.run_systolic(config, lanes, beats0, beats1)["vector_out"]
    assert np.array_equal(np.array(result["rows"], np.uint32), np.array(expected, np.uint32))
    product = pcu_model.matmul_from_stream(result["rows"], (m_len, n_len), lanes)
    reference = a.view(np.float32).astype(np.float64) @ b.view(np.float32).astype(np.float64)
    bound = np.abs(a.view(np.float32)) @ np.abs(b.view(np.float32)) * k_len * 2.0 ** -23
    assert (np.abs(product.view(np.float32) - reference) <= bound + 1e-30).all()
    assert len(result["done"]) == 1


def test_systolic_array_timing(seed):
    """Without stalls (and K = 12, longer than a drain) a beat pair issues every cycle,
    tile after tile, and the DONE token comes 2 * lanes + 1 cycles after the last issue
    (the skew, the last row's PEs, the drain of lanes rows: the PCU's
    T * K + 2 * lanes + 3 without its FIFOs)."""
    lanes = 4
    nrng = np.random.default_rng(seed)
    a = random_bf16_matrix(nrng, (8, 12))
    b = random_bf16_matrix(nrng, (12, 8))
    counters, beats0, beats1, _ = pcu_model.matmul_streams(a, b, lanes)
    config = {"mode": 1, "counters": counters}
    result = _run_systolic(SystolicArray(lanes), lanes, config, beats0, beats1,
                           random.Random(seed), 0.0)
    issues = result["issues"]
    assert issues == list(range(issues[0], issues[0] + len(beats0)))
    assert result["done"] == [issues[-1] + 2 * lanes + 1]


def _edge_bf16(nrng, shape):
    """BF16 words: random normals with zeros of both signs, infinities, NaNs, denormals
    (zeros on input), and values whose products overflow or flush."""
    words = random_bf16_matrix(nrng, shape)
    edges = np.array([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000,
                      0x00010000, 0x80400000, 0x7F7F0000, 0x00800000, 0x3F800000],
                     np.uint32)
    mask = nrng.random(shape) < 0.15
    words[mask] = nrng.choice(edges, size=int(mask.sum()))
    return words


@pytest.mark.parametrize("lanes,shape,edges,group_rows", [
    (4, (5, 6, 30), False, False), (2, (3, 9, 5), True, False), (2, (2, 1, 3), False, False),
    (4, (30, 6, 5), False, True), (2, (5, 9, 3), True, True), (2, (3, 1, 2), False, True)])
def test_pipelined_systolic_array_products(lanes, shape, edges, group_rows, seed):
    """``PipelinedSystolicArray`` (the PCU's ``fp_latency="default"``): random BF16 GEMM
    tiles (with edge-case words: zeros, infinities, NaNs, denormals, overflow) under
    random stalls on every port, every drained row bit-exact against
    ``run_systolic(..., group)``, which is the combinational array's reference on the
    column tiles of the group (mode ``SYSTOLIC_ROWS``: on the row tiles of the group);
    the DONE token once, after the last row."""
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    m_len, k_len, n_len = shape
    draw = _edge_bf16 if edges else random_bf16_matrix
    a, b = draw(nrng, (m_len, k_len)), draw(nrng, (k_len, n_len))
    group = systolic_group(DEFAULT_LATENCY)
    counters, beats0, beats1, _ = pcu_model.matmul_streams(a, b, lanes, group, group_rows)
    config = {"mode": Mode.SYSTOLIC_ROWS if group_rows else Mode.SYSTOLIC,
              "counters": counters}
    dut = PipelinedSystolicArray(lanes, DEFAULT_LATENCY)
    assert dut.group == group == 8 >= DEFAULT_LATENCY[FPKind.ADD]     # a power of two
    result = _run_systolic(dut, lanes, config, beats0, beats1, rng, 0.3, group)
    expected = pcu_model.run_systolic(config, lanes, beats0, beats1, group)["vector_out"]
    assert np.array_equal(np.array(result["rows"], np.uint32), np.array(expected, np.uint32))
    # the same words as the combinational array's reference, tile for tile
    plain = pcu_model.matmul_streams(a, b, lanes)
    flat = pcu_model.run_systolic({"mode": 1, "counters": plain[0]}, lanes, plain[1],
                                  plain[2])["vector_out"]
    product = pcu_model.matmul_from_stream(result["rows"], (m_len, n_len), lanes, group,
                                           group_rows)
    assert np.array_equal(product, pcu_model.matmul_from_stream(flat, (m_len, n_len), lanes))
    grouped = beats0 if group_rows else beats1
    assert len(result["done"]) == 1 and len(result["takes"]) == len(grouped)


def test_pipelined_systolic_array_timing(seed):
    """Without stalls a beat of ``in1`` enters every cycle, tile after tile (one MAC per
    PE per cycle), the chain steps every ``group`` cycles, and the DONE token comes
    ``systolic_pe_latency + (group + 1) * lanes + 1`` cycles after the last beat (the
    skew of row 0, the PE's product and sum, the drain of ``group * lanes`` rows; with
    ``group`` 1 and no PE latency the combinational array's ``2 * lanes + 1``)."""
    lanes, table = 4, DEFAULT_LATENCY
    group = systolic_group(table)
    nrng = np.random.default_rng(seed)
    a = random_bf16_matrix(nrng, (8, 12))
    b = random_bf16_matrix(nrng, (12, 2 * group * lanes))
    counters, beats0, beats1, _ = pcu_model.matmul_streams(a, b, lanes, group)
    config = {"mode": 1, "counters": counters}
    result = _run_systolic(PipelinedSystolicArray(lanes, table), lanes, config, beats0,
                           beats1, random.Random(seed), 0.0, group)
    takes, issues = result["takes"], result["issues"]
    assert takes == list(range(takes[0], takes[0] + len(beats1)))
    assert issues == takes[group - 1::group]
    assert result["done"] == [takes[-1] + systolic_pe_latency(table) +
                              (group + 1) * lanes + 1]


def test_pipelined_mac_arguments():
    """A PE needs a registered adder and at least as many slots as the adder's latency
    (a slot's next step must find its sum); its defaults are the latency table's, its
    slots the array's group."""
    pe = PipelinedMAC()
    assert pe.group == systolic_group(DEFAULT_LATENCY) == 8      # the array's PEs'
    assert pe.latency == systolic_pe_latency(DEFAULT_LATENCY)
    assert PipelinedMAC(9, add_latency=8).group == 9
    with pytest.raises(ValueError, match="at least as many slots as its adder's latency"):
        PipelinedMAC(6)
    with pytest.raises(ValueError, match="at least one register, not 0"):
        PipelinedMAC(4, add_latency=0)


def test_pipelined_systolic_back_to_back(seed):
    """Tiles follow without a gap exactly when ``(K - 1) * group >=
    systolic_pe_latency + (group + 1) * lanes`` (the next tile's last k step waits for
    the previous tile's drain): the K on either side of the bound, 4 lanes."""
    lanes, table = 4, DEFAULT_LATENCY
    group = systolic_group(table)
    bound = -(-(systolic_pe_latency(table) + (group + 1) * lanes) // group) + 1
    nrng = np.random.default_rng(seed)
    for k_len in (bound - 1, bound):
        a = random_bf16_matrix(nrng, (2 * lanes, k_len))
        b = random_bf16_matrix(nrng, (k_len, group * lanes))
        counters, beats0, beats1, _ = pcu_model.matmul_streams(a, b, lanes, group)
        result = _run_systolic(PipelinedSystolicArray(lanes, table), lanes,
                               {"mode": 1, "counters": counters}, beats0, beats1,
                               random.Random(seed), 0.0, group)
        takes = result["takes"]
        assert (takes == list(range(takes[0], takes[0] + len(beats1)))) == (k_len == bound)


# -- SIMD pipeline ----------------------------------------------------------------------

def _run_simd(dut, lanes, stages, config, vec0, vec1, scalars, rng, stall):
    """Play the counter chain around ``dut``; return what left it."""
    steps = _reference_chain(config["counters"])
    layout = pcu_config_layout(lanes, stages)
    uses_in1 = pcu_model.uses_in1(config)
    queues = {"in0": list(vec0), "in1": list(vec1) if uses_in1 else [],
              "scalar_in": list(scalars) if config["scalar_in"] else []}
    out = {"vector_out": [], "scalar_out": [], "done": 0}

    async def bench(ctx):
        ctx.set(dut.config.as_value(), layout.const(config).as_value().value)
        ctx.set(dut.active, 1)
        await ctx.tick().repeat(2)      # the stages' copies of the configuration
        index, cycle = 0, 0
        while not out["done"]:
            assert cycle < 40 * len(steps) + 300, "SIMD pipeline hangs"
            ctx.set(dut.running, index < len(steps))
            ctx.set(dut.chain.as_value(), _status_word(steps[min(index, len(steps) - 1)]))
            valid = {}
            for name, queue in queues.items():
                port = getattr(dut, name)
                valid[name] = bool(queue) and rng.random() >= stall
                ctx.set(port.valid, valid[name])
                if valid[name]:
                    word = queue[0] if name == "scalar_in" else _vector(queue[0])
                    ctx.set(port.payload.as_value() if name != "scalar_in" else port.payload,
                            int(word))
            ready = rng.random() >= stall
            for name in ("vector_out", "scalar_out", "control_out"):
                ctx.set(getattr(dut, name).ready, ready)
            for name, queue in queues.items():
                if valid[name] and ctx.get(getattr(dut, name).ready):
                    queue.pop(0)
            if ctx.get(dut.issue):
                index += 1
            if ready and ctx.get(dut.vector_out.valid):
                out["vector_out"].append(_words(ctx.get(dut.vector_out.payload.as_value()),
                                                lanes))
            if ready and ctx.get(dut.scalar_out.valid):
                out["scalar_out"].append(ctx.get(dut.scalar_out.payload))
            if ctx.get(dut.done):
                assert index == len(steps) and ctx.get(dut.control_out.valid)
                out["done"] += 1
            await ctx.tick()
            cycle += 1
        await ctx.tick().repeat(3)
        assert ctx.get(dut.busy) == 0
        out["left"] = {name: len(queue) for name, queue in queues.items()}

    _simulate(dut, bench)
    return out


def _assert_simd_matches_model(dut, lanes, stages, config, nrng, rng, stall):
    beats = len(_reference_chain(config["counters"]))
    inner = pcu_model.trip_count(config["counters"][0])
    a, b, _ = random_operands(nrng, beats * lanes)
    vec0, vec1 = a.reshape(beats, lanes), b.reshape(beats, lanes)
    scalars = random_operands(nrng, beats // inner)[2]
    expected = pcu_model.run_simd(config, lanes, vec0, vec1, scalars)
    got = _run_simd(dut, lanes, stages, config, vec0, vec1, scalars, rng, stall)
    assert np.array_equal(np.array(got["vector_out"], np.uint32).reshape(-1, lanes),
                          np.array(expected["vector_out"], np.uint32).reshape(-1, lanes))
    assert got["scalar_out"] == [int(word) for word in expected["scalar_out"]]
    assert got["left"] == {"in0": 0, "in1": 0, "scalar_in": 0}


@pytest.mark.parametrize("special,fp_latency", [("pipelined", "off"), ("iterative", "off"),
                                                ("pipelined", "default")])
def test_simd_pipeline_random_configs(special, fp_latency, seed):
    """Random operations, sources, reductions, tails, emits and accumulator stages,
    random stalls: every word out of the pipeline bit-exact against
    rdu.pcu_model.run_simd, every input beat taken, one DONE; with the combinational
    operators and with the pipelined ones (``fp_latency``)."""
    lanes, stages = 4, 3
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    for _ in range(3):
        config = random_simd_config(nrng, stages)
        dut = SIMDPipeline(lanes, stages, special=special, fp_latency=fp_latency)
        _assert_simd_matches_model(dut, lanes, stages, config, nrng, rng, 0.25)


@pytest.mark.parametrize("fp_latency", ["off", "default"])
def test_simd_pipeline_every_source(fp_latency, seed):
    """Each operand source in turn in the last stage of a two-stage pipeline (``madd``
    reads all three), every iteration emitted: results bit-exact against the model,
    with the combinational operators; with the pipelined ones the sources that travel
    beside the operators or come back to them (REG through the interlock, LAST, IN1,
    SCALAR, COUNTER: the others are the same multiplexer inputs either way)."""
    lanes, stages = 2, 2
    rng = random.Random(seed)
    nrng = np.random.default_rng(seed)
    sources = list(Source) if fp_latency == "off" else [
        Source.REG, Source.LAST, Source.IN1, Source.SCALAR, Source.COUNTER]
    for source in sources:
        config = random_simd_config(nrng, stages)
        config.update(vector_out=1, emit_every=1, tail=0, acc_stage=0)
        config["counters"][0] = {"min": 0, "max": 3, "stride": 1}
        config["stages"][stages - 1].update(
            op=int(Op.MADD), src_a=int(source), src_b=int(source), src_c=int(source))
        _assert_simd_matches_model(SIMDPipeline(lanes, stages, fp_latency=fp_latency),
                                   lanes, stages, config, nrng, rng, 0.2)


# -- shared ALU ---------------------------------------------------------------------------

def test_shared_alu_both_sides(seed):
    """SIMD side: every operation on random operands equals rdu.fpmodel.apply; PE side
    (``simd`` low): ``a * b`` of the BF16 words on ``first``, else ``acc + a * b``, as
    rdu.fpmodel's FP32 multiply and add of the words widened to FP32."""
    nrng = np.random.default_rng(seed)
    dut = SharedALU()
    a, b, c = random_operands(nrng, 40)

    async def bench(ctx):
        ctx.set(dut.simd, 1)
        for op in Op:
            for x, y, z in zip(a[:8], b[:8], c[:8], strict=True):
                ctx.set(dut.stage.op, op)
                ctx.set(dut.stage.a, int(x))
                ctx.set(dut.stage.b, int(y))
                ctx.set(dut.stage.c, int(z))
                want = fpmodel.apply(int(op), np.uint32(x), np.uint32(y), np.uint32(z))
                assert ctx.get(dut.stage.result) == int(want), op
        ctx.set(dut.simd, 0)
        for first in (1, 0):
            for x, y, z in zip(a, b, c, strict=True):
                ctx.set(dut.pe.a, int(x) >> 16)
                ctx.set(dut.pe.b, int(y) >> 16)
                ctx.set(dut.pe.acc, int(z))
                ctx.set(dut.pe.first, first)
                product = fpmodel.mul(np.uint32(x & 0xFFFF0000), np.uint32(y & 0xFFFF0000))
                want = product if first else fpmodel.add(np.uint32(z), product)
                assert ctx.get(dut.pe.result) == int(want)

    _simulate(dut, bench, clock=False)


def test_pipelined_alu(seed):
    """``PipelinedFPALU``: every operation, a new operand set each cycle, its result
    exactly ``op_latency`` cycles later equal to rdu.fpmodel.apply (the combinational
    ALU's word)."""
    nrng = np.random.default_rng(seed)
    dut = PipelinedFPALU()
    a, b, c = random_operands(nrng, 24)

    async def bench(ctx):
        for op in Op:
            latency = op_latency(op, DEFAULT_LATENCY)
            ctx.set(dut.op, op)
            for cycle in range(len(a) + latency):
                if cycle < len(a):
                    ctx.set(dut.a, int(a[cycle]))
                    ctx.set(dut.b, int(b[cycle]))
                    ctx.set(dut.c, int(c[cycle]))
                if cycle >= latency:
                    index = cycle - latency
                    want = fpmodel.apply(int(op), a[index], b[index], c[index])
                    assert ctx.get(dut.result) == int(want), (op, index)
                await ctx.tick()

    _simulate(dut, bench)


# -- special-function units -------------------------------------------------------------

_REFERENCE = {SpecialFunction.EXP: fpmodel.exp, SpecialFunction.RECIPROCAL: fpmodel.reciprocal,
              SpecialFunction.RSQRT: fpmodel.rsqrt}
_FUNCS = [SpecialFunction.EXP, SpecialFunction.RECIPROCAL, SpecialFunction.RSQRT]


def _special_inputs(nrng, count, lanes, func=None):
    words = random_operands(nrng, count * lanes)[0].reshape(count, lanes)
    # half of them ordinary magnitudes, where exp neither saturates nor flushes (positive
    # for rsqrt, which is NaN below 0)
    moderate = (nrng.integers(0, 2 ** 23, (count, lanes)) |
                (nrng.integers(118, 134, (count, lanes)) << 23) |
                (nrng.integers(0, 2, (count, lanes)) << 31)).astype(np.uint32)
    if func == SpecialFunction.RSQRT:
        moderate &= np.uint32(0x7FFFFFFF)
    return np.where(nrng.random((count, lanes)) < 0.5, moderate, words)


@pytest.mark.parametrize("func", _FUNCS, ids=["exp", "reciprocal", "rsqrt"])
def test_special_pipeline_alone(func, seed):
    """One vector per advance, random gaps in ``enable``: the result ``latency``
    advances after a vector entered is rdu.fpmodel's exp / reciprocal of it."""
    lanes = 2
    rng = random.Random(seed)
    inputs = _special_inputs(np.random.default_rng(seed), 24, lanes, func)
    dut = SpecialFunctionPipeline(lanes)

    async def bench(ctx):
        ctx.set(dut.active, 1)
        ctx.set(dut.func, func)
        entered = []
        for vector in itertools.chain(inputs, np.zeros((40, lanes), np.uint32)):
            while rng.random() < 0.3:         # no advance: everything holds
                ctx.set(dut.enable, 0)
                await ctx.tick()
            ctx.set(dut.enable, 1)
            ctx.set(dut.x.as_value(), _vector(vector))
            if len(entered) >= dut.latency and len(entered) - dut.latency < len(inputs):
                got = _words(ctx.get(dut.result.as_value()), lanes)
                want = _REFERENCE[func](entered[len(entered) - dut.latency])
                assert got == [int(word) for word in want]
            entered.append(np.asarray(vector, np.uint32))
            await ctx.tick()

    _simulate(dut, bench)


@pytest.mark.parametrize("func", _FUNCS, ids=["exp", "reciprocal", "rsqrt"])
def test_special_iterative_alone(func, seed):
    """A beat starts the unit, which is busy for as many cycles as the function's
    program has steps, then holds rdu.fpmodel's exp / reciprocal of the beat."""
    lanes = 2
    inputs = _special_inputs(np.random.default_rng(seed), 12, lanes, func)
    dut = SpecialFunctionIterative(lanes)

    async def bench(ctx):
        ctx.set(dut.active, 1)
        for vector in inputs:
            ctx.set(dut.func, func)
            ctx.set(dut.x.as_value(), _vector(vector))
            ctx.set(dut.enable, 1)
            ctx.set(dut.valid, 1)
            await ctx.tick()
            ctx.set(dut.valid, 0)
            busy = 0
            while ctx.get(dut.busy):
                busy += 1
                await ctx.tick()
            assert busy == len(PROGRAMS[func])
            got = _words(ctx.get(dut.result.as_value()), lanes)
            assert got == [int(word) for word in _REFERENCE[func](vector)]
            await ctx.tick()

    _simulate(dut, bench)

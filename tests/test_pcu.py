"""PCU: configuration layout, SIMD pipeline, reduction, counter chain, systolic mode,
error codes; bit-exact against rdu.models.pcu_reference in both tiers, random stalls on every
port."""

import numpy as np
import pytest
from amaranth.lib import data
from rdu.models import pcu_reference as pcu_model
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.fp import Op
from hdl.fp_latency import (
    DEFAULT_LATENCY,
    latency_table,
    op_latency,
    simd_latency,
    systolic_group,
    systolic_pe_latency,
)
from hdl.interfaces import config_words
from hdl.pcu import FPGA_PCU_OPTIONS, PCU
from hdl.pcu_config import Mode, pcu_config_layout
from hdl.special_function import PROGRAMS, SPECIAL_STEPS
from tb.suites.pcu import (
    causal_mask,
    config_errors,
    exp_to_bf16,
    random_bf16_matrix,
    rescaled_accumulator,
    running_max_step,
    simd_op_sweep,
    simd_random_configs,
    simd_timing,
    softmax_rows,
    special_function_sweep,
    systolic_matmuls,
    systolic_throughput,
)
from tb.suites.pcu_latency import simd_timing_cases, timing_case

ALL_OPS = [int(op) for op in Op]
SHAPES = [(4, 3, 4), (9, 20, 7), (1, 1, 1)]


# -- construction and layout ----------------------------------------------------------

@pytest.mark.parametrize("lanes,stages", [(4, 4), (8, 4), (8, 6)])
def test_config_layout(lanes, stages):
    layout = pcu_config_layout(lanes, stages)
    assert isinstance(layout, data.StructLayout)
    assert PCU(lanes=lanes, stages=stages).config_layout == layout
    assert layout["stages"].shape.length == stages
    assert layout["counters"].shape.length == 3
    assert config_words(layout) <= 256


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_pcu_rejects_bad_arguments():
    with pytest.raises(ValueError, match="Lane count must be a positive power of two, not 6"):
        PCU(lanes=6)
    with pytest.raises(TypeError, match="Lane count must be an integer, not 4.0"):
        PCU(lanes=4.0)
    with pytest.raises(ValueError, match="Stage count must be between 1 and 16, not 0"):
        PCU(stages=0)
    with pytest.raises(TypeError, match="Stage count must be an integer, not '4'"):
        PCU(stages="4")
    with pytest.raises(ValueError, match="FIFO depth must be at least 1, not 0"):
        PCU(fifo_depth=0)
    with pytest.raises(ValueError, match=r"Counter needs stride > 0 and max > min"):
        pcu_model.trip_count({"min": 3, "max": 3, "stride": 1})
    with pytest.raises(ValueError, match=r"Inner dimensions differ: A is \(2, 3\), B is \(4, 2\)"):
        pcu_model.matmul_streams(np.zeros((2, 3)), np.zeros((4, 2)), 4)


def test_model_systolic_matches_numpy():
    """The systolic model against numpy float32 matmul of the same BF16 inputs."""
    rng = np.random.default_rng(5)
    a = pcu_model.bf16_words(rng.standard_normal((20, 64)))
    b = pcu_model.bf16_words(rng.standard_normal((64, 13)))
    counters, in0, in1, _ = pcu_model.matmul_streams(a, b, 8)
    out = pcu_model.run_systolic({"mode": 1, "counters": counters}, 8, in0, in1)
    result = pcu_model.matmul_from_stream(out["vector_out"], (20, 13), 8).view(np.float32)
    reference = a.view(np.float32) @ b.view(np.float32)
    bound = np.abs(a.view(np.float32)) @ np.abs(b.view(np.float32)) * 64 * 2.0 ** -23
    assert (np.abs(result - reference) <= bound).all()


# -- Amaranth tier ------------------------------------------------------------------------

def test_config_errors_amaranth(seed):
    run_amaranth(PCU(lanes=4, stages=2), config_errors, seed=seed, lanes=4, stages=2)


@pytest.mark.parametrize("lanes", [4, 8])
def test_systolic_amaranth(lanes, seed):
    shapes = SHAPES if lanes == 4 else [(3, 4, 10)]
    stats = run_amaranth(PCU(lanes=lanes, stages=2), systolic_matmuls, seed=seed, lanes=lanes,
                         stages=2, shapes=shapes)
    assert stats.result["worst_relative_error"] < 1e-5


def test_systolic_cycle_count(seed):
    """Back-to-back tiles: T * K + 2 * lanes + 3 cycles from start token to DONE token."""
    stats = run_amaranth(PCU(lanes=4, stages=1), systolic_throughput, seed=seed, lanes=4,
                         stages=1, size=16)
    assert stats.result["cycles"] == 16 * 16 + 2 * 4 + 3


@pytest.mark.parametrize("group_rows", [False, True])
def test_systolic_pipelined_amaranth(group_rows, seed):
    """``fp_latency="default"``: the systolic array on pipelined PEs, tiles of ``lanes x
    group * lanes`` (``hdl.fp_latency.systolic_group``; mode ``SYSTOLIC_ROWS``: ``group
    * lanes x lanes``), random products of several shapes under random stalls on every
    port, bit-exact against the model."""
    group = systolic_group(DEFAULT_LATENCY)
    shapes = [(30, 7, 5), (3, 1, 4)] if group_rows else [(5, 7, 30), (4, 1, 3)]
    stats = run_amaranth(PCU(lanes=4, stages=1, fp_latency="default"), systolic_matmuls,
                         seed=seed, lanes=4, stages=1, shapes=shapes, group=group,
                         group_rows=group_rows)
    assert stats.result["worst_relative_error"] < 1e-5


def test_systolic_cycle_count_pipelined(seed):
    """Back-to-back tiles on the pipelined PEs: one beat of ``vector_in1`` per cycle,
    ``T * K * group + systolic_pe_latency + (group + 1) * lanes + 3`` cycles from start
    token to DONE token (``T * K + 2 * lanes + 3`` with ``group`` 1 and no PE
    latency, as ``test_systolic_cycle_count``)."""
    lanes, table = 4, DEFAULT_LATENCY
    group = systolic_group(table)
    size = group * lanes
    stats = run_amaranth(PCU(lanes=lanes, stages=1, fp_latency="default"),
                         systolic_throughput, seed=seed, lanes=lanes, stages=1, size=size,
                         group=group)
    tiles = size // lanes
    assert stats.result["cycles"] == tiles * size * group + systolic_pe_latency(table) + \
        (group + 1) * lanes + 3


@pytest.mark.parametrize("fp_latency,group_rows", [("off", False), ("default", False),
                                                   ("off", True), ("default", True)])
def test_systolic_functional_model(fp_latency, group_rows, seed):
    """The functional model (``PCUModel``) of a machine with ``fp_latency`` takes the
    streams of ``matmul_streams(..., group)`` (a beat of ``vector_in0`` per ``group``
    of ``vector_in1``; mode ``SYSTOLIC_ROWS`` the other way round, the same as
    ``SYSTOLIC`` with ``fp_latency`` off), the grouped stream one beat at a time with a
    two-item ``vector_out``, and gives the reference's rows, then the DONE token."""
    from rdu.models.pcu import PCUModel
    from rdu.models.shared import DONE, Queue, item_vector

    lanes, rng = 4, np.random.default_rng(seed)
    group = systolic_group(latency_table(fp_latency))
    a = random_bf16_matrix(rng, (9, 5) if group_rows else (6, 5))
    b = random_bf16_matrix(rng, (5, 6) if group_rows else (5, 9))
    counters, in0, in1, _ = pcu_model.matmul_streams(a, b, lanes, group, group_rows)
    config = {"mode": Mode.SYSTOLIC_ROWS if group_rows else Mode.SYSTOLIC,
              "counters": counters}
    queues = {name: Queue(2 if name == "vector_out" else 1000, name) for name in (
        "vector_in0", "vector_in1", "scalar_in", "control_in", "vector_out", "scalar_out",
        "control_out")}
    model = PCUModel(0, 0, lanes, 1, config, queues, fp_latency=fp_latency)
    queues["control_in"].items.append(0)
    grouped, held = ("vector_in0", "vector_in1") if group_rows else ("vector_in1",
                                                                     "vector_in0")
    beats = {"vector_in0": in0, "vector_in1": in1}
    queues[held].items.extend(beats[held])
    rows, left = [], list(beats[grouped])
    while not queues["control_out"].items:
        if left and not queues[grouped].items:
            queues[grouped].items.append(left.pop(0))
        progress = model.step()
        out = queues["vector_out"].items
        rows.extend(item_vector(out.popleft()) for _ in range(len(out)))
        assert progress or out or left, model.waits()
    assert queues["control_out"].items[0] == DONE and not queues[held].items
    expected = pcu_model.run_systolic(config, lanes, in0, in1, group)["vector_out"]
    assert np.array_equal(np.array(rows, np.uint32), np.array(expected, np.uint32))
    product = pcu_model.matmul_from_stream(rows, (len(a), b.shape[1]), lanes, group,
                                           group_rows)
    plain = pcu_model.matmul_streams(a, b, lanes)
    flat = pcu_model.run_systolic({"mode": Mode.SYSTOLIC, "counters": plain[0]}, lanes,
                                  plain[1], plain[2])["vector_out"]
    assert np.array_equal(product, pcu_model.matmul_from_stream(flat, (len(a), b.shape[1]),
                                                                lanes))
    assert model.counters()["macs"] == len(beats[grouped]) * lanes * lanes


@pytest.mark.parametrize("suite", ["systolic", "simd"])
def test_shared_units_amaranth(suite, seed):
    """``shared_units``: the systolic array on the SIMD ALUs gives the MAC array's words
    (random matmuls, bit-exact against the model) and cycles; the SIMD pipeline is
    unchanged (every operation, and random configurations of operations and sources)."""
    pcu = PCU(lanes=4, stages=4, shared_units=True)
    if suite == "systolic":
        run_amaranth(pcu, systolic_matmuls, seed=seed, lanes=4, stages=4, shapes=SHAPES)
        stats = run_amaranth(PCU(lanes=4, stages=4, shared_units=True), systolic_throughput,
                             seed=seed, lanes=4, stages=4, size=16)
        assert stats.result["cycles"] == 16 * 16 + 2 * 4 + 3
    else:
        run_amaranth(pcu, simd_op_sweep, seed=seed, lanes=4, stages=4, ops=ALL_OPS, beats=3)
        run_amaranth(PCU(lanes=4, stages=4, shared_units=True), simd_random_configs,
                     seed=seed, lanes=4, stages=4, configs=4)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_shared_units_checked():
    with pytest.raises(ValueError, match=r"Shared units need at least as many stages as "
                                         r"lanes \(the 4 x 4 systolic array on the stages' "
                                         r"ALUs\), not 2 stages for 4 lanes"):
        PCU(lanes=4, stages=2, shared_units=True)
    with pytest.raises(TypeError, match="Shared units must be a bool, not 1"):
        PCU(lanes=4, shared_units=1)


@pytest.mark.parametrize("fp_latency", ["off", "default"])
def test_simd_op_sweep_amaranth(fp_latency, seed):
    """Every op through stage 0 under random stalls, bit-exact against the model, with
    the combinational operators and the pipelined ones."""
    run_amaranth(PCU(lanes=4, stages=2, fp_latency=fp_latency), simd_op_sweep, seed=seed,
                 lanes=4, stages=2, ops=ALL_OPS, beats=3)


@pytest.mark.parametrize("lanes,stages,fp_latency", [(4, 3, "off"), (8, 2, "off"),
                                                    (4, 3, "default")])
def test_simd_random_amaranth(lanes, stages, fp_latency, seed):
    """Random SIMD configurations under random stalls, bit-exact against the model; with
    ``fp_latency="default"`` on the pipelined operators (the same words)."""
    run_amaranth(PCU(lanes=lanes, stages=stages, fp_latency=fp_latency),
                 simd_random_configs, seed=seed, lanes=lanes, stages=stages,
                 configs=6 if lanes == 4 else 1)


# -- Verilator tier: one lanes=4 build for the long runs, one lanes=8 build -------------

def _build(lanes):
    return build(PCU, lanes=lanes, stages=4, fifo_depth=4)


@pytest.mark.verilator
def test_simd_op_sweep_verilator(sim_dir, seed):
    """Every op through the configured pipeline: 2,000 random 4-lane vectors each, random
    stalls on every port (the 10,000-vector-per-op run is tests/test_fp.py)."""
    stats = run_verilator(_build(4), simd_op_sweep, sim_dir, seed=seed, lanes=4, stages=4,
                          ops=ALL_OPS, beats=2000)
    assert stats.result["beats"] == 2000 * len(ALL_OPS)


@pytest.mark.verilator
def test_simd_random_verilator(sim_dir, seed):
    run_verilator(_build(4), simd_random_configs, sim_dir, seed=seed, lanes=4, stages=4,
                  configs=500)


@pytest.mark.verilator
def test_systolic_verilator(sim_dir, seed):
    shapes = SHAPES + [(16, 33, 12), (5, 64, 3), (12, 7, 4), (37, 50, 29), (64, 64, 64)]
    run_verilator(_build(4), systolic_matmuls, sim_dir, seed=seed, lanes=4, stages=4,
                  shapes=shapes)


@pytest.mark.verilator
def test_config_errors_verilator(sim_dir, seed):
    run_verilator(_build(4), config_errors, sim_dir, seed=seed, lanes=4, stages=4)


@pytest.mark.verilator
def test_exp_to_bf16_verilator(sim_dir, seed):
    run_verilator(_build(4), exp_to_bf16, sim_dir, seed=seed, lanes=4, beats=500)


@pytest.mark.verilator
def test_rescaled_accumulator_verilator(sim_dir, seed):
    """The accumulator memory on the generated Verilog (the suite of the Amaranth test,
    more chunks and beats)."""
    stats = run_verilator(_build(4), rescaled_accumulator, sim_dir, seed=seed, lanes=4,
                          dims=12, chunks=6, groups=3)
    assert stats.result == 36


@pytest.mark.verilator
@pytest.mark.slow
def test_lanes8_verilator(sim_dir, seed):
    """The one unit-level lanes=8 build (about 2 to 10 minutes of C++ compilation the
    first time; cached afterwards): random SIMD configurations, matmuls and special
    functions at 8 lanes under random stalls. A long campaign: ``make test-long``, not
    ``make test`` (the system tests run the default 8-lane PCUs)."""
    built = _build(8)
    run_verilator(built, systolic_matmuls, sim_dir / "systolic", seed=seed, lanes=8, stages=4,
                  shapes=[(8, 8, 8), (13, 21, 19), (24, 64, 9)])
    run_verilator(built, simd_random_configs, sim_dir / "simd", seed=seed, lanes=8, stages=4,
                  configs=40)
    run_verilator(built, special_function_sweep, sim_dir / "special", seed=seed, lanes=8,
                  stages=4, funcs=[1, 2], beats=500)


@pytest.mark.parametrize("special", ["pipelined", "iterative"])
def test_special_functions_amaranth(special, seed):
    """exp, reciprocal and rsqrt in the tail, either unit, bit-exact against the model
    under random stalls (the iterating unit holds the pipeline while it computes)."""
    run_amaranth(PCU(lanes=4, stages=1, special=special), special_function_sweep, seed=seed,
                 lanes=4, stages=1, funcs=[1, 2, 3], beats=12)


@pytest.mark.verilator
@pytest.mark.slow
def test_fpga_pcu_verilator(sim_dir, seed):
    """The PCU of the FPGA configuration (``PCU(**FPGA_PCU_OPTIONS)``: iterating special
    unit, systolic array on the SIMD ALUs) on its generated Verilog: matmuls, random
    SIMD configurations and exp / reciprocal, bit-exact against the model under random
    stalls. In ``make test-long``: a Verilator build of its own (about a minute of a
    fresh clone's CPU); ``make test`` runs the same options in the Amaranth simulator
    (``test_shared_units_amaranth``, ``test_simd_timing_iterative``)."""
    built = build(PCU, lanes=4, stages=4, fifo_depth=4, **FPGA_PCU_OPTIONS)
    run_verilator(built, systolic_matmuls, sim_dir / "systolic", seed=seed, lanes=4, stages=4,
                  shapes=SHAPES)
    run_verilator(built, simd_random_configs, sim_dir / "simd", seed=seed, lanes=4, stages=4,
                  configs=20)
    run_verilator(built, special_function_sweep, sim_dir / "special", seed=seed, lanes=4,
                  stages=4, funcs=[1, 2], beats=1000)


@pytest.mark.verilator
def test_special_functions_verilator(sim_dir, seed):
    """exp and reciprocal in the tail: 4,000 random 4-lane vectors each plus edge cases,
    rsqrt 1,000, random stalls on every port."""
    stats = run_verilator(_build(4), special_function_sweep, sim_dir, seed=seed, lanes=4,
                          stages=4, funcs=[1, 2], beats=4_000)
    assert stats.result["beats"] == 8_000
    stats = run_verilator(_build(4), special_function_sweep, sim_dir / "rsqrt", seed=seed,
                          lanes=4, stages=4, funcs=[3], beats=1_000)
    assert stats.result["beats"] == 1_000


def test_softmax_amaranth(seed):
    """A whole softmax as five configured runs, against the model and numpy."""
    stats = run_amaranth(PCU(lanes=4, stages=2), softmax_rows, seed=seed, lanes=4, stages=2,
                         rows=2, beats_per_row=4)
    assert stats.result["error_over_budget"] <= 1.0


@pytest.mark.parametrize("stages,tail", [(4, 0), (1, 0), (2, 1), (2, 2), (2, 3)])
def test_simd_timing(stages, tail, seed):
    """Latency port to port is stages + 4 cycles (+ SPECIAL_STEPS with a special function
    in the tail, whose pipeline holds SPECIAL_STEPS + 1 registers where the plain tail
    has one); one beat per cycle either way."""
    stats = run_amaranth(PCU(lanes=4, stages=stages), simd_timing, seed=seed, lanes=4,
                         stages=stages, tail=tail, beats=5)
    marks = stats.result
    assert marks["out"][0] - marks["in"][0] == stages + 4 + (SPECIAL_STEPS if tail else 0)
    assert marks["out"][0] - marks["in"][0] == simd_latency(
        ["PASS"] * stages, "NONE", 4, None, SPECIAL_STEPS if tail else 0)
    assert np.diff(marks["out"]).tolist() == [1] * 4


#: (ops, reduce, src_b) of the stages of a two-stage PCU: each op class, each
#: reduction, and loop-carried operands (REG)
_LATENCY_CASES = [
    (("PASS", "PASS"), 0, 3), (("MUL", "ADD"), 1, 3), (("MADD", "MAX"), 2, 3),
    (("TO_BF16", "FROM_BF16"), 0, 3), (("SUB", "LT"), 0, 3), (("IADD", "SELECT"), 0, 3),
    (("ADD", "PASS"), 0, 1), (("MAX", "PASS"), 0, 1), (("PASS", "MADD"), 1, 1),
]


def test_simd_timing_pipelined(seed):
    """Beat in -> beat out on a two-stage PCU, without stalls, for each op class and
    reduction: the latency :func:`hdl.fp_latency.simd_latency` gives (``stages + 4``
    with the combinational operators), one beat per cycle; a stage whose ``REG`` is
    loop-carried takes a beat every latency of its op (the interlock: ADD 7, MADD 11,
    MAX 1). Every word bit-exact against the model. (With ``fp_latency`` off,
    ``test_simd_timing`` holds :func:`hdl.fp_latency.simd_latency` to ``stages + 4``.)"""
    fp_latency, table = "default", DEFAULT_LATENCY
    cases = [timing_case(ops, reduce=reduce, src_b=src_b) for ops, reduce, src_b in
             _LATENCY_CASES]
    beats = 6
    marks = run_amaranth(PCU(lanes=4, stages=2, fp_latency=fp_latency), simd_timing_cases,
                         seed=seed, lanes=4, stages=2, cases=cases, beats=beats).result
    for (ops, reduce, src_b), mark in zip(_LATENCY_CASES, marks, strict=True):
        latency = simd_latency(ops, ("NONE", "SUM", "MAX")[reduce], 4, table)
        interval = max(op_latency(op, table) for op in ops) if src_b == 1 else 1
        assert mark["out"][0] - mark["in"][0] == latency, (ops, reduce, mark)
        assert np.diff(mark["out"]).tolist() == [interval] * (beats - 1), (ops, mark)


@pytest.mark.parametrize("tail", [1, 2, 3])
def test_simd_timing_iterative(tail, seed):
    """With the iterating special-function unit a beat holds the pipeline for its
    program's steps (exp 12, reciprocal 7, rsqrt 11) in one register: latency stages + 4 + steps,
    one beat every steps + 1 cycles."""
    steps = len(PROGRAMS[tail])
    stats = run_amaranth(PCU(lanes=4, stages=2, special="iterative"), simd_timing,
                         seed=seed, lanes=4, stages=2, tail=tail, beats=5)
    marks = stats.result
    assert marks["out"][0] - marks["in"][0] == 2 + 4 + steps
    assert np.diff(marks["out"]).tolist() == [steps + 1] * 4


def test_special_unit_checked():
    with pytest.raises(ValueError, match="Special-function unit must be one of "
                                         "'pipelined', 'iterative', not 'unrolled'"):
        PCU(lanes=4, special="unrolled")
    with pytest.raises(TypeError, match="Special-function unit must be a string, not 1"):
        PCU(lanes=4, special=1)


@pytest.mark.parametrize("base", [0, -3, 2])
def test_causal_mask_amaranth(base, seed):
    """LANE and COUNTER sources make a causal mask: key j hidden from query i when
    j - i > base, against numpy, under random stalls."""
    stats = run_amaranth(PCU(lanes=4, stages=4), causal_mask, seed=seed, lanes=4, keys=9,
                         base=base)
    keys, query = np.meshgrid(np.arange(9), np.arange(4), indexing="ij")
    assert stats.result == int((keys - query > base).sum())


@pytest.mark.parametrize("fp_latency", ["off", "default"])
def test_rescaled_accumulator_amaranth(fp_latency, seed):
    """The accumulator memory holds a vector per beat across counter 1 (online softmax's
    ``O = O * alpha + O_c``), emitted on the last chunk only, under random stalls,
    against numpy float32; with ``fp_latency`` the multiply-add's 11 cycles exceed
    counter 0's 5 iterations, so the interlock spaces the beats."""
    stats = run_amaranth(PCU(lanes=4, stages=4, fp_latency=fp_latency),
                         rescaled_accumulator, seed=seed, lanes=4, dims=5, chunks=4,
                         groups=2)
    assert stats.result == 10          # the last chunk's 5 beats, per group


def test_exp_to_bf16_amaranth(seed):
    """``tail_bf16``: exp's results rounded to BF16 (RNE) after the tail, under random
    stalls; bit-exact against the model, within 2^-8 of float64 exp."""
    error = run_amaranth(PCU(lanes=4, stages=4), exp_to_bf16, seed=seed, lanes=4,
                         beats=24).result
    assert error > 0                 # rounding to 8 bits happened


def test_last_source_amaranth(seed):
    """LAST gives a stage its previous input: the step of a running max (old - new) per
    lane over rows of 7 beats, under random stalls, against numpy float32."""
    stats = run_amaranth(PCU(lanes=4, stages=4), running_max_step, seed=seed, lanes=4,
                         beats=7, rows=3)
    assert stats.result >= 12          # each row's first beat at least (3 rows x 4 lanes)


def test_fp_latency_checked_and_carried_by_the_machine():
    """``fp_latency``: its values, refused with shared units, carried by the machine
    description into the RTL's PCU variant and the watchdog's interval bound."""
    from rdu.machine import Machine, MachineError
    from rdu.runtime.watchdog import special_function_period

    assert PCU(lanes=4, fp_latency="default").fp_latency == "default"
    assert PCU(lanes=4).fp_latency == PCU(lanes=4, fp_latency=0).fp_latency == "off"
    with pytest.raises(ValueError, match="fp_latency must be one of off, default, not 'x'"):
        PCU(lanes=4, fp_latency="x")
    with pytest.raises(ValueError, match="not shared_units"):
        PCU(lanes=4, stages=4, shared_units=True, fp_latency="default")
    machine = Machine(rows=2, cols=2, lanes=4, fp_latency="default")
    unit = machine.system_params()["compute_unit"]
    assert unit(lanes=4).fp_latency == "default" and "fp_latency" in repr(unit)
    assert Machine.from_json(machine.to_json()) == machine
    assert "compute_unit" not in Machine(rows=2, cols=2, lanes=4).system_params()
    assert special_function_period(machine) == max(op_latency(op, DEFAULT_LATENCY)
                                                   for op in Op)
    with pytest.raises(MachineError, match="fp_latency"):
        Machine(rows=2, cols=2, lanes=4, pcu="fpga", fp_latency="default")

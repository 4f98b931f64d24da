"""The GEMM compiler: tiling, mapping, bitstream, tensor layouts (software only)."""

import numpy as np
import pytest
from rdu.bitstream import Geometry, UnitKind, read_bitstream
from rdu.compiler import CompileError
from rdu.compiler.families.matmul import MatmulGroup, tile_matmul
from rdu.frontend import gemm
from rdu.mapper import ArrayGeometry, MappingError
from rdu.unitconfig import unpack_config

from hdl.pmu import pmu_config_layout

DEFAULT = ArrayGeometry()
SMALL = ArrayGeometry(2, 2, 4, pmu_words=4096)


def _unpack(layout, words):
    return unpack_config(layout, words)


def test_plan_pads_and_counts():
    plan = gemm.plan_gemm(37, 50, 29, DEFAULT)
    assert (plan.k_pad, plan.k_pitch, plan.col_tiles) == (32, 32, 7)    # K to 2 x lanes
    assert plan.pcus == 5                 # ceil(37 / 8) row blocks
    assert plan.m_pad == 40 and plan.passes == 1
    plan = gemm.plan_gemm(256, 256, 256, DEFAULT)
    assert (plan.pcus, plan.passes, plan.buffers) == (8, 4, 2)
    assert plan.chunks == 1


def test_plan_splits_long_k_into_chunks():
    """A row of K longer than a PMU buffer is cut into double-buffered chunks of a
    power-of-two pitch; K is padded to whole chunks."""
    plan = gemm.plan_gemm(16, 16, 5000, DEFAULT)
    assert plan.k_pitch == DEFAULT.pmu_words // (2 * DEFAULT.lanes)      # 1024
    assert plan.chunks == 5 and plan.chunk % 16 == 0 and plan.chunk <= plan.k_pitch
    assert plan.k_pad == plan.chunks * plan.chunk >= 5000
    assert plan.buffers == 2


def test_plan_holds_a_skinny_b_in_a_pmu():
    """B of one systolic tile of columns, read again by every pass otherwise, is kept in
    a PMU, and the PCUs take a load of A each (as many as the HBM feeds): y^T = W^T x^T
    of a decode step; a B read once anyway, or too large for a PMU, streams as before."""
    graph = gemm.gemm_graph(704, 8, 256)
    group = MatmulGroup(graph.inputs["a"], graph.inputs["b"], output="c")
    plan = tile_matmul(group, DEFAULT, agcus=4, hbm_loads=2)
    assert plan.held_b and (plan.pcus, plan.passes, plan.stores) == (2, 44, 2)
    assert "B held in a PMU" in plan.describe()
    plan = gemm.plan_gemm(704, 8, 256, DEFAULT)         # 2 AGCUs: B's and one of A
    assert plan.held_b and (plan.pcus, plan.passes) == (1, 88)
    for shape in ((64, 8, 8), (256, 256, 256), (704, 16, 256), (704, 8, 4096)):
        plan = gemm.plan_gemm(*shape, DEFAULT)
        assert not plan.held_b, shape


def test_plan_splits_one_row_block_over_pcus_by_columns():
    """A matmul of one row block (a decode step's rows times a weight) splits its column
    groups over PCUs sharing the A panel, each on a load of B of its own, as many as
    the HBM feeds and divide the groups; none with 2 AGCUs (A's load and one more)."""
    graph = gemm.gemm_graph(8, 256, 256)
    group = MatmulGroup(graph.inputs["a"], graph.inputs["b"], output="c")
    plan = tile_matmul(group, DEFAULT, agcus=4, hbm_loads=2)
    assert (plan.split, plan.pcus, plan.stores, plan.pcu_tiles, plan.m_pad) == (2, 2, 2, 16, 8)
    assert "column groups split" in plan.describe()
    graph = gemm.gemm_graph(8, 24, 256)             # 3 column tiles: no equal share
    group = MatmulGroup(graph.inputs["a"], graph.inputs["b"], output="c")
    assert tile_matmul(group, DEFAULT, agcus=4, hbm_loads=2).split == 1
    assert gemm.plan_gemm(8, 256, 256, DEFAULT).split == 1
    graph = gemm.gemm_graph(8, 256, 256)
    group = MatmulGroup(graph.inputs["a"], graph.inputs["b"], output="c")
    assert tile_matmul(group, DEFAULT, agcus=4, own_loads=False).split == 1


@pytest.mark.parametrize("shape", [(200, 8, 72), (6, 160, 40)])
def test_own_loads_on_model_read_each_operand_once(shape, seed):
    """Held B (200 x 8 x 72) and the column split (6 x 160 x 40) on the model:
    bit-exact, within the float budget, and HBM reads A and B once each."""
    from rdu.machine import Machine
    from rdu.runtime import run_program
    program = gemm.compile_gemm(*shape, machine=Machine(agcus=4))
    meta = program.meta
    assert meta["pcus"] == 2 and (meta["held_b"] or meta["split"] == 2)
    a, b = gemm.random_inputs(*shape, seed)
    gemm.pack_inputs(program, a, b)
    result = run_program(program, "model")
    c = gemm.unpack_output(program, result.outputs["c"])
    assert np.array_equal(c.view(np.uint32), gemm.exact_reference(a, b, meta["k_pad"]))
    assert gemm.check_result(c, a, b)[0]
    read = sum(np.prod(meta["images"][name]["shape"]) * 2 for name in ("a", "b"))
    assert result.memory_bytes["hbm"]["read_bytes"] == read


@pytest.mark.verilator
def test_own_loads_on_native_rtl(sim_dir, seed):
    """Held B (a PMU read once per pass, ``read_repeat``) and the column split (one panel
    multicast, a B load and a store per PCU) on the native RTL of the 4x4 with 4 AGCUs,
    one memory for both: the model's words, the bit-exact reference, and HBM reading A
    and B once each."""
    from rdu.machine import Machine
    from rdu.runtime import run_programs
    shapes = ((200, 8, 72), (6, 160, 40))
    programs, operands = [], []
    for shape in shapes:
        program = gemm.compile_gemm(*shape, machine=Machine(agcus=4))
        a, b = gemm.random_inputs(*shape, seed + len(programs))
        gemm.pack_inputs(program, a, b)
        programs.append(program)
        operands.append((a, b))
    assert programs[0].meta["held_b"] and programs[1].meta["split"] == 2
    native = run_programs(programs, "native", seed=seed, work_dir=sim_dir / "own_loads")
    model = run_programs(programs, "model")
    for program, (a, b), run, reference in zip(programs, operands, native, model,
                                               strict=True):
        assert np.array_equal(run.outputs["c"], reference.outputs["c"])
        c = gemm.unpack_output(program, run.outputs["c"])
        assert np.array_equal(c.view(np.uint32),
                              gemm.exact_reference(a, b, program.meta["k_pad"]))
        images = program.meta["images"]
        assert run.memory_bytes["hbm"]["read_bytes"] == sum(
            np.prod(images[name]["shape"]) * 2 for name in ("a", "b"))


@pytest.mark.parametrize("shape, message", [
    ((0, 4, 4), "GEMM M must be a positive integer, not 0"),
    ((4, 4, -1), "GEMM K must be a positive integer, not -1"),
    ((4, 4, 70000), "matmul 4x4x70000: padded K = 70656 exceeds the 16-bit loop counters "
                    "by 5121"),
])
def test_plan_rejects_bad_shapes(shape, message):
    with pytest.raises((ValueError, MappingError)) as error:
        gemm.plan_gemm(*shape, DEFAULT)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_default_array_maps_every_pcu():
    program = gemm.compile_gemm(256, 256, 256, DEFAULT)
    assert program.meta["pcus"] == 8
    blocks = sorted(program.meta["row_blocks"].values())
    assert blocks == list(range(8))
    assert program.execute == [0, 1]


@pytest.mark.parametrize("geometry, shape", [(DEFAULT, (64, 24, 40)), (SMALL, (9, 5, 13))])
def test_bitstream_is_valid_and_complete(geometry, shape):
    program = gemm.compile_gemm(*shape, geometry)
    header, records = read_bitstream(program.bitstream,
                                     Geometry(geometry.rows, geometry.cols, geometry.lanes))
    kinds = [record.kind for record in records]
    # every grid unit and switch is written (stale configuration never survives)
    assert kinds.count(UnitKind.SWITCH) == geometry.rows * geometry.cols
    assert kinds.count(UnitKind.PCU) + kinds.count(UnitKind.PMU) == geometry.rows * geometry.cols
    assert kinds.count(UnitKind.AGCU) == 2
    # the PMUs that hold panels have disjoint predicate ranges covering the pass
    ranges = []
    for record in records:
        if record.kind == UnitKind.PMU:
            fields = _unpack(pmu_config_layout(), record.words)
            if fields["write_enable"]:
                ranges.append((fields["predicate_low"], fields["predicate_high"]))
    ranges.sort()
    plan_words = program.meta["lanes"] * program.meta["k_pitch"]
    assert ranges == [(i * plan_words, (i + 1) * plan_words) for i in range(len(ranges))]
    assert len(ranges) == program.meta["pcus"]


def test_compile_is_deterministic():
    first = gemm.compile_gemm(100, 30, 20, DEFAULT)
    second = gemm.compile_gemm(100, 30, 20, DEFAULT)
    assert first.bitstream == second.bitstream


def test_layouts_round_trip():
    program = gemm.compile_gemm(13, 11, 7, SMALL)
    meta = program.meta
    a, b = gemm.random_inputs(13, 11, 7, seed=3)
    gemm.pack_inputs(program, a, b)
    # packed BF16: value i of an image is bytes 2i, 2i+1 (little-endian)
    def bf16_values(words):
        raw = np.asarray(words, np.uint32).tobytes()
        return [int.from_bytes(raw[2 * i:2 * i + 2], "little") << 16
                for i in range(len(raw) // 2)]
    a_image = np.array(bf16_values(program.inputs["a"][1])).reshape(meta["m_pad"],
                                                                    meta["k_pad"])
    b_image = np.array(bf16_values(program.inputs["b"][1])).reshape(meta["col_tiles"],
                                                                    meta["k_pad"], 4)
    assert meta["k_pad"] == 8                  # K padded to whole AXI beats (2 x lanes)
    for i in range(13):
        for k in range(7):
            assert a_image[i, k] == a[i, k]
    for k in range(7):
        for j in range(11):
            assert b_image[j // 4, k, j % 4] == b[k, j]
    assert not a_image[13:].any() and not a_image[:, 7:].any()
    # C: column tile t holds rows 0..m_pad-1 of columns 4t..4t+3
    c = np.arange(meta["col_tiles"] * meta["m_pad"] * 4, dtype=np.uint32)
    result = gemm.unpack_output(program, c).view(np.uint32)
    assert result.shape == (13, 11)
    assert result[5, 6] == (6 // 4) * meta["m_pad"] * 4 + 5 * 4 + 6 % 4


def test_wrong_input_shape_is_refused():
    program = gemm.compile_gemm(8, 8, 8, SMALL)
    a, b = gemm.random_inputs(8, 8, 9, seed=1)
    with pytest.raises(ValueError, match=r"takes A \(8, 8\) and B \(8, 8\)"):
        gemm.pack_inputs(program, a, b[:8])


# -- compiled programs on the functional model ---------------------------------------------

def _run_model(m, n, k, geometry, seed):
    from rdu.runtime import run_program
    program = gemm.compile_gemm(m, n, k, geometry)
    a, b = gemm.random_inputs(m, n, k, seed)
    gemm.pack_inputs(program, a, b)
    result = run_program(program, "model")
    return program, a, b, gemm.unpack_output(program, result.outputs["c"]), result


@pytest.mark.parametrize("geometry, shape", [
    (SMALL, (1, 1, 1)), (SMALL, (7, 13, 3)), (SMALL, (37, 50, 29)), (SMALL, (16, 16, 64)),
    (DEFAULT, (1, 17, 31)), (DEFAULT, (64, 8, 8)), (DEFAULT, (97, 41, 53)),
    (DEFAULT, (130, 24, 16)),
])
def test_gemm_on_model(geometry, shape, seed):
    """Compiled GEMMs (1, primes, non-multiples of the tile) on the functional model:
    bit-exact against the hardware's arithmetic, and within the FP32 accumulation budget
    of numpy float32 matmul of the same BF16 inputs."""
    program, a, b, c, result = _run_model(*shape, geometry, seed)
    exact = gemm.exact_reference(a, b, program.meta["k_pad"])
    assert np.array_equal(c.view(np.uint32), exact), "model differs from the bit-exact model"
    ok, error = gemm.check_result(c, a, b)
    assert ok, f"C differs from numpy by {error}"
    macs = sum(value.get("macs", 0) for value in result.counters.values())
    meta = program.meta
    assert macs == meta["pcus"] * meta["passes"] * meta["col_tiles"] * meta["k_pad"] * \
        meta["lanes"] ** 2        # every PCU did its share, padding included


def _exact_on_model(program, seed):
    """Run ``program`` (a GEMM) on the functional model with random operands: its C
    bit-exact against the reference; returns the MACs its PCUs counted."""
    from rdu.runtime import run_program
    m, n, k = (program.meta[key] for key in ("m", "n", "k"))
    a, b = gemm.random_inputs(m, n, k, seed)
    gemm.pack_inputs(program, a, b)
    result = run_program(program, "model")
    c = gemm.unpack_output(program, result.outputs["c"])
    assert np.array_equal(c.view(np.uint32),
                          gemm.exact_reference(a, b, program.meta["k_pad"]))
    return sum(value.get("macs", 0) for value in result.counters.values())


@pytest.mark.parametrize("shape, pmu_kib", [((9, 13, 7), 64), ((37, 50, 29), 64),
                                            ((3, 5, 1), 64), ((12, 30, 700), 4)])
def test_gemm_on_model_fp_latency(shape, pmu_kib, seed):
    """A machine with ``fp_latency="default"``: its systolic PCUs take tiles of
    ``systolic_group`` column tiles (``docs/pcu.md``, "Systolic array on the pipelined
    operators"), so the compiler pads the column tiles to whole groups, lays B out by
    groups and streams a beat of A per group of B beats; on the functional model the
    words equal the bit-exact reference (K in chunks with 4 KiB PMUs too), and every
    PCU did its share of MACs."""
    from rdu.machine import Machine

    from hdl.fp_latency import systolic_group
    machine = Machine(rows=2, cols=2, lanes=4, pmu_bytes=pmu_kib * 1024,
                      fp_latency="default")
    group = systolic_group(machine.latency_table)
    m, n, k = shape
    program = gemm.compile_gemm(m, n, k, machine=machine)
    meta = program.meta
    assert meta["tile_group"] == group > 1 and meta["col_tiles"] % group == 0
    assert (meta["chunks"] > 1) == (pmu_kib == 4)
    macs = _exact_on_model(program, seed)
    assert macs == meta["pcus"] * meta["passes"] * meta["col_tiles"] * meta["k_pad"] * 16


@pytest.mark.parametrize("shape, agcus", [((100, 8, 300), 4), ((9, 3, 40), 2),
                                          ((700, 5, 64), 4), ((64, 4, 2000), 3),
                                          ((1, 1, 1), 2)])
def test_skinny_gemm_on_model_fp_latency(shape, agcus, seed):
    """A product with one column tile (N <= lanes) on a machine with ``fp_latency``:
    instead of padding B to ``group`` column tiles (and taking a beat of A per
    ``group`` cycles) each PCU takes ``group`` row tiles a pass (``Mode.SYSTOLIC_ROWS``),
    its A straight from a load of its own, B's column tile as it is (held in a PMU for
    several passes); the PCUs are as many as the loads allow, padding the fewest row
    groups. On the functional model the words equal the bit-exact reference and every
    PCU did its share of MACs."""
    from rdu.machine import Machine

    from hdl.fp_latency import systolic_group
    machine = Machine(rows=4, cols=4, lanes=8, agcus=agcus, fp_latency="default")
    group, lanes = systolic_group(machine.latency_table), machine.lanes
    m, n, k = shape
    program = gemm.compile_gemm(m, n, k, machine=machine)
    meta = program.meta
    assert meta["row_group"] == group > 1 and meta["tile_group"] == 1
    assert meta["col_tiles"] == 1 and meta["n_pad"] == lanes
    assert 1 <= meta["pcus"] <= agcus - 1 and meta["held_b"] == (meta["passes"] > 1)
    groups = -(-m // (group * lanes))
    assert meta["m_pad"] == meta["pcus"] * meta["passes"] * group * lanes
    assert meta["pcus"] * meta["passes"] == min(
        -(-groups // p) * p for p in range(1, min(agcus - 1, groups) + 1))
    systolic = [c for c in meta["pcu_programs"].values() if c["mode"] == "systolic"]
    assert all(c["group"] == group and c["group_rows"] for c in systolic)
    macs = _exact_on_model(program, seed)
    assert macs == meta["m_pad"] * meta["k_pad"] * lanes


def test_grouped_attention_cache_refusals():
    """On a machine with ``fp_latency`` a KV cache is read a systolic tile of 64 keys
    at a time (8 key blocks of 8 lanes): a capacity that is not whole tiles, or a head
    dimension whose padded tile is wider than the cache row, is refused in one line."""
    from rdu.frontend.kernels import get_kernel
    from rdu.machine import Machine
    kernel, machine = get_kernel("attention"), Machine(fp_latency="default", agcus=4)
    with pytest.raises(CompileError, match="capacity 32 is not a multiple of 64 keys"):
        kernel.compile(machine, seq=32, dim=64, heads=1, kv_heads=1, kv_layout="rows")
    with pytest.raises(CompileError, match="dim 16 is padded to 64, wider than a cache row"):
        kernel.compile(machine, seq=64, dim=16, heads=1, kv_heads=1, kv_layout="rows")


def test_gemm_mismatch_is_detected():
    """A wrong A makes the check fail (the check can fail)."""
    program, a, b, c, _ = _run_model(9, 9, 9, SMALL, 5)
    a_wrong = a.copy()
    a_wrong[3, 4] ^= 0x00400000          # flip a BF16 mantissa bit
    ok, _ = gemm.check_result(c, a_wrong, b)
    assert not ok


@pytest.mark.verilator
def test_gemm_on_verilator(sim_dir, seed):
    """Three compiled GEMMs launched in sequence on one RTL system and memory
    (RDUSystem 2x2, 4 lanes, under Verilator, through rdu.runtime.run_programs): each
    launch's words equal the functional model's (run as the same sequence) and the
    bit-exact reference; the network starts clean for each program (tokens a GEMM
    leaves unrouted are flushed by the next configuration)."""
    from rdu.runtime import run_programs
    shapes = ((5, 7, 3), (23, 9, 17), (8, 8, 8))
    programs, operands = [], []
    for shape in shapes:
        program = gemm.compile_gemm(*shape, SMALL)
        a, b = gemm.random_inputs(*shape, seed + len(programs))
        gemm.pack_inputs(program, a, b)
        programs.append(program)
        operands.append((a, b))
    rtl = run_programs(programs, "verilator", seed=seed, work_dir=sim_dir / "sequence")
    model = run_programs(programs, "model")
    for shape, program, (a, b), run, reference in zip(shapes, programs, operands, rtl, model,
                                                      strict=True):
        assert np.array_equal(run.outputs["c"], reference.outputs["c"]), \
            f"RTL differs from model for {shape}"
        c = gemm.unpack_output(program, run.outputs["c"])
        assert np.array_equal(c.view(np.uint32),
                              gemm.exact_reference(a, b, program.meta["k_pad"]))
        assert run.cycles > program.meta["passes"] * program.meta["col_tiles"] * \
            program.meta["k_pad"]
        assert run.load_cycles >= len(program.bitstream)      # one word per cycle at best
        print(f"GEMM {shape} on 2x2 lanes 4: load {run.load_cycles}, run {run.cycles} cycles")


@pytest.mark.parametrize("rows, cols, lanes", [(1, 2, 4), (2, 3, 4), (3, 3, 8), (3, 4, 4),
                                               (2, 4, 8)])
def test_gemm_maps_any_geometry(rows, cols, lanes):
    """The compiler places, routes and encodes for other array shapes too; the model's
    result is bit-exact."""
    geometry = ArrayGeometry(rows, cols, lanes)
    program, a, b, c, _ = _run_model(21, 19, 23, geometry, 2)
    assert np.array_equal(c.view(np.uint32), gemm.exact_reference(a, b, program.meta["k_pad"]))


def test_gemm_needs_a_pmu():
    with pytest.raises(CompileError, match="the 1x1 array has 1 PCUs and 0 PMUs"):
        gemm.compile_gemm(4, 4, 4, ArrayGeometry(1, 1, 4))

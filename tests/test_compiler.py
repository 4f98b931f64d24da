"""The compiler: front end, passes, generic kernels (software and functional model).

The Verilator test at the end replays the same programs on the RTL.
"""

import zlib

import numpy as np
import pytest
from rdu.bitstream import Record, UnitKind, read_bitstream, to_bytes, write_bitstream
from rdu.compiler import PIPELINE, CompileError, compile_graph
from rdu.compiler.check import check_kernel
from rdu.compiler.families.rows import RowGroup
from rdu.compiler.row_chain import RowChainBuilder
from rdu.frontend import gemm
from rdu.frontend.graph import FrontendError, Graph, exp, reciprocal, relu
from rdu.frontend.kernels import KERNELS, Kernel
from rdu.layout import Image, Piece, padded_row
from rdu.machine import Machine
from rdu.mapper import ArrayGeometry
from rdu.runtime import run_program, run_programs
from rdu.units.registry import unit_layouts

from hdl.interfaces import config_words

DEFAULT = ArrayGeometry()
SMALL = ArrayGeometry(2, 2, 4, pmu_words=4096)
SMALL_MACHINE = Machine(2, 2, 4, pmu_bytes=16384)

# CRC-32 of the bitstreams the hand-written GEMM encoder produced before the compiler was
# rewritten as passes (commit a4ed10b): the pass pipeline must reproduce them bit for bit,
# so no GEMM loses a cycle of utilisation to the rewrite.
GOLDEN = {
    ((256, 256, 256), DEFAULT): 0x342A4DBD,
    ((128, 128, 128), DEFAULT): 0xC23A5137,
    ((64, 64, 64), DEFAULT): 0xC3244ED4,
    ((97, 41, 53), DEFAULT): 0xCF00158B,
    ((37, 50, 29), SMALL): 0x57F12A1A,
    ((1, 1, 1), SMALL): 0x693A4547,
    ((21, 19, 23), ArrayGeometry(3, 3, 8)): 0x5975CE8C,
    ((21, 19, 23), ArrayGeometry(2, 4, 8)): 0x59310DA4,
}


#: AGCU configuration words of the golden bitstreams (the two position strides appended
#: since, ``docs/agcu.md``, made it 13: a GEMM leaves them 0).
GOLDEN_AGCU_WORDS = 12


@pytest.mark.parametrize("shape, geometry", list(GOLDEN))
def test_gemm_bitstreams_match_the_hand_encoder(shape, geometry):
    """Bit for bit in the format of then (version 1: every record the unit's whole
    configuration, no clear flag), once the AGCU records drop the words appended since
    (all zero)."""
    program = gemm.compile_gemm(*shape, geometry)
    header, records = read_bitstream(program.bitstream)
    sizes = {kind: config_words(layout) for kind, layout in
             unit_layouts(header.geometry.lanes, program.machine.stages).items()}
    sizes[UnitKind.AGCU] = GOLDEN_AGCU_WORDS
    then = []
    for record in records:
        assert record.clear, record
        words = list(record.words) + [0] * (sizes[record.kind] - len(record.words))
        assert not any(words[sizes[record.kind]:]), record
        then.append(Record(record.kind, record.row, record.col, words[:sizes[record.kind]]))
    words = write_bitstream(header.geometry, then, flags=header.flags)
    words[1] = 1 | words[1] & ~0xFFFF           # version 1
    assert zlib.crc32(to_bytes(words)) == GOLDEN[shape, geometry]


def test_every_pass_runs_and_dumps():
    state = []
    compile_graph(gemm.gemm_graph(20, 12, 9), kernel="gemm", params={}, state=state)
    compilation, = state
    assert set(compilation.seconds) == set(PIPELINE)
    assert "matmul a[20, 9] @ b[9, 12]" in compilation.dumps["fuse"]
    # ceil(20 / 8) = 3 row blocks: 3 PCUs, one pass of 24 rows
    assert "3 systolic PCUs, 1 passes of 24 rows" in compilation.dumps["tile"]
    assert "systolic" in compilation.dumps["lower"]
    assert "row block" in compilation.dumps["bind"]


# -- front end ----------------------------------------------------------------------------

def test_frontend_errors_name_the_user_line():
    graph = Graph("bad")
    a = graph.input("a", (4, 8))
    b = graph.input("b", (5, 8))
    with pytest.raises(FrontendError) as error:
        a @ b                                       # the line reported
    line = str(error.value)
    assert line.startswith("test_compiler.py:") and "cannot multiply shapes (4, 8) and " \
        "(5, 8)" in line
    with pytest.raises(FrontendError, match=r"test_compiler.py:\d+: cannot add shapes"):
        a + graph.input("c", (3,))
    with pytest.raises(FrontendError, match="defined twice"):
        graph.input("a", (2, 2))


def test_frontend_records_operators():
    graph = Graph("attention_like")
    q = graph.input("q", (4, 8))
    k = graph.input("k", (6, 8))
    s = (q @ k.T) / 8.0
    p = exp(s - s.max())
    graph.output("p", p * p.sum().reciprocal())
    assert s.max().shape == (4, 1)
    text = graph.dump()
    for op in ("matmul", "transpose", "reduce", "unary", "fn=exp",
               "fn=reciprocal", "fn=max", "fn=sum"):
        assert op in text, op
    assert graph.outputs["p"].shape == (4, 6)


def test_unsupported_fusion_is_refused_at_the_user_line():
    graph = Graph("softmax_like")
    a = graph.input("a", (8, 8))
    b = graph.input("b", (8, 8))
    graph.output("c", exp(a @ b))                   # exp after a matmul: not fused yet
    with pytest.raises(CompileError, match=r"test_compiler.py:\d+: .*unary exp is not "
                                           r"fused"):
        compile_graph(graph, geometry=DEFAULT)


# -- layouts ----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["bf16", "fp32"])
def test_image_pack_unpack_round_trip(fmt, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2 ** 32, (5, 7), dtype=np.uint32) & np.uint32(0xFFFF0000)
    image = Image((8, 8), (Piece("x", (0, 0), (5, 7)), Piece(None, (0, 7), (5, 1), 1.0)),
                  (2, 4, 2, 4), (0, 2, 1, 3), fmt)
    words = image.pack({"x": x})
    assert words.size == image.words
    assert np.array_equal(image.unpack(words, "x"), x)
    ones = image.unpack_matrix(words)[:5, 7].view(np.float32)
    assert np.all(ones == 1.0)


def _swapped_halves(outer=3, pitch=5, half=2, beat=16):
    """The strided image of onnx_rotary's copy: each block's halves swapped, the rows
    past them skipped."""
    return Image((outer * 2 * half, beat), (Piece("p", (0, 0), (outer * 2 * half, beat)),),
                 (outer, 2, half, beat), None, "fp32",
                 strides=(pitch * beat, -half * beat, beat, 1), origin=half * beat,
                 extent=outer * pitch * beat)


def test_strided_image_places_every_element(seed):
    image = _swapped_halves()
    rows = [block * 5 + (half_row + 2) % 4 for block in range(3) for half_row in range(4)]
    expected = (np.asarray(rows)[:, None] * 16 + np.arange(16)) * 4   # bytes, by hand
    assert np.array_equal(image.byte_offsets(), expected)
    assert image.nbytes == 3 * 5 * 16 * 4 and image.words == 3 * 5 * 16
    rng = np.random.default_rng(seed)
    p = rng.integers(0, 2 ** 32, (12, 16), dtype=np.uint32)
    words = image.pack({"p": p})
    assert words.size == image.words
    assert np.array_equal(words.reshape(15, 16)[rows], p)
    assert not words.reshape(3, 5, 16)[:, 4].any()      # the skipped rows stay zero
    assert np.array_equal(image.unpack(words, "p"), p)
    assert Image.from_json(image.to_json()) == image


def test_strided_image_walks_as_one_agcu_pattern():
    from rdu.compiler.families.rows import walk_rows
    pattern = walk_rows("copy", "p", _swapped_halves(), 0x1000, 12, 16, 32)
    assert (pattern.start, pattern.counts, pattern.strides) == (
        0x1000 + 2 * 64, (4, 2, 3), (32, -128, 320))


@pytest.mark.parametrize("args, match", [
    ({"split": (3, 2, 2, 16), "strides": (80, -32, 16, 1), "origin": 0},
     "reach elements -32 to"),
    ({"split": (3, 2, 2, 16), "strides": (80, 16, 16, 1), "origin": 0},
     "place two elements at one position"),
    ({"split": (3, 2, 2, 16), "strides": (80, 1), "origin": 0}, "one per axis"),
])
def test_strided_image_refuses_bad_strides(args, match):
    from rdu.layout import LayoutError
    with pytest.raises(LayoutError, match=match):
        Image((12, 16), (), args["split"], None, "fp32", strides=args["strides"],
              origin=args["origin"], extent=240)


# -- the deadlock check -----------------------------------------------------------------

def _lowered(kernel="linear_relu", shape=(20, 12, 9)):
    state = []
    compile_graph(KERNELS[kernel].graph(dict(zip("mnk", shape, strict=True))),
                  geometry=DEFAULT, state=state)
    return state[0].kernel


def test_check_passes_compiled_kernels():
    carried = check_kernel(_lowered(), DEFAULT.lanes)
    assert carried["load_b.vector_out"] == 2 * 16 // 2 * 2      # K padded to 16, 2 tiles


def test_check_refuses_an_unbalanced_stream():
    kernel = _lowered()
    config = kernel.nodes["epilogue0"].config
    config["trips"] = (config["trips"][0] + 1,) + tuple(config["trips"][1:])
    with pytest.raises(CompileError, match="epilogue0.vector_in0 takes .* would hang"):
        check_kernel(kernel, DEFAULT.lanes)


def test_check_refuses_a_cycle():
    """matmul0's DONE token gating its own A panel: a_panel0 -> matmul0 -> a_panel0."""
    kernel = _lowered("gemm")
    stream = kernel.output(kernel.nodes["matmul0"], "control_out")
    kernel.connect(stream, kernel.nodes["a_panel0"], "control_in")
    with pytest.raises(CompileError, match="cycle .*a_panel0 -> matmul0 -> a_panel0"):
        check_kernel(kernel, DEFAULT.lanes)


# -- kernels on the functional model -----------------------------------------------------

def _run(kernel_name, params, machine, seed):
    kernel = KERNELS[kernel_name]
    program = kernel.compile(machine, **params)
    inputs = kernel.random_inputs(program, seed)
    kernel.pack(program, inputs)
    result = run_program(program, "model")
    return kernel, program, inputs, kernel.unpack(program, result.outputs), result


@pytest.mark.parametrize("kernel_name, shape, machine", [
    ("gemm", (5, 8, 5000), Machine()),              # K in chunks, re-read per column tile
    ("gemm", (9, 5, 1), Machine()),
    ("gemm", (13, 9, 1500), SMALL_MACHINE),
    ("linear_relu", (37, 20, 29), Machine()),
    ("linear_relu", (9, 5, 7), SMALL_MACHINE),
    ("linear_relu", (16, 8, 2100), Machine()),      # bias, chunks and an epilogue
    ("gemm_bf16", (37, 20, 29), Machine()),         # TO_BF16 epilogue, packed stores
    ("gemm_bf16", (9, 6, 1200), SMALL_MACHINE),
])
def test_kernels_on_the_model(kernel_name, shape, machine, seed):
    """Shapes the tests were not written around (K = 5000, K = 1, primes), bit-exact
    against the hardware's arithmetic and within the float64 budget."""
    kernel, program, inputs, results, _ = _run(kernel_name, dict(zip("mnk", shape,
                                                                     strict=True)),
                                                machine, seed)
    exact = kernel.exact(program)
    assert np.array_equal(results["c"].view(np.uint32), exact["c"]), "not bit-exact"
    ok, error = kernel.check(program, inputs, results)
    assert ok, f"outside the float64 budget: {error}"
    if shape[2] > 1024:
        assert program.meta["chunks"] > 1


def test_linear_relu_check_can_fail(seed):
    kernel, program, inputs, results, _ = _run("linear_relu", {"m": 9, "n": 5, "k": 7},
                                               SMALL_MACHINE, seed)
    assert np.any(results["c"] == 0) and np.any(results["c"] > 0)    # relu clipped some
    wrong = dict(inputs)
    wrong["bias"] = inputs["bias"] ^ np.uint32(0x00400000)
    assert not kernel.check(program, wrong, results)[0]
    bad = {"c": results["c"].copy()}
    bad["c"].view(np.uint32)[0, 0] ^= 1                     # one ulp: not bit-exact
    assert not kernel.check(program, inputs, bad)[0]


@pytest.mark.verilator
def test_compiled_kernels_on_verilator(sim_dir, seed):
    """linear_relu, a K = 5000 GEMM (chunks), a K = 1 GEMM and a BF16-output GEMM launched
    in sequence on the 2x2 RTL: each launch's words equal the functional model's and the
    bit-exact reference, and pass the float64 check."""
    cases = [("linear_relu", {"m": 9, "n": 5, "k": 40}), ("gemm", {"m": 6, "n": 7, "k": 5000}),
             ("gemm", {"m": 5, "n": 3, "k": 1}), ("gemm_bf16", {"m": 11, "n": 9, "k": 20})]
    programs, all_inputs = zip(*(KERNELS[name].random_program(SMALL_MACHINE, seed + index,
                                                              **params)
                                 for index, (name, params) in enumerate(cases)), strict=True)
    rtl = run_programs(programs, "verilator", seed=seed, work_dir=sim_dir / "compiled")
    model = run_programs(programs, "model")
    for (name, params), program, inputs, run, reference in zip(
            cases, programs, all_inputs, rtl, model, strict=True):
        kernel = KERNELS[name]
        assert np.array_equal(run.outputs["c"], reference.outputs["c"]), \
            f"RTL differs from the model for {name} {params}"
        results = kernel.unpack(program, run.outputs)
        assert np.array_equal(results["c"].view(np.uint32), kernel.exact(program)["c"])
        assert kernel.check(program, inputs, results)[0]
        print(f"{name} {params} on 2x2 lanes 4: {run.cycles} cycles")


# -- row-wise kernels --------------------------------------------------------------------

def centered_graph(m, n):
    """A second row-wise kernel, only front end: rows minus half their mean, clipped."""
    graph = Graph("centered")
    x = graph.input("x", (m, n))
    graph.output("y", relu(x - x.sum() * (0.5 / n)) * 2.0)
    return graph


ROW_KERNELS = {"softmax": KERNELS["softmax"], "rmsnorm": KERNELS["rmsnorm"],
               "centered": Kernel("centered", ("m", "n"), {"x": ("m", "n")},
                                  {"y": ("m", "n")}, "test kernel", centered_graph)}


@pytest.mark.parametrize("name, shape", [("softmax", (6, 32)), ("softmax", (3, 16)),
                                         ("softmax", (2, 1024)), ("centered", (5, 48)),
                                         ("rmsnorm", (4, 64)), ("rmsnorm", (5, 40))])
def test_row_kernels_on_the_model(name, shape, seed):
    kernel = ROW_KERNELS[name]
    program = kernel.compile(Machine(), m=shape[0], n=shape[1])
    inputs = kernel.random_inputs(program, seed)
    kernel.pack(program, inputs)
    results = kernel.unpack(program, run_program(program, "model").outputs)
    assert np.array_equal(results["y"].view(np.uint32), kernel.exact(program)["y"])
    ok, error = kernel.check(program, inputs, results)
    assert ok, f"outside the float64 budget: {error}"
    if name == "softmax":
        assert np.allclose(results["y"].sum(axis=1), 1.0, atol=1e-5)
        # five PCUs (max, exp(x - max), sum, 1/sum, scaling), two row buffers
        assert program.meta["pcus"] == 5
        assert sum(1 for s in program.meta["placement"] if s.startswith("rowbuf")) == 2


def test_row_kernel_structure():
    """The centering kernel: the sum, the scalar scaling clocked by it, the subtraction
    behind a row buffer with relu and the scaling fused as stages of one PCU."""
    state = []
    ROW_KERNELS["centered"].compile(Machine(), state=state, m=5, n=48)
    kernel = state[0].kernel
    programs = {name: node.config for name, node in kernel.nodes.items() if node.unit == "pcu"}
    assert len(programs) == 3
    last = programs["row2"]
    assert [stage[0] for stage in last["stages"]] == ["SUB", "MAX", "MUL"]
    assert last["scalar_in"] and last["emit_every"]
    assert programs["row1"]["trips"][0] == 1 and programs["row1"]["reduce"] == "MAX"


def test_rmsnorm_structure():
    """RMSNorm, one configuration: the squares and their sum on one PCU, the scalar
    chain ``rsqrt(sum * (1 / n) + eps)`` on one per-row PCU (two stages and the RSQRT
    tail), the normalisation and the weight (a vector read again for every row, on
    IN1, loaded once into a PMU that reads it for every row) behind a row buffer; with
    padded rows the sum gets a PCU of its own."""
    for n, pcus in ((64, 3), (40, 4)):
        state = []
        KERNELS["rmsnorm"].compile(Machine(), state=state, m=4, n=n)
        kernel = state[0].kernel
        programs = [node.config for node in kernel.nodes.values() if node.unit == "pcu"]
        assert len(programs) == pcus
        scalar, last = programs[-2:]
        assert [stage[:3] for stage in scalar["stages"]] == [("MUL", "SCALAR", "CONST"),
                                                              ("ADD", "PREV", "CONST")]
        assert scalar["tail"] == "RSQRT" and scalar["trips"][0] == 1
        assert [stage[:3] for stage in last["stages"]] == [("MUL", "PREV", "SCALAR"),
                                                            ("MUL", "PREV", "IN1")]
        loads = [node for node in kernel.nodes.values() if node.unit == "agcu"
                 and node.name.startswith("load_")]
        assert sorted(node.name for node in loads) == ["load_w", "load_x"]
        assert sum(1 for name in kernel.nodes if name.startswith("rowbuf")) == 1
        weight = kernel.nodes["vector0"].config           # loaded once, read every row
        assert weight["read"].counts == (padded_row(n, 8) // 8, 4, 1)
        assert weight["read"].strides[1] == 0 and weight["read_passes"] == 1


def test_row_chain_joins_either_row_operand_while_in1_is_free():
    """``w * h`` joins h's PCU (w on IN1); a PCU whose IN1 is taken does not take a
    third row: SwiGLU's ``silu(g) * u`` gets a PCU of its own (g and 1 / (1 + exp(-g))
    on one, u on the next), which the BF16 cast joins."""
    graph = Graph("gated")
    g, u = graph.input("g", (8, 64)), graph.input("u", (8, 64))
    silu = g * reciprocal(exp(g * -1.0) + 1.0)
    out = (silu * u).astype("bf16")
    graph.output("y", out)
    nodes = [n for n in graph.live_nodes() if n.op not in ("input", "const")]
    pcus = RowChainBuilder(RowGroup(g.node, nodes, "y", out.node), 4).build()
    assert [(p.tail, [stage[:3] for stage in p.stages]) for p in pcus] == [
        ("EXP", [("MUL", "PREV", "CONST")]), ("RECIPROCAL", [("ADD", "PREV", "CONST")]),
        ("NONE", [("MUL", "PREV", "IN1")]),
        ("NONE", [("MUL", "PREV", "IN1"), ("TO_BF16", "PREV", "PREV")])]
    assert pcus[2].in1 is pcus[1].row_value and pcus[3].in1 is u.node
    # the weight first: w * h joins h's PCU
    graph = Graph("scaled")
    x, w = graph.input("x", (4, 32)), graph.input("w", (32,))
    out = w * (x * 2.0)
    graph.output("y", out)
    nodes = [n for n in graph.live_nodes() if n.op not in ("input", "const")]
    pcu, = RowChainBuilder(RowGroup(x.node, nodes, "y", out.node), 4).build()
    assert [stage[:3] for stage in pcu.stages] == [("MUL", "PREV", "CONST"),
                                                   ("MUL", "IN1", "PREV")]


def test_row_kernel_that_does_not_fit_says_what_ran_out():
    with pytest.raises(CompileError, match=r"needs 5 PCUs \(the array has 2, 3 short\)"):
        KERNELS["softmax"].compile(SMALL_MACHINE, m=4, n=16)
    words = Machine().pmu_bytes // 4
    with pytest.raises(CompileError, match=rf"a row of {words + 1} values \(padded to "
                                           rf"{words + 16}\) does not fit a PMU"):
        KERNELS["softmax"].compile(Machine(), m=4, n=words + 1)


#: The 4x4 machine of the RTL tests of fused kernels: the default array with the AGCUs
#: attention needs (one Verilator build, shared with tests/test_attention.py)
FUSED_MACHINE = Machine(**KERNELS["attention"].machine)


@pytest.mark.verilator
def test_row_kernels_on_verilator(sim_dir, seed):
    """Softmax, the centering kernel and RMSNorm, each one configuration, launched in
    sequence on the 4x4 RTL: words equal to the model's and to the exact row
    reference."""
    cases = [("softmax", (6, 32)), ("centered", (3, 32)), ("rmsnorm", (3, 32))]
    programs, all_inputs = zip(*(ROW_KERNELS[name].random_program(FUSED_MACHINE, seed + index,
                                                                  m=m, n=n)
                                 for index, (name, (m, n)) in enumerate(cases)), strict=True)
    rtl = run_programs(programs, "verilator", seed=seed, work_dir=sim_dir / "rows")
    model = run_programs(programs, "model")
    for (name, _), program, inputs, run, reference in zip(cases, programs, all_inputs, rtl,
                                                          model, strict=True):
        kernel = ROW_KERNELS[name]
        assert np.array_equal(run.outputs["y"], reference.outputs["y"]), name
        results = kernel.unpack(program, run.outputs)
        assert np.array_equal(results["y"].view(np.uint32), kernel.exact(program)["y"])
        assert kernel.check(program, inputs, results)[0]


def _transposed_a_run(m, k, n, sim, plan_image=None, bias=False):
    """A matmul whose A the plan gives as ``A^T`` in column tiles (``transposed_a_image``):
    ``(program, C words, the float64 product of the BF16 operands)``."""
    from rdu.compiler.core import ImagePlan
    from rdu.compiler.families.matmul import transposed_a_image
    from rdu.models.pcu_reference import bf16_words
    machine = Machine()
    lanes = machine.lanes
    graph = Graph("ta")
    a, b = graph.input("a", (m, k)), graph.input("b", (k, n))
    graph.output("c", a @ b + graph.input("v", (n,)) if bias else a @ b)
    image = plan_image or transposed_a_image("a", -(-m // lanes) * lanes,
                                             -(-(k + bias) // (2 * lanes)) * 2 * lanes, lanes)
    program = compile_graph(graph, machine, plan=ImagePlan(layouts={"a": image}))
    rng = np.random.default_rng(m * k * n)
    words = {"a": bf16_words(rng.standard_normal((m, k))),
             "b": bf16_words(rng.standard_normal((k, n)))}
    gemm.pack_images(program, words)
    out = gemm.unpack_images(program, run_program(program, sim).outputs)["c"]
    values = {name: w.view(np.float32).astype(np.float64) for name, w in words.items()}
    return program, np.asarray(out, np.uint32), values["a"].reshape(m, k) @ values[
        "b"].reshape(k, n)


@pytest.mark.parametrize("m, k, n", [(16, 80, 64), (24, 40, 20), (64, 128, 48)])
def test_matmul_reads_a_given_transposed(m, k, n):
    """A given as ``A^T`` in column tiles of ``lanes`` rows (what a producer of ``A^T``
    writes): each PMU writes its rows' columns a lane per row (write lane stride = the
    panel's pitch); the result equals the product within the FP32 accumulation of BF16
    products, on the functional model, and the same words on the native RTL for one
    shape."""
    program, words, expected = _transposed_a_run(m, k, n, "model")
    a = program.meta["images"]["a"]
    assert a["split"][1:] == [8, a["shape"][1]] and a["perm"] == [0, 2, 1]
    got = words.view(np.float32).reshape(m, n)
    assert np.abs(got - expected).max() <= 1e-5 * np.abs(expected).max() * k ** 0.5
    if (m, k, n) == (24, 40, 20):
        _, native, _ = _transposed_a_run(m, k, n, "native")
        assert np.array_equal(native, words)


def test_matmul_refuses_a_transposed_with_a_bias():
    """A given transposed and a folded bias (a column of ones A's producer does not
    write): one line."""
    with pytest.raises(CompileError, match=r"A given transposed .* with a folded bias; "
                                           r"supported: K in one PMU panel, no bias"):
        _transposed_a_run(16, 32, 16, "model", bias=True)

"""Kernel by kernel (``rdu.apps.unfused``): attention as one configuration per operator, its
intermediates through HBM, against float64 attention and its stages' own arithmetic;
the image plans that let one program read what another wrote."""

import json
import subprocess
import sys

import numpy as np
import pytest
from rdu.affine import addresses, fit
from rdu.apps.unfused import compile_unfused
from rdu.frontend.attention import attention64
from rdu.frontend.kernels import get_kernel
from rdu.machine import Machine


def test_fit_finds_the_loop_of_an_address_sequence():
    """A chunk-major walk (2 rows x 3 chunks x 2 beats) is found, and the loop it returns
    walks exactly the sequence; a sequence no three-level loop walks is refused."""
    sequence = [c * 128 + r * 64 + b * 32 for r in range(2) for c in range(3) for b in range(2)]
    start, counts, strides = fit(sequence)
    assert np.array_equal(addresses(start, counts, strides), sequence)
    assert counts == (2, 3, 2)
    assert fit([0, 32, 8]) is None
    assert fit(list(range(0, 4 * 32, 32)) * 2 + [5]) is None
    start, counts, strides = fit(np.arange(100) * 32, most=40)
    assert max(counts) <= 40 and np.array_equal(addresses(start, counts, strides),
                                                np.arange(100) * 32)


def _run(params, seed, sim="model", **options):
    from rdu.runtime import run_sequence
    kernel = get_kernel("attention")
    params = {"mode": "decode", "causal": False, **params}
    sequence = compile_unfused("attention", Machine(**kernel.machine), **params)
    program = kernel.compile(Machine(**kernel.machine), **params)
    inputs = kernel.random_inputs(program, seed)
    figures, results, steps = run_sequence(kernel, sequence, inputs, sim, **options)
    return kernel, sequence, inputs, figures, results, steps


#: decode with GQA and MHA, D 32 to 128, P V's keys in chunks (L = 4096), prefill
SHAPES = [dict(seq=64, dim=64, heads=8, kv_heads=1), dict(seq=48, dim=32, heads=4, kv_heads=2),
          dict(seq=256, dim=128, heads=2, kv_heads=2), dict(seq=4096, dim=64, heads=8,
                                                            kv_heads=1),
          dict(seq=64, dim=64, heads=1, kv_heads=1, mode="prefill")]


@pytest.mark.parametrize("params", SHAPES, ids=lambda p: "-".join(map(str, p.values())))
def test_unfused_attention_on_the_model(params, seed):
    """Every stage's output is bit-exact against its arithmetic fed the previous stage's
    words, O is within budget of float64 attention (2^-8 max|V| per head: P is rounded
    to BF16 as in the fused chain), and S and P never pass through the host: each is
    read where its producer wrote it, and no input image of a consumer is packed."""
    kernel, sequence, inputs, figures, results, steps = _run(params, seed)
    assert figures["launches"] == 3 * params["kv_heads"] == len(steps)
    exact, _ = sequence.exact(inputs)
    assert np.array_equal(results["o"].view(np.uint32), exact["o"])
    q, k, v = (np.asarray(inputs[n], np.uint32).view(np.float32).astype(np.float64)
               for n in "qkv")
    reference, budget = attention64(q, k, v, 1 / np.sqrt(params["dim"]))
    error = np.abs(results["o"] - reference)
    assert np.all(error <= budget), f"max abs error {error.max():.3g}"
    for stage in sequence.stages:
        for name, (index, output) in stage.produced.items():
            producer = sequence.stages[index].program
            assert stage.program.inputs[name][1] is None
            assert stage.program.meta["images"][name]["address"] == \
                producer.meta["images"][output]["address"]
    assert figures["ok"]


def test_unfused_refuses_what_it_cannot_lay_out():
    """A SEQ the softmax cannot write whole beats of, and causal masks (the row kernels
    take one input): one line each."""
    from rdu.compiler.core import CompileError
    machine = Machine(**get_kernel("attention").machine)
    with pytest.raises(CompileError, match="SEQ 40 is not a multiple of 16"):
        compile_unfused("attention", machine, seq=40, dim=64, heads=2, kv_heads=1)
    with pytest.raises(CompileError, match="--causal is not built"):
        compile_unfused("attention", machine, seq=64, dim=64, heads=1, kv_heads=1,
                        mode="prefill", causal=True)


@pytest.mark.parametrize("name,params,launches", [
    ("gemm", dict(m=16, n=24, k=40), 1), ("softmax", dict(m=5, n=64), 1),
    ("linear_relu", dict(m=20, n=32, k=48), 2), ("gemm_bf16", dict(m=16, n=32, k=40), 2),
    ("mlp", dict(m=5, d=40, f=96), 3)])
def test_unfused_kernels_on_the_model(name, params, launches, seed):
    """Any registered kernel runs unfused: its matmul (bias folded) writes FP32 rows, the
    operators after it are a row kernel reading them; a matmul or a row kernel alone is
    one launch. Bit-exact against the stages' arithmetic, within the kernel's float64
    budget."""
    from rdu.runtime import run_sequence
    kernel = get_kernel(name)
    machine = Machine(**kernel.machine)
    sequence = compile_unfused(name, machine, **params)
    inputs = kernel.random_inputs(kernel.compile(machine, **params), seed)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["launches"] == launches
    (out, words), = sequence.exact(inputs)[0].items()
    assert np.array_equal(results[out].view(np.uint32), words)
    assert figures["ok"], figures["max_abs_err"]


@pytest.mark.parametrize("m,d,f,agcus,splits,blocks", [
    (8, 64, 256, 5, [2, 2], 1), (5, 40, 96, 4, [2, 1], 1), (1, 16, 32, 3, [1, 1], 1),
    (20, 24, 56, 5, [1, 1], 2)])
def test_fused_mlp_on_the_model(m, d, f, agcus, splits, blocks, seed):
    """``Y = SiLU(X W1) W2`` as one configuration (the hidden rows wait in a PMU as the
    second matmul's A panel): bit-exact against the two matmuls' and the activation's
    arithmetic, within the float64 budget; only Y is written. One row block: each
    matmul's column tiles spread over as many systolic PCUs as there are AGCUs to stream
    its weights (one AGCU for X, the rest split between W1 and W2, at most two each: the
    HBM peak); more rows: passes of two row blocks (one PCU per block and matmul)."""
    from rdu.runtime import run_kernel
    kernel = get_kernel("mlp")
    program = kernel.compile(Machine(**{**kernel.machine, "agcus": agcus}), m=m, d=d, f=f)
    meta = program.meta
    assert meta["group"] == "mlp" and meta["splits"] == splits and meta["blocks"] == blocks
    assert meta["pcus"] == 3 + (sum(splits) if blocks == 1 else 2 * blocks)  # SiLU: 3
    assert meta["passes"] == -(-m // (8 * blocks))
    inputs = kernel.random_inputs(program, seed)
    figures, results, run = run_kernel(kernel, program, inputs, "model")
    assert np.array_equal(results["y"].view(np.uint32), kernel.exact(program)["y"])
    assert figures["ok"], figures["max_abs_err"]
    assert run.memory_bytes["hbm"]["write_bytes"] == 4 * program.outputs["y"][1]


@pytest.mark.parametrize("m,d,f,agcus,splits,blocks,k_pad", [
    (8, 256, 1024, 5, [2, 2], 1, [256, 1024]), (8, 64, 256, 5, [2, 1], 1, [64, 256]),
    (5, 40, 96, 4, [2, 1], 1, [48, 128]), (20, 24, 56, 5, [1, 1], 2, [32, 64])])
def test_fused_mlp_on_the_model_fp_latency(m, d, f, agcus, splits, blocks, k_pad, seed):
    """On a machine with ``fp_latency="default"`` the systolic PCUs take tiles of
    ``systolic_group`` (8) column tiles: the first matmul computes the hidden size in
    whole groups (the second's K padded to them), each matmul's groups are split over
    its PCUs (the split's results merged a group at a time) and B streams by groups.
    The same words as the bit-exact reference, within budget; a power-of-two hidden
    size (1024) pads nothing and reads the weights once, as with ``fp_latency`` off."""
    from rdu.runtime import run_kernel

    from hdl.fp_latency import systolic_group
    kernel = get_kernel("mlp")
    machine = Machine(**{**kernel.machine, "agcus": agcus})
    pipelined = machine.replace(fp_latency="default")
    program = kernel.compile(pipelined, m=m, d=d, f=f)
    meta = program.meta
    group = systolic_group(pipelined.latency_table)
    assert (meta["splits"], meta["blocks"], meta["k_pad"]) == (splits, blocks, k_pad)
    assert meta["tile_group"] == group > 1
    assert meta["k_pad"][1] % (group * pipelined.lanes) == 0     # whole groups of F
    inputs = kernel.random_inputs(program, seed)
    figures, results, run = run_kernel(kernel, program, inputs, "model")
    assert np.array_equal(results["y"].view(np.uint32), kernel.exact(program)["y"])
    assert figures["ok"], figures["max_abs_err"]
    if f == 1024:
        plain = kernel.compile(machine, m=m, d=d, f=f)
        assert figures["hbm_bytes"] == run_kernel(kernel, plain, inputs, "model")[0][
            "hbm_bytes"]


def test_fused_mlp_on_a_larger_array(seed):
    """On the 8x8 array a pass holds more row blocks (40 rows: 5 blocks, one pass, the
    results of five PCUs merged): bit-exact on the model, within budget."""
    from rdu.runtime import run_kernel
    kernel = get_kernel("mlp")
    program = kernel.compile(Machine(agcus=5, rows=8, cols=8), m=40, d=64, f=48)
    assert program.meta["blocks"] == 5 and program.meta["passes"] == 1
    inputs = kernel.random_inputs(program, seed)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    assert np.array_equal(results["y"].view(np.uint32), kernel.exact(program)["y"])
    assert figures["ok"], figures["max_abs_err"]


def test_fused_mlp_refusals():
    """What the fused MLP cannot hold is one line each: more row blocks of hidden tiles
    than a PMU's pass counter counts, too few AGCUs, operators after the second matmul,
    a second matmul on unrounded FP32 rows (a hidden size that does not fill whole beats
    is padded: tests/test_padding.py)."""
    from rdu.compiler import compile_graph
    from rdu.compiler.core import CompileError
    from rdu.frontend.graph import Graph, exp, relu
    kernel = get_kernel("mlp")
    machine = Machine(**kernel.machine)
    for params, agcus, message in ((dict(m=4112, d=16, f=2048), 5, "16-bit pass counter"),
                                   (dict(m=8, d=64, f=256), 2, "it needs 3 AGCUs")):
        with pytest.raises(CompileError, match=message):
            kernel.compile(machine.replace(agcus=agcus), **params)
    graph = Graph("two")
    x, w1, w2 = (graph.input(n, s) for n, s in (("x", (8, 16)), ("w1", (16, 32)),
                                                 ("w2", (32, 16))))
    graph.output("y", relu(relu(x @ w1).astype("bf16") @ w2))
    with pytest.raises(CompileError, match="must end in the second"):
        compile_graph(graph, machine)
    graph = Graph("unrounded")
    x, w1, w2 = (graph.input(n, s) for n, s in (("x", (8, 16)), ("w1", (16, 32)),
                                                 ("w2", (32, 16))))
    graph.output("y", exp(x @ w1) @ w2)
    with pytest.raises(CompileError, match="round the first matmul's activated rows"):
        compile_graph(graph, machine)


def test_plan_layout_is_honoured_or_refused():
    """A matmul asked to read A in another tiling than its own is refused in one line;
    asked to write its result row-major, it stores rows n_pad * 4 bytes apart."""
    from rdu.compiler import compile_graph
    from rdu.compiler.core import CompileError, ImagePlan
    from rdu.frontend.graph import Graph
    from rdu.layout import Image
    graph = Graph("g")
    graph.output("c", graph.input("a", (8, 32)) @ graph.input("b", (32, 24)))
    tiled = Image((8, 32), (), (8, 2, 16), (1, 0, 2), "bf16")
    with pytest.raises(CompileError, match="'a' is bf16 \\[8, 32\\] here, its other kernel "
                                           "has it as bf16 \\[8, 32\\] as \\[8, 2, 16\\]"):
        compile_graph(graph, plan=ImagePlan(layouts={"a": tiled}))
    program = compile_graph(graph, plan=ImagePlan(
        start=0x10000, layouts={"c": Image((8, 24), (), None, None, "fp32")}))
    images = program.meta["images"]
    assert images["c"]["address"] >= 0x10000
    assert Image.from_json(images["c"]).split is None


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "rdu.cli", "run", "attention", *args],
                          capture_output=True, text=True)


def test_cli_execution_choices():
    """``rdu run attention --execution unfused|unfused-host`` report the launches and
    are right; what cannot run is one line and exit 2."""
    for execution in ("unfused", "unfused-host"):
        done = _cli("--seq", "32", "--dim", "16", "--heads", "2", "--execution", execution,
                    "--json")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["ok"] and report["launches"] == 6 and report["execution"] == execution
    for args, message in ((("--seq", "20", "--dim", "16", "--heads", "2", "--execution",
                            "unfused"),
                           "SEQ 20 is not a multiple of 16"),
                          (("--seq", "32", "--dim", "16", "--execution", "unfused", "--sim",
                            "ip"), "runs on --sim model, verilator or native")):
        bad = _cli(*args)
        assert bad.returncode == 2 and "Traceback" not in bad.stderr, bad.stderr
        assert message in bad.stderr


@pytest.mark.verilator
def test_unfused_on_verilator(sim_dir, seed):
    """Attention decode (2 key/value heads: 6 launches), linear_relu (2 launches) and the
    MLP (3 launches), unfused on the 4x4 RTL with four AGCUs, launched by the
    orchestrator and by the host: both give the functional model's words, bit-exact
    against the stages' arithmetic and within budget of float64; the host's launches
    take more cycles than the orchestrator's. The attention runs under cocotb, then
    orchestrated on the native runner: the same words in the same cycles; linear_relu
    and the MLP run on the native runner only (a third of the time)."""
    from rdu.runtime import run_sequence
    machine = Machine(**get_kernel("attention").machine)  # test_attention's 4x4 build
    for name, params in (("attention", dict(seq=32, dim=16, heads=4, kv_heads=2,
                                            mode="decode", causal=False)),
                         ("linear_relu", dict(m=12, n=16, k=24)),
                         ("mlp", dict(m=5, d=16, f=32))):
        kernel = get_kernel(name)
        inputs = kernel.random_inputs(kernel.compile(machine, **params), seed)
        runs = {}
        for execution in ("model", "orchestrated", "host"):
            sequence = compile_unfused(name, machine, **params)
            sim = ("model" if execution == "model" else
                   "verilator" if name == "attention" else "native")
            options = {} if sim == "model" else {"execution": execution,
                                                 "work_dir": sim_dir / f"{name}-{execution}"}
            runs[execution] = run_sequence(kernel, sequence, inputs, sim, seed=seed,
                                           **options)
        for execution in ("orchestrated", "host"):
            figures, results, _ = runs[execution]
            assert figures["ok"], (name, execution, figures["max_abs_err"])
            for out, values in results.items():
                assert np.array_equal(values.view(np.uint32),
                                      runs["model"][1][out].view(np.uint32)), (name, execution)
        orchestrated, host = runs["orchestrated"][0], runs["host"][0]
        assert host["cycles"] > orchestrated["cycles"]
        if name == "attention":
            figures, results, _ = run_sequence(
                kernel, compile_unfused(name, machine, **params), inputs, "native",
                seed=seed, execution="orchestrated", work_dir=sim_dir / f"{name}-native")
            assert figures["cycles"] == orchestrated["cycles"]
            for out, values in results.items():
                assert np.array_equal(values.view(np.uint32),
                                      runs["orchestrated"][1][out].view(np.uint32))


@pytest.mark.verilator
def test_fused_mlp_on_verilator(sim_dir, seed):
    """The fused MLP on the 4x4 RTL with four AGCUs (the attention tests' build), both
    mappings: 6 rows (one row block, W1's column tiles over two PCUs merged, W2's on
    one) and 12 rows (a pass of two row blocks, one PCU each per matmul): the
    functional model's words, bit-exact against the arithmetic, within budget of
    float64; only Y is written."""
    from rdu.runtime import run_kernel
    kernel = get_kernel("mlp")
    machine = Machine(**get_kernel("attention").machine)
    for m, splits, blocks in ((6, [2, 1], 1), (12, [1, 1], 2)):
        program = kernel.compile(machine, m=m, d=32, f=64)
        assert program.meta["splits"] == splits and program.meta["blocks"] == blocks
        inputs = kernel.random_inputs(program, seed)
        figures, results, run = run_kernel(kernel, program, inputs, "verilator", seed=seed,
                                           work_dir=sim_dir / f"mlp{m}")
        model = run_kernel(kernel, program, inputs, "model")[1]
        assert np.array_equal(results["y"].view(np.uint32), model["y"].view(np.uint32))
        assert figures["ok"], figures["max_abs_err"]
        assert run.memory_bytes["hbm"]["write_bytes"] == 4 * program.outputs["y"][1]

"""ONNX models of several configurations (docs/onnx.md, "Several configurations"): a
graph cut into groups of the existing families (rdu.apps.onnx_groups), intermediates
through HBM, run one configuration after another by the runtime's one sequence path;
residual adds and products of two computed tensors in the rows family; Llama's SwiGLU
MLP as exporters write it. Each model runs on the functional model (one on the native
RTL), bit-exact against the families' references stage by stage, within the float64
budget and against onnxruntime; what is not supported is refused in one line."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import helper, numpy_helper  # noqa: E402
from rdu.apps.onnx_groups import compile_groups, partition  # noqa: E402
from rdu.cli import main  # noqa: E402
from rdu.machine import Machine  # noqa: E402
from rdu.onnx import onnx_kernel  # noqa: E402
from rdu.onnx.kernel import prepared_graph  # noqa: E402
from rdu.runtime import run_kernel, run_sequence  # noqa: E402
from test_onnx import info, initializer, make_model  # noqa: E402  (shared builders)


def swiglu_model(m=8, d=32, f=64):
    """Llama's ``LlamaMLP``, ``down(silu(gate(x)) * up(x))``, as the exporters write it
    (``nn.Linear`` without bias: MatMul by the transposed weight; SiLU as Sigmoid, Mul)."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "gate_w"], ["g"], name="/mlp/gate_proj/MatMul"),
        helper.make_node("Sigmoid", ["g"], ["s"], name="/mlp/act_fn/Sigmoid"),
        helper.make_node("Mul", ["g", "s"], ["a"], name="/mlp/act_fn/Mul"),
        helper.make_node("MatMul", ["x", "up_w"], ["u"], name="/mlp/up_proj/MatMul"),
        helper.make_node("Mul", ["a", "u"], ["h"], name="/mlp/Mul"),
        helper.make_node("MatMul", ["h", "down_w"], ["y"], name="/mlp/down_proj/MatMul")]
    return make_model(nodes, [info("x", [1, m, d])], [info("y", [1, m, d])],
                      [initializer(rng, "gate_w", (d, f), d ** -0.5),
                       initializer(rng, "up_w", (d, f), d ** -0.5),
                       initializer(rng, "down_w", (f, d), f ** -0.5)], name="swiglu")


def residual_model(m=8, d=32):
    """A pre-norm residual block: ``x + o_proj(RMSNorm(x))`` (opset 23's
    ``RMSNormalization``, a projection, the residual Add of two tensors)."""
    rng = np.random.default_rng(1)
    scale = numpy_helper.from_array((1 + 0.25 * rng.standard_normal(d)).astype(np.float32),
                                    "norm.weight")
    nodes = [helper.make_node("RMSNormalization", ["x", "norm.weight"], ["n"],
                              name="/norm/RMSNorm", axis=-1, epsilon=1e-6),
             helper.make_node("MatMul", ["n", "o_w"], ["p"], name="/attn/o_proj/MatMul"),
             helper.make_node("Add", ["x", "p"], ["y"], name="/residual/Add")]
    return make_model(nodes, [info("x", [1, m, d])], [info("y", [1, m, d])],
                      [scale, initializer(rng, "o_w", (d, d), d ** -0.5)], opset=23,
                      name="residual")


def mlp_block_model(m=8, d=32, f=64):
    """The second half of a Llama decoder layer: ``x + LlamaMLP(RMSNorm(x))``; the
    normalised rows feed both gate and up (one BF16 image read by both)."""
    rng = np.random.default_rng(3)
    scale = numpy_helper.from_array((1 + 0.25 * rng.standard_normal(d)).astype(np.float32),
                                    "norm.weight")
    mlp = swiglu_model(m, d, f).graph
    nodes = [helper.make_node("RMSNormalization", ["x", "norm.weight"], ["n"],
                              name="/post_attention_layernorm", axis=-1, epsilon=1e-6)]
    for node in mlp.node:
        node = helper.make_node(node.op_type, ["n" if i == "x" else i for i in node.input],
                                ["o" if o == "y" else o for o in node.output],
                                name=node.name)
        nodes.append(node)
    nodes.append(helper.make_node("Add", ["x", "o"], ["y"], name="/residual/Add"))
    return make_model(nodes, [info("x", [1, m, d])], [info("y", [1, m, d])],
                      [scale, *mlp.initializer], opset=23, name="mlp_block")


def two_outputs_model(m=8, d=32, n=16):
    """Two outputs: the softmax rows and their projection."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Softmax", ["x"], ["p"], name="sm", axis=-1),
             helper.make_node("MatMul", ["p", "w"], ["y"], name="proj")]
    return make_model(nodes, [info("x", [1, m, d])], [info("p", [1, m, d]),
                                                      info("y", [1, m, n])],
                      [initializer(rng, "w", (d, n), d ** -0.5)], name="two")


def two_linear_model(m=8, d=32, f=64, n=16):
    """Two ``nn.Linear`` with biases and a ReLU between (Gemm, transB): the first bias
    folds into its product; the second product's A is computed, so its bias is a row
    group's add (folding it would widen K by the ones column the row group would have
    to write)."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Gemm", ["x", "fc1.weight", "fc1.bias"], ["h"], name="fc1",
                              transB=1),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("Gemm", ["r", "fc2.weight", "fc2.bias"], ["y"], name="fc2",
                              transB=1)]
    return make_model(nodes, [info("x", [m, d])], [info("y", [m, n])],
                      [initializer(rng, "fc1.weight", (f, d), d ** -0.5),
                       initializer(rng, "fc1.bias", (f,)),
                       initializer(rng, "fc2.weight", (n, f), f ** -0.5),
                       initializer(rng, "fc2.bias", (n,))], name="two_linear")


def add_mul_model(m=4, d=48):
    """The residual Add and the Mul of two data inputs: one rows configuration."""
    nodes = [helper.make_node("Add", ["x", "y"], ["s"], name="residual"),
             helper.make_node("Mul", ["s", "y"], ["z"], name="gate")]
    return make_model(nodes, [info("x", [1, m, d]), info("y", [1, m, d])],
                      [info("z", [1, m, d])], name="add_mul")


def run_groups(model, seed=3):
    """Import, cut, compile, run on the functional model: (sequence, figures, agrees,
    error against onnxruntime)."""
    kernel, sequence = compile_groups(onnx_kernel(model), Machine())
    inputs = kernel.random_inputs(None, seed)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model",
                                       execution="orchestrated")
    agrees, others = kernel.references(None, inputs, results)
    return sequence, figures, agrees, others["max_abs_err_onnxruntime"]


@pytest.mark.parametrize("build, families", [
    (swiglu_model, ["matmul", "matmul", "rows", "matmul"]),
    (residual_model, ["rows", "matmul", "rows"]),
    (two_outputs_model, ["rows", "rows", "matmul"]),
    (mlp_block_model, ["rows", "matmul", "matmul", "rows", "matmul", "rows"]),
    (two_linear_model, ["matmul", "rows", "matmul", "rows"]),
], ids=["swiglu", "residual", "two_outputs", "mlp_block", "two_linear"])
def test_groups_run_and_agree_with_onnxruntime(build, families):
    """Each model is cut into its groups, runs bit-exact stage by stage and within the
    float64 budget, and agrees with onnxruntime within twice that budget."""
    sequence, figures, agrees, error = run_groups(build())
    assert [stage.program.meta["group"] for stage in sequence.stages] == families
    assert figures["ok"], figures["max_abs_err"]
    assert figures["launches"] == len(families)
    assert agrees, error


def test_swiglu_cut_and_casts():
    """SwiGLU: gate and up read the data input; silu(g) * u is one rows group reading
    both products as row operands and writing BF16 (the inserted cast) in down's A
    tiling; down reads it where it was written."""
    model = swiglu_model(m=8, d=32, f=64)
    graph = prepared_graph(onnx_kernel(model).imported.graph)
    down = next(node for node in graph.live_nodes() if node.op == "matmul" and
                node.where.endswith("down_proj/MatMul (MatMul)"))
    assert down.inputs[0].op == "unary" and down.inputs[0].dtype == "bf16"
    groups = partition(graph)
    assert [len(group.sources) for group in groups] == [0, 0, 2, 1]
    _, sequence = compile_groups(onnx_kernel(model), Machine())
    rows, last = sequence.stages[2], sequence.stages[3]
    assert sorted(rows.produced.values()) == [(0, "t0"), (1, "t1")]
    assert last.produced == {"t2": (2, "t2")}
    written = rows.program.meta["images"]["t2"]
    assert last.program.meta["images"]["t2"] == written


def test_add_and_mul_of_two_inputs_is_one_configuration():
    """Add and Mul of two activations of one shape: the rows family's second row
    operand, one configuration (bit-exact, within budget, onnxruntime's)."""
    kernel = onnx_kernel(add_mul_model())
    program = kernel.compile(Machine(**kernel.machine))
    assert program.meta["group"] == "rows"
    assert sorted(name for name, spec in program.tensors.items()
                  if spec["role"] == "input") == ["x", "y"]
    inputs = kernel.random_inputs(program, 4)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    agrees, _ = kernel.references(program, inputs, results)
    assert figures["ok"] and agrees


def test_cli_swiglu_native_compile_and_inspect(tmp_path, capsys):
    """``rdu run MODEL.onnx --sim native``: every configuration on the RTL (with 4 AGCUs:
    the attention tests' build), both errors reported; ``rdu compile`` writes one program file per
    configuration, ``rdu inspect`` says what each is; a configuration's file alone is
    refused."""
    path = tmp_path / "swiglu.onnx"
    onnx.save(swiglu_model(m=8, d=32, f=64), str(path))
    assert main(["run", str(path), "--sim", "native", "--json", "--execution",
                 "unfused", "--agcus", "4"]) == 0       # the attention tests' build
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 4 and report["cycles"] > 0
    assert all(stage["execute_cycles"] > 0 for stage in report["stages"])
    assert 0 < report["max_abs_err_onnxruntime"] < 0.05
    out = tmp_path / "swiglu.rdu"
    assert main(["compile", str(path), "-o", str(out), "--json", "--execution",
                 "unfused"]) == 0
    compiled = json.loads(capsys.readouterr().out)
    assert compiled["configurations"] == 4
    assert "rows 8 rows of 64" in compiled["configuration 3"]
    assert main(["inspect", str(path)]) == 0      # fused: one gated mlp configuration
    text = capsys.readouterr().out
    assert "configurations   1" in text and "mlp, 7 PCUs" in text
    assert main(["inspect", str(tmp_path / "swiglu.3.rdu")]) == 0
    assert "configuration 3 of 4 of the model: rows family" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "swiglu.3.rdu")]) == 2
    assert "is configuration 3 of 4 of" in capsys.readouterr().err


def test_cli_two_outputs_checks_every_output(tmp_path, capsys):
    """Two outputs, both checked against numpy and onnxruntime (a wrong one fails)."""
    path = tmp_path / "two.onnx"
    onnx.save(two_outputs_model(), str(path))
    assert main(["run", str(path), "--json", "--execution", "unfused-host"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 3
    kernel, sequence = compile_groups(onnx_kernel(two_outputs_model()), Machine())
    inputs = kernel.random_inputs(None, 6)
    _, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert sorted(results) == ["p", "y"] and kernel.references(None, inputs, results)[0]
    for name in results:
        wrong = {**results, name: results[name] + 0.05 * np.abs(results[name]).max()}
        assert not kernel.references(None, inputs, wrong)[0], name


def test_padded_k_after_a_row_group_is_one_line(tmp_path, capsys):
    """A computed matmul operand whose K the matmul pads: exit 2, one line naming the
    node, its op type and what is unsupported."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="act"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="proj")]
    path = tmp_path / "pad.onnx"
    onnx.save(make_model(nodes, [info("x", [1, 8, 24])], [info("y", [1, 8, 16])],
                         [initializer(rng, "w", (24, 16))]), str(path))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rdu run: error: pad.onnx: node proj (MatMul): the matmul pads "
                          "its K 24 to 32"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_row_operand_of_another_shape_is_one_line(tmp_path, capsys):
    """``Add`` of a matrix and a per-row column input: no family maps it, in one
    configuration or in a cut; one line naming the node and its op type, exit 2."""
    nodes = [helper.make_node("Add", ["x", "z"], ["y"], name="add")]
    path = tmp_path / "add2.onnx"
    onnx.save(make_model(nodes, [info("x", [4, 8]), info("z", [4, 1])],
                         [info("y", [4, 8])]), str(path))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rdu run: error: add2.onnx: node add (Add): output 'y': input "
                          "'z' of shape (4, 1): a row-wise kernel's other inputs are "
                          "matrices of 'x''s shape (4, 8) or vectors"), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_computed_second_operand_is_one_line():
    """A matrix product whose B is computed (``x @ relu(y)``): refused in one line
    naming the node and its op type."""
    nodes = [helper.make_node("Relu", ["y"], ["r"], name="act"),
             helper.make_node("MatMul", ["x", "r"], ["z"], name="mm")]
    model = make_model(nodes, [info("x", [8, 32]), info("y", [32, 16])], [info("z", [8, 16])])
    with pytest.raises(ValueError) as caught:
        compile_groups(onnx_kernel(model), Machine())
    text = str(caught.value)
    assert text.startswith("model.onnx: node mm (MatMul): its second operand is computed")
    assert "\n" not in text


def test_residual_on_the_native_rtl_launched_by_the_host():
    """The pre-norm residual block on the native RTL, each configuration launched by the
    host (the runtime's one sequence path): every launch timed, bit-exact stage by
    stage, within budget and onnxruntime's."""
    kernel, sequence = compile_groups(onnx_kernel(residual_model()), Machine())
    inputs = kernel.random_inputs(None, 8)
    figures, results, steps = run_sequence(kernel, sequence, inputs, "native",
                                           execution="host")
    assert figures["ok"], figures["max_abs_err"]
    assert [stage["execute_cycles"] > 0 for stage in figures["stages"]] == [True] * 3
    assert figures["host_launch_cycles"] > 0
    assert kernel.references(None, inputs, results)[0]


def test_swiglu_fused_as_one_gated_mlp_on_the_native_rtl(tmp_path, capsys):
    """SwiGLU as the exporters write it, fused: one configuration of the mlp family's
    gated form (gate and up on systolic PCUs of their own reading one X panel, the
    chain reading both hidden streams, down), on the native RTL: bit-exact against
    the gated reference, within budget, onnxruntime's; the same result as the four
    configurations, in fewer cycles (4 AGCUs: the attention tests' build; the mlp
    kernel's machine has 5, one more weight stream)."""
    path = tmp_path / "swiglu.onnx"
    onnx.save(swiglu_model(m=8, d=32, f=64), str(path))
    runs = {}
    for execution in ("fused", "unfused"):
        assert main(["run", str(path), "--sim", "native", "--json", "--execution",
                     execution, "--agcus", "4", "--save", str(tmp_path / execution)]) == 0
        runs[execution] = json.loads(capsys.readouterr().out)
    fused, cut = runs["fused"], runs["unfused"]
    assert fused["ok"] and fused["pcus_used"] == 7 and "launches" not in fused
    assert fused["macs"] == 3 * 8 * 32 * 64
    assert fused["cycles"] < cut["cycles"]
    y = [np.load(tmp_path / execution / "y.npy") for execution in runs]
    assert np.array_equal(*y)


def test_mlp_block_cut_around_one_gated_mlp(tmp_path, capsys):
    """``x + LlamaMLP(RMSNorm(x))`` on the mlp kernel's machine: RMSNorm, the SwiGLU as
    one gated mlp configuration (reading the normalised rows where the RMSNorm wrote
    them), the residual add (reading the mlp's result where it wrote it); on the
    functional model, then on the native RTL through ``rdu run`` (4 AGCUs: the
    attention tests' build)."""
    model = mlp_block_model()
    machine = Machine(agcus=5)
    kernel, sequence = compile_groups(onnx_kernel(model), machine)
    assert [stage.program.meta["group"] for stage in sequence.stages] == ["rows", "mlp",
                                                                         "rows"]
    assert len(sequence.stages[1].program.meta["operands"]) == 4      # gated
    _, cut = compile_groups(onnx_kernel(model), machine, fuse_mlp=False)
    assert len(cut.stages) == 6
    inputs = kernel.random_inputs(None, 9)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"] and kernel.references(None, inputs, results)[0]
    path = tmp_path / "mlp_block.onnx"
    onnx.save(model, str(path))
    assert main(["run", str(path), "--sim", "native", "--json", "--agcus", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 3 and "4 AGCUs" in report["machine"]

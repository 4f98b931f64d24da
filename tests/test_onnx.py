"""The ONNX front end (rdu.onnx, docs/onnx.md): models built here with onnx.helper,
imported into the front end, compiled, run on the functional model (one on the native
RTL) and checked bit-exact against their family's reference, within the float64 budget
and against onnxruntime on the same BF16 inputs and weights; what is not supported is
refused in one line (exit 2 through the command line)."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from rdu.cli import main  # noqa: E402
from rdu.machine import Machine  # noqa: E402
from rdu.onnx import OnnxImportError, import_model, onnx_kernel  # noqa: E402
from rdu.onnx.kernel import compare, onnxruntime_outputs  # noqa: E402
from rdu.runtime import run_kernel  # noqa: E402


def make_model(nodes, inputs, outputs, initializers=(), opset=18, name="model"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def info(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def initializer(rng, name, shape, scale=1.0):
    return numpy_helper.from_array(
        (rng.standard_normal(shape) * scale).astype(np.float32), name)


def linear_relu_model(m=8, k=32, n=16):
    """``relu(x W^T + b)``: a PyTorch Linear (Gemm, transB) and ReLU."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["h"], name="fc",
                              transB=1),
             helper.make_node("Relu", ["h"], ["y"], name="relu")]
    return make_model(nodes, [info("x", [m, k])], [info("y", [m, n])],
                      [initializer(rng, "fc.weight", (n, k)),
                       initializer(rng, "fc.bias", (n,))], name="linear")


def softmax_model(m=4, n=32):
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=-1)]
    return make_model(nodes, [info("x", [1, m, n])], [info("y", [1, m, n])], opset=17)


def decomposed_softmax_model(opset, m=4, n=48):
    """``exp(x - max) / sum``: ReduceSum's axes an input; ReduceMax's an input from
    opset 18, an attribute before."""
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    max_axes = {"inputs": ["x", "axes"]} if opset >= 18 else {"inputs": ["x"],
                                                               "axes": [-1]}
    nodes = [helper.make_node("ReduceMax", max_axes.pop("inputs"), ["mx"], name="max",
                              keepdims=1, **max_axes),
             helper.make_node("Sub", ["x", "mx"], ["d"], name="sub"),
             helper.make_node("Exp", ["d"], ["e"], name="exp"),
             helper.make_node("ReduceSum", ["e", "axes"], ["s"], name="sum", keepdims=1),
             helper.make_node("Div", ["e", "s"], ["y"], name="div")]
    return make_model(nodes, [info("x", [m, n])], [info("y", [m, n])], [axes], opset=opset)


def inverse_square_model(m=4, n=64):
    """``x * 1 / (mean(x * x) + eps)``: a row chain of one input (no Sqrt yet)."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean"),
             helper.make_node("Constant", [], ["eps"], name="eps", value_float=1e-5),
             helper.make_node("Add", ["ms", "eps"], ["v"], name="add_eps"),
             helper.make_node("Reciprocal", ["v"], ["r"], name="inverse"),
             helper.make_node("Mul", ["x", "r"], ["y"], name="scale")]
    axes = numpy_helper.from_array(np.array([2], np.int64), "axes")
    return make_model(nodes, [info("x", [1, m, n])], [info("y", [1, m, n])], [axes])


def mlp_model(m=8, d=32, f=64):
    """``SiLU(x W1) W2`` with the hidden rows rounded to BF16 (Cast to bfloat16 and
    back: onnxruntime multiplies float matrices)."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
             helper.make_node("Sigmoid", ["h"], ["g"], name="sigmoid"),
             helper.make_node("Mul", ["h", "g"], ["a"], name="silu"),
             helper.make_node("Cast", ["a"], ["a16"], name="to_bf16",
                              to=TensorProto.BFLOAT16),
             helper.make_node("Cast", ["a16"], ["a32"], name="to_float",
                              to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["a32", "w2"], ["y"], name="down")]
    return make_model(nodes, [info("x", [1, m, d])], [info("y", [1, m, d])],
                      [initializer(rng, "w1", (d, f), 0.2),
                       initializer(rng, "w2", (f, d), 0.2)])


def half_weights_model(m=8, k=32, n=16):
    """``x W + b`` with W a float16 and b a bfloat16 initializer, each cast to float
    (a widening: the machine holds them as BF16 and onnxruntime gets them so)."""
    import ml_dtypes
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((k, n)).astype(np.float16), "w")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(ml_dtypes.bfloat16), "b")
    nodes = [helper.make_node("Cast", ["w"], ["w32"], name="w_float", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["b"], ["b32"], name="b_float", to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["x", "w32"], ["h"], name="matmul"),
             helper.make_node("Add", ["h", "b32"], ["y"], name="bias")]
    return make_model(nodes, [info("x", [1, m, k])], [info("y", [1, m, n])], [w, b])


def gemm_beta_model(m=8, k=32, n=16):
    """``-(x W^T + C / 2)``: a power-of-two ``beta`` folds into C's values, ``Neg`` is
    an epilogue stage."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Gemm", ["x", "W", "C"], ["h"], name="gemm", transB=1,
                              beta=0.5),
             helper.make_node("Neg", ["h"], ["y"], name="neg")]
    return make_model(nodes, [info("x", [m, k])], [info("y", [m, n])],
                      [initializer(rng, "W", (n, k)), initializer(rng, "C", (1, n))])


def constant_first_model(m=4, n=16):
    """``1 - exp(-x)`` after an identity Transpose: a constant as the first operand."""
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    nodes = [helper.make_node("Transpose", ["x"], ["xt"], name="same", perm=[0, 1]),
             helper.make_node("Neg", ["xt"], ["n"], name="neg"),
             helper.make_node("Exp", ["n"], ["e"], name="exp"),
             helper.make_node("Sub", ["one", "e"], ["y"], name="one_minus")]
    return make_model(nodes, [info("x", [m, n])], [info("y", [m, n])], [one])


def folded_shape_model(m=4, n=16):
    """Softmax of ``x`` reshaped by a shape computed from ``Shape`` (folded at import)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"], name="shape"),
             helper.make_node("Gather", ["shape", "rows_cols"], ["dims"], name="dims"),
             helper.make_node("Reshape", ["x", "dims"], ["x2"], name="flatten"),
             helper.make_node("Softmax", ["x2"], ["y"], name="sm")]
    rows_cols = numpy_helper.from_array(np.array([1, 2], np.int64), "rows_cols")
    return make_model(nodes, [info("x", [1, m, n])], [info("y", [m, n])], [rows_cols])


def run_on_model(model, seed=3):
    """Import, compile, run on the functional model: (kernel, program, figures, ok and
    the error against onnxruntime)."""
    kernel = onnx_kernel(model)
    program = kernel.compile(Machine(**kernel.machine))
    inputs = kernel.random_inputs(program, seed)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    agrees, others = kernel.references(program, inputs, results)
    return kernel, program, figures, agrees, others["max_abs_err_onnxruntime"]


@pytest.mark.parametrize("build, family", [
    (linear_relu_model, "matmul"),
    (softmax_model, "rows"),
    (lambda: decomposed_softmax_model(17), "rows"),
    (lambda: decomposed_softmax_model(18), "rows"),
    (inverse_square_model, "rows"),
    (mlp_model, "mlp"),
    (folded_shape_model, "rows"),
    (half_weights_model, "matmul"),
    (gemm_beta_model, "matmul"),
    (constant_first_model, "rows"),
], ids=["linear_relu", "softmax", "softmax_decomposed_opset17",
        "softmax_decomposed_opset18", "inverse_square", "mlp_silu", "folded_shape",
        "half_weights", "gemm_beta", "constant_first"])
def test_model_runs_and_agrees_with_onnxruntime(build, family):
    """Each model compiles into its family, runs bit-exact and within the float64
    budget, and agrees with onnxruntime within twice that budget."""
    kernel, program, figures, agrees, error = run_on_model(build())
    assert program.meta["group"] == family
    assert figures["ok"], figures["max_abs_err"]
    assert agrees, error


def test_import_keeps_names_and_folds_weights():
    """Inputs and outputs keep their ONNX names (as identifiers); Gemm's transB folds
    into the weight's values; batch-1 dimensions are dropped."""
    imported = import_model(linear_relu_model(m=8, k=32, n=16))
    graph = imported.graph
    assert list(imported.data.values()) == ["x"] and list(imported.outputs.values()) == ["y"]
    assert graph.inputs["fc_weight_T"].shape == (32, 16)
    weight = numpy_helper.to_array(imported.model.graph.initializer[0])
    assert np.array_equal(imported.weights["fc_weight_T"], weight.T)
    assert imported.held == {"fc.weight", "fc.bias"}
    assert import_model(mlp_model()).graph.inputs["x"].shape == (8, 32)


def test_onnxruntime_check_catches_a_wrong_result():
    """The comparison with onnxruntime is not vacuous: a result off by 1% fails it."""
    kernel = onnx_kernel(softmax_model())
    program = kernel.compile(Machine())
    inputs = kernel.random_inputs(program, 5)
    others = onnxruntime_outputs(kernel.imported, inputs)
    graph = kernel.imported.graph
    assert compare(graph, inputs, {"y": others["y"]}, others)[0]
    assert not compare(graph, inputs, {"y": others["y"] * 1.01}, others)[0]


@pytest.mark.parametrize("model, message", [
    (make_model([helper.make_node("Gelu", ["x"], ["y"], name="act")],
                [info("x", [4, 8])], [info("y", [4, 8])], opset=20),
     "model.onnx: node act (Gelu): operator Gelu is not supported; supported: Add, Cast"),
    (make_model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=0)],
                [info("x", [4, 8])], [info("y", [4, 8])]),
     "node sm (Softmax): Softmax over axis 0 of a rank-2 tensor; supported: Softmax "
     "over the last axis"),
    (make_model([helper.make_node("ReduceSum", ["x"], ["y"], name="r", keepdims=0)],
                [info("x", [4, 8])], [info("y", [])]),
     "node r (ReduceSum): a reduction over every axis"),
    (make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                [info("x", ["batch", 8])], [info("y", ["batch", 8])]),
     "input 'x' has a dynamic dimension batch; supported: static shapes"),
    (make_model([helper.make_node("Relu", ["x"], ["y"], name="r")],
                [info("x", [2, 4, 8])], [info("y", [2, 4, 8])]),
     "has a leading dimension 2 over 1; supported: batch 1"),
    (make_model([helper.make_node("Softmax", ["x"], ["y"], name="sm")],
                [info("x", [4, 8])], [info("y", [4, 8])], opset=16),
     "model.onnx: opset 16; supported: opsets 17 to 23"),
])
def test_unsupported_is_one_line(model, message):
    with pytest.raises(OnnxImportError) as caught:
        import_model(model)
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_cli_refuses_unsupported_operator(tmp_path, capsys):
    """``rdu run MODEL.onnx`` with a Conv: exit 2, one line on stderr, no traceback."""
    weight = numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv1")],
                       [info("x", [1, 1, 8, 8])], [info("y", [1, 1, 6, 6])], [weight])
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rdu run: error: conv.onnx: node conv1 (Conv): operator Conv "
                          "is not supported; supported: Add, "), err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_run_with_input_file_and_program_file(tmp_path, capsys):
    """``rdu run MODEL.onnx --input x=X.npy`` (the ONNX shape, batch dimension
    included); ``rdu compile MODEL.onnx -o FILE`` then ``rdu run FILE``."""
    path = tmp_path / "softmax.onnx"
    onnx.save(softmax_model(m=4, n=32), str(path))
    x = np.random.default_rng(7).standard_normal((1, 4, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--input", f"x={tmp_path / 'x.npy'}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["inputs"].startswith("--input x=")
    assert report["max_abs_err_onnxruntime"] < 1e-6
    program = tmp_path / "softmax.rdu"
    assert main(["compile", str(path), "-o", str(program)]) == 0
    capsys.readouterr()
    assert main(["run", str(program), "--input", f"x={tmp_path / 'x.npy'}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    assert main(["run", str(path), "--input", f"q={tmp_path / 'x.npy'}"]) == 2
    assert "the model has no input 'q'; its inputs: x" in capsys.readouterr().err
    np.save(tmp_path / "bad.npy", np.zeros((4, 31), np.float32))
    assert main(["run", str(path), "--input", f"x={tmp_path / 'bad.npy'}"]) == 2
    assert "shape (4, 31), the model takes x as (1, 4, 32)" in capsys.readouterr().err
    assert main(["run", str(path), "--m", "4"]) == 2
    assert "an ONNX model's shapes and inputs are its own (--m is for kernels by name" \
        in capsys.readouterr().err
    assert main(["run", "softmax", "--m", "4", "--n", "32", "--input",
                 f"x={tmp_path / 'x.npy'}"]) == 2
    assert "--input NAME=FILE.npy gives an ONNX model's inputs; softmax takes --x X.npy" \
        in capsys.readouterr().err


@pytest.mark.verilator
def test_cli_native_run(tmp_path, capsys):
    """One small run on the native RTL (the 4x4 with 4 AGCUs, the attention tests'
    build): cycles, and the same checks."""
    path = tmp_path / "softmax.onnx"
    onnx.save(softmax_model(m=4, n=32), str(path))
    assert main(["run", str(path), "--sim", "native", "--json", "--agcus", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["cycles"] > 0
    assert report["max_abs_err_onnxruntime"] < 1e-6

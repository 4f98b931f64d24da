"""RMSNorm from ONNX (docs/onnx.md, "RMSNorm"): the forms the PyTorch exporters write
for Llama's ``LlamaRMSNorm`` (Cast, Pow 2, ReduceMean, Add eps, Sqrt and Reciprocal or
Div, Mul, Cast, Mul by the weight), ``Pow 0.5``, ``Pow -0.5``, the opset-23
``RMSNormalization`` node and a lone ``Sqrt``, built here with onnx.helper, each compiled
into one configuration of the rows family with the PCU's rsqrt on a tail, run on the
functional model (one on the native RTL) bit-exact against the family's reference,
within the float64 budget and against onnxruntime; what is not supported is refused in
one line."""

import json

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from rdu.cli import main  # noqa: E402
from rdu.machine import Machine  # noqa: E402
from rdu.onnx import OnnxImportError, import_model, onnx_kernel  # noqa: E402
from rdu.runtime import run_kernel  # noqa: E402
from test_onnx import info, make_model  # noqa: E402  (the models' builders, shared)


def _constant(name, value):
    """A scalar Constant node, as the TorchScript exporter writes ``2`` or ``eps``."""
    return helper.make_node("Constant", [], [name], name=f"/norm/{name}",
                            value=numpy_helper.from_array(np.array(value, np.float32)))


def _weight(n, seed=0):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((1.0 + 0.25 * rng.standard_normal(n)).astype(np.float32),
                                   "norm.weight")


def llama_rmsnorm_model(form="reciprocal", m=4, n=64, opset=18, eps=1e-6):
    """``LlamaRMSNorm`` as exported: ``h = x.to(float32)``; ``v = h.pow(2).mean(-1,
    keepdim=True)``; ``h = h * torch.rsqrt(v + eps)``; ``weight * h.to(x.dtype)``.
    ``torch.rsqrt`` is written ``Reciprocal(Sqrt(.))`` (``form`` "reciprocal", both
    exporters), ``Div(1, Sqrt(.))`` ("div_one"), ``x / Sqrt(.)`` ("div": the normalised
    rows as one Div), ``Pow(., -0.5)`` ("pow_minus_half") or ``1 / Pow(., 0.5)``
    ("pow_half"). ReduceMean's axes are an input from opset 18, an attribute before."""
    axes = numpy_helper.from_array(np.array([-1], np.int64), "axes")
    mean = (helper.make_node("ReduceMean", ["sq", "axes"], ["var"], name="/norm/ReduceMean",
                             keepdims=1) if opset >= 18 else
            helper.make_node("ReduceMean", ["sq"], ["var"], name="/norm/ReduceMean",
                             keepdims=1, axes=[-1]))
    nodes = [helper.make_node("Cast", ["x"], ["h"], name="/norm/Cast", to=TensorProto.FLOAT),
             _constant("two", 2.0),
             helper.make_node("Pow", ["h", "two"], ["sq"], name="/norm/Pow"), mean,
             _constant("eps", eps),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="/norm/Add")]
    inverse = {
        "reciprocal": [helper.make_node("Sqrt", ["ve"], ["sd"], name="/norm/Sqrt"),
                       helper.make_node("Reciprocal", ["sd"], ["r"], name="/norm/Reciprocal")],
        "div_one": [helper.make_node("Sqrt", ["ve"], ["sd"], name="/norm/Sqrt"),
                    _constant("one", 1.0),
                    helper.make_node("Div", ["one", "sd"], ["r"], name="/norm/Div")],
        "pow_minus_half": [_constant("minus_half", -0.5),
                           helper.make_node("Pow", ["ve", "minus_half"], ["r"],
                                            name="/norm/Pow_1")],
        "pow_half": [_constant("half", 0.5),
                     helper.make_node("Pow", ["ve", "half"], ["sd"], name="/norm/Pow_1"),
                     helper.make_node("Reciprocal", ["sd"], ["r"], name="/norm/Reciprocal")],
    }
    if form == "div":
        nodes += [helper.make_node("Sqrt", ["ve"], ["sd"], name="/norm/Sqrt"),
                  helper.make_node("Div", ["h", "sd"], ["normed"], name="/norm/Div")]
    else:
        nodes += inverse[form] + [helper.make_node("Mul", ["h", "r"], ["normed"],
                                                   name="/norm/Mul")]
    nodes += [helper.make_node("Cast", ["normed"], ["back"], name="/norm/Cast_1",
                               to=TensorProto.FLOAT),
              helper.make_node("Mul", ["norm.weight", "back"], ["y"], name="/norm/Mul_1")]
    inits = [_weight(n)] + ([axes] if opset >= 18 else [])
    return make_model(nodes, [info("x", [1, m, n])], [info("y", [1, m, n])], inits,
                      opset=opset, name="rmsnorm")


def rms_normalization_model(m=4, n=64, **attrs):
    """Opset 23's one-node form."""
    node = helper.make_node("RMSNormalization", ["x", "norm.weight"], ["y"], name="rms",
                            **attrs)
    return make_model([node], [info("x", [1, m, n])], [info("y", [1, m, n])], [_weight(n)],
                      opset=23, name="rms23")


def sqrt_model(m=4, n=32):
    """``sqrt(x * x + 1)``: a lone Sqrt, ``reciprocal(rsqrt(.))`` on two tails."""
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
             helper.make_node("Constant", [], ["one"], name="one", value_float=1.0),
             helper.make_node("Add", ["sq", "one"], ["s"], name="plus_one"),
             helper.make_node("Sqrt", ["s"], ["y"], name="sqrt")]
    return make_model(nodes, [info("x", [m, n])], [info("y", [m, n])], name="sqrt")


def run_on_model(model, seed=3):
    kernel = onnx_kernel(model)
    program = kernel.compile(Machine(**kernel.machine))
    inputs = kernel.random_inputs(program, seed)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    agrees, others = kernel.references(program, inputs, results)
    return program, figures, agrees, others["max_abs_err_onnxruntime"]


def _rsqrt_tails(program):
    return sum(1 for config in program.meta["pcu_programs"].values()
               if config.get("tail") == "RSQRT")


@pytest.mark.parametrize("build", [
    lambda: llama_rmsnorm_model("reciprocal"),
    lambda: llama_rmsnorm_model("reciprocal", m=3, n=40, opset=17),
    lambda: llama_rmsnorm_model("div_one"),
    lambda: llama_rmsnorm_model("div", m=5, n=48),
    lambda: llama_rmsnorm_model("pow_minus_half"),
    lambda: llama_rmsnorm_model("pow_half"),
    lambda: rms_normalization_model(epsilon=1e-5),
    lambda: rms_normalization_model(m=2, n=1024, axis=2),
], ids=["reciprocal_sqrt", "opset17_padded", "div_one", "div", "pow_minus_half",
        "pow_half", "rms_normalization", "rms_normalization_1024"])
def test_rmsnorm_forms_run_and_agree_with_onnxruntime(build):
    """Each form is one rows configuration with one rsqrt tail (the scalar chain
    ``rsqrt(sum * (1 / n) + eps)`` on one PCU, the weight a vector input), bit-exact and
    within the float64 budget, and within twice that budget of onnxruntime."""
    program, figures, agrees, error = run_on_model(build())
    assert program.meta["group"] == "rows"
    assert _rsqrt_tails(program) == 1
    assert program.meta["pcus"] in (3, 4)           # 4: padded rows, the sum apart
    assert figures["ok"], figures["max_abs_err"]
    assert agrees, error


def test_lone_sqrt_is_reciprocal_of_rsqrt():
    program, figures, agrees, error = run_on_model(sqrt_model())
    tails = [config.get("tail") for config in program.meta["pcu_programs"].values()]
    assert sorted(t for t in tails if t != "NONE") == ["RECIPROCAL", "RSQRT"]
    assert figures["ok"] and agrees, (figures["max_abs_err"], error)


def test_imported_graph_is_the_front_ends_rmsnorm():
    """The exporter's nodes become ``x * rsqrt(sum(x * x) * (1 / n) + eps) * w``: the
    Casts to float vanish, Pow 2 is ``x * x``, Reciprocal(Sqrt) one rsqrt, the weight an
    input of one dimension."""
    imported = import_model(llama_rmsnorm_model("reciprocal", n=64))
    graph = imported.graph
    ops = [(node.op, node.attrs.get("fn")) for node in graph.live_nodes()
           if node.op not in ("input", "const")]
    assert ops == [("binary", "mul"), ("reduce", "sum"), ("binary", "mul"),
                   ("binary", "add"), ("unary", "rsqrt"), ("binary", "mul"),
                   ("binary", "mul")]
    assert graph.inputs["norm_weight"].shape == (64,)
    assert imported.held == {"norm.weight"}


@pytest.mark.parametrize("model, message", [
    (make_model([helper.make_node("Constant", [], ["three"], name="c", value_float=3.0),
                 helper.make_node("Pow", ["x", "three"], ["y"], name="cube")],
                [info("x", [4, 8])], [info("y", [4, 8])]),
     "model.onnx: node cube (Pow): exponent [3.0]; supported: Pow by a constant exponent "
     "2, 1, 0.5, -0.5 or -1"),
    (make_model([helper.make_node("Pow", ["x", "x"], ["y"], name="pow")],
                [info("x", [4, 8])], [info("y", [4, 8])]),
     "node pow (Pow): a computed exponent; supported: Pow by a constant"),
    (rms_normalization_model(axis=1),
     "node rms (RMSNormalization): RMSNormalization over axis 1 of a rank-3 tensor; "
     "supported: RMSNormalization over the last axis"),
    (rms_normalization_model(stash_type=16),
     "node rms (RMSNormalization): stash_type 16; supported: stash_type 1 (float)"),
])
def test_unsupported_is_one_line(model, message):
    with pytest.raises(OnnxImportError) as caught:
        import_model(model)
    text = str(caught.value)
    assert message in text and "\n" not in text, text


@pytest.mark.verilator
def test_cli_native_run(tmp_path, capsys):
    """The exporter's RMSNorm on the native RTL (the 4x4 with 4 AGCUs, the attention
    tests' build, as tests/test_onnx.py's softmax): cycles, bit-exact, within budget,
    and onnxruntime's."""
    path = tmp_path / "rmsnorm.onnx"
    onnx.save(llama_rmsnorm_model("reciprocal", m=4, n=64), str(path))
    assert main(["run", str(path), "--sim", "native", "--json", "--agcus", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["cycles"] > 0 and report["pcus_used"] == 3
    assert report["max_abs_err_onnxruntime"] < 1e-5

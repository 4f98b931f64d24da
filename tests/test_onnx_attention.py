"""Attention from ONNX (rdu.onnx.attention, docs/onnx.md "Attention"): the exporters'
``MatMul(Q, Transpose(K))``, scale, mask, ``Softmax``, ``MatMul(., V)`` recognised as
the front end's attention, the causal mask folded from shape and position arithmetic
into the family's causal mode; run on the functional model (one run on the native RTL)
and checked bit-exact against the chain, within the float64 budget and against
onnxruntime; other masks and computed Q, K, V refused in one line naming the node."""

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
from test_onnx import run_on_model  # noqa: E402  (import, compile, run on the model)


def info(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, inputs, outputs, initializers=(), name="sdpa"):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    return model


def _causal_where(scores, seq_from="q"):
    """``Where(row >= col, scores, -inf)`` with the positions from ``Shape`` and
    ``Range`` (as the dynamo exporter writes the causal mask)."""
    nodes = [helper.make_node("Shape", [seq_from], ["shape"], name="shape"),
             helper.make_node("Constant", [], ["two"], name="two", value_int=2),
             helper.make_node("Gather", ["shape", "two"], ["n"], name="seq_len"),
             helper.make_node("Constant", [], ["zero"], name="zero", value_int=0),
             helper.make_node("Constant", [], ["one"], name="one", value_int=1),
             helper.make_node("Range", ["zero", "n", "one"], ["pos"], name="positions"),
             helper.make_node("Unsqueeze", ["pos", "axis1"], ["cols"], name="cols"),
             helper.make_node("Unsqueeze", ["pos", "axis0"], ["rows"], name="rows"),
             helper.make_node("LessOrEqual", ["rows", "cols"], ["keep"], name="keep"),
             helper.make_node("Constant", [], ["ninf"], name="ninf",
                              value_float=float("-inf")),
             helper.make_node("Where", ["keep", scores, "ninf"], ["masked"], name="mask")]
    axes = [numpy_helper.from_array(np.array([1], np.int64), "axis1"),
            numpy_helper.from_array(np.array([0], np.int64), "axis0")]
    return nodes, axes


def _additive(kind, seq):
    """A constant additive mask of (1, 1, seq, seq): the causal one as exporters write
    it (``Trilu`` of a ``ConstantOfShape`` of float32's minimum), or a wrong one."""
    if kind == "causal":
        value = numpy_helper.from_array(np.array([np.finfo(np.float32).min], np.float32))
        return [helper.make_node("Constant", [], ["mshape"], name="mshape",
                                 value_ints=[1, 1, seq, seq]),
                helper.make_node("ConstantOfShape", ["mshape"], ["full"], name="full",
                                 value=value),
                helper.make_node("Constant", [], ["k1"], name="k1", value_int=1),
                helper.make_node("Trilu", ["full", "k1"], ["m"], name="triu", upper=1)], []
    wrong = np.tril(np.full((seq, seq), -1e9, np.float32), -1)     # anti-causal
    return [], [numpy_helper.from_array(wrong[None, None], "m")]


def sdpa_model(heads=2, kv_heads=2, rows=8, seq=8, dim=16, mask=None, scale="Div"):
    """``softmax(Q K^T / sqrt(dim) + mask) V`` as the exporters write it, Q, K, V
    inputs of (1, heads, rows, dim) and (1, kv_heads, seq, dim)."""
    c = float(np.sqrt(dim)) if scale == "Div" else float(1 / np.sqrt(dim))
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["s"], name="qk"),
             helper.make_node("Constant", [], ["c"], name="c", value_float=c),
             helper.make_node(scale, ["s", "c"], ["scaled"], name="scale")]
    inits, last = [], "scaled"
    if mask == "where":
        more, inits = _causal_where(last)
        nodes, last = nodes + more, "masked"
    elif mask in ("causal", "wrong"):
        more, inits = _additive(mask, seq)
        nodes += more + [helper.make_node("Add", [last, "m"], ["masked"], name="mask")]
        last = "masked"
    nodes += [helper.make_node("Softmax", [last], ["p"], name="softmax", axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["o"], name="pv")]
    inputs = [info("q", [1, heads, rows, dim]), info("k", [1, kv_heads, seq, dim]),
              info("v", [1, kv_heads, seq, dim])]
    return _model(nodes, inputs, [info("o", [1, heads, rows, dim])], inits)


@pytest.mark.parametrize("params, causal", [
    ({}, False),
    ({"mask": "where"}, True),
    ({"mask": "causal", "seq": 16, "rows": 16, "scale": "Mul"}, True),
    ({"heads": 4, "kv_heads": 1, "seq": 24, "rows": 24}, False),
    ({"heads": 4, "kv_heads": 4, "rows": 1, "seq": 40}, False),
], ids=["prefill", "causal_where", "causal_trilu_add", "multi_query", "decode"])
def test_attention_runs_and_agrees_with_onnxruntime(params, causal):
    """One configuration of the attention family: the scale and the mask as the
    model writes them; bit-exact against the chain, within budget, onnxruntime's."""
    model = sdpa_model(**params)
    kernel, program, figures, agrees, error = run_on_model(model)
    node, = [n for n in kernel.imported.graph.live_nodes() if n.op == "attention"]
    assert node.attrs["causal"] is causal
    assert node.attrs["scale"] == pytest.approx(1 / np.sqrt(params.get("dim", 16)))
    assert program.meta["group"] == "attention"
    assert figures["ok"], figures["max_abs_err"]
    assert agrees and 0 < error < 4e-3, error


def test_causal_mask_matters():
    """The causal mode is not vacuous: the same inputs without the mask differ from
    onnxruntime's causal result far beyond the budget."""
    from rdu.onnx.kernel import compare, onnxruntime_outputs
    causal = onnx_kernel(sdpa_model(mask="where"))
    plain = onnx_kernel(sdpa_model())
    program = plain.compile(Machine(**plain.machine))
    inputs = plain.random_inputs(program, 4)
    _, results, _ = run_kernel(plain, program, inputs, "model")
    others = onnxruntime_outputs(causal.imported, inputs)
    assert not compare(causal.imported.graph, inputs, results, others)[0]


def _weak_where():
    """The causal ``Where`` with -1 where it masks: not a mask the family takes."""
    model = sdpa_model(mask="where")
    ninf, = [node for node in model.graph.node if node.name == "ninf"]
    ninf.attribute[0].f = -1.0
    return model


def _position_tables(dim, prefix="", heads_axes=False):
    """``(initializers, nodes)`` of Llama's rotary tables ``cos`` and ``sin`` from
    position ids as exporters write them (``Shape`` of ``x``, ``Range``, ``Cast``,
    ``MatMul`` by the inverse frequencies, ``Concat``, ``Cos``, ``Sin``; with
    ``heads_axes`` ``Unsqueeze`` d to ``(1, 1, L, D)``), and the ``Slice`` bounds of
    ``rotate_half`` (``{prefix}start``, ``middle``, ``end``, ``last``)."""
    half, p = dim // 2, prefix
    inverse = (1.0 / 10000 ** (np.arange(0, dim, 2) / dim)).astype(np.float32)
    inits = [numpy_helper.from_array(inverse.reshape(1, half), "inv_freq")] + [
        numpy_helper.from_array(np.array(v, np.int64), p + n) for n, v in (
            ("start", [0]), ("middle", [half]), ("end", [2 ** 62]), ("last", [-1]),
            ("axis1", [1]), ("axes01", [0, 1]))]
    tables = (f"{p}cos2", f"{p}sin2") if heads_axes else ("cos", "sin")
    nodes = [helper.make_node("Shape", ["x"], [f"{p}shape"], name=f"{p}shape"),
             helper.make_node("Constant", [], [f"{p}i1"], name=f"{p}i1", value_int=1),
             helper.make_node("Gather", [f"{p}shape", f"{p}i1"], [f"{p}n"],
                              name=f"{p}seq_len"),
             helper.make_node("Constant", [], [f"{p}zero"], name=f"{p}zero", value_int=0),
             helper.make_node("Constant", [], [f"{p}one"], name=f"{p}one", value_int=1),
             helper.make_node("Range", [f"{p}zero", f"{p}n", f"{p}one"], [f"{p}pos"],
                              name=f"{p}position_ids"),
             helper.make_node("Cast", [f"{p}pos"], [f"{p}posf"], name=f"{p}pos_float",
                              to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", [f"{p}posf", f"{p}axis1"], [f"{p}column"],
                              name=f"{p}column"),
             helper.make_node("MatMul", [f"{p}column", "inv_freq"], [f"{p}freqs"],
                              name=f"{p}freqs"),
             helper.make_node("Concat", [f"{p}freqs", f"{p}freqs"], [f"{p}emb"],
                              name=f"{p}emb", axis=-1),
             helper.make_node("Cos", [f"{p}emb"], [tables[0]], name=tables[0]),
             helper.make_node("Sin", [f"{p}emb"], [tables[1]], name=tables[1])]
    if heads_axes:
        nodes += [helper.make_node("Unsqueeze", [table, f"{p}axes01"], [out],
                                   name=f"{p}{out}")
                  for table, out in zip(tables, ("cos", "sin"), strict=True)]
    return inits, nodes


def _rope(dim, names, halves=("neg", "x1")):
    """Llama's rotary embedding of the heads ``{name}h`` into ``name`` for ``names``:
    cos and sin ``(1, 1, L, D)`` from position ids (``Shape``, ``Range``, ``Cast``,
    ``MatMul`` by the inverse frequencies, ``Concat``, ``Cos``, ``Sin``, ``Unsqueeze``),
    ``rotate_half`` as ``Concat`` of the ``halves`` (``Slice`` s, ``Neg``)."""
    inits, nodes = _position_tables(dim, "r_", heads_axes=True)
    ropes = []
    for name in names:
        h = f"{name}h"
        ropes += [helper.make_node("Slice", [h, "r_start", "r_middle", "r_last"],
                                   [f"{name}_x1"], name=f"{name}_x1"),
                  helper.make_node("Slice", [h, "r_middle", "r_end", "r_last"],
                                   [f"{name}_x2"], name=f"{name}_x2"),
                  helper.make_node("Neg", [f"{name}_x2"], [f"{name}_neg"], name=f"{name}_neg"),
                  helper.make_node("Concat", [f"{name}_{part}" for part in halves],
                                   [f"{name}_rh"], name=f"{name}_rotate_half", axis=-1),
                  helper.make_node("Mul", [h, "cos"], [f"{name}_c"], name=f"{name}_cos"),
                  helper.make_node("Mul", [f"{name}_rh", "sin"], [f"{name}_s"],
                                   name=f"{name}_sin"),
                  helper.make_node("Add", [f"{name}_c", f"{name}_s"], [name],
                                   name=f"{name}_rope")]
    return nodes, ropes, inits


def rms_norm(source, target, hidden, prefix, seed=7):
    """Llama's RMSNorm as the exporters write it at opset 18: ``Pow``, ``ReduceMean``,
    ``Add`` of epsilon, ``Sqrt``, ``Reciprocal``, ``Mul``, ``Mul`` by the weight."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((1 + 0.25 * rng.standard_normal(hidden)).astype(
        np.float32), f"{prefix}.weight"),
        numpy_helper.from_array(np.array([-1], np.int64), f"{prefix}_axes"),
        numpy_helper.from_array(np.array(2.0, np.float32), f"{prefix}_two"),
        numpy_helper.from_array(np.array(1e-6, np.float32), f"{prefix}_eps")]
    p = prefix
    nodes = [helper.make_node("Pow", [source, f"{p}_two"], [f"{p}_sq"], name=f"{p}_pow"),
             helper.make_node("ReduceMean", [f"{p}_sq", f"{p}_axes"], [f"{p}_var"],
                              name=f"{p}_mean", keepdims=1),
             helper.make_node("Add", [f"{p}_var", f"{p}_eps"], [f"{p}_ve"], name=f"{p}_add"),
             helper.make_node("Sqrt", [f"{p}_ve"], [f"{p}_sd"], name=f"{p}_sqrt"),
             helper.make_node("Reciprocal", [f"{p}_sd"], [f"{p}_r"], name=f"{p}_rec"),
             helper.make_node("Mul", [source, f"{p}_r"], [f"{p}_xr"], name=f"{p}_mul"),
             helper.make_node("Mul", [f"{p}.weight", f"{p}_xr"], [target], name=f"{p}_scale")]
    return nodes, inits


def mlp_half(source, target, hidden, ffn, rng):
    """``target = source + LlamaMLP(RMSNorm(source))``: the post-attention norm
    (:func:`rms_norm`), gate and up projections, SiLU as ``Sigmoid`` and ``Mul``, the
    gate, down projection, the residual ``Add``."""
    nodes, inits = rms_norm(source, "hn", hidden, "post_attention_layernorm", seed=8)
    for name, shape in (("gate", (hidden, ffn)), ("up", (hidden, ffn)),
                        ("down", (ffn, hidden))):
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * shape[0] ** -0.5)
                                             .astype(np.float32), f"mlp.{name}_proj"))
    nodes += [helper.make_node("MatMul", ["hn", "mlp.gate_proj"], ["g"], name="gate_proj"),
              helper.make_node("MatMul", ["hn", "mlp.up_proj"], ["u"], name="up_proj"),
              helper.make_node("Sigmoid", ["g"], ["gs"], name="act_sigmoid"),
              helper.make_node("Mul", ["g", "gs"], ["ga"], name="act_mul"),
              helper.make_node("Mul", ["ga", "u"], ["gu"], name="gate_mul"),
              helper.make_node("MatMul", ["gu", "mlp.down_proj"], ["dn"], name="down_proj"),
              helper.make_node("Add", [source, "dn"], [target], name="mlp_residual")]
    return nodes, inits


def repeat_kv(name, kv_heads, times, seq, dim, unsqueeze=True):
    """HF's ``repeat_kv`` of heads ``name`` (1, kv_heads, seq, dim) into ``{name}_rep``
    as the exporters write it: ``Unsqueeze`` (or ``Reshape``) to (1, G, 1, L, D),
    ``Expand`` to (1, G, times, L, D), ``Reshape`` to (1, G * times, L, D)."""
    inits = [numpy_helper.from_array(np.array(v, np.int64), f"{name}_{n}") for n, v in (
        ("axis2", [2]), ("one", [1, kv_heads, 1, seq, dim]),
        ("expand", [1, kv_heads, times, seq, dim]), ("merged", [1, kv_heads * times, seq,
                                                                dim]))]
    first = helper.make_node("Unsqueeze", [name, f"{name}_axis2"], [f"{name}_5"],
                             name=f"{name}_unsqueeze") if unsqueeze else helper.make_node(
        "Reshape", [name, f"{name}_one"], [f"{name}_5"], name=f"{name}_unsqueeze")
    return [first,
            helper.make_node("Expand", [f"{name}_5", f"{name}_expand"], [f"{name}_x"],
                             name=f"{name}_expand"),
            helper.make_node("Reshape", [f"{name}_x", f"{name}_merged"], [f"{name}_rep"],
                             name=f"{name}_repeat")], inits


def projected_model(seq=16, hidden=32, heads=2, dim=16, causal=False, o_proj=False,
                    residual=False, after=None, rope=None, norm=False, mlp=None,
                    kv_heads=None, unsqueeze=True):
    """Llama's attention without rotary: Q, K, V projections of x split into heads
    (``Reshape`` to (1, L, H, D), ``Transpose`` (0, 2, 1, 3)), scaled dot-product
    attention (causal: ``Add`` of an initializer of ``-inf`` above the diagonal);
    ``o_proj``: the heads merged back (``Transpose``, ``Reshape``) and projected;
    ``residual``: ``x +`` that; ``after``: one more operator on the result; ``rope``:
    rotary embeddings of Q and K (the ``halves`` of rotate_half, :func:`_rope`);
    ``norm``: the projections of ``RMSNorm(x)`` (:func:`rms_norm`), the residual of x;
    ``mlp``: the FFN width of the decoder layer's second half after the residual,
    ``h + LlamaMLP(RMSNorm(h))`` (:func:`mlp_half`); ``kv_heads``: K and V of that
    many heads, repeated for the query heads by :func:`repeat_kv` (``unsqueeze``: its
    first step an ``Unsqueeze``, else a ``Reshape``)."""
    rng = np.random.default_rng(0)
    kv_heads = kv_heads or heads
    nodes, ropes, inits = _rope(dim, "qk", rope) if rope else ([], [], [])
    if norm:
        more, weights = rms_norm("x", "xn", hidden, "input_layernorm")
        nodes, inits = more + nodes, inits + weights
    for name in "qkv":
        count = heads if name == "q" else kv_heads
        inits += [numpy_helper.from_array((rng.standard_normal((hidden, count * dim)) *
                                           0.3).astype(np.float32), f"w{name}"),
                  numpy_helper.from_array(np.array([1, seq, count, dim], np.int64),
                                          f"s{name}")]
        source = "xn" if norm else "x"
        nodes += [helper.make_node("MatMul", [source, f"w{name}"], [f"{name}2"],
                                   name=f"{name}_proj"),
                  helper.make_node("Reshape", [f"{name}2", f"s{name}"], [f"{name}4"],
                                   name=f"{name}_heads"),
                  helper.make_node("Transpose", [f"{name}4"],
                                   [f"{name}h" if rope and name != "v" else name],
                                   name=f"{name}_split", perm=[0, 2, 1, 3])]
    nodes += ropes
    sdpa = sdpa_model(heads=heads, kv_heads=heads, rows=seq, seq=seq, dim=dim)
    nodes += [node for node in sdpa.graph.node if node.name not in ("softmax", "pv")]
    kv = "v"
    if kv_heads != heads:
        for name in "kv":
            more, weights = repeat_kv(name, kv_heads, heads // kv_heads, seq, dim, unsqueeze)
            nodes, inits = nodes[:-4] + more + nodes[-4:], inits + weights
        nodes[-4].input[0], kv = "k_rep", "v_rep"
    last = "scaled"
    if causal == "where":                # Shape, Range, LessOrEqual, Where
        more, axes = _causal_where(last)
        nodes, inits, last = nodes + more, inits + axes, "masked"
    elif causal:
        mask = np.triu(np.full((seq, seq), -np.inf, np.float32), 1)
        inits.append(numpy_helper.from_array(mask, "causal_mask"))
        nodes.append(helper.make_node("Add", [last, "causal_mask"], ["masked"], name="mask"))
        last = "masked"
    nodes += [helper.make_node("Softmax", [last], ["p"], name="softmax", axis=-1),
              helper.make_node("MatMul", ["p", kv], ["o"], name="pv")]
    output = info("o", [1, heads, seq, dim])
    if o_proj:
        inits += [numpy_helper.from_array(np.array([1, seq, heads * dim], np.int64), "merged"),
                  numpy_helper.from_array(rng.standard_normal((heads * dim, hidden)).astype(
                      np.float32), "wo")]
        nodes += [helper.make_node("Transpose", ["o"], ["ot"], name="merge_t",
                                   perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", ["ot", "merged"], ["om"], name="merge"),
                  helper.make_node("MatMul", ["om", "wo"], ["yo"], name="o_proj")]
        last = "yo"
        if residual:
            nodes.append(helper.make_node("Add", ["x", last], ["yr"], name="residual"))
            last = "yr"
        if mlp:
            more, weights = mlp_half(last, "ym", hidden, mlp, rng)
            nodes, inits, last = nodes + more, inits + weights, "ym"
        if after:
            nodes.append(helper.make_node(after, [last], ["ya"], name="after"))
            last = "ya"
        nodes.append(helper.make_node("Identity", [last], ["y"], name="out"))
        output = info("y", [1, seq, hidden])
    return _model(nodes, [info("x", [1, seq, hidden])], [output], inits, name="attn")


@pytest.mark.parametrize("model, message", [
    (sdpa_model(mask="wrong"), "sdpa.onnx: node mask (Add): the attention mask is not "
     "the causal pattern; supported: no mask, or the causal mask"),
    (_weak_where(), "sdpa.onnx: node mask (Where): masked value [-1.0]; supported: "
     "-inf or at most -10000"),
])
def test_unsupported_attention_is_one_line(model, message):
    with pytest.raises(OnnxImportError) as caught:
        import_model(model)
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_step_of_attention_used_otherwise_is_one_line():
    """The scores feeding anything but the pattern (a Relu) are refused at that node."""
    model = sdpa_model()
    relu = helper.make_node("Relu", ["scaled"], ["r"], name="act")
    model.graph.node.insert(4, relu)
    model.graph.output.append(info("r", [1, 2, 8, 8]))
    with pytest.raises(OnnxImportError) as caught:
        import_model(model)
    assert "node act (Relu): Relu of scores (a step of attention)" in str(caught.value)


#: The stated budget against onnxruntime of attention of projections: 2% of the
#: largest output. (The float64 budget of attention of computed operands, a worst-case
#: bound through the softmax, is about 3 here: it would take a wrong model.)
SHARE = 0.02


def onnxruntime_error(kernel, inputs, results, model=None):
    """The largest error of ``results`` against onnxruntime running ``model`` (the
    kernel's by default), as a share of onnxruntime's largest output."""
    from rdu.onnx.kernel import onnxruntime_outputs
    imported = kernel.imported if model is None else onnx_kernel(model).imported
    others = onnxruntime_outputs(imported, inputs)
    return max(float(np.abs(np.asarray(results[name], np.float64) - others[name]).max() /
                     np.abs(others[name]).max()) for name in others)


@pytest.mark.parametrize("params, stages, other", [
    ({"seq": 8}, ["q0", "q1", "k0_0", "k1_0", "v", "attention"], None),
    ({"dim": 12}, ["q0", "q1", "k0_0", "k1_0", "v0_0", "v1_0", "attention"], None),
    ({"causal": True, "o_proj": True}, ["q0", "q1", "k0_0", "k0_1", "k1_0", "k1_1", "v",
                                        "attention", "merge_heads", "o_proj"],
     {"o_proj": True}),
    ({"rope": ("neg", "x1"), "o_proj": True, "residual": True},
     ["q_0", "q_rotated", "q", "k_0", "k_rotated", "k", "v", "attention", "merge_heads",
      "o_proj", "residual"],
     {"rope": ("x1", "neg"), "o_proj": True, "residual": True}),
    ({"rope": ("x1", "neg"), "o_proj": True},      # not rotate_half: its own product
     ["q_0", "q_1", "q", "k_0", "k_1", "k", "v", "attention", "merge_heads", "o_proj"],
     {"rope": ("neg", "x1"), "o_proj": True}),
    ({"norm": True, "causal": True, "rope": ("neg", "x1"), "o_proj": True,
      "residual": True},
     ["norm_squares", "norm_sums", "norm", "q_0", "q_rotated", "q", "k_0", "k_rotated",
      "k", "v", "attention", "merge_heads", "o_proj", "residual"],
     {"causal": True, "rope": ("neg", "x1"), "o_proj": True, "residual": True}),
], ids=["padded_keys", "dim_12", "causal_o_proj", "rope_o_proj_residual",
        "rope_other_rotation", "norm_llama"])
def test_attention_of_projections_runs_and_agrees_with_onnxruntime(params, stages, other):
    """Q, K, V projections of x split into heads: configurations that write Q^T by
    pass and K by key block (mask constants included: the identity rows of the
    host-packed B) where the attention configuration reads them; stage by stage
    bit-exact (the attention fed the words the projections wrote), within budget,
    within the stated budget of onnxruntime's; and far outside it against the model
    ``other`` (without the causal mask: the K copies' -BIG come from the projections;
    with another rotate_half)."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.runtime import run_sequence
    kernel, sequence = compile_groups(onnx_kernel(projected_model(**params)), Machine(agcus=4))
    names = [stage.name.split("_", 2)[-1] for stage in sequence.stages]
    if stages:
        assert names == stages
    tail = (["rows", "matmul"] if params.get("o_proj") else []) + \
        (["rows"] if params.get("residual") else [])
    att = len(names) - 1 - len(tail)
    groups = [stage.program.meta["group"] for stage in sequence.stages]
    assert groups[att:] == ["attention"] + tail
    assert set(groups[:att]) == ({"matmul", "rows"} if params.get("rope") else {"matmul"})
    assert sequence.stages[att].program.meta["causal"] is params.get("causal", False)
    assert [(stage.program.params["group"], stage.program.params["groups"])
            for stage in sequence.stages] == [(i + 1, len(names)) for i in range(len(names))]
    inputs = kernel.random_inputs(None, 5)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"], figures["max_abs_err"]
    agrees, others = kernel.references(None, inputs, results)
    assert agrees and others["max_abs_err_onnxruntime"] > 0     # BF16 Q, K, V
    assert onnxruntime_error(kernel, inputs, results) < SHARE
    if other:
        assert onnxruntime_error(kernel, inputs, results,
                                 projected_model(**other)) > 10 * SHARE


def test_cli_attention_block_on_the_native_rtl(tmp_path, capsys):
    """``rdu run`` of a LlamaAttention block of one head, ``x + o_proj(causal attention
    of rotary Q, K and V projections of x)``, on the native RTL (the 4x4 with 4 AGCUs
    the attention tests build): 11 configurations, bit-exact stage by stage, within
    budget and onnxruntime's; an operator after it that the cut does not take exits 2
    with one line naming the attention."""
    path = tmp_path / "attn.onnx"
    onnx.save(projected_model(heads=1, causal=True, o_proj=True, residual=True,
                              rope=("neg", "x1")), str(path))
    assert main(["run", str(path), "--sim", "native", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 11 and "4 AGCUs" in report["machine"]
    assert report["max_abs_err_onnxruntime"] > 0       # BF16 Q, K, V, O (FP32 there)
    onnx.save(projected_model(o_proj=True, after="Relu"), str(path))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rdu run: error: attn.onnx: node pv (MatMul): operators after "
                          "attention in a model of several configurations"), err
    assert err.count("\n") == 1


def rotary_model(seq=8, hidden=64, dim=32, project=True, halves=("neg_x2", "x1")):
    """Llama's rotary embedding of ``q = x @ Wq`` (or of the input itself):
    ``q * cos + rotate_half(q) * sin``, ``cos`` and ``sin`` from position ids
    (``Shape``, ``Range``, ``Cast``, ``MatMul`` by the inverse frequencies, ``Concat``,
    ``Cos``, ``Sin``) and ``rotate_half(q) = Concat(Neg(q2), q1)`` of ``Slice`` s."""
    rng = np.random.default_rng(1)
    inits, nodes = _position_tables(dim)
    source = "x"
    if project:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal((hidden, dim)) * 0.2).astype(np.float32), "wq"))
        nodes.append(helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"))
        source = "q"
    nodes += [helper.make_node("Slice", [source, "start", "middle", "last"], ["x1"],
                               name="x1"),
              helper.make_node("Slice", [source, "middle", "end", "last"], ["x2"],
                               name="x2"),
              helper.make_node("Neg", ["x2"], ["neg_x2"], name="neg"),
              helper.make_node("Concat", list(halves), ["rh"], name="rotate_half", axis=-1),
              helper.make_node("Mul", [source, "cos"], ["qc"], name="mul_cos"),
              helper.make_node("Mul", ["rh", "sin"], ["rs"], name="mul_sin"),
              helper.make_node("Add", ["qc", "rs"], ["y"], name="rotary")]
    width = hidden if project else dim
    return _model(nodes, [info("x", [1, seq, width])], [info("y", [1, seq, dim])], inits,
                  name="rotary")


@pytest.mark.parametrize("project, families", [
    (True, ["matmul", "matmul", "rows"]),
    (False, ["matmul", "rows"]),
], ids=["of_a_projection", "of_an_input"])
def test_rotary_runs_and_agrees_with_onnxruntime(project, families):
    """``rotate_half`` is a product by a constant signed permutation, folded into the
    projection's weight (``x @ (Wq R)``, both products reading x); cos and sin are FP32
    tables of the row group. Stage by stage bit-exact, within budget, onnxruntime's."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.runtime import run_sequence
    kernel = onnx_kernel(rotary_model(project=project))
    graph = kernel.imported.graph
    assert graph.inputs["cos"].dtype == graph.inputs["sin"].dtype == "fp32"
    if project:
        weights = kernel.imported.weights
        half = 16
        rotated = np.concatenate([-weights["wq"][:, half:], weights["wq"][:, :half]], 1)
        assert np.array_equal(weights["wq_rotated"], rotated)
    kernel, sequence = compile_groups(kernel, Machine(**kernel.machine))
    assert [stage.program.meta["group"] for stage in sequence.stages] == families
    inputs = kernel.random_inputs(None, 2)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"], figures["max_abs_err"]
    agrees, others = kernel.references(None, inputs, results)
    assert agrees and others["max_abs_err_onnxruntime"] < 1e-6


def test_half_rotation_block_finds_the_heads():
    """The importer marks a weight ``W R`` as rotated when ``R`` is rotate_half on every
    head (``[-x2, x1]``), so that attention reads ``x @ W`` once (rdu.apps.onnx_rotary);
    another signed permutation is not marked."""
    from rdu.onnx.rotary import half_rotation, half_rotation_block
    x = np.arange(8, dtype=np.float32)
    assert np.array_equal(x @ half_rotation(8), np.concatenate([-x[4:], x[:4]]))
    assert half_rotation_block(np.kron(np.eye(4, dtype=np.float32), half_rotation(8))) == 8
    assert half_rotation_block(half_rotation(8).T) is None           # [x2, -x1]
    assert half_rotation_block(np.eye(8, dtype=np.float32)) is None


def test_rotary_permutation_follows_the_concat():
    """The signed permutation is the model's: ``Concat(x1, Neg(x2))`` (another one)
    runs and agrees with its own onnxruntime result, and not with the rotate_half
    model's."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.onnx.kernel import compare, onnxruntime_outputs
    from rdu.runtime import run_sequence
    right = onnx_kernel(rotary_model(project=False))
    other = onnx_kernel(rotary_model(project=False, halves=("x1", "neg_x2")))
    kernel, sequence = compile_groups(other, Machine(**other.machine))
    inputs = kernel.random_inputs(None, 3)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"] and kernel.references(None, inputs, results)[0]
    theirs = onnxruntime_outputs(right.imported, inputs)
    assert not compare(right.imported.graph, inputs, results, theirs)[0]


def test_slice_of_a_computed_tensor_used_otherwise_is_one_line():
    """A half that is not put back together by a Concat (a Relu of it) is refused."""
    model = rotary_model(project=False)
    relu = helper.make_node("Relu", ["x1"], ["r"], name="act")
    model.graph.node.insert(len(model.graph.node) - 1, relu)
    with pytest.raises(OnnxImportError) as caught:
        import_model(model)
    text = str(caught.value)
    assert "rotary.onnx: node act (Relu): Relu of a Slice of a computed tensor" in text
    assert "\n" not in text


@pytest.mark.parametrize("other", [{"causal": False}, {"rope": ("x1", "neg")}],
                         ids=["mask_removed", "rotate_half_swapped"])
def test_cli_onnxruntime_check_tells_a_wrong_model(tmp_path, capsys, monkeypatch, other):
    """``rdu run``'s check against onnxruntime is tight enough to tell a wrong model:
    the machine runs the causal LlamaAttention block, onnxruntime a model without the
    causal mask or with another rotate_half (the same weights): exit 1, one line
    naming the share budget. Against the model itself the check passes (exit 0)."""
    from rdu.onnx import kernel as onnx_kernel_module
    params = {"causal": True, "o_proj": True, "rope": ("neg", "x1"), "seq": 16}
    path = tmp_path / "attn.onnx"
    onnx.save(projected_model(**params), str(path))
    assert main(["run", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["max_abs_err_onnxruntime"] > 0
    wrong = onnx_kernel(projected_model(**{**params, **other})).imported
    real = onnx_kernel_module.onnxruntime_outputs
    monkeypatch.setattr(onnx_kernel_module, "onnxruntime_outputs",
                        lambda imported, inputs: real(wrong, inputs))
    assert main(["run", str(path)]) == 1
    err = capsys.readouterr().err
    assert "differs from onnxruntime's" in err and "or 2% of its largest output" in err
    assert err.count("\n") == 1, err


def decoder_model(seq=16, hidden=64, heads=2, dim=32, ffn=128, **changes):
    """A Llama decoder layer as the exporters write it: ``h = x + o_proj(attention(
    RMSNorm(x)))`` (rotary from position ids, the causal mask from ``Shape``, ``Range``,
    ``LessOrEqual``, ``Where``), ``y = h + LlamaMLP(RMSNorm(h))``; ``changes`` of
    :func:`projected_model`'s parameters make a wrong one."""
    params = {"seq": seq, "hidden": hidden, "heads": heads, "dim": dim, "causal": "where",
              "rope": ("neg", "x1"), "o_proj": True, "residual": True, "norm": True,
              "mlp": ffn}
    return projected_model(**{**params, **changes})


def test_decoder_layer_runs_and_agrees_with_onnxruntime():
    """The whole decoder layer: the attention half as before (its input norm on the
    view of the projections' B), the MLP half in transposed space after the residual
    (squares, sums by a matmul of ones, the norm's operators, gate, up, ``silu(g) *
    u``, down, the residual, all on views of column tiles); stage by stage bit-exact,
    within the stated budget of onnxruntime's; far outside it against the layer
    without the causal mask, with another rotate_half, and without its input norm."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.runtime import run_sequence
    kernel, sequence = compile_groups(onnx_kernel(decoder_model()), Machine(agcus=4))
    names = [stage.name.split("_", 2)[-1] for stage in sequence.stages]
    assert names[:3] == ["norm_squares", "norm_sums", "norm"]
    assert names[-8:] == ["squares", "sums", "post_attention_layernorm_scale", "gate_proj",
                          "up_proj", "gate_mul", "down_proj", "mlp_residual"]
    groups = [stage.program.meta["group"] for stage in sequence.stages]
    assert groups[-8:] == ["rows", "matmul", "rows", "matmul", "matmul", "rows", "matmul",
                           "rows"]
    assert groups.count("attention") == 1 and len(names) == 22
    inputs = kernel.random_inputs(None, 5)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"], figures["max_abs_err"]
    agrees, others = kernel.references(None, inputs, results)
    assert agrees and others["max_abs_err_onnxruntime"] > 0
    assert onnxruntime_error(kernel, inputs, results) < SHARE
    for wrong in ({"causal": False}, {"rope": ("x1", "neg")}, {"norm": False}):
        assert onnxruntime_error(kernel, inputs, results,
                                 decoder_model(**wrong)) > 5 * SHARE, wrong


def test_cli_decoder_layer_on_the_native_rtl(tmp_path, capsys):
    """``rdu run`` of the whole decoder layer (hidden 64, 2 heads x 32, FFN 128, L 16)
    on the native RTL (the 4x4 with 4 AGCUs): 22 configurations, orchestrated on chip
    (within the schedule memory), bit-exact stage by stage, within the float64 budget
    and within 2% of onnxruntime's largest output. ``--operators``: every configuration
    in one operator's row, the rows' cycles adding up to the run's, each operator within
    2% of onnxruntime's value of it."""
    path = tmp_path / "decoder.onnx"
    onnx.save(decoder_model(), str(path))
    assert main(["run", str(path), "--sim", "native", "--json", "--operators"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 22 and "4 AGCUs" in report["machine"]
    assert report["execution"] == "configurations in sequence, orchestrated"
    assert 0 < report["max_abs_err_onnxruntime"] < 2.0
    rows = report["operators"]
    assert [c for row in rows for c in row["configurations"]] == list(range(1, 23))
    for key in ("load_cycles", "execute_cycles"):
        assert sum(row[key] for row in rows) == report[key] > 0
    assert all(row["execute_cycles"] > 0 and 0 < row["share"] < SHARE for row in rows), rows


def test_unsupported_operator_after_the_residual_is_one_line(tmp_path, capsys):
    """After the attention's residual, a reduction other than RMSNorm's sum of squares
    (a Softmax's max) is refused in one line naming its node (exit 2)."""
    path = tmp_path / "attn.onnx"
    onnx.save(projected_model(o_proj=True, residual=True, after="Softmax"), str(path))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rdu run: error: attn.onnx: node after (Softmax): a reduction "
                          "after attention other than a sum of squares"), err
    assert err.count("\n") == 1


def _kv_heads_swapped(model, kv_heads, dim):
    """``model`` with the key/value heads' columns of Wk and Wv in reverse order: each
    query head reads another key/value head (a wrong grouping)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for init in model.graph.initializer:
        if init.name in ("wk", "wv"):
            w = numpy_helper.to_array(init)
            swapped = w.reshape(w.shape[0], kv_heads, dim)[:, ::-1].reshape(w.shape)
            init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(swapped), init.name))
    return model


def test_grouped_query_decoder_layer_agrees_with_onnxruntime():
    """The decoder layer with 4 query heads and 2 key/value heads, K and V repeated as
    HF's ``repeat_kv`` writes it (``Unsqueeze`` or ``Reshape``, ``Expand``,
    ``Reshape``): the attention family's grouped-query mode reading K and V of the 2
    heads the projections wrote; stage by stage bit-exact, within 2% of onnxruntime's
    largest output; far outside it when each query head reads the other key/value
    head."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.runtime import run_sequence
    params = {"heads": 4, "dim": 16, "kv_heads": 2}
    kernel, sequence = compile_groups(onnx_kernel(decoder_model(**params)),
                                      Machine(agcus=4))
    att, = [stage.program for stage in sequence.stages if stage.program.meta["group"] ==
            "attention"]
    assert (att.meta["heads"], att.meta["kv_heads"], att.meta["causal"]) == (4, 2, True)
    assert len(sequence.stages) == 22
    inputs = kernel.random_inputs(None, 5)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"], figures["max_abs_err"]
    agrees, others = kernel.references(None, inputs, results)
    assert agrees and others["max_abs_err_onnxruntime"] > 0
    assert onnxruntime_error(kernel, inputs, results) < SHARE
    wrong = _kv_heads_swapped(decoder_model(**params), 2, 16)
    assert onnxruntime_error(kernel, inputs, results, wrong) > 5 * SHARE


@pytest.mark.parametrize("unsqueeze", [True, False], ids=["unsqueeze", "reshape"])
def test_repeat_kv_imports_as_grouped_query_attention(unsqueeze):
    """``repeat_kv`` of K and V (either first step) is no operator: attention reads
    the 2 key/value heads themselves for its 4 query heads."""
    graph = import_model(projected_model(heads=4, kv_heads=2, unsqueeze=unsqueeze)).graph
    node, = [n for n in graph.live_nodes() if n.op == "attention"]
    assert [operand.shape for operand in node.inputs] == [(4, 16, 16), (2, 16, 16),
                                                          (2, 16, 16)]


def test_repeat_kv_other_than_hf_is_one_line():
    """K expanded along another axis than the one after its heads is refused in one
    line naming the node."""
    model = projected_model(heads=4, kv_heads=2)
    for init in model.graph.initializer:
        if init.name == "k_expand":
            init.CopyFrom(numpy_helper.from_array(np.array([1, 2, 2, 16, 2], np.int64),
                                                  "k_expand"))
    with pytest.raises(OnnxImportError) as caught:
        import_model(model)
    text = str(caught.value)
    assert "node k_expand (Expand): expand of K/V heads (2, 1, 16, 16) to (1, 2, 2, 16, " \
        "2); supported: repeat_kv: (1, 2, n_rep, 16, 16)" in text and "\n" not in text, text

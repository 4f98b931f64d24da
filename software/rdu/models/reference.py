"""References a compiled kernel's results are checked against.

* :func:`exact_matmul`, :func:`exact_rows_program`, :func:`exact_mlp`,
  :func:`exact_attention` (each family's ``exact`` calls its own,
  :mod:`rdu.compiler.families`): the hardware's arithmetic, bit for bit, from the
  program's input images (so a folded bias and the zero padding are what the hardware sees): the
  systolic accumulation of :func:`rdu.models.pcu_reference.systolic_accumulate` in K order, then
  the epilogue's SIMD stages with :func:`rdu.models.fp.apply`. Independent of the
  functional model and of the RTL.
* :func:`float64_outputs`: the front-end graph evaluated in float64 on the same BF16
  inputs, with an error budget per element propagated operator by operator (FP32
  rounding ``2^-23`` relative per operation, ``K * 2^-22 * (|A| |B|)`` for a matmul,
  ``2^-8`` relative for a cast to BF16, flush-to-zero ``2^-126`` absolute);
  :func:`check` compares a result with it.
"""

import numpy as np

from hdl.fp import Op

from ..frontend.attention import AttentionShape, chain_matrices, unpack_outputs
from ..frontend.graph import ELEMENTWISE
from ..layout import Image, padded_row
from . import fp, pcu_reference

__all__ = ["exact_matmul", "exact_rows_program", "exact_attention", "exact_rows", "exact_mlp",
           "float64_outputs", "check"]

_ULP = 2.0 ** -23
_TINY = 2.0 ** -126


def exact_rows_program(program, graph):
    """``{output: words}`` of a row-wise program: its input images unpacked (the matrix,
    and the per-column vectors as one row each), then :func:`exact_rows` of the
    front-end ``graph``."""
    meta = program.meta
    inputs = {}
    for name, spec in program.tensors.items():
        if spec["role"] == "input":
            image = Image.from_json(meta["images"][spec["image"]])
            inputs[name] = image.unpack(program.inputs[spec["image"]][1], name)
    return exact_rows(graph, inputs, meta["lanes"])


def exact_matmul(program, graph=None):
    """``{output: words}`` of a matmul program: the systolic accumulation of its packed
    operands in K order, then its epilogue's SIMD stages."""
    meta = program.meta
    images = meta["images"]
    (out_name, out_spec), = ((n, s) for n, s in program.tensors.items()
                             if s["role"] == "output")
    a_name, b_name = meta["operands"]
    logical = {}
    for name in (a_name, b_name):
        image = Image.from_json(images[name])
        words = program.inputs[name][1]
        if words is None:
            raise ValueError(f"{program.name}: input image {name} is not packed")
        # the packed words back to the logical matrix (a folded bias's ones included)
        logical[name] = image.unpack_matrix(words)
    a, b = logical[a_name], logical[b_name]
    k_pad = meta["k_pad"]
    value = pcu_reference.systolic_accumulate(a[:, :k_pad].T.copy(), b[:k_pad])
    for op, src_a, src_b, src_c, constant in meta["epilogue"]:
        operands = {"PREV": value, "CONST": np.full_like(value, np.uint32(constant))}
        value = fp.apply(_op_code(op), operands[src_a], operands[src_b],
                              operands[src_c])
    m, n = out_spec["shape"]
    return {out_name: np.asarray(value, np.uint32)[:m, :n]}


def exact_mlp(program, graph):
    """``{output: words}`` of an MLP group: the first matmul's sums, the activation's
    operators on them as a row kernel's (:func:`exact_rows`), the second matmul on the
    BF16 rows."""
    meta = program.meta
    x_name, w1_name, w2_name, *up_name = meta["operands"]
    logical = {}
    for name in (x_name, w1_name, w2_name, *up_name):
        words = program.inputs[name][1]
        if words is None:
            raise ValueError(f"{program.name}: input image {name} is not packed")
        logical[name] = Image.from_json(meta["images"][name]).unpack_matrix(words)
    k1, k2 = meta["k_pad"]
    hidden = pcu_reference.systolic_accumulate(logical[x_name][:, :k1].T.copy(),
                                           logical[w1_name][:k1])
    (out_name, out), = graph.outputs.items()
    cast, _ = out.inputs
    firsts = [node for node in graph.live_nodes() if node.op == "matmul" and
              node is not out]
    sources = {firsts[0]: "h"}
    m = cast.shape[0]
    # the hidden rows with their padding to the second matmul's K (W1's zero columns)
    hidden_rows = {"h": np.asarray(hidden, np.uint32)[:m, :k2]}
    if up_name:             # gated: the up product, the chain's second row operand
        up = pcu_reference.systolic_accumulate(logical[x_name][:, :k1].T.copy(),
                                               logical[up_name[0]][:k1])
        sources[firsts[1]] = "u"
        hidden_rows["u"] = np.asarray(up, np.uint32)[:m, :k2]
    chain = graph.extract(f"{graph.name}_activation", sources, {"s": cast})
    activated = exact_rows(chain, hidden_rows, meta["lanes"])["s"]
    value = pcu_reference.systolic_accumulate(np.asarray(activated, np.uint32)[:, :k2].T.copy(),
                                          logical[w2_name][:k2])
    m, n = program.tensors[out_name]["shape"]
    return {out_name: np.asarray(value, np.uint32)[:m, :n]}


def attention_shape(program):
    """The :class:`rdu.frontend.attention.AttentionShape` an attention program was compiled for."""
    m = program.meta
    return AttentionShape(m["mode"], m["seq"], m["dim"], m["heads"], m["kv_heads"],
                          m["lanes"], m["chunk"], m["scale"], m["causal"],
                          m.get("dim_align", 2), m.get("kv_layout", "blocks"),
                          m.get("valid"), m.get("queries"), m.get("tile_group", 1))


def exact_attention(program):
    """``{output: uint32 (heads, rows, dim)}``: the chain's arithmetic
    (:func:`rdu.frontend.attention.chain_matrices`) on the program's packed Q, K and V images, as
    the hardware sees them (masks and padding included)."""
    matrices = []
    for name in program.meta["operands"]:
        spec = program.tensors[name]
        image = Image.from_json(program.meta["images"][spec["image"]])
        words = program.inputs[spec["image"]][1]
        if words is None:
            raise ValueError(f"{program.name}: input image {name} is not packed")
        matrices.append(image.unpack_matrix(words))
    (out_name, _), = ((n, s) for n, s in program.tensors.items() if s["role"] == "output")
    shape = attention_shape(program)
    return {out_name: unpack_outputs(shape, chain_matrices(shape, *matrices))}


def _lane_tree(words, reduce_max):
    """The PCU's cross-lane reduction of ``(..., lanes)`` words: pairs (0,1), (2,3), ...
    level by level (:func:`rdu.models.pcu_reference.reduce_lanes`, vectorised over rows)."""
    level = words
    while level.shape[-1] > 1:
        left, right = level[..., 0::2], level[..., 1::2]
        level = fp.fmax(left, right) if reduce_max else fp.add(left, right)
    return level


def exact_rows(graph, inputs, lanes):
    """``{output: uint32 array}`` of a row-wise graph with the PCU chain's arithmetic
    (:mod:`rdu.compiler.row_chain`): element-wise operators per lane, a reduction
    accumulated lane-wise over the row's beats in order (``op(x_j, acc)``, from ``0`` or
    ``-inf``) then the cross-lane tree, exp, reciprocal and rsqrt as :mod:`rdu.models.fp`."""
    values = {}
    for node in graph.live_nodes():
        args = [values[id(i)] for i in node.inputs]
        if node.op == "input":
            value = np.asarray(inputs[node.name], np.uint32)
        elif node.op == "const":
            value = np.float32(node.attrs["value"]).view(np.uint32)
        elif node.op == "binary":
            a, b = args
            zero = np.uint32(0)
            value = fp.apply(_op_code(ELEMENTWISE[node.attrs["fn"]]), a, b, zero)
        elif node.op == "unary":
            (x,) = args
            fn = node.attrs["fn"]
            special = {"exp": fp.exp, "reciprocal": fp.reciprocal, "rsqrt": fp.rsqrt}
            value = (special[fn](x) if fn in special else fp.to_bf16(x)
                     if node.dtype == "bf16" else x)
        elif node.op == "reduce":
            (x,) = args
            rows, length = x.shape
            is_max = node.attrs["fn"] == "max"
            identity = np.uint32(fp.NEG_INF if is_max else 0)
            # the padding of the row to whole beats enters as the identity (row_pad)
            padded = np.full((rows, padded_row(length, lanes)), identity, np.uint32)
            padded[:, :length] = x
            beats = padded.reshape(rows, -1, lanes)
            acc = np.full((rows, lanes), identity, np.uint32)
            combine = fp.fmax if is_max else fp.add
            for j in range(beats.shape[1]):
                acc = combine(beats[:, j], acc)
            value = _lane_tree(acc, is_max)
        else:
            raise ValueError(f"{node.where}: no row-wise reference for {node.op}")
        values[id(node)] = np.asarray(value, np.uint32)
    return {name: _as_output(values[id(node)], node.shape)
            for name, node in graph.outputs.items()}


def _as_output(value, shape):
    """An output's words: a per-row scalar or a constant broadcast to ``shape``; rows
    given wider than the graph's (with their padding: the MLP's hidden rows) as they
    are."""
    if value.ndim == 2 and value.shape[1] > shape[1]:
        return value
    return np.broadcast_to(value, shape)


def _op_code(name):
    return Op[name] if isinstance(name, str) else Op(name)


def float64_outputs(graph, inputs):
    """``{output: (float64 value, float64 budget)}`` of ``graph`` on ``inputs``
    (``{input: uint32 words}``, BF16 in the high half)."""
    cache = {}

    def value(node):
        if id(node) in cache:
            return cache[id(node)]
        args = [value(i) for i in node.inputs]
        if node.op == "input":
            x = np.asarray(inputs[node.name], np.uint32).view(np.float32).astype(np.float64)
            result = (x, np.zeros_like(x))
        elif node.op == "const":
            x = float(np.float32(node.attrs["value"]))
            result = (np.float64(x), np.float64(0.0))
        elif node.op == "matmul":
            (a, ea), (b, eb) = args
            v = a @ b
            budget = (a.shape[1] + 1) * 2 * _ULP * (np.abs(a) @ np.abs(b)) + \
                ea @ np.abs(b) + np.abs(a) @ eb
            result = (v, budget)
        elif node.op == "binary":
            (a, ea), (b, eb) = args
            fn = node.attrs["fn"]
            if fn in ("add", "sub"):
                v = a + b if fn == "add" else a - b
                budget = ea + eb + 2 * _ULP * (np.abs(a) + np.abs(b))
            elif fn == "mul":
                v = a * b
                with np.errstate(invalid="ignore"):     # inf * 0: see below
                    budget = np.abs(a) * eb + np.abs(b) * ea + ea * eb + _ULP * np.abs(v)
            else:
                v = np.maximum(a, b) if fn == "max" else np.minimum(a, b)
                budget = np.maximum(ea, eb) + 0 * v
            result = (v, budget)
        elif node.op == "unary":
            (x, ex), = args
            fn = node.attrs["fn"]
            if fn == "exp":
                v = np.exp(x)
                with np.errstate(over="ignore"):    # an unbounded operand: no bound
                    budget = v * (np.expm1(ex) + 4 * _ULP)
            elif fn == "reciprocal":
                v = 1.0 / x
                budget = np.abs(v) * (ex / np.maximum(np.abs(x) - ex, _TINY) + 4 * _ULP)
            elif fn == "rsqrt":
                # sqrt(1 + u) - 1 <= u / 2: an error ex of x moves 1/sqrt(x) by at most
                # v * ex / (2 (x - ex)); the unit's 1.24 ulp within the 4 ulp term
                with np.errstate(invalid="ignore", divide="ignore"):
                    v = 1.0 / np.sqrt(x)
                budget = np.abs(v) * (0.5 * ex / np.maximum(x - ex, _TINY) + 4 * _ULP)
            else:
                v = x
                budget = ex + (2.0 ** -8 if node.dtype == "bf16" else 0) * np.abs(x)
            result = (v, budget)
        elif node.op == "reduce":
            (x, ex), = args
            if node.attrs["fn"] == "sum":
                v = x.sum(axis=-1, keepdims=True)
                budget = ex.sum(axis=-1, keepdims=True) + x.shape[-1] * 2 * _ULP * \
                    np.abs(x).sum(axis=-1, keepdims=True)
            else:
                v = x.max(axis=-1, keepdims=True)
                budget = ex.max(axis=-1, keepdims=True)
            result = (v, budget)
        elif node.op == "transpose":
            (x, ex), = args
            result = (x.T, ex.T)
        elif node.op == "broadcast":
            (x, ex), = args
            result = (np.broadcast_to(x, node.shape), np.broadcast_to(ex, node.shape))
        elif node.op == "attention":
            from ..frontend.attention import attention64, scale_value
            valid = node.attrs.get("valid")     # a cache: its first keys only
            if valid is not None:
                args = [args[0]] + [(x[:, :valid], ex[:, :valid]) for x, ex in args[1:]]
            result = _attention_budget(args, scale_value(args[0][0].shape[2],
                                                         node.attrs.get("scale")),
                                       node.attrs.get("causal", False), attention64)
        elif node.op == "merge_heads":
            (x, ex), = args
            result = (_merge_heads(x), _merge_heads(ex))
        elif node.op == "heads":
            (x, ex), = args
            heads = node.shape[0]
            result = (_split_heads(x, heads), _split_heads(ex, heads))
        else:
            raise ValueError(f"{node.where}: no float64 reference for {node.op}")
        v, budget = result
        # an unbounded error times an exact zero is no bound either (inf * 0 = nan)
        budget = np.where(np.isnan(budget), np.inf, budget)
        cache[id(node)] = (v, budget + _TINY)
        return cache[id(node)]
    return {name: value(node) for name, node in graph.outputs.items()}


def _split_heads(x, heads):
    """``(rows, heads * dim)`` as ``(heads, rows, dim)``."""
    rows = x.shape[0]
    return x.reshape(rows, heads, -1).transpose(1, 0, 2)


def _merge_heads(x):
    """``(heads, rows, dim)`` as ``(rows, heads * dim)``."""
    return x.transpose(1, 0, 2).reshape(x.shape[1], -1)


def _attention_budget(args, scale, causal, attention64):
    """Attention's float64 value and budget: the chain's own (``2^-8 max|V|``) plus what
    errors of computed operands move it by: a score moves by at most ``d = scale
    (|q| |ek|^T + |eq| |k|^T)``, so each probability by a factor within ``exp(+-2 d)``,
    and ``O`` by at most ``2 (exp(2 d) - 1) max|V|``, plus V's own error."""
    (q, eq), (k, ek), (v, ev) = args
    out, budget = attention64(q, k, v, scale, causal)
    if not (np.any(eq) or np.any(ek) or np.any(ev)):
        return out, budget
    group = q.shape[0] // k.shape[0]
    for h in range(q.shape[0]):
        g = h // group
        moved = float(scale) * (np.abs(q[h]) @ np.abs(ek[g]).T + np.abs(eq[h]) @
                                np.abs(k[g]).T).max()
        budget[h] += 2 * np.expm1(2 * moved) * np.abs(v[g]).max() + ev[g].max()
    return out, budget


def check(graph, inputs, results):
    """``(ok, max_abs_err)``: every output element within its budget of float64."""
    ok, worst = True, 0.0
    for name, (ref, budget) in float64_outputs(graph, inputs).items():
        got = np.asarray(results[name], np.float64)
        if got.shape != np.shape(ref):
            return False, float("inf")
        error = np.abs(got - ref)
        if error.size:
            worst = max(worst, float(error.max()))
        ok = ok and bool(np.all(error <= budget))
    return ok, worst

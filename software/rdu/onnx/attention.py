"""Scaled dot-product attention as the exporters write it, recognised as the front end's
:func:`rdu.frontend.graph.attention` (``docs/onnx.md``, "Attention")::

    MatMul(Q, Transpose(K)) -> Mul or Div by a constant (the scale; optional)
      -> Add of a constant mask, or Where(mask, ., -inf) (optional; folded at import
         time from Shape, Range, comparisons, Trilu, ...) -> Softmax(axis=-1)
      -> MatMul(., V)

Q is ``(1, H, rows, D)`` (or ``(H, rows, D)``), K and V ``(1, G, L, D)``, ``G`` dividing
``H``. The steps between the two products are kept as *pending* values
(:class:`KeysT`, :class:`Scores`, :class:`Probs`): only the last product makes a
front-end operator, so the scores never exist as a tensor. The mask must be none (all
zeros) or the causal pattern (0 at and below the diagonal, ``-inf`` or at most
``-1e4`` above), which is the attention family's causal mode; any other mask is refused
in one line naming the node that adds it.

Anything else a pending value meets (a Relu of the scores, a product of the
probabilities with a weight) is refused in one line naming the node.
"""

from dataclasses import dataclass

import numpy as np

from ..frontend.graph import attention, heads, merge_heads
from .values import Const, Value

__all__ = ["KeysT", "Scores", "Probs", "PENDING", "convert", "MASKED"]

#: An additive mask value at or below this masks its position (exp underflows to 0).
MASKED = -1e4


@dataclass
class KeysT:
    """``Transpose(K)`` of a heads tensor (its last two axes swapped), times ``scale``
    (SDPA's exporter scales Q and K^T by the square root of the scale each)."""
    k: Value
    scale: float = 1.0


@dataclass
class NaNs:
    """``IsNaN(probs)``: SDPA's exporter zeroes the probabilities of a fully masked row
    (``Where(IsNaN(p), 0, p)``); the causal mask leaves none, so it is ``p``."""
    probs: object


@dataclass
class Scores:
    """``Q K^T * scale + mask``; ``mask``: additive (numpy, broadcast to the scores'
    ONNX shape) or None; ``mask_node``: the node that added it (for the error)."""
    q: Value
    k: Value
    shape: tuple
    scale: float = 1.0
    mask: np.ndarray = None
    mask_node: object = None


@dataclass
class Split:
    """A computed ``(1, L, H * D)`` reshaped to ``(1, L, H, D)``: heads, once
    transposed to ``(1, H, L, D)`` (Q, V) or ``(1, H, D, L)`` (K^T)."""
    x: Value
    count: int


@dataclass
class Merged:
    """Attention's result ``(1, H, L, D)`` transposed to ``(1, L, H, D)``: reshaped to
    ``(1, L, H * D)`` it is the heads merged (:func:`rdu.frontend.graph.merge_heads`)."""
    x: Value


@dataclass
class Repeated:
    """K or V of ``G`` key/value heads (a heads tensor) with a size-1 axis after the
    heads (``Unsqueeze`` or ``Reshape`` to ``(1, G, 1, L, D)``), expanded ``times``
    along it (``Expand``): reshaped to ``(1, G * times, L, D)`` it is HF's
    ``repeat_kv``, which attention reads as the ``G`` heads themselves (grouped-query
    attention: query head ``h`` reads key/value head ``h // times``)."""
    x: Value
    times: int = 1


@dataclass
class Probs:
    """``Softmax(scores)`` over the keys."""
    scores: Scores


PENDING = (KeysT, Scores, Probs, Split, Merged, Repeated, NaNs)


def _heads(imp, value, what):
    """``value`` as a heads tensor: a front-end tensor of three dimensions."""
    if isinstance(value, Value) and len(value.tensor.shape) == 3:
        return value
    shape = value.shape if isinstance(value, Value) else np.shape(value.array)
    imp.fail(f"attention {what} of shape {tuple(shape)} is not a model input of heads",
             "Q, K and V as model inputs of shape (1, heads, rows, dim); computed ones "
             "(projections of x) are not built yet")


def _constant(imp, value, what):
    if not isinstance(value, Const):
        imp.fail(f"{what} is computed", f"{what} as a constant")
    return np.asarray(value.array)


def _factor(imp, value, divide):
    """The factor a ``Mul`` (``divide``: ``Div``) by the constant ``value`` scales by:
    a positive number (a constant of equal elements)."""
    array = np.asarray(_constant(imp, value, "the scale"), np.float64)
    if not array.size or not np.all(array == array.flat[0]) or not array.flat[0] > 0 \
            or not np.isfinite(array.flat[0]):
        imp.fail(f"scale {array.ravel()[:4].tolist()}", "a positive constant of equal "
                 "elements")
    return float(1.0 / array.flat[0] if divide else array.flat[0])


def _scale(imp, scores, value, divide):
    factor = _factor(imp, value, divide)
    mask = None if scores.mask is None else scores.mask * factor
    return Scores(scores.q, scores.k, scores.shape, scores.scale * factor, mask,
                  scores.mask_node)


def _masked(imp, scores, additive):
    additive = np.asarray(additive, np.float64)
    try:
        np.broadcast_to(additive, scores.shape)
    except ValueError:
        imp.fail(f"mask of shape {additive.shape} for scores of shape {scores.shape}")
    mask = additive if scores.mask is None else scores.mask + additive
    return Scores(scores.q, scores.k, scores.shape, scores.scale, mask, imp.node)


def _where(imp, cond, a, b):
    """``Where(cond, scores, fill)`` or ``Where(cond, fill, scores)`` as an additive
    mask: ``fill`` (a constant at or below :data:`MASKED`) where it is chosen."""
    cond = _constant(imp, cond, "the condition")
    scores, fill, pick = (a, b, ~cond.astype(bool)) if isinstance(a, Scores) else (
        b, a, cond.astype(bool))
    if not isinstance(scores, Scores):
        imp.fail("Where of pending attention values", "Where(mask, scores, -inf)")
    fill = np.asarray(_constant(imp, fill, "the masked value"), np.float64)
    if np.any(fill > MASKED):
        imp.fail(f"masked value {fill.ravel()[:2].tolist()}", f"-inf or at most {MASKED}")
    return _masked(imp, scores, np.where(pick, fill, 0.0))


def _causal(imp, scores):
    """Whether ``scores``' mask is the causal one (False: none); refuses another."""
    if scores.mask is None:
        return False
    mask = np.broadcast_to(scores.mask, scores.shape)
    rows, keys = scores.shape[-2:]
    flat = mask.reshape(-1, rows, keys)
    if not np.all(flat == flat[:1]):
        return _refuse_mask(imp, scores, "differs between heads")
    mask = flat[0]
    if np.all(mask == 0):
        return False
    causal = np.triu(np.ones((rows, keys), bool), 1)
    if rows != keys or not np.all(mask[~causal] == 0) or not np.all(mask[causal] <= MASKED):
        return _refuse_mask(imp, scores, "is not the causal pattern")
    return True


def _refuse_mask(imp, scores, what):
    node, imp.node = imp.node, scores.mask_node
    imp.fail(f"the attention mask {what}", f"no mask, or the causal mask (0 at and below "
             f"the diagonal, -inf or at most {MASKED:g} above), rows = keys")
    imp.node = node


def _finish(imp, probs, v):
    scores = probs.scores
    q, k = scores.q, scores.k
    v = _heads(imp, v, "V")
    causal = _causal(imp, scores)
    # attention reads BF16: a computed operand is rounded (the budget counts it)
    operands = [t if t.dtype == "bf16" else imp.call(lambda x: x.astype("bf16"), t)
                for t in (q.tensor, k.tensor, v.tensor)]
    out = imp.call(lambda a, b, c: attention(a, b, c, float(scores.scale), causal),
                   *operands)
    shape = tuple(np.broadcast_shapes(scores.shape[:-2], v.shape[:-2])) + \
        (scores.shape[-2], v.shape[-1])
    return Value(out, shape)


def _matmul(imp, a, b):
    if isinstance(a, Probs):
        return _finish(imp, a, b.x if isinstance(b, Repeated) and b.times == -1 else b)
    if isinstance(b, KeysT):
        q, factor = _unscaled(_heads(imp, a, "Q"))
        shape = tuple(np.broadcast_shapes(q.shape[:-2], b.k.shape[:-2])) + \
            (q.shape[-2], b.k.shape[-2])
        if q.shape[-1] != b.k.shape[-1]:
            imp.fail(f"Q of shape {q.shape} against K of shape {b.k.shape}")
        return Scores(q, b.k, shape, factor * b.scale)
    imp.fail("a matrix product of pending attention values", "MatMul(Q, Transpose(K)) "
             "and MatMul(Softmax(.), V)")


def _unscaled(q):
    """``(q', c)`` with ``q = q' * c`` when ``q`` is a heads tensor times a positive
    number (SDPA's exporter scales Q by the square root of the scale): attention takes
    ``c`` into its scale; else ``(q, 1)``."""
    node = q.tensor.node
    if node.op == "binary" and node.attrs["fn"] == "mul":
        inner, const = node.inputs
        if inner.op == "const":
            inner, const = const, inner
        if const.op == "const" and len(inner.shape) == 3 and \
                np.isfinite(const.attrs["value"]) and const.attrs["value"] > 0:
            return Value(type(q.tensor)(q.tensor.graph, inner), q.shape), \
                float(const.attrs["value"])
    return q, 1.0


def _keys_reshaped(imp, keys, shape):
    """A ``Reshape`` of K^T that adds or drops size-1 dimensions only (SDPA's exporter
    writes K^T of repeated heads as ``(H, D, L)``, then ``(1, H, D, L)``)."""
    k = keys.k
    transposed = k.shape[:-2] + (k.shape[-1], k.shape[-2])
    target = _resolved([int(d) for d in np.asarray(_constant(imp, shape, "the shape"))
                        .ravel()], transposed)
    if len(target) < 2 or [d for d in target if d != 1] != \
            [d for d in transposed if d != 1] or tuple(target[-2:]) != transposed[-2:]:
        imp.fail(f"reshape of K^T {transposed} to {tuple(target)}", "reshapes of K^T that "
                 "add or drop leading size-1 dimensions")
    shape = tuple(target[:-2]) + (target[-1], target[-2])
    return KeysT(Value(k.tensor, shape), keys.scale)


def _transpose(imp, node, x):
    from onnx import helper
    perm = [helper.get_attribute_value(a) for a in node.attribute if a.name == "perm"]
    rank = len(x.shape)
    perm = list(perm[0]) if perm else list(range(rank))[::-1]
    if perm == list(range(rank - 2)) + [rank - 1, rank - 2]:
        return KeysT(_heads(imp, x, "K"))
    if perm == [0, 2, 1, 3] and x.tensor.node.op == "attention":
        return Merged(x)
    imp.fail(f"perm {perm} of a heads tensor of shape {x.shape}", "transposes of the "
             "last two axes (K^T)")


def _softmax(imp, node, scores):
    from onnx import helper
    axis = [helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"]
    axis = axis[0] if axis else -1
    if axis not in (-1, len(scores.shape) - 1):
        imp.fail(f"Softmax over axis {axis} of the scores", "Softmax over the keys (the "
                 "last axis)")
    return Probs(scores)


def convert(imp, node):
    """Convert ``node`` when it is a step of attention (its inputs include a pending
    value, or a Transpose or MatMul of a heads tensor); False when it is not."""
    values = [imp.get(name) if name else None for name in node.input]
    pending = [v for v in values if isinstance(v, PENDING)]
    heads = [v for v in values if isinstance(v, Value) and len(v.tensor.shape) == 3]
    op = node.op_type
    if op == "Reshape" and isinstance(values[0], Value) and isinstance(values[1], Const) \
            and len(values[0].tensor.shape) == 2:
        split = _split_heads(imp, values[0], values[1])
        if split is not None:
            imp.values[node.output[0]] = split
            return True
    if heads and not pending and op in ("Unsqueeze", "Reshape"):
        repeated = _unsqueezed(imp, node, values)
        if repeated is not None:
            imp.values[node.output[0]] = repeated
            return True
    if not pending and not (heads and op in ("Transpose", "MatMul")):
        return False
    if isinstance(values[0], Repeated) and op in ("Expand", "Reshape"):
        imp.values[node.output[0]] = _repeat(imp, op, *values[:2])
        return True
    if isinstance(values[0], Repeated) and op == "Shape":   # dynamic shapes' arithmetic
        imp.values[node.output[0]] = _repeated_shape(node, values[0])
        return True
    if op == "Reshape" and isinstance(values[0], Merged):
        merged = values[0].x
        target = [int(d) for d in np.asarray(_constant(imp, values[1], "the shape")).ravel()]
        count, rows, dim = merged.tensor.shape
        resolved = _resolved(target, (1, rows, count, dim))    # 0: (1, L, H, D)'s
        if resolved not in ([1, rows, count * dim], [rows, count * dim]):
            imp.fail(f"reshape of merged heads to {target}", f"(1, {rows}, {count * dim})")
        tensor = imp.call(merge_heads, merged.tensor)
        imp.values[node.output[0]] = Value(tensor, (1, rows, count * dim))
        return True
    out = _step(imp, node, op, values)
    if out is None:
        imp.fail(f"{op} of {type(pending[0]).__name__.lower()} (a step of attention)",
                 "attention as MatMul(Q, Transpose(K)), Mul or Div by a constant, Add "
                 "of a constant mask or Where, Softmax, MatMul(., V)")
    imp.values[node.output[0]] = out
    return True


def _unsqueezed(imp, node, values):
    """``Unsqueeze(axes=[2])`` or ``Reshape`` to ``(1, G, 1, L, D)`` of a heads tensor
    (the first step of ``repeat_kv``): a :class:`Repeated`; None for anything else."""
    from onnx import helper
    x = values[0]
    if len(x.shape) != 4:
        return None
    heads_, rows, dim = x.tensor.shape
    if node.op_type == "Reshape":
        target = [int(d) for d in np.asarray(_constant(imp, values[1], "the shape")).ravel()]
        target = [x.shape[i] if d == 0 and i < 4 else d for i, d in enumerate(target)]
        fits = target == [1, heads_, 1, rows, dim]
    else:
        axes = [helper.get_attribute_value(a) for a in node.attribute if a.name == "axes"]
        axes = list(axes[0]) if axes else (
            np.asarray(_constant(imp, values[1], "the axes")).ravel().tolist()
            if len(values) > 1 and values[1] is not None else [])
        fits = [int(a) % 5 for a in axes] == [2]
    return Repeated(x) if fits else None


def _repeat(imp, op, repeated, shape):
    """``Expand`` of a :class:`Repeated` along its size-1 axis, or the ``Reshape`` that
    merges it into the heads: ``(1, G * times, L, D)``, attention's K or V of ``G``
    heads (a pending value: anything but attention refuses it)."""
    x, times = repeated.x, repeated.times
    heads_, rows, dim = x.tensor.shape
    target = [int(d) for d in np.asarray(_constant(imp, shape, "the shape")).ravel()]
    if op == "Expand":
        try:
            out = np.broadcast_shapes((1, heads_, times, rows, dim), tuple(target))
        except ValueError:
            out = None
        if out is None or len(out) != 5 or out[:2] != (1, heads_) or out[3:] != (rows, dim):
            imp.fail(f"expand of K/V heads ({heads_}, 1, {rows}, {dim}) to {tuple(target)}",
                     f"repeat_kv: (1, {heads_}, n_rep, {rows}, {dim})")
        return Repeated(x, int(out[2]))
    total = x.shape[-3] if times == -1 else heads_ * times     # -1: reshaped already
    known = [1, total, rows, dim]
    target = _resolved(target, known if len(target) == 4 else known[1:])
    if target not in (known, known[1:]):      # SDPA's exporter writes (H, L, D) too
        imp.fail(f"reshape of repeated K/V heads ({heads_}, {times}, {rows}, {dim}) to "
                 f"{tuple(target)}", f"repeat_kv: {tuple(known)}")
    return Repeated(Value(x.tensor, tuple(target)), -1)


def _repeated_shape(node, repeated):
    """``Shape`` of a :class:`Repeated` (``start``, ``end``): a constant, ``(1, G,
    times, L, D)`` expanded, or the shape it was reshaped to (``times`` -1)."""
    from onnx import helper
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = repeated.x
    shape = tuple(x.shape) if repeated.times == -1 else \
        (1, x.tensor.shape[0], repeated.times) + tuple(x.tensor.shape[1:])
    return Const(np.asarray(shape[attrs.get("start", 0):attrs.get("end")], np.int64),
                 None, node.output[0])


def _split_heads(imp, value, shape):
    """A reshape of a computed matrix ``(1, L, H * D)`` into heads ``(1, L, H, D)``: a
    :class:`Split`; None for a reshape that adds or drops size-1 dimensions only."""
    target = [int(d) for d in np.asarray(shape.array).ravel()]
    if len(target) != 4:
        return None
    rows, width = value.tensor.shape if len(value.tensor.shape) == 2 else (0, 0)
    target = _resolved(target, value.shape)
    size = target[2] * target[3] if target[2] > 0 and target[3] > 0 else 0
    if target[0] == 1 and target[1] in (rows, 0, -1) and size == width:
        return Split(value, target[2])
    if [d for d in target if d != 1] == [d for d in value.shape if d != 1]:
        return None
    imp.fail(f"reshape of {value.shape} to {tuple(target)}", "reshapes into heads: "
             "(1, L, H * D) to (1, L, H, D)")


def _resolved(target, shape):
    """A reshape's ``target`` with ``0`` (copy the dimension: onnx's default, not
    ``allowzero``) and ``-1`` (the rest) resolved against ``shape``."""
    size = int(np.prod(shape))
    target = [shape[i] if d == 0 and i < len(shape) else d for i, d in enumerate(target)]
    if target.count(-1) == 1:
        known = int(np.prod([d for d in target if d != -1]))
        target = [size // known if d == -1 and known else d for d in target]
    return target


def _heads_of(imp, split, perm):
    """``Transpose`` of a :class:`Split`: ``(0, 2, 1, 3)`` the heads (Q, V), ``(0, 2,
    3, 1)`` K^T (attention rounds them to BF16, :func:`_finish`)."""
    if perm not in ([0, 2, 1, 3], [0, 2, 3, 1]):
        imp.fail(f"perm {perm} of heads", "perm [0, 2, 1, 3] (heads) or [0, 2, 3, 1] "
                 "(K^T)")
    tensor = imp.call(lambda t: heads(t, split.count), split.x.tensor)
    value = Value(tensor, (1,) + tensor.shape)
    return value if perm == [0, 2, 1, 3] else KeysT(value)


def _unmasked_nans(imp, nans, fill, probs):
    """``Where(IsNaN(p), c, p)``: ``p`` (no row of a causal or unmasked softmax is NaN)."""
    if probs is not nans.probs:
        imp.fail("Where(IsNaN(p), ., q) of other probabilities", "Where(IsNaN(p), 0, p)")
    _constant(imp, fill, "the value of a NaN")
    return probs


def _step(imp, node, op, values):
    first = values[0]
    if isinstance(first, Repeated) and first.times == -1 and op == "Transpose":
        first = first.x                 # repeat_kv's K: its G heads, shape of H
    if op == "Transpose" and isinstance(first, Value):
        return _transpose(imp, node, first)
    if op == "Transpose" and isinstance(first, Split):
        from onnx import helper
        perm = [list(helper.get_attribute_value(a)) for a in node.attribute
                if a.name == "perm"]
        return _heads_of(imp, first, perm[0] if perm else [3, 2, 1, 0])
    if op == "MatMul":
        return _matmul(imp, *values)
    if op in ("Identity", "Cast") and isinstance(first, PENDING):
        return first            # casts of the scores to float: nothing
    if op == "IsNaN" and isinstance(first, Probs):
        return NaNs(first)
    if op == "Where" and isinstance(first, NaNs):
        return _unmasked_nans(imp, first, *values[1:])
    if isinstance(first, KeysT) and op in ("Mul", "Div") and len(values) == 2:
        return KeysT(first.k, first.scale * _factor(imp, values[1], op == "Div"))
    if op == "Mul" and len(values) == 2 and isinstance(values[1], KeysT):
        return KeysT(values[1].k, values[1].scale * _factor(imp, first, False))
    if isinstance(first, KeysT) and op == "Reshape":
        return _keys_reshaped(imp, first, values[1])
    if not isinstance(first, Scores) and op != "Where" and not (
            len(values) == 2 and isinstance(values[1], Scores)):
        return None
    if op in ("Mul", "Div"):
        scores, other = (first, values[1]) if isinstance(first, Scores) else (
            values[1], first)
        if op == "Div" and other is values[0]:
            return None         # c / scores
        return _scale(imp, scores, other, op == "Div")
    if op == "Add":
        scores, other = (first, values[1]) if isinstance(first, Scores) else (
            values[1], first)
        return _masked(imp, scores, _constant(imp, other, "the mask"))
    if op == "Where":
        return _where(imp, *values)
    if op == "Softmax":
        return _softmax(imp, node, first)
    return None

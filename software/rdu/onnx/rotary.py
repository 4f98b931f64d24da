"""Rotary position embeddings as the exporters write them (``docs/onnx.md``,
"Rotary embeddings")::

    x1 = Slice(x, 0, D/2, axis -1); x2 = Slice(x, D/2, D, axis -1)
    rotate_half(x) = Concat(Neg(x2), x1, axis -1)
    y = Add(Mul(x, cos), Mul(rotate_half(x), sin))

``cos`` and ``sin`` come from position ids and the inverse frequencies (``Range``,
``Unsqueeze``, ``MatMul`` or ``Mul``, ``Concat``, ``Cos``, ``Sin``): constants, folded at
import time (:mod:`rdu.onnx.folds`), which become per-(row, column) weights of the row
group that computes ``y``. The halves and their negation are *pending* values
(:class:`Part`); the ``Concat`` that puts every column of ``x`` back, each once (any
order, any signs), is ``x @ R`` with ``R`` the constant signed permutation: a matrix
product the compiler maps. When ``x`` is itself ``a @ W`` with ``W`` a weight,
``x @ R`` is ``a @ (W R)``: the permutation folds into the weight (exact: ``W R``
permutes ``W``'s columns and flips signs, so its BF16 values are ``W``'s), and both
products read the same ``a``.

A half used any other way is refused in one line naming the node.
"""

from dataclasses import dataclass

import numpy as np

from ..frontend.graph import heads, matmul
from .values import Const, Value

__all__ = ["Part", "convert", "signed_permutation", "half_rotation", "half_rotation_block"]


@dataclass
class Part:
    """Columns ``start .. stop`` of the last axis of ``x``, times ``sign``."""
    x: Value
    start: int
    stop: int
    sign: float = 1.0


def signed_permutation(parts, width):
    """``R`` (width x width) with ``x @ R`` the concatenation of ``parts`` (each
    ``sign * x[:, start:stop]``), or None when they are not every column once."""
    columns = [c for part in parts for c in range(part.start, part.stop)]
    if sorted(columns) != list(range(width)):
        return None
    matrix = np.zeros((width, width), np.float32)
    at = 0
    for part in parts:
        for c in range(part.start, part.stop):
            matrix[c, at] = part.sign
            at += 1
    return matrix


def half_rotation(block):
    """``R`` of ``rotate_half`` over ``block`` columns: ``x @ R = [-x2, x1]``."""
    half = block // 2
    matrix = np.zeros((block, block), np.float32)
    matrix[half:, :half] = -np.eye(half, dtype=np.float32)
    matrix[:half, half:] = np.eye(half, dtype=np.float32)
    return matrix


def half_rotation_block(matrix):
    """The ``block`` (even) whose :func:`half_rotation` repeated down the diagonal is
    ``matrix`` (rotate_half of every head of ``block`` columns), or None."""
    width = matrix.shape[0]
    for block in range(2, width + 1, 2):
        if width % block == 0 and np.array_equal(
                matrix, np.kron(np.eye(width // block, dtype=np.float32),
                                half_rotation(block))):
            return block
    return None


def _const(imp, value, what):
    if not isinstance(value, Const):
        imp.fail(f"{what} is computed", f"{what} as a constant")
    return [int(v) for v in np.asarray(value.array).ravel()]


def _slice(imp, x, starts, ends, axes=None, steps=None):
    rank, width = len(x.shape), x.shape[-1]
    starts, ends = _const(imp, starts, "starts"), _const(imp, ends, "ends")
    axes = list(range(len(starts))) if axes is None else _const(imp, axes, "axes")
    steps = [1] * len(starts) if steps is None else _const(imp, steps, "steps")
    if len(axes) != 1 or axes[0] % rank != rank - 1 or steps != [1]:
        imp.fail(f"Slice of a computed tensor over axes {axes} steps {steps}", "Slice of "
                 "a computed tensor over the last axis, step 1 (rotary's halves)")
    start, stop = (min(max(v + width if v < 0 else v, 0), width)
                   for v in (starts[0], ends[0]))
    if stop <= start:
        imp.fail(f"an empty Slice {start}:{stop}")
    return Part(x, start, stop)


def _rotated(imp, x, matrix):
    """``x @ matrix``: ``a @ (W matrix)`` when ``x`` is ``a @ W`` of a weight ``W``;
    of heads of ``a @ W`` (``W`` of ``H`` heads of ``D`` columns), heads of ``a @ (W
    R)`` with ``R`` the block-diagonal of ``matrix``."""
    node = x.tensor.node
    if node.op == "heads":
        inner = Value(type(x.tensor)(x.tensor.graph, node.inputs[0]), None)
        if inner.tensor.node.op != "matmul":
            imp.fail(f"rotate_half of heads of {inner.tensor.node.op}", "rotate_half of "
                     "heads of a projection x @ W")
        count = node.attrs["count"]
        rotated = _rotated(imp, inner, np.kron(np.eye(count, dtype=np.float32), matrix))
        return Value(imp.call(lambda t: heads(t, count), rotated.tensor), x.shape)
    if node.op == "matmul" and node.inputs[1].op == "input" and \
            node.inputs[1].name in imp.weights:
        a, w = node.inputs
        weight = Const(imp.weights[w.name] @ matrix, None, f"{w.name}_rotated")
        a_tensor = type(x.tensor)(x.tensor.graph, a)
        rotated = imp.tensor(weight).tensor
        block = half_rotation_block(matrix)
        if block is not None:       # the compiler may read W once (docs/onnx.md)
            rotated.node.attrs.update(rotation_of=w.name, rotation_block=block)
        return Value(imp.call(matmul, a_tensor, rotated), x.shape)
    if len(x.tensor.shape) != 2:
        imp.fail(f"rotate_half of a tensor of shape {x.shape}", "rotary embeddings of "
                 "matrices (batch 1, leading size-1 dimensions dropped)")
    weight = imp.tensor(Const(matrix, None, "rotate_half"))
    return Value(imp.call(matmul, x.tensor, weight.tensor), x.shape)


def _concat(imp, node, values):
    from onnx import helper
    axis = [helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"][0]
    parts = [v for v in values if isinstance(v, Part)]
    x = parts[0].x
    rank = len(x.shape)
    if len(parts) != len(values) or any(p.x is not x for p in parts) or \
            axis % rank != rank - 1:
        imp.fail("Concat of halves and other tensors", "Concat over the last axis of "
                 "the halves of one tensor (rotate_half)")
    matrix = signed_permutation(parts, x.shape[-1])
    if matrix is None:
        imp.fail(f"Concat of columns {[(p.start, p.stop) for p in parts]} of width "
                 f"{x.shape[-1]}", "every column once (rotate_half)")
    return _rotated(imp, x, matrix)


def convert(imp, node):
    """Convert ``node`` when it is a step of rotate_half (a Slice of a computed tensor,
    or a node reading a :class:`Part`); False when it is not."""
    values = [imp.get(name) if name else None for name in node.input]
    op = node.op_type
    if op == "Slice" and isinstance(values[0], Value):
        out = _slice(imp, *values)
    elif not any(isinstance(v, Part) for v in values):
        return False
    elif op == "Neg":
        part = values[0]
        out = Part(part.x, part.start, part.stop, -part.sign)
    elif op == "Concat":
        out = _concat(imp, node, values)
    elif op == "Identity":
        out = values[0]
    else:
        imp.fail(f"{op} of a Slice of a computed tensor", "Slices of a computed tensor "
                 "in rotate_half: Concat(Neg(x2), x1) of its halves")
    imp.values[node.output[0]] = out
    return True

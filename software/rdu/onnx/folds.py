"""Operators the importer folds at import time only (every input a constant): the shape
and position arithmetic exporters write around attention (``docs/onnx.md``): the causal
mask from ``Shape``, ``Range``, comparisons, ``Where``, ``Trilu``, ``ConstantOfShape``,
``Expand``, ``GatherND`` (HF's padding mask); rotary tables from ``Range``, ``Cos``,
``Sin``, ``Slice``, ``Concat``.

:data:`FOLDS` (``{op_type: function(attrs, *arrays) -> array}``) and :data:`ATTRIBUTES`
extend :data:`rdu.onnx.ops.FOLDS` and :data:`rdu.onnx.ops.ATTRIBUTES`. None of these
operators takes a computed tensor: a computed input is refused in one line naming the
node (``... of constants and shapes only``).
"""

import functools

import numpy as np

__all__ = ["FOLDS", "ATTRIBUTES"]


def _slice(attrs, x, starts, ends, axes=None, steps=None):
    axes = range(len(starts)) if axes is None else [int(a) % x.ndim for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        index[axis] = slice(int(start), int(end), int(step))
    return x[tuple(index)]


def _trilu(attrs, x, k=None):
    k = 0 if k is None else int(np.asarray(k).ravel()[0])
    return np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)


def _constant_of_shape(attrs, shape):
    from onnx import numpy_helper
    value = (numpy_helper.to_array(attrs["value"]).ravel() if "value" in attrs
             else np.zeros(1, np.float32))
    return np.full([int(d) for d in shape], value[0], value.dtype)


def _expand(attrs, x, shape):
    return x * np.ones([int(d) for d in shape], x.dtype)


def _gather_nd(attrs, x, indices):
    """ONNX ``GatherND``: ``x[indices[..., 0], indices[..., 1], ...]`` after
    ``batch_dims`` leading dimensions (HF's padding mask indexes the attention mask)."""
    batch = int(attrs.get("batch_dims", 0))
    indices = np.asarray(indices, np.int64)
    if batch:
        return np.stack([_gather_nd({}, a, i) for a, i in zip(
            x.reshape((-1,) + x.shape[batch:]), indices.reshape((-1,) + indices.shape[batch:]),
            strict=True)]).reshape(indices.shape[:-1] + x.shape[batch + indices.shape[-1]:])
    return x[tuple(np.moveaxis(indices, -1, 0))]


def _compare(function):
    return lambda attrs, a, b: function(a, b)


#: ``{op_type: function(attrs, *arrays) -> array}``: folded with numpy.
FOLDS = {
    "Range": lambda attrs, start, limit, delta: np.arange(
        start.ravel()[0], limit.ravel()[0], delta.ravel()[0]).astype(start.dtype),
    "Less": _compare(np.less), "Greater": _compare(np.greater),
    "LessOrEqual": _compare(np.less_equal), "GreaterOrEqual": _compare(np.greater_equal),
    "Equal": _compare(np.equal), "Not": lambda attrs, x: np.logical_not(x),
    "And": _compare(np.logical_and), "Or": _compare(np.logical_or),
    "Where": lambda attrs, c, a, b: np.where(c, a, b),
    "Trilu": _trilu, "ConstantOfShape": _constant_of_shape, "Expand": _expand,
    "Slice": _slice, "Cos": lambda attrs, x: np.cos(x), "Sin": lambda attrs, x: np.sin(x),
    "Max": lambda attrs, *xs: functools.reduce(np.maximum, xs),     # broadcasting
    "Min": lambda attrs, *xs: functools.reduce(np.minimum, xs),
    "GatherND": _gather_nd,
    "Tile": lambda attrs, x, repeats: np.tile(x, [int(r) for r in repeats]),
}

#: The attributes each of them may carry.
ATTRIBUTES = {"Trilu": ("upper",), "ConstantOfShape": ("value",),
              "GatherND": ("batch_dims",)}

"""The ONNX operators the importer converts: :data:`CONVERTERS`, one function per
operator type (``docs/onnx.md`` has the table).

A converter takes the :class:`~rdu.onnx.importer.Importer`, the node and its input
values (:class:`~rdu.onnx.importer.Const` or :class:`~rdu.onnx.importer.Value`, None
for an omitted optional input) and returns its output values. Operators over constants
only fold with numpy (:data:`FOLDS`), so shape arithmetic (Shape, Gather of a shape,
Concat, Constant arithmetic) costs nothing on the machine.
"""

import numpy as np

from ..frontend.graph import Tensor, exp, matmul, reciprocal, relu, rsqrt, sqrt
from .folds import ATTRIBUTES as _FOLD_ATTRIBUTES
from .folds import FOLDS as _MORE_FOLDS
from .values import Const, Value, core_shape

__all__ = ["CONVERTERS", "FOLDS", "ATTRIBUTES", "convert_node", "supported_operators"]


def _attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _const_input(imp, value, what):
    if not isinstance(value, Const):
        imp.fail(f"{what} must be a constant (an initializer or Constant), not computed")
    return np.asarray(value.array)


def _last_axis(imp, axis, rank, what):
    if axis not in (-1, rank - 1):
        imp.fail(f"{what} over axis {axis} of a rank-{rank} tensor",
                 f"{what} over the last axis")


def _binary(imp, a, b, function):
    """``function(x, y)`` of two values, at least one a tensor."""
    shape = tuple(np.broadcast_shapes(_shape(a), _shape(b)))
    x, _ = imp.operand(a, _shape(b)) if isinstance(a, Const) else (a.tensor, a.shape)
    y, _ = imp.operand(b, _shape(a)) if isinstance(b, Const) else (b.tensor, b.shape)
    return Value(imp.call(function, x, y), shape)


def _shape(value):
    return tuple(np.shape(value.array)) if isinstance(value, Const) else value.shape


def _unary(value, tensor):
    return Value(tensor, value.shape)


# -- element-wise ---------------------------------------------------------------------------

def convert_add(imp, node, attrs, a, b):
    return [_binary(imp, a, b, lambda x, y: x + y)]


def convert_sub(imp, node, attrs, a, b):
    return [_binary(imp, a, b, lambda x, y: x - y)]


def convert_mul(imp, node, attrs, a, b):
    return [_binary(imp, a, b, lambda x, y: x * y)]


def _rsqrt_of(value):
    """``rsqrt(y)`` when ``value`` is a square root (``reciprocal(rsqrt(y))``, what Sqrt
    and Pow 0.5 write), else None: its reciprocal is then the PCU's rsqrt itself."""
    if not isinstance(value, Value):
        return None
    node = value.tensor.node
    if node.op == "unary" and node.attrs["fn"] == "reciprocal":
        inner = node.inputs[0]
        if inner.op == "unary" and inner.attrs["fn"] == "rsqrt":
            return Value(Tensor(value.tensor.graph, inner), value.shape)
    return None


def _is_one(value, shape):
    """``value`` is a constant of ones that does not widen ``shape``."""
    if not isinstance(value, Const):
        return False
    array = np.asarray(value.array, np.float64)
    return bool(array.size and np.all(array == 1.0) and
                np.broadcast_shapes(array.shape, shape) == tuple(shape))


def convert_div(imp, node, attrs, a, b):
    """``a / c`` (``c`` a constant of equal elements) scales by ``1 / c``; ``a / t`` of
    a tensor ``t`` is ``a * reciprocal(t)``; ``a / sqrt(y)`` is ``a * rsqrt(y)`` and
    ``1 / sqrt(y)`` is ``rsqrt(y)``."""
    inverse = _rsqrt_of(b)
    if inverse is not None:
        if _is_one(a, inverse.shape):
            return [inverse]
        return [_binary(imp, a, inverse, lambda x, y: x * y)]
    if isinstance(b, Const):
        array = np.asarray(b.array, np.float64)
        if array.size and np.all(array == array.flat[0]) and array.flat[0] != 0:
            shape = tuple(np.broadcast_shapes(_shape(a), array.shape))
            if shape == _shape(a):
                return [Value(imp.call(lambda x: x * (1.0 / float(array.flat[0])),
                                       a.tensor), shape)]
        b = imp.tensor(b)
    inverse = Value(imp.call(reciprocal, b.tensor), b.shape)
    return [_binary(imp, a, inverse, lambda x, y: x * y)]


def convert_neg(imp, node, attrs, x):
    return [_unary(x, imp.call(lambda t: t * -1.0, x.tensor))]


def convert_exp(imp, node, attrs, x):
    return [_unary(x, imp.call(exp, x.tensor))]


def convert_reciprocal(imp, node, attrs, x):
    """``reciprocal(x)``; of a square root, the PCU's ``rsqrt`` of its operand."""
    inverse = _rsqrt_of(x)
    if inverse is not None:
        return [inverse]
    return [_unary(x, imp.call(reciprocal, x.tensor))]


def convert_sqrt(imp, node, attrs, x):
    """``reciprocal(rsqrt(x))`` (:func:`rdu.frontend.graph.sqrt`); a Reciprocal or Div
    of it takes the ``rsqrt`` alone."""
    return [_unary(x, imp.call(sqrt, x.tensor))]


#: Exponents of Pow (a constant) and what they become.
POW_EXPONENTS = {2.0: lambda t: t * t, 1.0: lambda t: t, 0.5: sqrt, -0.5: rsqrt,
                 -1.0: reciprocal}


def convert_pow(imp, node, attrs, x, y):
    """``x ** c``, ``c`` a constant of equal elements: 2 (``x * x``, RMSNorm's
    ``x.pow(2)``), 1, 0.5 (sqrt), -0.5 (rsqrt), -1 (reciprocal)."""
    if not isinstance(y, Const):
        imp.fail("a computed exponent", "Pow by a constant")
    array = np.asarray(y.array, np.float64)
    exponent = float(array.flat[0]) if array.size else None
    supported = "Pow by a constant exponent 2, 1, 0.5, -0.5 or -1"
    if exponent not in POW_EXPONENTS or not np.all(array == exponent):
        imp.fail(f"exponent {array.ravel()[:4].tolist()}", supported)
    if np.broadcast_shapes(array.shape, x.shape) != tuple(x.shape):
        imp.fail(f"exponent of shape {array.shape} widens {x.shape}", supported)
    return [_unary(x, imp.call(POW_EXPONENTS[exponent], x.tensor))]


def convert_relu(imp, node, attrs, x):
    return [_unary(x, imp.call(relu, x.tensor))]


def convert_sigmoid(imp, node, attrs, x):
    """``reciprocal(1 + exp(-x))`` (the MLP kernel's SiLU writes it so)."""
    return [_unary(x, imp.call(lambda t: reciprocal(exp(t * -1.0) + 1.0), x.tensor))]


def convert_identity(imp, node, attrs, x):
    return [x]


def convert_cast(imp, node, attrs, x):
    """To bfloat16 or float16: the cast to BF16 (round to nearest even); to float: the
    value as it is (widening BF16 to FP32 is exact)."""
    from onnx import TensorProto
    to = attrs["to"]
    if to in (TensorProto.BFLOAT16, TensorProto.FLOAT16):
        return [_unary(x, imp.call(lambda t: t.astype("bf16"), x.tensor))]
    if to == TensorProto.FLOAT:
        return [x]
    imp.fail(f"cast to {TensorProto.DataType.Name(to)}", "casts to float, float16 and "
             "bfloat16")


# -- matrix products ------------------------------------------------------------------------

def _matrix(imp, value, what):
    value = imp.tensor(value)
    shape = value.tensor.shape
    if len(shape) != 2 or len(core_shape(value.shape, keep=2)) != 2:
        imp.fail(f"{what} of shape {value.shape}", "matrices (2-D, leading size-1 "
                 "dimensions dropped: batch 1)")
    return value


def convert_matmul(imp, node, attrs, a, b):
    a, b = _matrix(imp, a, "operand A"), _matrix(imp, b, "operand B")
    out = imp.call(matmul, a.tensor, b.tensor)
    rank = max(len(a.shape), len(b.shape))
    return [Value(out, (1,) * (rank - 2) + out.shape)]


def convert_gemm(imp, node, attrs, a, b, c=None):
    """``alpha * A' B' + beta * C``: ``transB`` (or ``transA``) of a constant folds into
    its values (the weight input holds the transposed matrix), of a tensor is ``.T``."""
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    operands = []
    for value, flag, label in ((a, "transA", "A"), (b, "transB", "B")):
        if attrs.get(flag, 0):
            if isinstance(value, Const):
                value = Const(np.asarray(value.array).T, value.origin,
                              f"{value.name}_T")
            else:
                value = _matrix(imp, value, f"operand {label}")
                value = Value(imp.call(lambda t: t.T, value.tensor), value.shape[::-1])
        operands.append(_matrix(imp, value, f"operand {label}"))
    out = Value(imp.call(matmul, operands[0].tensor, operands[1].tensor),
                (operands[0].shape[0], operands[1].shape[1]))
    if alpha != 1.0:
        out = Value(imp.call(lambda t: t * alpha, out.tensor), out.shape)
    if c is not None:
        if beta != 1.0:
            if isinstance(c, Const) and abs(np.frexp(beta)[0]) == 0.5:
                # a power of two scales BF16 values exactly: still C's values
                c = Const(np.asarray(c.array, np.float32) * np.float32(beta), c.origin,
                          c.name)
            else:
                c = imp.tensor(c)
                c = Value(imp.call(lambda t: t * beta, c.tensor), c.shape)
        out = _binary(imp, out, c, lambda x, y: x + y)
    return [out]


# -- rows -----------------------------------------------------------------------------------

def convert_softmax(imp, node, attrs, x):
    """``exp(x - max) * reciprocal(sum)`` over the last axis (the softmax kernel's)."""
    _last_axis(imp, attrs.get("axis", -1), len(x.shape), "Softmax")
    t = x.tensor
    e = imp.call(lambda v: exp(v - v.max()), t)
    return [_unary(x, imp.call(lambda v: v * reciprocal(v.sum()), e))]


def _reduce(imp, node, attrs, x, axes, fn):
    rank = len(x.shape)
    if axes is None:
        axes = attrs.get("axes")
    if axes is not None:
        axes = [int(a) for a in np.asarray(axes).ravel()]
    if not axes:
        imp.fail("a reduction over every axis", f"{node.op_type} over the last axis")
    if len(axes) != 1:
        imp.fail(f"a reduction over axes {axes}", f"{node.op_type} over the last axis")
    _last_axis(imp, axes[0], rank, node.op_type)
    if not attrs.get("keepdims", 1):
        imp.fail("keepdims=0", f"{node.op_type} with keepdims=1")
    t = x.tensor
    length = t.shape[-1]
    out = imp.call(fn, t, length)
    return [Value(out, x.shape[:-1] + (1,))]


def _axes_input(imp, axes):
    return None if axes is None else _const_input(imp, axes, "axes")


def convert_reduce_max(imp, node, attrs, x, axes=None):
    return _reduce(imp, node, attrs, x, _axes_input(imp, axes), lambda t, n: t.max())


def convert_reduce_sum(imp, node, attrs, x, axes=None):
    return _reduce(imp, node, attrs, x, _axes_input(imp, axes), lambda t, n: t.sum())


def convert_reduce_mean(imp, node, attrs, x, axes=None):
    return _reduce(imp, node, attrs, x, _axes_input(imp, axes),
                   lambda t, n: t.sum() / float(n))


def convert_rms_normalization(imp, node, attrs, x, scale):
    """Opset 23's ``RMSNormalization``: ``x * rsqrt(mean(x * x) + epsilon) * scale``
    over the last axis (``axis`` -1; ``stash_type`` float)."""
    rank = len(x.shape)
    _last_axis(imp, attrs.get("axis", -1), rank, "RMSNormalization")
    if attrs.get("stash_type", 1) != _FLOAT:
        imp.fail(f"stash_type {attrs['stash_type']}", "stash_type 1 (float)")
    epsilon = float(attrs.get("epsilon", 1e-5))
    length = x.shape[-1]
    normed = imp.call(lambda t: t * rsqrt((t * t).sum() * (1.0 / length) + epsilon),
                      x.tensor)
    return [_binary(imp, Value(normed, x.shape), scale, lambda a, b: a * b)]


# -- layout ---------------------------------------------------------------------------------

def convert_transpose(imp, node, attrs, x):
    perm = attrs.get("perm")
    rank = len(x.shape)
    if perm is None:
        perm = list(range(rank))[::-1]
    perm = list(perm)
    moved = [i for i, p in enumerate(perm) if p != i]
    if not moved:
        return [x]                                  # the identity permutation
    if sorted(moved) != [rank - 2, rank - 1] or rank < 2:
        imp.fail(f"perm {perm}", "transposes of the last two axes of a matrix")
    x = _matrix(imp, x, "transposed tensor")
    shape = x.shape[:-2] + (x.shape[-1], x.shape[-2])
    return [Value(imp.call(lambda t: t.T, x.tensor), shape)]


def _relayout(imp, x, shape):
    """``x`` seen with ONNX shape ``shape``: only size-1 dimensions added or dropped."""
    shape = tuple(int(d) for d in shape)
    if [d for d in shape if d != 1] != [d for d in x.shape if d != 1]:
        imp.fail(f"reshape of {x.shape} to {shape}", "reshapes that add or drop size-1 "
                 "dimensions")
    if core_shape(shape) != core_shape(x.shape):
        imp.fail(f"reshape of {x.shape} to {shape} moves a size-1 dimension inside the "
                 f"matrix", "reshapes that add or drop leading size-1 dimensions")
    return Value(x.tensor, shape)


def convert_reshape(imp, node, attrs, x, shape):
    target = [int(d) for d in _const_input(imp, shape, "the shape")]
    if attrs.get("allowzero", 0) and 0 in target:
        imp.fail("allowzero with a zero in the shape", "reshapes of static shapes")
    size = int(np.prod(x.shape))
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1]))
        target = [size // known if d == -1 else d for d in target]
    return [_relayout(imp, x, target)]


def convert_squeeze(imp, node, attrs, x, axes=None):
    axes = attrs.get("axes") if axes is None else _const_input(imp, axes, "axes")
    rank = len(x.shape)
    if axes is None:
        shape = [d for d in x.shape if d != 1]
    else:
        drop = {int(a) % rank for a in np.asarray(axes).ravel()}
        shape = [d for i, d in enumerate(x.shape) if i not in drop]
    return [_relayout(imp, x, shape)]


def convert_unsqueeze(imp, node, attrs, x, axes=None):
    axes = attrs.get("axes") if axes is None else _const_input(imp, axes, "axes")
    rank = len(x.shape) + len(np.asarray(axes).ravel())
    shape = list(x.shape)
    for axis in sorted(int(a) % rank for a in np.asarray(axes).ravel()):
        shape.insert(axis, 1)
    return [_relayout(imp, x, shape)]


def convert_shape(imp, node, attrs, x):
    """The ONNX shape of a tensor, a constant (shapes are static)."""
    return [Const(_fold_shape(attrs, np.empty(x.shape, np.int8)), None, node.output[0])]


def convert_constant(imp, node, attrs):
    from onnx import numpy_helper
    if "value" in attrs:
        array = numpy_helper.to_array(attrs["value"])
    elif "value_float" in attrs or "value_floats" in attrs:
        array = np.asarray(attrs.get("value_float", attrs.get("value_floats")), np.float32)
    elif "value_int" in attrs or "value_ints" in attrs:
        array = np.asarray(attrs.get("value_int", attrs.get("value_ints")), np.int64)
    else:
        imp.fail(f"attributes {sorted(attrs)}", "value, value_float(s), value_int(s)")
    if array.dtype.kind == "f" or array.dtype.name == "bfloat16":
        array = np.asarray(array, np.float32)
    return [Const(array, None, node.output[0])]


# -- folds: operators over constants only ---------------------------------------------------

def _fold_cast(attrs, x):
    import ml_dtypes
    from onnx import TensorProto
    types = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16,
             TensorProto.BFLOAT16: ml_dtypes.bfloat16, TensorProto.INT64: np.int64,
             TensorProto.INT32: np.int32, TensorProto.DOUBLE: np.float64,
             TensorProto.BOOL: np.bool_}
    return np.asarray(x).astype(types[attrs["to"]])


def _fold_shape(attrs, x):
    return np.asarray(x.shape[attrs.get("start", 0):attrs.get("end")], np.int64)


def _fold_reshape(attrs, x, shape):
    target = [x.shape[i] if d == 0 and not attrs.get("allowzero", 0) else int(d)
              for i, d in enumerate(np.asarray(shape))]
    return np.reshape(x, target)


def _fold_squeeze(attrs, x, axes=None):
    axes = attrs.get("axes") if axes is None else axes
    return np.squeeze(x, axis=None if axes is None else tuple(int(a) for a in axes))


def _fold_unsqueeze(attrs, x, axes=None):
    axes = attrs.get("axes") if axes is None else axes
    return np.expand_dims(x, tuple(int(a) % (x.ndim + len(axes)) for a in axes))


def _fold_reduce(function):
    def fold(attrs, x, axes=None):
        axes = attrs.get("axes") if axes is None else axes
        axis = None if axes is None or not len(axes) else tuple(int(a) for a in axes)
        return function(x, axis=axis, keepdims=bool(attrs.get("keepdims", 1)))
    return fold


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _softmax(attrs, x):
    e = np.exp(x - x.max(axis=attrs.get("axis", -1), keepdims=True))
    return e / e.sum(axis=attrs.get("axis", -1), keepdims=True)


#: ``{op_type: function(attrs, *arrays) -> array}``: a node whose inputs are all
#: constants becomes a constant (numpy, float32 like the model).
FOLDS = {
    "Add": lambda attrs, a, b: a + b, "Sub": lambda attrs, a, b: a - b,
    "Mul": lambda attrs, a, b: a * b,
    "Div": lambda attrs, a, b: (a // b if a.dtype.kind in "iu" else a / b),
    "Neg": lambda attrs, x: -x, "Exp": lambda attrs, x: np.exp(x),
    "Reciprocal": lambda attrs, x: 1 / x, "Relu": lambda attrs, x: np.maximum(x, 0),
    "Sigmoid": lambda attrs, x: _sigmoid(x), "Identity": lambda attrs, x: x,
    "Pow": lambda attrs, a, b: np.power(a, b), "Sqrt": lambda attrs, x: np.sqrt(x),
    "Cast": _fold_cast, "Shape": _fold_shape, "Reshape": _fold_reshape,
    "Squeeze": _fold_squeeze, "Unsqueeze": _fold_unsqueeze,
    "Transpose": lambda attrs, x: np.transpose(x, attrs.get("perm")),
    "Gather": lambda attrs, x, i: np.take(x, i, axis=attrs.get("axis", 0)),
    "Concat": lambda attrs, *xs: np.concatenate(xs, axis=attrs["axis"]),
    "MatMul": lambda attrs, a, b: a @ b, "Softmax": _softmax,
    "ReduceMax": _fold_reduce(np.max), "ReduceSum": _fold_reduce(np.sum),
    "ReduceMean": _fold_reduce(np.mean), **_MORE_FOLDS,
}

_FLOAT = 1       # onnx.TensorProto.FLOAT (a cast to it widens: the values stay)

#: Operators that keep a constant's values as they are (only moved): the weight they
#: become is still the initializer's values, rounded to BF16 on the machine.
RELAYOUTS = ("Identity", "Transpose", "Reshape", "Squeeze", "Unsqueeze")

#: ``{op_type: function(importer, node, attrs, *values) -> [values]}``.
CONVERTERS = {
    "Add": convert_add, "Sub": convert_sub, "Mul": convert_mul, "Div": convert_div,
    "Neg": convert_neg, "Exp": convert_exp, "Reciprocal": convert_reciprocal,
    "Sqrt": convert_sqrt, "Pow": convert_pow,
    "RMSNormalization": convert_rms_normalization,
    "Relu": convert_relu, "Sigmoid": convert_sigmoid, "Identity": convert_identity,
    "Cast": convert_cast, "MatMul": convert_matmul, "Gemm": convert_gemm,
    "Softmax": convert_softmax, "ReduceMax": convert_reduce_max,
    "ReduceSum": convert_reduce_sum, "ReduceMean": convert_reduce_mean,
    "Transpose": convert_transpose, "Reshape": convert_reshape,
    "Squeeze": convert_squeeze, "Unsqueeze": convert_unsqueeze,
    "Constant": convert_constant, "Shape": convert_shape,
}

#: The attributes each operator may carry (any other is refused).
ATTRIBUTES = {
    "Gemm": ("alpha", "beta", "transA", "transB"), "Softmax": ("axis",),
    "ReduceMax": ("axes", "keepdims", "noop_with_empty_axes"),
    "ReduceSum": ("axes", "keepdims", "noop_with_empty_axes"),
    "ReduceMean": ("axes", "keepdims", "noop_with_empty_axes"),
    "Cast": ("to", "saturate"), "Transpose": ("perm",), "Reshape": ("allowzero",),
    "Squeeze": ("axes",), "Unsqueeze": ("axes",), "Shape": ("start", "end"),
    "Gather": ("axis",), "Concat": ("axis",),
    "RMSNormalization": ("axis", "epsilon", "stash_type"),
    "Constant": ("value", "value_float", "value_floats", "value_int", "value_ints"),
    **_FOLD_ATTRIBUTES,
}


def supported_operators():
    """The operator types the importer takes, sorted (on tensors, or constants only)."""
    return sorted(CONVERTERS)


def _fold(imp, node, attrs, values):
    arrays = [None if v is None else np.asarray(v.array) for v in values]
    while arrays and arrays[-1] is None:
        arrays.pop()
    try:
        result = FOLDS[node.op_type](attrs, *arrays)
    except Exception as error:          # numpy's complaint about the constants
        imp.fail(f"cannot fold constants ({error})")
    if np.asarray(result).dtype.kind == "f" or np.asarray(result).dtype.name == "bfloat16":
        result = np.asarray(result, np.float32)
    widening = node.op_type == "Cast" and attrs["to"] == _FLOAT
    origin = values[0].origin if node.op_type in RELAYOUTS or widening else None
    return [Const(np.asarray(result), origin, node.output[0])]


def convert_node(imp, node):
    """Convert one node into ``imp``'s values (or refuse it in one line)."""
    if node.domain not in ("", "ai.onnx"):
        imp.fail(f"operator domain {node.domain!r}", "the default ONNX domain")
    if node.op_type not in CONVERTERS and node.op_type not in FOLDS:
        imp.fail(f"operator {node.op_type} is not supported",
                 ", ".join(supported_operators()) + " (and of constants "
                 "only: " + ", ".join(sorted(set(FOLDS) - set(CONVERTERS))) + ")")
    attrs = _attrs(node)
    allowed = ATTRIBUTES.get(node.op_type, ())
    extra = sorted(set(attrs) - set(allowed))
    if extra:
        imp.fail(f"attribute {', '.join(extra)}", ", ".join(allowed) or "no attributes")
    values = [imp.get(name) if name else None for name in node.input]
    if node.op_type == "Constant" or all(isinstance(v, Const) or v is None
                                         for v in values):
        if node.op_type not in FOLDS:
            outputs = CONVERTERS[node.op_type](imp, node, attrs, *values)
        else:
            outputs = _fold(imp, node, attrs, values)
    elif node.op_type not in CONVERTERS:
        imp.fail(f"{node.op_type} of a computed tensor", f"{node.op_type} of constants "
                 f"and shapes only")
    else:
        outputs = CONVERTERS[node.op_type](imp, node, attrs, *values)
    for name, value in zip(node.output, outputs, strict=False):
        if name:
            imp.values[name] = value

"""Causal LMs with a KV cache (``docs/onnx.md``, "A KV cache"): the dynamic dimensions
bound, the prefill imported.

The exporters write a causal LM with a cache as one graph of dynamic dimensions: inputs
``input_ids`` (or ``inputs_embeds``) ``(1, L)``, ``position_ids`` ``(1, L)`` and/or
``attention_mask`` ``(1, P + L)`` (int64), ``past_key_values.{i}.key`` and ``.value``
``(1, G, P, D)``; outputs ``logits`` and ``present.{i}.key``, ``.value`` ``(1, G, P + L,
D)`` = ``Concat(past, new)`` on axis 2. :func:`bind` gives every dynamic dimension of
the graph's inputs a value:

* ``dims`` (``rdu run --bind NAME=VALUE``) first;
* the past's length ``P`` (axis 2 of a ``past_key_values.*`` input): 0, the prefill;
* the sequence ``L`` from the shape of an input array a run is given (``--input``);
* ``attention_mask``'s length: ``P + L``;

and refuses in one line what stays unbound, and a past of length ``P > 0`` (decode
steps: ``rdu generate``, which compiles a decode step of its own). The prefill's bound
inputs are constants of the import (:data:`Bound`): the empty past, ``position_ids``
``arange(P, P + L)``, ``attention_mask`` ones (one prompt, no padding), so the rotary
tables and the causal mask fold as before; onnxruntime is fed the same values.
``Concat`` of the empty past
and the new keys or values is the new ones (:func:`convert`).
"""

import re

import numpy as np

from .values import Const, OnnxImportError

__all__ = ["bind", "convert", "Bound", "PAST", "SEQUENCE_INPUTS", "is_past", "dims_of"]

#: The names of past inputs (HF's and the exporters'): ``past_key_values.{i}.key`` and
#: ``.value`` (also ``past_key_values.{i}.{j}``, ``past.{i}.key``).
PAST = re.compile(r"^past(_key_values)?[._]\d+[._](key|value|\d)$")

#: The inputs the prefill binds to constants (besides the past).
POSITION_INPUTS = ("position_ids", "attention_mask")

#: The sequence inputs whose axis 1 is ``L``.
SEQUENCE_INPUTS = ("input_ids", "inputs_embeds", "position_ids")


def is_past(name):
    """Whether the graph input ``name`` is a past key or value of a cache."""
    return bool(PAST.match(name))


class Bound(dict):
    """``{ONNX input name: array}`` of the inputs the binding fixes (the empty past,
    ``position_ids``, ``attention_mask``), with ``dims`` (``{dimension name: value}``)."""

    def __init__(self, arrays=(), dims=None):
        super().__init__(arrays)
        self.dims = dict(dims or {})


def dims_of(info):
    """The dimensions (``TensorShapeProto.Dimension``) of graph input ``info``."""
    return list(info.type.tensor_type.shape.dim)


def _given(shape, rank):
    """``shape`` of a given array aligned to ``rank`` axes (its leading size-1
    dimensions may be dropped), or None."""
    shape = tuple(shape)
    if len(shape) > rank:
        return None
    return (1,) * (rank - len(shape)) + shape


def _dims_from(info, given, values):
    """The dynamic dimensions of ``info`` from the shape ``given`` of an array of it,
    into ``values`` (those not given already)."""
    shape = _given(given, len(dims_of(info)))
    if shape is None:
        return                      # more axes than the input: the kernel refuses it
    for dim, size in zip(dims_of(info), shape, strict=True):
        if dim.dim_param and dim.dim_param not in values:
            values[dim.dim_param] = int(size)


def bind(model, label, dims=None, shapes=None):
    """``(model, bound)``: a copy of ``model`` whose graph inputs have static shapes, and
    :class:`Bound`; ``model`` itself and an empty :class:`Bound` when nothing is
    dynamic and nothing is a cache. ``dims``: ``{name: value}``; ``shapes``: ``{ONNX
    input name: shape}`` of the arrays a run is given. One line
    (:class:`OnnxImportError`) for a dimension that stays unbound, a ``--bind`` the
    model does not have, and a past of length over 0."""
    inputs = list(model.graph.input)
    names = {d.dim_param for info in inputs for d in dims_of(info) if d.dim_param}
    past = [info for info in inputs if is_past(info.name)]
    if not names and not past:
        if dims:
            raise OnnxImportError(f"{label}: --bind {next(iter(dims))}: the model's inputs "
                                  f"have static shapes")
        return model, Bound()
    values = {}
    for name, value in (dims or {}).items():
        if name not in names:
            raise OnnxImportError(f"{label}: --bind {name}={value}: the model has no "
                                  f"dynamic dimension {name!r}; its dynamic dimensions: "
                                  f"{', '.join(sorted(names)) or 'none'}")
        if int(value) < 0:
            raise OnnxImportError(f"{label}: --bind {name}={value}: a size of 0 or more")
        values[name] = int(value)
    for info in past:                               # P: 0 (the prefill) unless given
        dim = dims_of(info)[2] if len(dims_of(info)) == 4 else None
        if dim is not None and dim.dim_param:
            values.setdefault(dim.dim_param, 0)
    for name, shape in (shapes or {}).items():      # L from the arrays given
        info = next((i for i in inputs if i.name == name), None)
        if info is not None and name not in POSITION_INPUTS:
            _dims_from(info, shape, values)
    length = _sequence_length(inputs, values)
    lengths = {}
    for info in past:
        dims_ = dims_of(info)
        size = None
        if len(dims_) == 4:
            size = values.get(dims_[2].dim_param) if dims_[2].dim_param else \
                dims_[2].dim_value
        if size is None:
            raise OnnxImportError(f"{label}: graph: past input {info.name!r} of rank "
                                  f"{len(dims_)}; supported: (1, key/value heads, past "
                                  f"length, head dimension)")
        lengths[info.name] = size
    for name, size in lengths.items():
        if size:
            raise OnnxImportError(f"{label}: graph: input {name!r} holds a past of length "
                                  f"{size}: decode steps run with `rdu generate` "
                                  f"(docs/generate.md); supported: the prefill (a past of "
                                  f"length 0)")
    mask = next((i for i in inputs if i.name == "attention_mask"), None)
    if mask is not None and len(dims_of(mask)) == 2 and dims_of(mask)[1].dim_param and \
            length is not None:
        name = dims_of(mask)[1].dim_param
        values.setdefault(name, length)                         # P + L, P = 0
        if values[name] != length:
            raise OnnxImportError(f"{label}: --bind {name}={values[name]}: the attention "
                                  f"mask's length is the past's (0) plus the sequence's "
                                  f"({length})")
    bound = _bound_model(model, label, values)
    return bound, _bound_inputs(bound, label, values)


def _sequence_length(inputs, values):
    """``L``: axis 1 of a sequence input, once bound (or static)."""
    for info in inputs:
        dims = dims_of(info)
        if info.name in SEQUENCE_INPUTS and len(dims) >= 2:
            dim = dims[1]
            if dim.dim_param in values:
                return values[dim.dim_param]
            if not dim.dim_param and dim.dim_value:
                return dim.dim_value
    return None


def _bound_model(model, label, values):
    """A copy of ``model`` with its inputs' dynamic dimensions ``values``."""
    bound = type(model)()
    bound.CopyFrom(model)
    for info in bound.graph.input:
        for dim in dims_of(info):
            if not dim.dim_param:
                continue
            if dim.dim_param not in values:
                raise OnnxImportError(
                    f"{label}: graph: input {info.name!r} has a dynamic dimension "
                    f"{dim.dim_param}; supported: static shapes, or the dimension "
                    f"bound (--bind {dim.dim_param}=VALUE, or an --input file of "
                    f"{info.name})")
            dim.dim_value = values[dim.dim_param]       # clears dim_param (a oneof)
    return bound


def _bound_inputs(model, label, values):
    """:class:`Bound` of the bound ``model``: the empty past, ``position_ids``
    ``arange(0, L)``, ``attention_mask`` ones."""
    from onnx import helper
    arrays = {}
    for info in model.graph.input:
        shape = [d.dim_value for d in dims_of(info)]
        dtype = helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        if is_past(info.name):
            arrays[info.name] = np.zeros(shape, dtype)
        elif info.name == "position_ids":
            arrays[info.name] = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        elif info.name == "attention_mask":
            arrays[info.name] = np.ones(shape, dtype)
    return Bound(arrays, values)


def convert(imp, node):
    """``Concat`` of the empty past and a computed tensor: the tensor (``present`` of
    the prefill). False for any other node."""
    if node.op_type != "Concat":
        return False
    values = [imp.get(name) for name in node.input if name]
    empty = [v for v in values if isinstance(v, Const) and np.asarray(v.array).size == 0]
    rest = [v for v in values if not any(v is e for e in empty)]
    if not empty or len(rest) != 1 or isinstance(rest[0], Const):
        return False
    imp.values[node.output[0]] = rest[0]
    return True


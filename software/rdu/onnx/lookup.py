"""The embedding lookup on the host (``docs/onnx.md``, "A tiny Llama"): a ``Gather`` of an
initializer table by an integer model input (token ids).

The machine has no unit that turns token ids into addresses, so the host looks the rows
up: the program's input is the rows ``E[ids]`` (BF16, as the machine holds ``E``), a
data input of the graph like any other; the run's ids (given, or seeded random ones in
range of the table) become those rows before they are written to HBM, and onnxruntime
gets the ids themselves (:mod:`rdu.onnx.kernel`). An integer input used any other way
(another operator, a Gather of a computed tensor or along another axis) is refused in
one line naming the node.
"""

from dataclasses import dataclass

import numpy as np

from ..frontend.kernels import KernelInputError
from .values import Const, Value, core_shape

__all__ = ["Ids", "Lookup", "convert", "lookup_rows", "check_ids", "random_ids",
           "vocabulary"]


@dataclass
class Ids:
    """An integer model input: ``name`` (ONNX), ``key`` (its front-end name: the key
    of the run's ids among its inputs), ``shape`` (ONNX) and ``elem`` (its element
    type, ``onnx.TensorProto``)."""
    name: str
    key: str
    shape: tuple
    elem: int


@dataclass
class Lookup:
    """``rows = table[ids]``: the rows input ``rows`` (front-end name) the host fills
    from the ids ``ids`` (:class:`Ids`) and ``table`` (float32, the initializer's
    values, rounded to BF16 when they become words)."""
    rows: str
    ids: Ids
    table: np.ndarray


def convert(imp, node):
    """Convert ``node`` when it reads an integer model input: ``Gather(table, ids)`` of
    an initializer table along axis 0 is a lookup on the host (a rows input); anything
    else is refused. False when ``node`` reads no integer input."""
    from onnx import helper
    values = [imp.get(name) if name else None for name in node.input]
    if not any(isinstance(v, Ids) for v in values):
        return False
    supported = "Gather(table, ids) of an initializer table (vocabulary, width) along " \
        "axis 0: the host looks the rows up; Shape of the ids"
    if node.op_type == "Shape" and isinstance(values[0], Ids):     # static: a constant
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        shape = np.asarray(values[0].shape[attrs.get("start", 0):attrs.get("end")], np.int64)
        imp.values[node.output[0]] = Const(shape, None, node.output[0])
        return True
    if node.op_type != "Gather" or not isinstance(values[1], Ids):
        imp.fail(f"{node.op_type} of the integer input "
                 f"{next(v for v in values if isinstance(v, Ids)).name!r}", supported)
    table, ids = values
    axis = [helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"]
    if not isinstance(table, Const) or table.origin is None or \
            np.asarray(table.array).ndim != 2 or np.asarray(table.array).dtype.kind != "f":
        imp.fail(f"Gather by {ids.name!r} of a table that is not a float initializer of "
                 f"two dimensions", supported)
    if axis and axis[0] not in (0, -2):
        imp.fail(f"Gather by {ids.name!r} along axis {axis[0]}", supported)
    array = np.asarray(table.array, np.float32)
    shape = tuple(ids.shape) + (array.shape[1],)
    name = imp.fresh(node.output[0])
    tensor = imp.call(imp.graph.input, name, core_shape(shape, keep=2))
    tensor.node.where = f"{imp.label}: node {node.name or node.output[0]} (Gather)"
    imp.lookups[name] = Lookup(name, ids, array)
    imp.held.add(table.origin)
    imp.values[node.output[0]] = Value(tensor, shape)
    return True


def check_ids(array, ids, vocabulary, source):
    """``array`` as int64 token ids of ``ids``' shape, each below ``vocabulary``: one
    line (:class:`KernelInputError`) for a non-integer array or an id out of range."""
    array = np.asarray(array)
    if array.dtype.kind not in "iu":
        raise KernelInputError(f"{source}: {array.dtype} values; {ids.name} holds token "
                               f"ids (an integer array)")
    if core_shape(array.shape) != core_shape(ids.shape):
        raise KernelInputError(f"{source}: shape {array.shape}, the model takes "
                               f"{ids.name} as {tuple(ids.shape)}")
    bad = np.argwhere((array < 0) | (array >= vocabulary))
    if bad.size:
        at = tuple(int(i) for i in bad[0])
        raise KernelInputError(f"{source}: token id {int(array[at])} at {at} is outside "
                               f"the vocabulary of {vocabulary} rows")
    return np.asarray(array, np.int64).reshape(ids.shape)


def vocabulary(lookups, ids):
    """The number of rows every table ``ids`` indexes has (the smallest)."""
    return min(lookup.table.shape[0] for lookup in lookups.values()
               if lookup.ids.key == ids.key)


def random_ids(rng, ids, lookups):
    """Seeded random token ids of ``ids``' shape, in range of its tables."""
    return rng.integers(0, vocabulary(lookups, ids), ids.shape).astype(np.int64)


def lookup_rows(lookup, ids, shape):
    """The host's lookup: ``table[ids]`` as float32 of the rows input's ``shape``."""
    return lookup.table[np.asarray(ids, np.int64)].reshape(shape)

"""An ONNX model as a front-end :class:`~rdu.frontend.graph.Graph` (``docs/onnx.md``).

:func:`import_model` walks the model's nodes in order, converting each with its
operator's converter (:data:`rdu.onnx.ops.CONVERTERS`). A value is either a front-end
:class:`~rdu.frontend.graph.Tensor` (it depends on a graph input) or a
:class:`Const` (it depends only on initializers, constants and shapes: folded with
numpy at import time). A constant that meets a tensor becomes a front-end number when
all its elements are equal, else a graph input (a *weight*: its values come from the
model, rounded to BF16 as the machine holds them).

Shapes: static, batch 1. A tensor's front-end shape is its ONNX shape with leading
size-1 dimensions dropped (a data input keeps two dimensions, a weight one), so an ONNX
``(1, M, N)`` activation is an ``(M, N)`` matrix; :class:`Value` keeps the ONNX shape
beside it. Anything else is refused in one line naming the model, the node and what is
not supported (:class:`OnnxImportError`).
"""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..frontend.graph import FrontendError, Graph
from .attention import PENDING
from .attention import convert as convert_attention
from .cache import SEQUENCE_INPUTS, Bound, bind, dims_of
from .cache import convert as convert_cache
from .lookup import Ids
from .lookup import convert as convert_lookup
from .ops import convert_node
from .rotary import Part
from .rotary import convert as convert_rotary
from .values import Const, OnnxImportError, Value, core_shape, identifier

__all__ = ["Importer", "Imported", "import_model", "rotary_tables", "OPSET_RANGE",
           "load_model", "cpu_session"]

#: The element types of integer inputs (``onnx.TensorProto`` INT64, INT32): token ids.
INTEGER_INPUTS = (7, 6)

#: The default-domain opsets the importer reads (inclusive).
OPSET_RANGE = (17, 23)


def load_model(source):
    """``(ModelProto, label)`` of a path or a ModelProto (``label`` names it in errors)."""
    import onnx
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            model = onnx.load(str(path))
        except FileNotFoundError:
            raise OnnxImportError(f"{source}: no such file") from None
        except Exception as error:      # a protobuf DecodeError and the like
            raise OnnxImportError(f"{path}: not an ONNX model ({error})") from None
        return model, path.name
    return source, f"{source.graph.name or 'model'}.onnx"


def cpu_session(model):
    """An onnxruntime session of ``model`` (a ModelProto) as every reference of the
    project runs it: the CPU provider, one thread, warnings off."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])


@dataclass
class Imported:
    """What :func:`import_model` returns.

    ``graph``: the front-end graph; ``data``: ``{front-end name: ONNX name}`` of the
    inputs a run supplies; ``weights``: ``{front-end name: float32 array}`` of the
    inputs the model supplies (front-end shape, not yet rounded); ``onnx_shapes``:
    ``{front-end name: ONNX shape}`` of every input and output; ``outputs``:
    ``{front-end name: ONNX name}``; ``held``: the initializers the machine holds in
    BF16 (the onnxruntime reference rounds them the same way); ``model``: the
    ModelProto; ``label``: its file name; ``lookups``: ``{rows input: Lookup}`` of the
    embedding rows the host looks up; ``ids``: ``{front-end name: Ids}`` of the
    integer inputs (token ids) a run supplies (:mod:`rdu.onnx.lookup`); ``bound``: the
    inputs the binding of dynamic dimensions fixes (:mod:`rdu.onnx.cache`: the empty
    past, position ids, the attention mask), fed to onnxruntime as they are; ``tables``:
    ``{ONNX name: array}`` of the ``Cos`` and ``Sin`` outputs folded at import (the
    rotary tables of the bound positions: :func:`rdu.onnx.importer.rotary_tables`)."""
    graph: Graph
    data: dict
    weights: dict
    onnx_shapes: dict
    outputs: dict
    held: set
    model: object
    label: str
    elem_types: dict = field(default_factory=dict)
    lookups: dict = field(default_factory=dict)
    ids: dict = field(default_factory=dict)
    bound: Bound = field(default_factory=Bound)
    tables: dict = field(default_factory=dict)


class Importer:
    """The state of one import: the values by ONNX name, the graph being built."""

    def __init__(self, model, label):
        self.model, self.label = model, label
        name = identifier(model.graph.name or Path(label).stem)
        self.graph = Graph(name if name.replace("_", "").isalnum() else "onnx_model")
        self.values = {}            # ONNX name -> Const | Value
        self.weights = {}           # front-end name -> float32 array
        self.held = set()
        self.lookups = {}           # rows input -> rdu.onnx.lookup.Lookup
        self.names = set()
        self.node = None

    # -- errors ----------------------------------------------------------------------------
    def fail(self, what, supported=""):
        """Raise the one-line error of the node being converted."""
        node = self.node
        where = (f"node {node.name or (node.output[0] if node.output else '?')} "
                 f"({node.op_type})" if node is not None else "graph")
        text = f"{self.label}: {where}: {what}"
        raise OnnxImportError(text + (f"; supported: {supported}" if supported else ""))

    # -- names -----------------------------------------------------------------------------
    def fresh(self, name):
        base = identifier(name)
        text, count = base, 1
        while text in self.names:
            count += 1
            text = f"{base}_{count}"
        self.names.add(text)
        return text

    # -- values ----------------------------------------------------------------------------
    def get(self, name):
        if name not in self.values:
            self.fail(f"input {name!r} is not defined before this node")
        return self.values[name]

    def tensor(self, value, dtype="bf16", held=True):
        """A :class:`Value` for ``value``: a constant becomes a weight input (``dtype``:
        BF16 as the machine holds weights, or FP32: a table the model computes from
        shapes, which onnxruntime holds in float; ``held``: whether the machine holds
        the initializer it comes from in BF16)."""
        if isinstance(value, Value):
            return value
        array = np.asarray(value.array)
        if array.dtype.kind not in "fiu" and array.dtype.name != "bfloat16":
            self.fail(f"constant {value.name!r} of dtype {array.dtype} used as a tensor")
        shape = core_shape(array.shape, keep=1)
        name = self.fresh(value.name or "weight")
        try:
            tensor = self.graph.input(name, shape, dtype)
        except FrontendError as error:
            self.fail(f"weight {value.name!r}: {error}")
        self.weights[name] = np.asarray(array, np.float32).reshape(shape)
        if value.origin and held:
            self.held.add(value.origin)
        return Value(tensor, tuple(array.shape))

    def operand(self, value, other_shape):
        """An operand of an element-wise operator with a tensor of ONNX shape
        ``other_shape``: a number when ``value`` is a constant of equal elements that
        does not widen that shape, else a tensor (a weight input)."""
        if isinstance(value, Const):
            array = np.asarray(value.array, np.float64)
            widens = np.broadcast_shapes(array.shape, other_shape) != tuple(other_shape)
            if array.size and not widens and np.all(array == array.flat[0]):
                return float(array.flat[0]), array.shape
            # an initializer's vector (a norm's weight, a bias) is held in BF16
            # (onnxruntime's reference rounds it too); a table of rows and columns
            # (rotary's cos and sin, computed from shapes or folded into an initializer
            # by the exporter) in FP32, as onnxruntime holds it
            table = len(core_shape(array.shape)) >= 2
            value = self.tensor(value, "bf16" if value.origin and not table else "fp32",
                                held=not table)
        return value.tensor, value.shape

    def call(self, function, *args):
        """A front-end operator, its :class:`FrontendError` as the node's error."""
        try:
            return function(*args)
        except FrontendError as error:
            self.fail(str(error).split(": ", 1)[-1])


def _check_opset(model, label):
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            low, high = OPSET_RANGE
            if not low <= opset.version <= high:
                raise OnnxImportError(f"{label}: opset {opset.version}; supported: "
                                      f"opsets {low} to {high}")
            return opset.version
    raise OnnxImportError(f"{label}: no default-domain opset; supported: opsets "
                          f"{OPSET_RANGE[0]} to {OPSET_RANGE[1]}")


def _static_shape(importer, info):
    import onnx
    tensor_type = info.type.tensor_type
    if not info.type.HasField("tensor_type"):
        importer.fail(f"input {info.name!r} is not a tensor")
    elem = tensor_type.elem_type
    if elem not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, *INTEGER_INPUTS):
        importer.fail(f"input {info.name!r} has element type "
                      f"{onnx.TensorProto.DataType.Name(elem)}", "float and float16 inputs "
                      "(int64 and int32 ones: token ids of an embedding lookup)")
    dims = []
    for dim in tensor_type.shape.dim:
        if not dim.HasField("dim_value") or dim.dim_value < 1:
            importer.fail(f"input {info.name!r} has a dynamic dimension "
                          f"{dim.dim_param or '?'}", "static shapes (batch 1)")
        dims.append(dim.dim_value)
    if not dims:
        importer.fail(f"input {info.name!r} is a scalar", "tensors of one or more "
                      "dimensions")
    if elem in INTEGER_INPUTS:
        return tuple(dims), elem            # token ids: the host looks the rows up
    if len(dims) == 4 and dims[0] == 1:
        return tuple(dims), elem            # (1, heads, rows, dim): heads of attention
    if len(core_shape(dims, keep=2)) > 2:
        importer.fail(f"input {info.name!r} of shape {tuple(dims)} has a leading dimension "
                      f"{dims[0]} over 1", "batch 1: matrices with leading size-1 "
                      "dimensions")
    return tuple(dims), elem


def _initializers(importer, graph):
    from onnx import TensorProto, numpy_helper
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        if init.data_type in floats:
            array = np.asarray(array, np.float32)
            importer.values[init.name] = Const(array, init.name, init.name)
        elif init.data_type in (TensorProto.INT64, TensorProto.INT32):
            importer.values[init.name] = Const(np.asarray(array, np.int64), None, init.name)
        elif init.data_type == TensorProto.BOOL:        # a mask's (folded: constants)
            importer.values[init.name] = Const(np.asarray(array, bool), None, init.name)
        else:
            importer.fail(f"initializer {init.name!r} of type "
                          f"{TensorProto.DataType.Name(init.data_type)}",
                          "float32, float16 and bfloat16 initializers (int64 ones as "
                          "shapes and axes, bool ones of masks)")


def import_model(source, dims=None, shapes=None):
    """Import an ONNX model (a path or a ModelProto): an :class:`Imported`. ``dims``
    (``{name: value}``) and ``shapes`` (``{ONNX input: shape}`` of the arrays a run is
    given) bind its dynamic dimensions (:func:`rdu.onnx.cache.bind`)."""
    model, label = load_model(source)
    _check_opset(model, label)
    model, bound = bind(model, label, dims, shapes)
    importer = Importer(model, label)
    graph = model.graph
    _initializers(importer, graph)
    data, shapes, elems, ids = {}, {}, {}, {}
    for info in graph.input:
        if info.name in importer.values:
            continue                          # an initializer listed as an input too
        if info.name in bound:                # fixed by the binding: rdu.onnx.cache
            importer.values[info.name] = Const(bound[info.name], None, info.name)
            continue
        shape, elem = _static_shape(importer, info)
        name = importer.fresh(info.name)
        if elem in INTEGER_INPUTS:              # token ids: rdu.onnx.lookup
            importer.values[info.name] = ids[name] = Ids(info.name, name, shape, elem)
            continue
        keep = 3 if len(shape) == 4 else 2
        tensor = importer.call(importer.graph.input, name, core_shape(shape, keep=keep))
        importer.values[info.name] = Value(tensor, shape)
        tensor.node.where = f"{label}: input {info.name}"
        data[name], shapes[name], elems[name] = info.name, shape, elem
    for node in graph.node:
        importer.node = node
        first = len(importer.graph.nodes)
        if not convert_lookup(importer, node) and not convert_cache(importer, node) \
                and not convert_rotary(importer, node) \
                and not convert_attention(importer, node):
            convert_node(importer, node)
        for created in importer.graph.nodes[first:]:     # the compiler's errors name it
            created.where = f"{label}: node {node.name or node.output[0]} ({node.op_type})"
    importer.node = None
    outputs, held = {}, _held_operands(importer.graph)
    for info in graph.output:
        value = importer.get(info.name)
        if isinstance(value, Const):
            importer.fail(f"output {info.name!r} depends on no input (a constant)")
        if isinstance(value, Ids):
            importer.fail(f"output {info.name!r} is the integer input {value.name!r}",
                          "outputs computed from the embedding rows")
        if isinstance(value, (*PENDING, Part)):
            importer.fail(f"output {info.name!r} is a step of attention (the scores or "
                          f"the probabilities)", "attention's result as the output")
        name = importer.fresh(info.name)
        importer.call(importer.graph.output, name, held.get(id(value.tensor.node),
                                                            value.tensor))
        outputs[name], shapes[name] = info.name, value.shape
    for name, array in importer.weights.items():
        shapes[name] = array.shape
    for name, lookup in importer.lookups.items():
        shapes[name] = tuple(lookup.ids.shape) + lookup.table.shape[1:]
    unused = [i.name for i in ids.values()
              if not any(look.ids is i for look in importer.lookups.values())]
    if unused:
        importer.fail(f"integer input {unused[0]!r} is read by no Gather of a table",
                      "token ids read by Gather(table, ids): the host looks the rows up")
    tables = {node.output[0]: np.asarray(importer.values[node.output[0]].array)
              for node in graph.node if node.op_type in ("Cos", "Sin")
              and isinstance(importer.values.get(node.output[0]), Const)}
    return Imported(importer.graph, data, importer.weights, shapes, outputs,
                    importer.held, model, label, elems, importer.lookups, ids, bound,
                    tables)


def _held_operands(graph):
    """``{id(node): tensor}``: K and V of an attention as the machine holds them (the
    BF16 cast the attention reads), for the nodes they are cast from: a model output
    of K or V (``present.*`` of a cache) is those words (:mod:`rdu.onnx.cache`)."""
    from ..frontend.graph import Tensor
    held = {}
    for node in graph.nodes:
        if node.op != "attention":
            continue
        for operand in node.inputs[1:]:
            if operand.op == "unary" and operand.attrs.get("fn") == "cast":
                held[id(operand.inputs[0])] = Tensor(graph, operand)
    return held


def rotary_tables(model, positions, dims=None):
    """The rotary tables of a causal LM with a KV cache for positions ``0 ..
    positions - 1``, as its exporter computes them (``position_ids`` times ``inv_freq``,
    ``Cos``, ``Sin``): ``{ONNX name of a Cos or Sin output: float32 array}``, the
    positions on the second-to-last axis. The model is imported as the prefill of
    ``positions`` tokens (``P`` = 0), so the tables are the importer's own folds, once
    at compile time; a decode step at position ``p`` reads their row ``p`` (issue #34,
    ``docs/generate.md``). ``model``: a ModelProto; ``dims`` as :func:`bind`'s."""
    shapes = {}
    for info in model.graph.input:
        if info.name in SEQUENCE_INPUTS and info.name != "position_ids":
            last = [d.dim_value for d in dims_of(info)][2:]
            shapes[info.name] = (1, positions, *last)
    return import_model(model, dims=dims, shapes=shapes).tables

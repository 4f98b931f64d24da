"""An imported ONNX model as a :class:`~rdu.frontend.kernels.Kernel`: compiled, packed,
run and checked like any kernel (bit-exact against its family's reference, within the
float64 budget of its graph), and checked against onnxruntime (:meth:`OnnxKernel.references`).

The onnxruntime reference runs the model itself, on the same inputs: the data inputs
rounded to BF16, and the initializers the machine holds (the weights) rounded to BF16
(both as float32). Its result is within the float64 budget of the graph as the
machine's is, so the two agree within twice the budget (:func:`compare`). Where the
graph holds attention of computed operands, whose float64 budget is a worst-case bound
through the softmax too loose to tell a wrong model, they agree within
:data:`ATTENTION_SHARE` of onnxruntime's largest output too (``docs/onnx.md``).
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..frontend.graph import Tensor
from ..frontend.kernels import KERNELS, Kernel, KernelInputError, to_bf16_words
from ..models import pcu_reference as pcu_model
from ..models import reference
from .importer import cpu_session, import_model
from .lookup import check_ids, lookup_rows, random_ids, vocabulary
from .values import core_shape

__all__ = ["OnnxKernel", "onnx_kernel", "KERNEL_NAME", "onnxruntime_outputs",
           "onnxruntime_values", "compare",
           "rounded_model", "prepared_graph", "ATTENTION_SHARE"]

#: The kernel name a program compiled from an ONNX model records (its params: the model).
KERNEL_NAME = "onnx"

#: The budget against onnxruntime of a model with attention of computed operands: a
#: share of onnxruntime's largest output (the BF16 rounding of Q, K, V, the
#: probabilities and the merged heads stays under 1% of it; a model without its mask
#: or with another rotate_half is 20% off or more).
ATTENTION_SHARE = 0.02


def _bf16(array):
    """float32 ``array`` rounded to BF16 (round to nearest even), as float32."""
    array = np.asarray(array, np.float32)
    return pcu_model.bf16_words(array).view(np.float32).reshape(array.shape)


def rounded_model(imported):
    """A copy of the model with the initializers the machine holds rounded to BF16 (in
    their own element type)."""
    from onnx import numpy_helper
    model = type(imported.model)()
    model.CopyFrom(imported.model)
    for init in model.graph.initializer:
        if init.name in imported.held:
            array = numpy_helper.to_array(init)
            rounded = _bf16(np.asarray(array, np.float32)).astype(array.dtype)
            init.CopyFrom(numpy_helper.from_array(rounded, init.name))
    return model


def onnxruntime_values(imported, inputs, tensors):
    """``{tensor: float64 array}``: onnxruntime (CPU, one thread) on the data inputs
    ``{front-end name: uint32 BF16 words}`` (token ids: the ids themselves) and the
    rounded weights, the values of the ONNX ``tensors`` (outputs of the graph or of any
    node: those are made outputs too)."""
    import onnx
    from onnx import TensorProto
    model = rounded_model(imported)
    present = {output.name for output in model.graph.output}
    for tensor in tensors:
        if tensor not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(
                tensor, TensorProto.FLOAT, None))
    session = cpu_session(model)
    feed = dict(imported.bound)                    # the empty past, positions, mask
    for key, ids in imported.ids.items():          # the token ids themselves
        values = np.asarray(inputs[key], np.int64).reshape(ids.shape)
        feed[ids.name] = values.astype(np.int32 if ids.elem == TensorProto.INT32
                                       else np.int64)
    for name, onnx_name in imported.data.items():
        values = np.asarray(inputs[name], np.uint32).view(np.float32)
        values = values.reshape(imported.onnx_shapes[name])
        if imported.elem_types.get(name) == TensorProto.FLOAT16:
            values = values.astype(np.float16)
        feed[onnx_name] = values
    results = session.run(list(tensors), feed)
    return {tensor: np.asarray(value, np.float64)
            for tensor, value in zip(tensors, results, strict=True)}


def onnxruntime_outputs(imported, inputs):
    """``{front-end output: float64 array (front-end shape)}``: :func:`onnxruntime_values`
    of the model's outputs."""
    names = list(imported.outputs)
    values = onnxruntime_values(imported, inputs, [imported.outputs[n] for n in names])
    graph_outputs = imported.graph.outputs
    return {name: values[imported.outputs[name]].reshape(graph_outputs[name].shape)
            for name in names}


def compare(graph, inputs, results, others):
    """``(ok, max_abs_err)`` of ``results`` against ``others`` (onnxruntime's): every
    element within twice its float64 budget (each is within one of float64), and with
    attention of computed operands (:func:`computed_attention`) within
    :data:`ATTENTION_SHARE` of the largest of ``others`` per such attention."""
    ok, worst = True, 0.0
    share = ATTENTION_SHARE * computed_attention(graph) or None
    for name, (_, budget) in reference.float64_outputs(graph, inputs).items():
        got = np.asarray(results[name], np.float64)
        error = np.abs(got - others[name])
        if error.size:
            worst = max(worst, float(error.max()))
            if share is not None:
                budget = np.minimum(budget, share / 2 * float(np.abs(others[name]).max()))
        ok = ok and bool(np.all(error <= 2 * budget))
    return ok, worst


def computed_attention(graph):
    """How many attentions of an operand that is not a graph input ``graph`` holds (a
    decoder's layers): the share budget against onnxruntime is
    :data:`ATTENTION_SHARE` per attention, as each layer's BF16 roundings of Q, K, V,
    the probabilities and the merged heads add to the next layer's input."""
    return sum(node.op == "attention" and any(i.op != "input" for i in node.inputs)
               for node in graph.live_nodes())


@dataclass(frozen=True)
class OnnxKernel(Kernel):
    """A kernel from an ONNX model (:func:`onnx_kernel`): no shape parameters; the
    data inputs are the model's, the weights come from its initializers."""
    imported: object = None         # rdu.onnx.importer.Imported
    model_path: str = ""
    dims: tuple = ()                # ((name, value), ...): the bound dynamic dimensions

    def shape(self, tensor, params):
        graph = self.imported.graph
        node = graph.inputs.get(tensor) or graph.outputs[tensor]
        return node.shape

    def graph(self, params):
        return self.imported.graph

    def compile(self, machine, state=None, passes=None, skip=(), **params):
        dims = {"dims": dict(self.dims)} if self.dims else {}
        return super().compile(machine, state=state, passes=passes, skip=skip,
                               model=self.model_path, **dims)

    def weight_words(self):
        """The weights' words: BF16 (rounded) or FP32 as the graph's inputs hold them."""
        inputs = self.imported.graph.inputs
        return {name: to_bf16_words(array, name) if inputs[name].dtype == "bf16" else
                np.asarray(array, np.float32).view(np.uint32)
                for name, array in self.imported.weights.items()}

    def random_inputs(self, program, seed):
        """Standard normal BF16 data inputs (in the model's input order, one seeded
        generator), then token ids in range of their tables (the rows looked up from
        them), the weights from the model."""
        rng = np.random.default_rng(seed)
        words = {name: pcu_model.bf16_words(rng.standard_normal(self.shape(name, None)))
                 for name in self.imported.data}
        ids = {key: random_ids(rng, ids, self.imported.lookups)
               for key, ids in self.imported.ids.items()}
        return {**words, **self.looked_up(ids), **self.weight_words()}

    def looked_up(self, ids):
        """The host's embedding lookups: ``{rows input: BF16 words}`` from ``{ids key:
        int64 ids}``, the ids with them (onnxruntime's inputs)."""
        rows = {name: to_bf16_words(lookup_rows(lookup, ids[lookup.ids.key],
                                                self.shape(name, None)), name)
                for name, lookup in self.imported.lookups.items()}
        return {**ids, **rows}

    def user_inputs(self, program, arrays, sources):
        """``{name: words}`` of the data inputs ``arrays`` (keyed by ONNX name, of the
        ONNX shape or without its leading size-1 dimensions), the weights with them."""
        by_onnx = {onnx: name for name, onnx in self.imported.data.items()}
        token_ids = {ids.name: ids for ids in self.imported.ids.values()}
        words, given_ids = {}, {}
        for onnx_name, array in arrays.items():
            if onnx_name in token_ids:
                ids = token_ids[onnx_name]
                given_ids[ids.key] = check_ids(array, ids, vocabulary(self.imported.lookups, ids),
                                               sources[onnx_name])
                continue
            name = by_onnx[onnx_name]
            shape = self.shape(name, None)
            given = tuple(np.shape(array))
            if core_shape(given) != core_shape(shape):
                raise KernelInputError(
                    f"{sources[onnx_name]}: shape {given}, the model takes {onnx_name} "
                    f"as {self.imported.onnx_shapes[name]}")
            words[name] = to_bf16_words(np.reshape(array, shape), sources[onnx_name])
        return {**words, **self.looked_up(given_ids), **self.weight_words()}

    def data_inputs(self):
        """The ONNX names of the inputs a run supplies (token ids among them), in the
        model's order."""
        given = set(self.imported.data.values()) | {
            ids.name for ids in self.imported.ids.values()}
        return [info.name for info in self.imported.model.graph.input if info.name in given]

    def input_option(self, name):
        return f"--input {name}=FILE.npy"

    def references(self, program, inputs, results):
        """``(ok, figures)``: the result against onnxruntime's on the same inputs."""
        others = onnxruntime_outputs(self.imported, inputs)
        ok, error = compare(self.imported.graph, inputs, results, others)
        return ok, {"max_abs_err_onnxruntime": error}

    def describe(self, program):
        graph = self.imported.graph
        shapes = {onnx: self.imported.onnx_shapes[name]
                  for name, onnx in self.imported.data.items()}
        shapes.update({ids.name: ids.shape for ids in self.imported.ids.values()})
        shapes = ", ".join(f"{onnx} {list(shapes[onnx])}" for onnx in self.data_inputs())
        dims = "".join(f", {name}={value}" for name, value in self.dims)
        return f"onnx {self.imported.label} ({graph.name}: {shapes}{dims})"


def prepared_graph(graph):
    """A copy of ``graph`` in which every computed first operand of a matmul is cast to BF16
    (what the row group that writes it stores, or what a fused mlp's chain ends in)."""
    copy = graph.extract(graph.name, {}, dict(graph.outputs))
    for name, node in copy.inputs.items():     # where they come from, for errors
        node.where = graph.inputs[name].where or node.where
    casts = {}                          # one cast of a value however many matmuls read it
    for matmul in [node for node in copy.nodes if node.op == "matmul"]:
        operands = list(matmul.inputs)
        for index, operand in enumerate(operands[:1]):     # A (a computed B is refused)
            if operand.op == "input" or operand.dtype == "bf16":
                continue
            if id(operand) not in casts:
                cast = Tensor(copy, operand).astype("bf16").node
                cast.where = operand.where or matmul.where
                copy.nodes.remove(cast)
                copy.nodes.insert(copy.nodes.index(matmul), cast)
                casts[id(operand)] = cast
            operands[index] = casts[id(operand)]
        matmul.inputs = tuple(operands)
    return copy


def machine_defaults(graph):
    """Machine parameters a model needs by default: the fused kernels' machines (the
    ``attention`` and ``mlp`` kernels': 4 and 5 AGCUs) for attention, or for a graph of
    two matrix products (the MLP) or of FP32 tables (rotary's ``x * cos +
    rotate_half(x) * sin``: a row group of four loads), else none."""
    ops = [node.op for node in graph.live_nodes()]
    if "attention" in ops:
        return dict(KERNELS["attention"].machine)
    tables = any(node.dtype == "fp32" for node in graph.inputs.values())
    return dict(KERNELS["mlp"].machine) if ops.count("matmul") > 1 or tables else {}


def onnx_kernel(path, dims=None, shapes=None):
    """The :class:`OnnxKernel` of the model at ``path`` (or a ModelProto); ``dims`` and
    ``shapes`` bind its dynamic dimensions (:func:`rdu.onnx.cache.bind`)."""
    imported = import_model(path, dims, shapes)
    imported.graph = graph = prepared_graph(imported.graph)
    return OnnxKernel(KERNEL_NAME, (), {name: () for name in graph.inputs},
                      {name: () for name in graph.outputs},
                      f"the ONNX model {imported.label}",
                      machine=machine_defaults(graph), imported=imported,
                      model_path=str(Path(path).resolve()) if isinstance(path, (str, Path))
                      else "", dims=tuple(sorted(imported.bound.dims.items())))

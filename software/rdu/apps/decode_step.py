"""One decode step of a causal LM from its ONNX file, as the schedule a token runs
(``docs/generate.md``).

:func:`compile_decode_step` imports the model for one tile of rows (the token and zero
rows after it), keeps its logits, and compiles it as a sequence of configurations whose
attentions read and append a KV cache at the launch's position
(:mod:`rdu.apps.onnx_decode`). :class:`DecodeStep` gives what a run needs: the steps
(the cache's first contents and the tables written once, then every launch), the
words the host writes for a token, and where the logits are.
"""

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..frontend.kernels import KernelInputError, to_bf16_words
from ..layout import Image
from ..onnx import onnx_kernel
from ..onnx.importer import import_model, load_model
from ..onnx.lookup import lookup_rows
from ..onnx.values import OnnxImportError
from ..runtime import Launch, Write
from .onnx_decode import DecodePlan
from .onnx_groups import compile_groups

__all__ = ["DecodeStep", "compile_decode_step", "LOGITS"]

#: The ONNX output a causal LM's logits are.
LOGITS = "logits"


@dataclass
class DecodeStep:
    """A compiled decode step: ``kernel`` (the model imported for ``rows`` rows, its
    logits the one output), ``sequence`` (:class:`rdu.apps.unfused.Sequence`, packed
    with the weights and token 0), ``plan`` (:class:`DecodePlan`), ``logits`` (the
    front-end output name), ``vocabulary``."""
    kernel: object
    sequence: object
    plan: DecodePlan
    logits: str
    vocabulary: int

    @property
    def capacity(self):
        """Keys per head of every cache."""
        return self.plan.capacity

    @property
    def positions(self):
        """Positions a step may run at (tokens a generation holds)."""
        return self.plan.positions

    def _rows_input(self):
        lookups = self.kernel.imported.lookups
        if len(lookups) != 1:
            raise KernelInputError(f"{self.kernel.imported.label}: a decode step takes the "
                                   f"token ids of one embedding lookup; the model has "
                                   f"{len(lookups)}")
        return next(iter(lookups.items()))

    def inputs(self, token):
        """The run's inputs for ``token`` (row 0: its embedding; the padding rows zero)
        with the weights."""
        name, lookup = self._rows_input()
        ids = np.zeros(lookup.ids.shape, np.int64)
        ids.reshape(-1)[0] = token
        shape = self.kernel.shape(name, None)
        return self._with_row(lookup_rows(lookup, ids, shape).reshape(shape[0], -1)[0])

    def _with_row(self, row):
        """The inputs whose row 0 is ``row`` (float32), the other rows zero."""
        name, _ = self._rows_input()
        shape = self.kernel.shape(name, None)
        rows = np.zeros(shape, np.float32)
        rows.reshape(shape[0], -1)[0] = row
        if getattr(self, "_weights", None) is None:
            self._weights = self.kernel.weight_words()
        return {name: to_bf16_words(rows, name), **self._weights}

    def _stage_images(self, index, inputs):
        """``{image: packed words}`` of stage ``index``'s host-written inputs."""
        stage = self.sequence.stages[index]
        arrays = {name: make(inputs) for name, make in stage.user.items()}
        written = {image for program, image in self.plan.written if program is stage.program}
        return {name: Image.from_json(layout).pack(arrays)
                for name, layout in stage.program.meta["images"].items()
                if name in stage.program.inputs and name not in stage.produced and
                name not in written}

    def token_images(self):
        """``[(stage index, image, address)]``: the input images that hold the token
        (every other image is the same for every token)."""
        if getattr(self, "_token_images", None) is None:
            width = int(np.prod(self.kernel.shape(self._rows_input()[0], None)[1:]))
            one, zero = self._with_row(np.ones(width)), self._with_row(np.zeros(width))
            found = []
            for index, stage in enumerate(self.sequence.stages):
                if not stage.user:
                    continue
                ours, theirs = self._stage_images(index, one), self._stage_images(index, zero)
                found += [(index, image, stage.program.meta["images"][image]["address"])
                          for image in ours if not np.array_equal(ours[image], theirs[image])]
            self._token_images = found
        return self._token_images

    def token_words(self, token):
        """The words of each of :meth:`token_images` for ``token``."""
        inputs = self.inputs(token)
        return [self._stage_images(index, inputs)[image]
                for index, image, _ in self.token_images()]

    def steps(self, token=0):
        """The schedule of a step whose input is ``token``: the plan's writes (the
        caches' first contents, the tables), then every stage's launch."""
        self.sequence.pack(self.inputs(token))
        for program, image in self.plan.written:
            program.inputs[image] = (program.inputs[image][0], None)
        return [Write(address, words) for address, words in self.plan.writes] + \
            [Launch(program) for program in self.sequence.programs]

    def logits_words(self):
        """``(launch, output, indices)``: the FP32 words of row 0's logits are
        ``indices`` of output ``output`` of the ``launch``-th launch (found by reading
        the raw output's word indices back through the sequence's unpacking)."""
        programs = self.sequence.programs
        launch = len(programs) - 1
        where = [name for name, (_, count) in programs[launch].outputs.items()]
        if len(where) != 1:
            raise KernelInputError(f"{programs[launch].name}: the logits' stage has outputs "
                                   f"{', '.join(where)}; a decode step reads one")
        raw = [{name: np.zeros(count, np.uint32) for name, (_, count) in
                program.outputs.items()} for program in programs]
        raw[launch][where[0]] = np.arange(programs[launch].outputs[where[0]][1],
                                          dtype=np.uint32)
        indices = self.sequence.outputs(raw)[self.logits]
        return launch, where[0], np.asarray(indices, np.int64).reshape(
            -1, self.vocabulary)[0]

    def logits_of(self, results):
        """Row 0's logits (float32) from every launch's raw outputs."""
        words = self.sequence.outputs(results)[self.logits]
        return np.asarray(words, np.uint32).view(np.float32).reshape(-1, self.vocabulary)[0]


def _logits_only(kernel):
    """``kernel`` with its logits the one output (a cache's ``present`` dropped)."""
    imported = kernel.imported
    names = [name for name, onnx_name in imported.outputs.items() if onnx_name == LOGITS]
    if not names:
        raise OnnxImportError(f"{imported.label}: graph: no output {LOGITS!r}; a decode "
                              f"step takes a causal LM (outputs logits and present.*)")
    name = names[0]
    graph = imported.graph.extract(imported.graph.name, {},
                                   {name: imported.graph.outputs[name]})
    for input_name, node in graph.inputs.items():
        node.where = imported.graph.inputs[input_name].where or node.where
    imported = dataclasses.replace(imported, graph=graph, outputs={name: LOGITS})
    return dataclasses.replace(kernel, imported=imported, outputs={name: ()}), name


def compile_decode_step(source, machine, capacity, dims=None):
    """The :class:`DecodeStep` of the causal LM ``source`` (a path or ModelProto) on
    ``machine``, its caches of ``capacity`` keys per head (a multiple of the lanes; a
    generation runs at positions ``0 .. capacity - lanes``). ``dims``: dimensions to
    bind (``--bind``) besides the sequence's and the past's."""
    model, label = load_model(source)
    rows = machine.lanes
    ids = [info.name for info in model.graph.input if info.name == "input_ids"]
    if not ids:
        raise OnnxImportError(f"{label}: graph: no input 'input_ids'; a decode step takes "
                              f"token ids")
    if capacity % rows or capacity < rows:
        raise OnnxImportError(f"{label}: a cache of {capacity} keys; supported: a multiple "
                              f"of the {rows} lanes")
    if machine.latency_table is not None:
        # its products, norms, rotary and attention tail are laid out for tiles of one
        # block (the products group rows or columns on the pipelined datapath)
        raise OnnxImportError(f"{label}: a decode step with fp_latency {machine.fp_latency} "
                              f"is not supported yet (--fp-latency off)")
    kernel = onnx_kernel(source, dims, {"input_ids": (1, rows)})
    kernel, logits = _logits_only(kernel)
    long = import_model(model, dims, {"input_ids": (1, capacity)})
    graph = kernel.imported.graph
    tables = {name: long.weights[name] for name, node in graph.inputs.items()
              if node.dtype == "fp32" and name in long.weights and
              np.shape(long.weights[name])[:1] == (capacity,)}
    plan = DecodePlan(capacity, rows, tables)
    path = str(Path(source).resolve()) if isinstance(source, (str, Path)) else ""
    kernel, sequence = compile_groups(kernel, machine, model=path, decode=plan)
    vocabulary = int(np.prod(graph.outputs[logits].shape[1:]))
    return DecodeStep(kernel, sequence, plan, logits, vocabulary)

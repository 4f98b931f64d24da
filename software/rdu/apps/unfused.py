"""Kernel by kernel: a front-end kernel as a sequence of programs, one per operator.

The baseline of the paper's first claim (``docs/fusion.md``): every operator is its own
configuration, its intermediates go to HBM and come back, and each launch pays its
program load. :func:`compile_unfused` turns a registered kernel into a
:class:`Sequence` of :class:`Stage` programs compiled by the same compiler
(:mod:`rdu.compiler`) with an :class:`~rdu.compiler.core.ImagePlan` each: a
producer's output image is its consumer's input image, at one address, in a geometry
both can walk (the matmul writes the scores row-major for the softmax; the softmax
writes the probabilities in the layout the next matmul reads), and every program has
its own pages for the rest, so the whole sequence sits in HBM at once.

Attention with ``G`` key/value heads is ``3 G`` stages, per head group ``g``::

    scores_g : S = Q_g K_g^T               (matmul, FP32 S row-major)
    softmax_g: P = softmax(S * scale)     (row kernel, P rounded to BF16)
    pv_g     : O_g = P V_g                (matmul, FP32)

``Q_g`` is the group's query rows stacked (``HEADS / KV_HEADS`` heads x rows); the
softmax is one row kernel (max, exp, sum, reciprocal, scale: the row chain of
:mod:`rdu.compiler.row_chain`), which makes this baseline faster than one
configuration per elementary operator. The user's Q, K and V are packed by the host
in each stage's layout, as for the fused program; only S and P stay on the device.
"""

from dataclasses import dataclass, field

import numpy as np

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..compiler.families import family_named
from ..compiler.lower import PAGE
from ..frontend.attention import query_rows, scale_value
from ..frontend.gemm import pack_images, unpack_images
from ..frontend.graph import Graph, exp, reciprocal
from ..layout import Image

__all__ = ["Stage", "Sequence", "compile_unfused", "unfused_attention", "unfused_graph",
           "end_of"]


@dataclass
class Stage:
    """One program of a sequence: ``graph`` compiled to ``program``; ``user``:
    ``{tensor: function(user inputs) -> uint32 words}`` for the inputs the host packs;
    ``produced``: ``{tensor: (stage index, output name)}`` for the intermediates an
    earlier stage wrote (already in memory at the program's address); ``(stage index,
    output name, function)``: several stages wrote it, ``function(per-stage outputs)``
    gives its words (attention's heads, :mod:`rdu.apps.onnx_attention`); ``observes``:
    ``[(node, function(per-stage outputs) -> words of node's shape)]``, the front-end
    values the stage completes (for the per-operator errors of
    :mod:`rdu.apps.onnx_operators`)."""
    name: str
    graph: Graph
    program: object
    user: dict = field(default_factory=dict)
    produced: dict = field(default_factory=dict)
    observes: list = field(default_factory=list)


@dataclass
class Sequence:
    """A kernel as programs run in order on one machine and one memory."""
    kernel: str
    params: dict
    stages: list
    assemble: object            # function(list of {output: uint32 words}) -> user outputs

    @property
    def name(self):
        return f"{self.kernel}_unfused"

    @property
    def machine(self):
        return self.stages[0].program.machine

    @property
    def programs(self):
        return [stage.program for stage in self.stages]

    def pack(self, inputs):
        """Pack the user's ``{tensor: uint32 words}`` into every stage's input images
        (intermediates stay ``None``: the previous stage leaves them in memory)."""
        for stage in self.stages:
            arrays = {name: make(inputs) for name, make in stage.user.items()}
            program = stage.program
            for image_name, layout in program.meta["images"].items():
                if image_name in stage.produced or image_name not in program.inputs:
                    continue
                program.inputs[image_name] = (layout["address"],
                                              Image.from_json(layout).pack(arrays))
        return self

    def stage_outputs(self, results):
        """``[{output: uint32 words (its shape)}]`` per stage from each launch's raw
        output images."""
        return [unpack_images(stage.program, outputs)
                for stage, outputs in zip(self.stages, results, strict=True)]

    def outputs(self, results):
        """The user's ``{output: uint32 words}`` from each launch's raw output images."""
        return self.assemble(self.stage_outputs(results))

    def exact(self, inputs):
        """``(user outputs, per-stage outputs)``: the hardware's arithmetic stage by
        stage, each stage fed the words the previous one produced."""
        produced = []
        for stage in self.stages:
            arrays = {name: make(inputs) for name, make in stage.user.items()}
            for name, (index, output, *gather) in stage.produced.items():
                arrays[name] = gather[0](produced) if gather else produced[index][output]
            program = _with_images(stage.program, arrays)
            produced.append(family_named(program.meta["group"]).exact(program, stage.graph))
        return self.assemble(produced), produced

    def hbm_bytes(self):
        """Bytes each stage reads and writes in its images (the traffic of one run)."""
        return sum(Image.from_json(layout).nbytes
                   for stage in self.stages
                   for layout in stage.program.meta["images"].values())


def _with_images(program, arrays):
    """A shallow copy of ``program`` with every input image packed from ``arrays``."""
    import copy
    clone = copy.copy(program)
    clone.inputs = dict(program.inputs)
    return pack_images(clone, arrays)


def end_of(program):
    """The first page after everything ``program`` occupies in HBM."""
    ends = [program.bitstream_address + 4 * len(program.bitstream)]
    ends += [layout["address"] + Image.from_json(layout).nbytes
             for layout in program.meta["images"].values()]
    return -(-max(ends) // PAGE) * PAGE


def _image(program, name):
    return Image.from_json(program.meta["images"][name])


def _gemm_graph(name, m, k, n, a="a", b="b", out="c"):
    graph = Graph(name)
    graph.output(out, graph.input(a, (m, k)) @ graph.input(b, (k, n)))
    return graph


def _softmax_graph(name, m, n, scale):
    graph = Graph(name)
    x = graph.input("s", (m, n), dtype="fp32") * float(scale)
    e = exp(x - x.max())
    graph.output("p", (e * reciprocal(e.sum())).astype("bf16"))
    return graph


def unfused_attention(machine, seq, dim, heads, kv_heads, mode="decode", causal=False,
                      scale=None, kv_layout="blocks", valid=None, queries=None):
    """The :class:`Sequence` of attention (module docstring) for ``machine``; ``valid``
    and ``queries`` are a KV cache's (``kv_layout`` ``rows``, fused only)."""
    if kv_layout != "blocks" or queries not in (None, 1):
        raise CompileError("unfused attention: --kv-layout rows (a KV cache) is read by "
                           "the fused chain only")
    if causal:
        raise CompileError("unfused attention: --causal is not built (the row kernels "
                           "take one input, so the mask has no way in)")
    rows = query_rows(mode, seq)
    group = heads // kv_heads
    m = group * rows
    scale = scale_value(dim, scale)
    stages, start = [], None

    def compile_stage(graph, plan):
        nonlocal start
        program = compile_graph(graph, machine, plan=plan)
        start = end_of(program)
        return program

    for g in range(kv_heads):
        def q_rows(inputs, g=g):
            return np.asarray(inputs["q"], np.uint32)[g * group:(g + 1) * group].reshape(
                m, dim)

        def k_t(inputs, g=g):
            return np.ascontiguousarray(np.asarray(inputs["k"], np.uint32)[g].T)

        def v_rows(inputs, g=g):
            return np.asarray(inputs["v"], np.uint32)[g]

        # the consumer first: the probabilities' image is the one P V reads
        pv = _gemm_graph(f"attention_pv{g}", m, seq, dim, a="p", b="v", out="o")
        pv_program = compile_stage(pv, ImagePlan(start=start))
        p_image = _image(pv_program, "p")
        if p_image.shape[1] != seq:
            raise CompileError(f"unfused attention: SEQ {seq} is not a multiple of "
                               f"{2 * machine.lanes}: P V pads the keys to "
                               f"{p_image.shape[1]} and the softmax writes whole beats of "
                               f"BF16, not the zeros between")
        scores = _gemm_graph(f"attention_scores{g}", m, dim, seq, a="q", b="kt", out="s")
        scores_program = compile_stage(scores, ImagePlan(
            start=start, layouts={"s": Image((m, seq), (), None, None, "fp32")}))
        softmax = _softmax_graph(f"attention_softmax{g}", m, seq, scale)
        softmax_program = compile_stage(softmax, ImagePlan(
            start=start,
            addresses={"s": scores_program.meta["images"]["s"]["address"],
                       "p": pv_program.meta["images"]["p"]["address"]},
            layouts={"s": _image(scores_program, "s"), "p": p_image}))
        base = len(stages)
        stages += [
            Stage(f"scores{g}", scores, scores_program, {"q": q_rows, "kt": k_t}),
            Stage(f"softmax{g}", softmax, softmax_program, produced={"s": (base, "s")}),
            Stage(f"pv{g}", pv, pv_program, {"v": v_rows}, {"p": (base + 1, "p")}),
        ]

    def assemble(produced):
        o = np.zeros((heads, rows, dim), np.uint32)
        for g in range(kv_heads):
            o[g * group:(g + 1) * group] = np.asarray(
                produced[3 * g + 2]["o"], np.uint32).reshape(group, rows, dim)
        return {"o": o}

    return Sequence("attention", {"seq": seq, "dim": dim, "heads": heads,
                                  "kv_heads": kv_heads, "mode": mode, "causal": causal},
                    stages, assemble)


def _bias_of(graph, matmul):
    """The add that folds a bias into ``matmul`` (the compiler's ``bias`` rule), or None."""
    for user in graph.users(matmul):
        if user.op == "binary" and user.attrs["fn"] == "add":
            other, = [i for i in user.inputs if i is not matmul] or [None]
            if other is not None and other.op == "input" and other.dtype == "bf16" and \
                    other.shape in ((matmul.shape[1],), (1, matmul.shape[1])):
                return user
    return None


def _user_inputs(graph):
    return {name: (lambda inputs, name=name: inputs[name]) for name in graph.inputs}


def unfused_graph(kernel, machine, params):
    """A front-end kernel as one program per operator group:

    * a matmul (with a folded bias: the matmul kernel's own K extension) writes its FP32
      result row-major;
    * the operators after it are one row kernel reading that;
    * a second matmul (an MLP: ``act(x W1).astype(bf16) W2``) reads the row kernel's
      BF16 rows, which the row kernel writes in that matmul's A tiling.

    A kernel of row operators only, or a matmul alone, is one program (its fused
    form)."""
    graph = kernel.graph(params)
    (out_name, out), = graph.outputs.items()
    matmuls = [node for node in graph.live_nodes() if node.op == "matmul"]
    if len(matmuls) > 2:
        raise CompileError(f"{graph.name}: the unfused form of {len(matmuls)} matmuls is not "
                           f"built (at most two: matmul, row operators, matmul)")
    if not matmuls or out is matmuls[0] or out is _bias_of(graph, matmuls[0]):
        program = compile_graph(graph, machine)
        stage = Stage(graph.name, graph, program, _user_inputs(graph))
        return Sequence(kernel.name, dict(params), [stage],
                        lambda produced: {out_name: produced[0][out_name]})
    core = _bias_of(graph, matmuls[0]) or matmuls[0]
    rows_out, last = out, None
    if len(matmuls) == 2:
        if out is not matmuls[1]:
            raise CompileError(f"{graph.name}: operators after the second matmul are not "
                               f"built in the unfused form")
        rows_out = out.inputs[0]
        # the consumer first: its A tiling is the image the row kernel writes
        last_graph = graph.extract(f"{graph.name}_matmul2", {rows_out: "a"},
                                   {out_name: out})
        last_program = compile_graph(last_graph, machine)
        a_image = _image(last_program, "a")
        if a_image.shape[1] != rows_out.shape[1]:
            raise CompileError(f"{graph.name}: the second matmul pads its K "
                               f"{rows_out.shape[1]} to {a_image.shape[1]}; the row kernel "
                               f"between would have to write the zeros")
        last = Stage(last_graph.name, last_graph, last_program,
                     {name: make for name, make in _user_inputs(last_graph).items()
                      if name != "a"}, {"a": (1, "a")})
    first = graph.extract(f"{graph.name}_matmul", {}, {"h": core})
    first_program = compile_graph(first, machine, plan=ImagePlan(
        start=end_of(last.program) if last else None,
        layouts={"h": Image(core.shape, (), None, None, "fp32")}))
    rows_name = "a" if last else out_name
    second = graph.extract(f"{graph.name}_rows", {core: "h"}, {rows_name: rows_out})
    addresses = {"h": first_program.meta["images"]["h"]["address"]}
    layouts = {"h": _image(first_program, "h")}
    if last:
        addresses["a"] = last.program.meta["images"]["a"]["address"]
        layouts["a"] = _image(last.program, "a")
    second_program = compile_graph(second, machine, plan=ImagePlan(
        start=end_of(first_program), addresses=addresses, layouts=layouts))
    stages = [Stage(first.name, first, first_program, _user_inputs(first)),
              Stage(second.name, second, second_program, produced={"h": (0, "h")})]
    if last:
        stages.append(last)
    return Sequence(kernel.name, dict(params), stages,
                    lambda produced: {out_name: produced[-1][out_name]})


def compile_unfused(kernel, machine, **params):
    """The :class:`Sequence` of registered kernel ``kernel`` (:mod:`rdu.frontend.kernels`):
    attention as ``3 G`` stages, any other kernel by :func:`unfused_graph`."""
    from ..frontend.kernels import get_kernel
    if kernel == "attention":
        return unfused_attention(machine, **params)
    return unfused_graph(get_kernel(kernel), machine, params)

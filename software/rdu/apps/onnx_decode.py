"""A decode step of a causal LM (``docs/generate.md``): every attention of projections
of the model, compiled for one token at the launch's position ``p`` with its keys and
values in a KV cache in HBM.

The step's graph is the model imported for one tile of rows (``rows``: the token in
row 0, zero rows after it; the products need whole tiles). Each attention of
projections (:mod:`rdu.apps.onnx_attention`) becomes:

* ``Q^T`` per head, as for a prefill of ``rows`` rows, with the rotary tables read at
  the position (:meth:`DecodePlan.table`: a table of every position's entry, written
  once, read through a positioned load);
* per key/value head ``g``, **cache writers**: ``[x | I] @ [W_g; C]`` with an FP32
  row-major result (``x`` the norm's rows, read from what the norm writes for the
  products, ``I`` the identity of the rows, ``C`` the
  rows' constants in the mask column ``D``: K's 0 for the token and ``-BIG`` for the
  padding rows, V's 1 in every row), then a row group (K: rotary ``p1 t1 + p2 t2``,
  the tables positioned too; V: the cast) that stores the ``rows`` rows of ``pitch``
  values into rows ``p .. p + rows - 1`` of the cache through a positioned store;
* the attention over the whole cache (``kv_layout`` ``rows``, ``queries`` = ``rows``:
  every row sees the cache; the empty slots' ``-BIG`` masks them);
* its tail: the heads' ``O^T`` cast into ``o_proj``'s B as it lies (``P V``'s first
  block, the softmax sum, and the blocks from the last down, ``docs/attention.md``: the
  rows of ``Wo^T`` are ordered the same way, the sum's against zeros), ``o_proj`` and
  the residual.

A cache is ``(G, capacity, pitch)`` BF16 per layer for K and V; its first contents
(every K row's mask ``-BIG``, except row 0, which the first token writes; every V row's
ones column) and the tables are :attr:`DecodePlan.writes`, written once before the first
token. The padding rows write keys masked ``-BIG`` into rows ``p + 1 ..``, which the
next tokens overwrite, so the capacity holds ``rows - 1`` more keys than the positions.
"""

from dataclasses import dataclass, field

import numpy as np

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..compiler.lower import PAGE
from ..frontend.attention import NEG_BIG
from ..frontend.attention import images as attention_images
from ..frontend.graph import Graph
from ..layout import Image
from ..models.reference import attention_shape
from ..onnx import KERNEL_NAME
from .onnx_attention import (
    ProjectionBuilder,
    attention_of,
    merge_heads_program,
    residual_stage,
)
from .onnx_rotary import half_signs, reads_rotated, result_of, rotated_copy
from .onnx_views import bf16, floats, product_pcus, view
from .unfused import Stage, end_of

__all__ = ["DecodePlan", "compile_decode_attention"]


def _align(value, unit):
    return -(-value // unit) * unit


@dataclass
class DecodePlan:
    """What a decode step's attentions share: ``capacity`` keys per head in every
    cache, ``rows`` rows per step, ``tables`` ``{front-end input: float32 (positions,
    dim)}`` (a rotary table over every position, :func:`rdu.onnx.importer.
    rotary_tables`' values as the graph's inputs). Compiling fills ``writes`` (``[(byte
    address, uint32 words)]``, written once before the first token), ``written``
    (``[(program, input image)]``: the inputs those writes hold, not packed per run)
    and ``caches`` (per attention, ``{"k" | "v": (address, bytes), "kv_heads",
    "dim"}``)."""
    capacity: int
    rows: int
    tables: dict
    writes: list = field(default_factory=list)
    written: list = field(default_factory=list)
    caches: list = field(default_factory=list)

    @property
    def positions(self):
        """Positions a step may be launched at: ``0 .. capacity - rows``."""
        return self.capacity - self.rows + 1

    def reserve(self, built, nbytes, stride=None):
        """``(address, (stride, entries))`` of a positioned table of :attr:`positions`
        entries of ``nbytes`` (``stride`` apart, default the entry rounded to a beat)
        on ``built``'s pages, which move past it."""
        beat = built.machine.beat_bytes
        stride = _align(nbytes, beat) if stride is None else stride
        address = _align(built.start, PAGE)
        built.start = _align(address + stride * (self.positions - 1) + nbytes, PAGE)
        return address, (stride, self.positions)

    def table(self, program, image, name, rows, words_of):
        """Write the table of input ``image`` of ``program`` (positioned): entry ``p``
        is ``words_of(table[p:p + rows])`` packed as the image, ``table`` the values of
        front-end input ``name`` over every position."""
        if name not in self.tables:
            raise CompileError(f"{program.name}: no table over the positions for {name!r}")
        values = np.asarray(self.tables[name], np.float32)
        if values.shape[0] < self.positions + rows - 1:
            raise CompileError(f"{program.name}: the table {name!r} has {values.shape[0]} "
                               f"positions; the cache needs {self.positions + rows - 1}")
        layout = Image.from_json(program.meta["images"][image])
        stride, entries = (program.meta["positions"][image][key]
                           for key in ("stride", "entries"))
        words = np.zeros((stride * (entries - 1) + layout.nbytes) // 4, np.uint32)
        for p in range(entries):
            packed = layout.pack({image: words_of(values[p:p + rows])})
            words[p * stride // 4:p * stride // 4 + packed.size] = packed
        self.writes.append((program.meta["images"][image]["address"], words))
        self.written.append((program, image))


def _rows_table(rows, dim, pitch, number, rotated=False, heads=1):
    """``words_of`` of K's rotary table ``number`` (0: cos, 1: sin) as rows of ``heads``
    blocks of ``pitch`` (the same table for every key/value head): the mask column
    ``dim`` through ``t1`` = 1, ``t2`` = 0; ``rotated``: the second table signed for
    ``p2`` read from ``p1`` (:mod:`rdu.apps.onnx_rotary`)."""
    signs = half_signs(dim) if rotated and number else np.ones(dim, np.float32)

    def words_of(values):
        full = np.zeros((rows, pitch), np.float32)
        full[:, :dim] = np.asarray(values, np.float32).reshape(rows, dim) * signs
        full[:, dim] = 1.0 if number == 0 else 0.0
        return np.ascontiguousarray(np.tile(full, (1, heads))).view(np.uint32)
    return words_of


def _cache_writer(built, s, plan, kind, address, head_bytes):
    """Every key/value head's rows of ``kind`` (k or v) into the cache at ``address``
    (head ``g``'s row 0 at ``address + g * head_bytes``) through one positioned store:
    one product ``[x | I] [W_0 | C; W_1 | C; ...]`` of every head (its rows ``heads``
    blocks of ``pitch``), with rotary a second product or its copy
    (:mod:`rdu.apps.onnx_rotary`), and a row group to BF16 whose output image is
    strided (a row's blocks ``head_bytes`` apart); the writer's stages."""
    rows, width, dim, pitch, lanes = built.rows, built.width, s.dim, s.pitch, s.lanes
    heads, parts = s.kv_heads, built.parts[kind]
    depth = built.norm_b(None).depth
    constants = np.zeros((rows, pitch), np.float32)
    if kind == "k":         # the token's key filled (0), the padding rows' masked
        constants[1:, dim] = float(np.uint32(NEG_BIG).view(np.float32))
    else:
        constants[:, dim] = 1.0
    fp32_rows = Image((rows, heads * pitch), (), None, None, "fp32")

    firsts = []
    rotated = reads_rotated(parts, dim, row=2 * lanes, pitch=pitch)
    for number, (_, w, _) in enumerate(parts):
        if number and rotated:      # p2 read from p1 (rdu.apps.onnx_rotary)
            firsts.append(rotated_copy(built, kind, firsts[0], rows * heads,
                                       pitch // (2 * lanes), dim // (4 * lanes)))
            continue

        def weight(inputs, w=w, number=number):
            b = np.zeros((depth, heads * pitch), np.float32)
            w_all = floats(inputs[w.name]).reshape(width, -1)
            for g in range(heads):
                b[:width, g * pitch:g * pitch + dim] = w_all[:, g * dim:(g + 1) * dim]
                if number == 0:
                    b[width:width + rows, g * pitch:(g + 1) * pitch] = constants
            return bf16(b)
        firsts.append(built.produce(f"{kind}_{number}", None, None, weight,
                                    (rows, depth), (depth, heads * pitch), None,
                                    bf16=False, out_layout=fp32_rows))
    count = rows * heads * pitch // (2 * lanes)
    rows_view = Image((count, 2 * lanes), (), None, None, "fp32")
    graph = Graph(built.name(f"{kind}_rows"))
    p = [graph.input(f"p{n + 1}", (count, 2 * lanes), "fp32") for n in range(len(parts))]
    if len(parts) == 1:
        out = p[0]
    else:
        t1, t2 = (graph.input(name, (count, 2 * lanes), "fp32") for name in ("t1", "t2"))
        out = p[0] * t1 + p[1] * t2
    graph.output("out", out.astype("bf16"))
    addresses = {"out": address}
    layouts = {"out": Image((count, 2 * lanes), (), (rows, heads, pitch), None, "bf16",
                            strides=(pitch, head_bytes // 2, 1))}
    positions = {"out": (pitch * 2, plan.positions)}
    for n, index in enumerate(firsts):
        addresses[f"p{n + 1}"] = built.stages[index - built.first].program.meta[
            "images"]["out"]["address"]
        layouts[f"p{n + 1}"] = rows_view
    if len(parts) == 2:     # a table row per position: entry p is rows p .. p + rows - 1
        for name in ("t1", "t2"):
            layouts[name] = rows_view
            addresses[name], positions[name] = plan.reserve(
                built, rows_view.nbytes, stride=heads * pitch * 4)
    program = compile_graph(graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                            plan=ImagePlan(start=built.start, addresses=addresses,
                                           layouts=layouts, positions=positions))
    user = {}
    if len(parts) == 2:     # written whole, once (entry 0 packed as the image)
        for number, (_, _, t) in enumerate(parts):
            words_of = _rows_table(rows, dim, pitch, number, rotated, heads)
            plan.table(program, f"t{number + 1}", t.name, rows, words_of)
            user[f"t{number + 1}"] = lambda inputs, w=words_of, t=t: w(plan.tables[t.name][
                :rows])

    def produced(index):
        result = result_of(built, index)
        return (index, "out", lambda words: view(np.asarray(result(words), np.uint32),
                                                 lanes))
    index = built.add(Stage(graph.name, graph, program, user,
                            {f"p{n + 1}": produced(i) for n, i in enumerate(firsts)}))
    for g in range(heads):
        built.final[(kind, g, f"{kind}_rows")] = (index, "out", lambda words: words)


def _queries(built, s, address, layout):
    """``Q^T`` of every head where the attention reads it (:class:`ProjectionBuilder`'s
    producers, or its stacked rotary products and row group)."""
    zero = {"q": np.zeros(s.heads * s.rows * s.dim, np.uint32),
            "k": np.zeros(s.kv_heads * s.seq * s.dim, np.uint32),
            "v": np.zeros(s.kv_heads * s.seq * s.dim, np.uint32)}
    constants = floats(attention_images(s)["q"].matrix(zero)).reshape(layout.shape)
    offsets = layout.byte_offsets()
    items = []
    for h in range(s.heads):
        mine = [p for p, (_, _, queries) in enumerate(s.passes()) if queries[0][0] == h]
        block = np.concatenate([np.arange(p * s.lanes, (p + 1) * s.lanes) for p in mine])
        items.append((h, 0, constants[block].T, offsets[block].T))
    if len(built.parts["q"]) == 2:
        built.stacked("q", s, items, address)
        return
    for h, copy, target, wanted in items:
        built.operand("q", h, s, target, address, wanted, copy)


def compile_decode_attention(graph, sink, machine, start, out_name, first, params,
                             values, plan):
    """``([Stage], transform)`` of the attention of projections ending at ``sink`` in a
    decode step (module docstring), as :func:`rdu.apps.onnx_attention.
    compile_attention`'s; ``plan``: the :class:`DecodePlan` the step's attentions
    share."""
    node, tail = attention_of(sink)
    built = ProjectionBuilder(graph, node, machine, params, values or {})
    built.tables = plan
    if built.rows != plan.rows:
        raise CompileError(f"{node.where}: a decode step of {built.rows} rows; the plan "
                           f"has {plan.rows}")
    if built.norm is None:
        raise CompileError(f"{node.where}: a decode step's attention of projections of a "
                           f"model input; supported: of its RMSNorm (a decoder layer: the "
                           f"norm writes the rows the cache writers read)")
    if len(tail) != 4 or out_name is not None:
        raise CompileError(f"{node.where}: a decode step's attention followed by o_proj "
                           f"and the residual, read by more of the model; supported: a "
                           f"decoder layer")
    att_graph, att = built.attention_program("o", start, plan.capacity)
    built.first, built.start = first, end_of(att)
    s = attention_shape(att)
    images = att.meta["images"]
    built.b_columns = built.rows
    _queries(built, s, images["q"]["address"], Image.from_json(images["q"]))
    head_bytes = s.seq * s.pitch * 2
    for kind in "kv":
        _cache_writer(built, s, plan, kind, images[kind]["address"], head_bytes)
    stages = built.stages
    att_index = first + len(stages)

    def empty(inputs):
        return np.zeros(s.kv_heads * s.seq * s.dim, np.uint32)
    q_index = next(value[0] for key, value in built.final.items() if key[0] == "q")
    stages.append(Stage(f"{graph.name}_{att_index}_attention", att_graph, att,
                        {"k": empty, "v": empty}, {"q": (q_index, "out")}))
    for kind in "kv":         # the cache before the first token: written once
        layout = Image.from_json(images[kind])
        plan.writes.append((images[kind]["address"], layout.pack({kind: empty(None)})))
        plan.written.append((att, kind))
    plan.caches.append({**{kind: (images[kind]["address"], s.kv_heads * head_bytes)
                           for kind in "kv"}, "kv_heads": s.kv_heads, "dim": s.dim})
    return _tail(built, s, att, tail, first, stages, att_index)


def _wo_rows(s, wo_words, hidden):
    """``Wo`` (``heads * dim``, ``hidden``) with its rows in the order of the attention's
    ``O^T`` pass rows (``out_dims`` a head: the sum's block, zeros, then the blocks of
    ``lanes`` dimensions from the last down), transposed: ``o_proj``'s A."""
    lanes, dim = s.lanes, s.dim
    wo = floats(wo_words).reshape(s.heads, dim, hidden)
    rows = np.zeros((s.heads, s.out_dims, hidden), np.float32)
    blocks = dim // lanes
    for b in range(blocks):
        at = (1 + blocks - 1 - b) * lanes
        rows[:, at:at + lanes] = wo[:, b * lanes:(b + 1) * lanes]
    return bf16(np.ascontiguousarray(rows.reshape(s.heads * s.out_dims, hidden).T))


def _tail(built, s, att, tail, first, stages, att_index):
    """The attention's ``O^T`` (pass by pass: the passes are the heads in order) cast to
    BF16 as it lies into ``o_proj``'s B, ``y^T = Wo'^T B`` (:func:`_wo_rows`), and the
    residual (:func:`rdu.apps.onnx_attention.residual_stage`)."""
    lanes, heads, rows = s.lanes, s.heads, s.rows
    where, name = built.node.where, built.graph.name
    if not s.sum_in_pv or rows != lanes or [q[0][0] for _, _, q in s.passes()] != \
            list(range(heads)):
        raise CompileError(f"{where}: a decode step's attention of head dimension {s.dim} "
                           f"over {rows} rows; supported: a multiple of {lanes} under "
                           f"{128 - lanes} (the softmax sum from P V), {lanes} rows")
    matmul = tail[2]
    wo = matmul.inputs[1]
    hidden = wo.shape[1]
    depth = heads * s.out_dims
    start = max(end_of(stage.program) for stage in stages)
    o_graph = Graph(f"{name}_o_proj")
    o_graph.output("yT", o_graph.input("wo_t", (hidden, depth)) @
                   o_graph.input("ob", (depth, rows)))
    o_prog = compile_graph(o_graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                           plan=ImagePlan(start=start),
                           max_pcus=product_pcus(hidden, rows, lanes))
    b_image = Image.from_json(o_prog.meta["images"]["ob"])
    o_image = Image.from_json(att.meta["images"]["o"])
    count = depth * rows // (2 * lanes)
    dense = Image((count, 2 * lanes), (), None, None, "fp32")
    if b_image.shape != (depth, rows) or o_image.nbytes != dense.nbytes or \
            b_image.nbytes * 2 != dense.nbytes:
        raise CompileError(f"{where}: o_proj's B {b_image.describe()} is not the "
                           f"attention's O^T {o_image.describe()} cast to BF16")
    m_graph, m_prog = merge_heads_program(built, att, o_prog, dense, Image(
        (count, 2 * lanes), (), None, None, "bf16"))

    def wo_t(inputs):
        return _wo_rows(s, inputs[wo.name], hidden)

    stages.append(Stage(f"{name}_{att_index + 1}_merge_heads", m_graph, m_prog, {},
                        {"o": (att_index, "o")}))
    stages.append(Stage(f"{name}_{att_index + 2}_o_proj", o_graph, o_prog, {"wo_t": wo_t},
                        {"ob": (att_index + 1, "ob")}))
    stages.append(residual_stage(built, tail, o_prog, end_of(m_prog), None, True,
                                 att_index, (hidden, rows, lanes)))
    return stages, None

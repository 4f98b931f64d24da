"""Attention of projections in a model of several configurations (``docs/onnx.md``,
"Attention of projections"): ``attention(heads(bf16(x @ Wq)), heads(bf16(x @ Wk)),
heads(bf16(x @ Wv)))`` as configurations that write Q, K and V where the attention
configuration reads them, and the attention configuration.

The attention family reads ``Q^T`` pass by pass and K key block by key block,
dimension-major, each with its mask dimensions' constants (``docs/attention.md``, "Masks
are score dimensions"), and V chunk by chunk, dimension block by dimension block. A
matmul writes its result column tile by column tile (``lanes`` columns, every row), so:

* ``Q_h^T = [Wq_h^T | C_q] [x^T; I_L]`` (one configuration per head): its column tiles
  are the head's passes (``lanes`` queries each) and its rows the score dimensions;
  the identity rows of B times the constant columns ``C_q`` of A are the mask
  dimensions' constants (1 where ``Q^T`` holds 1), everything else adds exact zeros;
* ``K_{h,c}^T = [Wk_h^T | C_k] [x^T; I]`` per head and K copy (causal: one per row
  tile), over the padded keys: its column tiles are the key blocks, ``C_k`` the ``-BIG``
  of masked keys;
* ``V_{h,c} = x_c Wv_h`` per head and chunk of keys (``x_c`` the chunk's rows of x,
  zero past the keys): its column tiles are V's dimension blocks;

each rounded to BF16 by the matmul's epilogue (the cast the graph has before
:func:`rdu.frontend.graph.heads`), at most one systolic PCU (whole tiles of ``lanes``
rows), the attention's ``Dk`` a multiple of the lanes (``dim_align``). A and B are
packed by the host from x and the weights (a layout of the model's inputs); nothing
between the configurations leaves HBM. The byte offsets every producer writes are
checked against the attention's images at compile time.
"""

import numpy as np

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..frontend.attention import images as attention_images
from ..frontend.graph import Graph, attention
from ..layout import Image
from ..models import pcu_reference as pcu_model
from ..models.reference import attention_shape
from ..onnx import KERNEL_NAME
from .unfused import Stage, end_of

__all__ = ["attention_members", "compile_attention"]


def _projection(node):
    """``(x, w)`` of an attention operand ``heads(cast(x @ w))``, or None."""
    if node.op != "heads":
        return None
    cast = node.inputs[0]
    if cast.op != "unary" or cast.attrs.get("fn") != "cast" or cast.inputs[0].op != "matmul":
        return None
    x, w = cast.inputs[0].inputs
    return (x, w) if x.op == "input" and w.op == "input" else None


def _next_in_tail(current, after, op, fn):
    """Whether ``after`` (the one user of ``current``) is the tail's next step."""
    if after.op != op or (fn and after.attrs.get("fn") != fn):
        return False
    if op == "matmul":
        return after.inputs[0] is current and after.inputs[1].op == "input"
    if op == "binary":
        other = [i for i in after.inputs if i is not current]
        return len(other) == 1 and other[0].op == "input" and other[0].shape == after.shape
    return True


def tail_of(node, users, outputs):
    """``[merge_heads, cast, o_proj matmul, residual add]`` after attention ``node``, or
    its first three, or nothing (attention the output); a one-line error for anything
    else."""
    chain, current = [], node
    for op, fn in (("merge_heads", None), ("unary", "cast"), ("matmul", None),
                   ("binary", "add")):
        after = users.get(id(current), [])
        if not after or id(current) in outputs or len(after) != 1 or \
                not _next_in_tail(current, after[0], op, fn):
            break
        chain.append(after[0])
        current = after[0]
    if not users.get(id(current)) and id(current) in outputs and len(chain) in (0, 3, 4):
        return chain
    raise CompileError(f"{node.where}: operators after attention in a model of several "
                       f"configurations: supported: attention's result as a model output, "
                       f"or merged heads @ o_proj (+ a model input: the residual)")


def attention_members(node, users, outputs):
    """The ids of the nodes an attention group of ``node`` holds (its operands' heads,
    casts and projections, and :func:`tail_of`); a one-line error when it is not
    attention of projections of one model input followed by what :func:`tail_of`
    takes."""
    members = {id(member) for member in tail_of(node, users, outputs)}
    sources = set()
    for operand in node.inputs:
        found = _projection(operand)
        if found is None:
            raise CompileError(f"{node.where}: attention of {operand.op} "
                               f"{operand.attrs.get('fn', '')} in a model of several "
                               f"configurations; supported: attention of model inputs (one "
                               f"configuration), or of projections x @ W split into heads")
        cast, matmul = operand.inputs[0], operand.inputs[0].inputs[0]
        for inner in (cast, matmul):
            if len(users.get(id(inner), ())) != 1 or id(inner) in outputs:
                raise CompileError(f"{inner.where}: a projection of attention read "
                                   f"elsewhere too; supported: read by attention alone")
        members |= {id(operand), id(cast), id(matmul)}
        sources.add(id(found[0]))
    if len(sources) != 1:
        raise CompileError(f"{node.where}: attention of projections of several tensors; "
                           f"supported: Q, K and V projections of one model input")
    return members


def _floats(words):
    return np.asarray(words, np.uint32).view(np.float32)


def _bf16(array):
    return pcu_model.bf16_words(np.asarray(array, np.float32))


def _product_graph(name, a_shape, b_shape):
    graph = Graph(name)
    a, b = graph.input("a", a_shape), graph.input("b", b_shape)
    graph.output("out", (a @ b).astype("bf16"))
    return graph


def _check_bytes(where, program, wanted):
    """The producer's ``out`` image writes element ``(r, c)`` at byte ``wanted[r, c]``
    of where it is placed."""
    image = Image.from_json(program.meta["images"]["out"])
    got = image.byte_offsets()
    if got.shape != wanted.shape or not np.array_equal(got, wanted):
        raise CompileError(f"{where}: the projection {program.name} writes its "
                           f"{image.describe()} result in another layout than the "
                           f"attention's image")


class _Builder:
    """The configurations of one attention of projections (module docstring)."""

    def __init__(self, graph, node, machine, model):
        self.graph, self.node, self.machine, self.model = graph, node, machine, model
        self.q, self.k, self.v = (_projection(operand) for operand in node.inputs)
        self.x = self.q[0].name
        self.rows, self.width = self.q[0].shape

    def attention_program(self, out_name, start, params):
        node, graph = self.node, Graph(f"{self.graph.name}_attention")
        q, k, v = (graph.input(name, operand.shape)
                   for name, operand in zip("qkv", node.inputs, strict=True))
        out = attention(q, k, v, node.attrs.get("scale"), node.attrs.get("causal", False))
        out.node.attrs["dim_align"] = self.machine.lanes
        out.node.where = node.where
        graph.output(out_name, out)
        if q.shape[0] != k.shape[0] or q.shape[1] % self.machine.lanes:
            raise CompileError(f"{node.where}: attention of projections of {q.shape[0]} "
                               f"query and {k.shape[0]} key/value heads, {q.shape[1]} rows; "
                               f"supported: as many key/value heads as query heads, rows a "
                               f"multiple of {self.machine.lanes}")
        program = compile_graph(graph, self.machine, kernel=KERNEL_NAME, params=params,
                                plan=ImagePlan(start=start))
        return graph, program

    def produce(self, name, start, address, a, b, shape_a, shape_b, wanted):
        """A producer stage: ``(a() @ b()).astype(bf16)`` written where ``wanted`` (the
        byte offsets of its elements in the attention's image at ``address``) says."""
        offset = int(wanted[0, 0])
        address += offset
        wanted = wanted - offset
        graph = _product_graph(name, shape_a, shape_b)
        program = compile_graph(graph, self.machine, kernel=KERNEL_NAME, params=self.params,
                                plan=ImagePlan(start=start, addresses={"out": address}),
                                max_pcus=1)
        _check_bytes(self.node.where, program, wanted)
        return Stage(name, graph, program, {"a": a, "b": b})


def _identity_b(x_words, rows, width, columns):
    """``[x^T; I]`` (width + columns, columns) as BF16 words: x^T of the first ``rows``
    columns (zero past them), then the identity."""
    b = np.zeros((width + columns, columns), np.float32)
    b[:width, :rows] = _floats(x_words).reshape(rows, width).T
    b[width:] = np.eye(columns, dtype=np.float32)
    return _bf16(b)


def _attention_of(sink):
    """The attention node at the head of ``sink``'s tail (:func:`tail_of`), and the
    tail."""
    tail = []
    node = sink
    while node.op != "attention":
        tail.insert(0, node)
        node = node.inputs[0] if node.op != "binary" else next(
            i for i in node.inputs if i.op != "input")
    return node, tail


def compile_attention(graph, sink, machine, start, out_name, first, params):
    """``([Stage], transform)``: the projections (Q per head, K per head and copy, V per
    head and chunk), the attention, and its tail (:func:`tail_of`: the heads merged
    into ``o_proj``'s B, ``o_proj``, the residual); ``first`` the index of the first in
    the sequence; ``transform`` turns the last stage's result into the output's words
    (``o_proj`` and the residual compute the transposed rows), or None."""
    node, tail = _attention_of(sink)
    built = _Builder(graph, node, machine, params.get("model", ""))
    built.params = params
    att_graph, att = built.attention_program("o" if tail else out_name, start, params)
    s = attention_shape(att)
    layout = {name: Image.from_json(att.meta["images"][name]) for name in "qkv"}
    address = {name: att.meta["images"][name]["address"] for name in "qkv"}
    zero = {name: np.zeros(int(np.prod(operand.shape)), np.uint32)
            for name, operand in zip("qkv", node.inputs, strict=True)}
    constants = {name: _floats(attention_images(s)[name].matrix(zero)).reshape(
        layout[name].shape) for name in "qk"}
    offsets = {name: layout[name].byte_offsets() for name in "qkv"}
    rows, width, dim, lanes = built.rows, built.width, s.dim, s.lanes
    stages, start = [], end_of(att)
    heads = node.inputs[0].shape[0]

    def weight_a(w_name, h, coefficients):
        def make(inputs):
            w = _floats(inputs[w_name]).reshape(width, -1)[:, h * dim:(h + 1) * dim]
            a = np.zeros((s.dim_k, width + coefficients.shape[1]), np.float32)
            a[:dim, :width] = w.T
            a[dim:, width:] = coefficients[dim:]
            return _bf16(a)
        return make

    def add(stage):
        nonlocal start
        stages.append(stage)
        start = end_of(stage.program)

    passes = s.passes()
    for h in range(heads):
        mine = [p for p, (_, _, queries) in enumerate(passes) if queries[0][0] == h]
        block = slice(mine[0] * lanes, (mine[-1] + 1) * lanes)
        target = constants["q"][block].T                       # (dim_k, rows)
        add(built.produce(
            f"{graph.name}_{first + len(stages)}_q{h}", start,
            address["q"],
            weight_a(built.q[1].name, h, target),
            lambda inputs: _identity_b(inputs[built.x], rows, width, rows),
            (s.dim_k, width + rows), (width + rows, rows), offsets["q"][block].T))
        for copy in range(s.key_copies):
            base = (h * s.key_copies + copy) * s.seq_pad
            keys = slice(base, base + s.seq_pad)
            add(built.produce(
                f"{graph.name}_{first + len(stages)}_k{h}_{copy}", start,
                address["k"],
                weight_a(built.k[1].name, h, constants["k"][keys].T),
                lambda inputs: _identity_b(inputs[built.x], rows, width, s.seq_pad),
                (s.dim_k, width + s.seq_pad), (width + s.seq_pad, s.seq_pad),
                offsets["k"][keys].T))
        for chunk in range(s.chunks):
            keys = slice(h * s.seq_pad + chunk * s.chunk, h * s.seq_pad + (chunk + 1) *
                         s.chunk)

            def x_chunk(inputs, chunk=chunk):
                x = np.zeros((s.chunk, width), np.float32)
                part = _floats(inputs[built.x]).reshape(rows, width)[
                    chunk * s.chunk:(chunk + 1) * s.chunk]
                x[:len(part)] = part
                return _bf16(x)

            def w_head(inputs, h=h):
                w = _floats(inputs[built.v[1].name]).reshape(width, -1)
                return _bf16(w[:, h * dim:(h + 1) * dim])

            add(built.produce(
                f"{graph.name}_{first + len(stages)}_v{h}_{chunk}", start,
                address["v"], x_chunk, w_head,
                (s.chunk, width), (width, dim), offsets["v"][keys]))
    produced = _gathered(stages, s, first, heads, dim)
    stages.append(Stage(f"{graph.name}_{first + len(stages)}_attention", att_graph, att, {},
                        produced))
    if not tail:
        return stages, None
    start = max(end_of(stage.program) for stage in stages)
    return _tail_stages(built, s, att, tail, out_name, first, start, stages)


def _gathered(stages, s, first, heads, dim):
    """``{q, k, v: (stage, "out", function)}``: each operand's ``(heads, rows, dim)``
    words from the producers' results (for the stage-by-stage reference)."""
    names = [stage.name for stage in stages]

    def find(prefix):
        return first + next(i for i, name in enumerate(names) if name.endswith(prefix))

    def q(produced):
        return np.stack([np.asarray(produced[find(f"_q{h}")]["out"])[:dim, :s.rows].T
                         for h in range(heads)])

    def k(produced):
        return np.stack([np.asarray(produced[find(f"_k{h}_0")]["out"])[:dim, :s.seq].T
                         for h in range(heads)])

    def v(produced):
        return np.stack([np.concatenate([np.asarray(produced[find(f"_v{h}_{c}")]["out"])
                                         for c in range(s.chunks)])[:s.seq, :dim]
                         for h in range(heads)])

    return {"q": (find("_q0"), "out", q), "k": (find("_k0_0"), "out", k),
            "v": (find("_v0_0"), "out", v)}


def _tail_stages(built, s, att, tail, out_name, first, start, stages):
    """The attention's result through ``o_proj`` (and the residual), transposed:
    ``y^T = Wo^T O^T`` so that ``O^T``, which the attention writes pass by pass, is the
    matmul's B. A cast-only row group turns the attention's FP32 ``O^T`` (viewed as
    rows of two dimensions of ``lanes`` queries) into BF16 B, column tile by column
    tile; ``o_proj`` writes ``y^T`` row-major; the residual row group adds ``x^T``."""
    lanes, dim, heads = s.lanes, s.dim, s.heads
    rows, tiles = s.rows, s.rows // lanes
    matmul = tail[2]
    wo = matmul.inputs[1]
    hidden = wo.shape[1]
    where = built.node.where
    if dim % lanes or rows % (2 * lanes):
        raise CompileError(f"{where}: o_proj after attention of {rows} rows of dim {dim}; "
                           f"supported: dim a multiple of {lanes}, rows of {2 * lanes}")
    name = built.graph.name
    y_name = "yT" if len(tail) == 4 else out_name       # o_proj's result (transposed)
    # o_proj first: its B image is what the cast-only row group writes
    o_graph = Graph(f"{name}_o_proj")
    o_graph.output(y_name, o_graph.input("wo_t", (hidden, heads * dim)) @
                   o_graph.input("ob", (heads * dim, rows)))
    row_major = Image((hidden, rows), (), None, None, "fp32")
    o_prog = compile_graph(o_graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                           plan=ImagePlan(start=start, layouts={y_name: row_major}))
    b_image = Image.from_json(o_prog.meta["images"]["ob"])
    if b_image.shape != (heads * dim, rows):
        raise CompileError(f"{where}: o_proj pads its K {heads * dim} or N {rows}; the row "
                           f"group before it would have to write the padding")
    count = heads * tiles * dim // 2
    split = (heads, tiles, dim // 2, 2, lanes)
    view_in = Image((count, 2 * lanes), (), None, None, "fp32")
    view_out = Image((count, 2 * lanes), (), split, (1, 0, 2, 3, 4), "bf16")
    o_image = Image.from_json(att.meta["images"]["o"])
    _same_bytes(where, view_in, o_image, lambda m: m.reshape(split).transpose(
        0, 1, 4, 2, 3).reshape(heads * tiles * lanes, dim))
    _same_bytes(where, view_out, b_image, lambda m: m.reshape(split).transpose(
        0, 2, 3, 1, 4).reshape(heads * dim, rows))
    m_graph = Graph(f"{name}_merge_heads")
    m_graph.output("ob", m_graph.input("o", (count, 2 * lanes), "fp32").astype("bf16"))
    m_prog = compile_graph(m_graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                           plan=ImagePlan(start=end_of(o_prog), addresses={
                               "o": att.meta["images"]["o"]["address"],
                               "ob": o_prog.meta["images"]["ob"]["address"]},
                               layouts={"o": view_in, "ob": view_out}))
    att_index = first + len(stages) - 1

    def o_view(produced):
        o = np.asarray(produced[att_index]["o"], np.uint32)     # (heads, rows, dim)
        return o.reshape(heads, tiles, lanes, dim // 2, 2).transpose(
            0, 1, 3, 4, 2).reshape(count, 2 * lanes)

    def b_of(produced):
        view = np.asarray(produced[att_index + 1]["ob"], np.uint32)
        return view.reshape(split).transpose(0, 2, 3, 1, 4).reshape(heads * dim, rows)

    def wo_t(inputs):
        return np.ascontiguousarray(np.asarray(inputs[wo.name], np.uint32).reshape(
            heads * dim, hidden).T)

    stages.append(Stage(f"{name}_{att_index + 1}_merge_heads", m_graph, m_prog, {},
                        {"o": (att_index, "o", o_view)}))
    stages.append(Stage(f"{name}_{att_index + 2}_o_proj", o_graph, o_prog, {"wo_t": wo_t},
                        {"ob": (att_index + 1, "ob", b_of)}))
    if len(tail) < 4:
        return stages, lambda words: np.ascontiguousarray(np.asarray(words)[:hidden].T)
    x = next(i for i in tail[3].inputs if i.op == "input")
    r_graph = Graph(f"{name}_residual")
    r_graph.output(out_name, r_graph.input("yT", (hidden, rows), "fp32") +
                   r_graph.input("xT", (hidden, rows)))
    r_prog = compile_graph(r_graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                           plan=ImagePlan(start=end_of(m_prog), addresses={
                               "yT": o_prog.meta["images"]["yT"]["address"]},
                               layouts={"yT": Image.from_json(o_prog.meta["images"]["yT"])}))

    def x_t(inputs):
        return np.ascontiguousarray(np.asarray(inputs[x.name], np.uint32).reshape(
            rows, hidden).T)

    stages.append(Stage(f"{name}_{att_index + 3}_residual", r_graph, r_prog, {"xT": x_t},
                        {"yT": (att_index + 2, "yT")}))
    return stages, lambda words: np.ascontiguousarray(np.asarray(words).T)


def _same_bytes(where, view, image, arrange):
    """``view`` and ``image`` place every element at the same byte: ``arrange`` turns
    a matrix of ``view``'s shape into ``image``'s logical one (padding aside)."""
    ours = arrange(view.byte_offsets())
    theirs = image.byte_offsets()[:ours.shape[0], :ours.shape[1]]
    if not np.array_equal(ours, theirs):
        raise CompileError(f"{where}: the merged heads' view {view.describe()} is not the "
                           f"layout of {image.describe()}")

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
from ..compiler.families.matmul import transposed_a_image
from ..frontend.attention import images as attention_images
from ..frontend.graph import Graph, attention
from ..layout import Image
from ..models.reference import attention_shape
from ..onnx import KERNEL_NAME
from .onnx_norm import NormB, b_depth, norm_members, norm_of
from .onnx_rotary import half_signs, reads_rotated, result_of, rotated_copy
from .onnx_views import bf16 as _bf16
from .onnx_views import floats as _floats
from .onnx_views import identity_b, product_pcus
from .onnx_views import unview as _unview
from .onnx_views import view as _view
from .unfused import Stage, end_of

__all__ = ["attention_members", "compile_attention", "operand_outputs", "ProjectionBuilder",
           "attention_of", "tail_stages", "residual_stage", "merge_heads_program"]


def _heads_of_projection(node):
    """``(x, w, nodes)`` of ``heads(x @ w)`` (x, w inputs), or None."""
    if node.op != "heads" or node.inputs[0].op != "matmul":
        return None
    x, w = node.inputs[0].inputs
    fits = x.op == "input" or norm_of(x) is not None
    return (x, w, [node, node.inputs[0]]) if fits and w.op == "input" else None


def _projection(node):
    """An attention operand ``cast(heads(x @ w))`` as ``[(x, w, None)]``, or rotary's
    ``cast(heads(x @ w1) * t1 + heads(x @ w2) * t2)`` (``t`` FP32 tables of ``(rows,
    dim)``) as ``[(x, w1, t1), (x, w2, t2)]``; and the nodes it holds. None otherwise."""
    if node.op != "unary" or node.attrs.get("fn") != "cast":
        return None
    inner = node.inputs[0]
    found = _heads_of_projection(inner)
    if found is not None:
        return [found[:2] + (None,)], [node] + found[2]
    if inner.op != "binary" or inner.attrs["fn"] != "add":
        return None
    parts, nodes = [], [node, inner]
    for product in inner.inputs:
        if product.op != "binary" or product.attrs["fn"] != "mul":
            return None
        for heads_node, table in (product.inputs, product.inputs[::-1]):
            found = _heads_of_projection(heads_node)
            if found is not None and table.op == "input" and table.dtype == "fp32" and \
                    table.shape == heads_node.shape[1:]:
                parts.append(found[:2] + (table,))
                nodes += [product] + found[2]
                break
        else:
            return None
    return parts, nodes


def _next_in_tail(current, after, op, fn):
    """Whether ``after`` (the one user of ``current``) is the tail's next step."""
    if after.op != op or (fn and after.attrs.get("fn") != fn):
        return False
    if op == "matmul":
        return after.inputs[0] is current and after.inputs[1].op == "input"
    if op == "binary":
        other = [i for i in after.inputs if i is not current]
        return len(other) == 1 and other[0].shape == after.shape
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
    if len(chain) == 4 and id(current) not in outputs:
        return chain                    # read by more of the model: onnx_transposed
    raise CompileError(f"{node.where}: operators after attention in a model of several "
                       f"configurations: supported: attention's result as a model output, "
                       f"or merged heads @ o_proj (+ the residual: the layer's input)")


def attention_reads(node, users, outputs):
    """The computed values attention ``node``'s group reads (its norm's ``x0`` and its
    residual when they are not model inputs: the residual of the layer before)."""
    reads = []
    x = _projection(node.inputs[0])[0][0][0]
    found = norm_of(x) if x.op != "input" else None
    if found is not None and found[0].op != "input":
        reads.append(found[0])
    tail = tail_of(node, users, outputs)
    if len(tail) == 4:
        other = next(i for i in tail[3].inputs if i is not tail[2])
        if other.op != "input" and all(other is not read for read in reads):
            reads.append(other)
    return reads


def attention_members(node, users, outputs):
    """The ids of the nodes an attention group of ``node`` holds (its operands' heads,
    rotary products, casts and projections, and :func:`tail_of`); a one-line error
    when it is not attention of projections of one model input followed by what
    :func:`tail_of` takes. K and V (their BF16 casts) may be model outputs too: a
    cache's ``present`` (:mod:`rdu.onnx.cache`), read from the attention's images by
    the host (:func:`operand_outputs`)."""
    members = {id(member) for member in tail_of(node, users, outputs)}
    sources = set()
    for index, operand in enumerate(node.inputs):
        found = _projection(operand)
        if found is None or (index == 2 and len(found[0]) > 1):
            raise CompileError(f"{node.where}: attention of {operand.op} "
                               f"{operand.attrs.get('fn', '')} in a model of several "
                               f"configurations; supported: attention of model inputs (one "
                               f"configuration), or of projections x @ W split into heads "
                               f"(Q and K with rotary embeddings)")
        parts, nodes = found
        for inner in nodes:
            if inner is operand and index and id(inner) in outputs and \
                    users.get(id(inner)) == [node]:
                continue            # K or V as the machine holds it, an output (present)
            if len(users.get(id(inner), ())) != 1 or id(inner) in outputs:
                raise CompileError(f"{inner.where}: a projection of attention read "
                                   f"elsewhere too; supported: read by attention alone")
        members |= {id(inner) for inner in nodes}
        sources |= {id(x) for x, _, _ in parts}
        members |= {member for x, _, _ in parts if x.op != "input"
                    for member in norm_members(x, users, outputs)}
    if len(sources) != 1:
        raise CompileError(f"{node.where}: attention of projections of several tensors; "
                           f"supported: Q, K and V projections of one model input or "
                           f"of its RMSNorm")
    return members


def _product_graph(name, a_shape, b_shape, bf16=True):
    graph = Graph(name)
    a, b = graph.input("a", a_shape), graph.input("b", b_shape)
    graph.output("out", (a @ b).astype("bf16") if bf16 else a @ b)
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


class ProjectionBuilder:
    """The configurations of one attention of projections (module docstring)."""

    def __init__(self, graph, node, machine, params, values):
        self.graph, self.node, self.machine, self.params = graph, node, machine, params
        self.parts = {name: _projection(operand)[0]
                      for name, operand in zip("qkv", node.inputs, strict=True)}
        x = self.parts["q"][0][0]
        self.norm = None if x.op == "input" else x      # cast(RMSNorm(x0)): onnx_norm
        x0 = x if x.op == "input" else norm_of(x)[0]
        self.x, self.values, self.source = x0.name, values, None
        if x0.op != "input":        # the residual of the layer before, kept transposed
            self.source = values.get(id(x0))
            if self.source is None:
                raise CompileError(f"{node.where}: attention of projections of the norm "
                                   f"of a value computed in its own configuration; "
                                   f"supported: of a model input or of the residual of "
                                   f"the layer before")
        self.rows, self.width = x.shape
        self.stages, self.first, self.start, self.final = [], 0, None, {}
        self.results = {}       # stage index: its result as a product's (onnx_rotary)
        #: a decode step's positioned tables (:class:`rdu.apps.onnx_decode.DecodePlan`),
        #: or None: the rotary tables of the rows themselves
        self.tables = None

    def attention_program(self, out_name, start, capacity=None):
        """The attention's program; ``capacity``: read K and V from a KV cache of that
        many keys per head (``kv_layout`` ``rows``, a decode step: every row sees the
        whole cache)."""
        node, graph = self.node, Graph(f"{self.graph.name}_attention")
        q = graph.input("q", node.inputs[0].shape)
        k, v = (graph.input(name, operand.shape if capacity is None else
                            (operand.shape[0], capacity, operand.shape[2]))
                for name, operand in zip("kv", node.inputs[1:], strict=True))
        if capacity is None:
            out = attention(q, k, v, node.attrs.get("scale"), node.attrs.get("causal", False))
        else:       # the cache as it is before the first token: key 0 filled, the rest empty
            out = attention(q, k, v, node.attrs.get("scale"), kv_layout="rows", valid=1)
        out.node.attrs["dim_align"] = self.machine.lanes
        out.node.where = node.where
        graph.output(out_name, out)
        if q.shape[0] % k.shape[0] or q.shape[1] % self.machine.lanes:
            raise CompileError(f"{node.where}: attention of projections of {q.shape[0]} "
                               f"query and {k.shape[0]} key/value heads, {q.shape[1]} rows; "
                               f"supported: key/value heads dividing the query heads, rows "
                               f"a multiple of {self.machine.lanes}")
        return graph, compile_graph(graph, self.machine, kernel=KERNEL_NAME,
                                    params=self.params, plan=ImagePlan(start=start))

    def name(self, what):
        return f"{self.graph.name}_{self.first + len(self.stages)}_{what}"

    def add(self, stage):
        self.stages.append(stage)
        self.start = max(self.start or 0, end_of(stage.program))
        return self.first + len(self.stages) - 1

    def produce(self, what, address, a, b, shape_a, shape_b, wanted, bf16=True, a_row=0,
                out_layout=None):
        """A producer: ``(a() @ b())`` (rounded to BF16) written where ``wanted`` (the
        byte offsets of its elements in an image at ``address``) says, or on pages of
        its own (``wanted`` None; ``out_layout``: its geometry, e.g. FP32 row-major);
        the stage's index. ``a`` or ``b`` None: the norm's
        (:mod:`rdu.apps.onnx_norm`: ``[x | I]`` as V's A from its row ``a_row`` on,
        ``[x^T; I]`` as Q's and K's B)."""
        addresses = {}
        if wanted is not None:
            offset = int(wanted[0, 0])
            wanted = wanted - offset
            addresses["out"] = address + offset
        layouts = {}
        if b is None:
            addresses["b"] = self.norm_b(shape_b[1]).address
        if a is None:               # [x | I]: B of the keys read as its transpose
            norm_b = self.norm_b(None)
            addresses["a"] = norm_b.address + a_row * norm_b.depth * 2   # a chunk's tiles
            layouts["a"] = transposed_a_image("a", shape_a[0], shape_a[1], self.machine.lanes)
        if out_layout is not None:
            layouts["out"] = out_layout
        name = self.name(what)
        graph = _product_graph(name, shape_a, shape_b, bf16)
        program = compile_graph(graph, self.machine, kernel=KERNEL_NAME, params=self.params,
                                plan=ImagePlan(start=self.start, addresses=addresses,
                                               layouts=layouts),
                                max_pcus=product_pcus(shape_a[0], shape_b[1],
                                                      self.machine.lanes))
        if wanted is not None:
            _check_bytes(self.node.where, program, wanted)
        user = {key: value for key, value in (("a", a), ("b", b)) if value is not None}
        produced = {}
        if b is None:
            produced["b"] = self.norm_b(shape_b[1]).b(shape_b[1], program)
        if a is None:
            produced["a"] = norm_b.a(shape_a, program, a_row)
        return self.add(Stage(name, graph, program, user, produced))

    def depth(self, columns):
        """B's rows of the Q and K products: ``width + columns`` (``[x^T; I]``); the
        norm's one B of the keys' ``b_columns`` (Q reads its first column tiles) padded
        with zero rows to whole beats (:func:`~rdu.apps.onnx_norm.b_depth`)."""
        if self.norm is None:
            return self.width + columns
        keys = getattr(self, "b_columns", 0)        # set by compile_attention
        return b_depth(self.width, max(columns, keys), self.machine.lanes)

    def norm_b(self, columns):
        """The :class:`~rdu.apps.onnx_norm.NormB` of ``columns`` (built once)."""
        if getattr(self, "_norm_b", None) is None:
            keys = getattr(self, "b_columns", 0)
            self._norm_b = NormB(self, self.norm, max(columns or 0, keys), self.source)
        return self._norm_b

    def weight_a(self, w_name, h, dim, dim_k, coefficients):
        """A of a transposed projection: head ``h``'s columns of ``w`` transposed, then
        ``coefficients``' rows past ``dim`` against the identity rows of B (or zeros:
        None)."""
        width, columns = self.width, coefficients.shape[1]

        def make(inputs):
            w = _floats(inputs[w_name]).reshape(width, -1)[:, h * dim:(h + 1) * dim]
            a = np.zeros((dim_k, self.depth(columns)), np.float32)    # zero past B's rows
            a[:dim, :width] = w.T
            a[dim:, width:width + columns] = coefficients[dim:]
            return _bf16(a)
        return make

    def operand(self, kind, h, s, target, address, wanted, copy=0):
        """``kind`` (q or k) of head ``h`` transposed, ``target`` ``(dim_k, columns)``
        the image's constants, written at ``wanted`` (byte offsets, same shape) of the
        image at ``address``: one producer, or (rotary) two FP32 ones and the row group
        ``p1 * t1 + p2 * t2`` (the mask dimensions through ``t1 = 1``, ``t2 = 0``).
        Records in ``final`` how to read the result as that matrix."""
        dim_k, columns = target.shape
        rows, width, lanes = self.rows, self.width, s.lanes
        depth = self.depth(columns)

        def b(inputs):
            return identity_b(inputs[self.x], rows, width, columns)
        if self.norm is not None:
            b = None                    # written by the norm's configurations

        tag = f"q{h}" if kind == "q" else f"k{h}_{copy}"
        parts = self.parts[kind]
        if len(parts) == 1:
            index = self.produce(tag, address, self.weight_a(parts[0][1].name, h, s.dim,
                                                              dim_k, target),
                                 b, (dim_k, depth), (depth, columns),
                                 wanted)
            self.final[(kind, h, tag)] = (index, "out", lambda words: words)
            return
        firsts = []
        for number, (_, w, _) in enumerate(parts):
            if number and reads_rotated(parts, s.dim):
                firsts.append(rotated_copy(self, tag, firsts[0], columns // lanes,
                                           dim_k // 2, s.dim // 4))
                continue
            coefficients = target if number == 0 else np.zeros_like(target)
            firsts.append(self.produce(f"{tag}_{number}", None, self.weight_a(
                w.name, h, s.dim, dim_k, coefficients), b, (dim_k, depth),
                (depth, columns), None, bf16=False))
        self.final[(kind, h, tag)] = (self.rotary(tag, s, parts, firsts, target, address,
                                                  wanted), "out",
                                      lambda words: _unview(words, dim_k, lanes))

    def stacked(self, kind, s, items, address):
        """Rotary ``kind`` (q or k) of every ``(head, copy, target, wanted)`` of
        ``items`` (:meth:`operand`'s) as two products of the blocks stacked (their rows
        one after another: every head's projection in one product) and one row group
        that writes each block where the attention reads it."""
        dim_k, columns = items[0][2].shape
        blocks, width, parts = len(items), self.width, self.parts[kind]

        def b(inputs):
            return identity_b(inputs[self.x], self.rows, width, columns)

        firsts = []
        for number, (_, w, _) in enumerate(parts):
            if number and reads_rotated(parts, s.dim):
                firsts.append(rotated_copy(self, kind, firsts[0], blocks * columns //
                                           s.lanes, dim_k // 2, s.dim // 4))
                continue
            makers = [self.weight_a(w.name, h, s.dim, dim_k, target if number == 0 else
                                    np.zeros_like(target)) for h, _, target, _ in items]

            def a(inputs, makers=makers):
                return np.concatenate([np.asarray(make(inputs)).reshape(dim_k, -1)
                                       for make in makers])
            firsts.append(self.produce(f"{kind}_{number}", None, a,
                                       b if self.norm is None else None,
                                       (blocks * dim_k, self.depth(columns)),
                                       (self.depth(columns), columns), None, bf16=False))
        # causal grouped-query passes run by key/value head, row tile, then query head
        group = s.group if kind == "q" and s.causal else 1
        index = self.rotary(kind, s, parts, firsts,
                            np.concatenate([item[2] for item in items]), address,
                            np.concatenate([item[3] for item in items]), blocks, group)
        for number, (h, copy, _, _) in enumerate(items):
            tag = f"q{h}" if kind == "q" else f"k{h}_{copy}"
            self.final[(kind, h, tag)] = (index, "out", lambda words, number=number: _unview(
                np.asarray(words), blocks * dim_k, s.lanes)[number * dim_k:
                                                            (number + 1) * dim_k])

    def rotary(self, tag, s, parts, firsts, target, address, wanted, blocks=1, group=1):
        """The row group ``(p1 * t1 + p2 * t2)`` to BF16 over the producers' FP32
        results and the tables, viewed as rows of two dimensions (:func:`_view`),
        written into the attention's image (``blocks`` heads or K copies stacked in the
        products: each block's rows of a column tile where the attention reads them;
        ``group`` > 1: the image holds them by key/value head, tile, then the ``group``
        query heads of the key/value head); its stage index."""
        dim_k, columns = target.shape
        dim_k //= blocks
        lanes, dim = s.lanes, s.dim
        count = blocks * dim_k * columns // (2 * lanes)
        graph = Graph(self.name(tag))
        p1, p2, t1, t2 = (graph.input(name, (count, 2 * lanes), "fp32")
                          for name in ("p1", "p2", "t1", "t2"))
        graph.output("out", (p1 * t1 + p2 * t2).astype("bf16"))
        offset = int(wanted.min())
        view = Image((count, 2 * lanes), (), None, None, "fp32")
        split = (columns // lanes, blocks // group, group, dim_k // 2, 2 * lanes)
        out = Image((count, 2 * lanes), (), split if group > 1 else split[:2] + split[3:],
                    (1, 0, 2, 3, 4) if group > 1 else (1, 0, 2, 3), "bf16")
        if not np.array_equal(_view(wanted - offset, lanes), out.byte_offsets()):
            raise CompileError(f"{self.node.where}: rotary's row group cannot write the "
                               f"attention's image as rows")
        addresses = {"out": address + offset}
        for name, index in zip(("p1", "p2"), firsts, strict=True):
            addresses[name] = self.stages[index - self.first].program.meta["images"][
                "out"]["address"]
        layouts, positions = {"p1": view, "p2": view, "out": out}, {}
        if self.tables is not None:     # a table of every position's rows, read at its own
            for name in ("t1", "t2"):
                layouts[name] = view
                addresses[name], positions[name] = self.tables.reserve(self, view.nbytes)
        program = compile_graph(graph, self.machine, kernel=KERNEL_NAME, params=self.params,
                                plan=ImagePlan(start=self.start, addresses=addresses,
                                               layouts=layouts, positions=positions))

        signs = half_signs(dim) if reads_rotated(parts, dim) else np.ones(dim, np.float32)

        def table_words(number, values):
            full = np.zeros((dim_k, columns), np.float32)
            full[:dim, :self.rows] = np.asarray(values, np.float32).reshape(
                self.rows, dim).T * (signs[:, None] if number else 1)
            full[dim:] = 1.0 if number == 0 else 0.0
            return _view(np.tile(full, (blocks, 1)), lanes).view(np.uint32)

        def table(number, table_name):
            def make(inputs):
                return table_words(number, _floats(inputs[table_name]))
            return make

        if self.tables is not None:
            for number, (_, _, t) in enumerate(parts):
                self.tables.table(program, f"t{number + 1}", t.name, self.rows,
                                  lambda rows, number=number: table_words(number, rows))

        def viewed(index, result):
            return (index, "out", lambda produced: _view(
                np.asarray(result(produced), np.uint32), lanes))

        user = {f"t{n + 1}": table(n, t.name) for n, (_, _, t) in enumerate(parts)}
        produced = {f"p{n + 1}": viewed(i, result_of(self, i)) for n, i in enumerate(firsts)}
        return self.add(Stage(graph.name, graph, program, user, produced))


def attention_of(sink):
    """The attention node at the head of ``sink``'s tail (:func:`tail_of`), and the
    tail."""
    tail = []
    node = sink
    while node.op != "attention":
        tail.insert(0, node)
        node = node.inputs[0] if node.op != "binary" else next(
            i for i in node.inputs if i.op == "matmul")
    return node, tail


def compile_attention(graph, sink, machine, start, out_name, first, params, values=None):
    """``([Stage], transform)``: the projections (Q per head, K per head and copy, V per
    head and chunk; with rotary, two products and a row group each), the attention,
    and its tail (:func:`tail_of`: the heads merged into ``o_proj``'s B, ``o_proj``,
    the residual); ``first`` the index of the first in the sequence; ``transform``
    turns the last stage's result into the output's words (``o_proj`` and the residual
    compute the transposed rows), or None. ``values``: the values earlier configurations
    keep transposed (:class:`rdu.apps.onnx_transposed.Transposed`), by node id: the
    layer's input when it is the residual of the layer before."""
    node, tail = attention_of(sink)
    built = ProjectionBuilder(graph, node, machine, params, values or {})
    att_graph, att = built.attention_program("o" if tail else out_name, start)
    built.first, built.start = first, end_of(att)
    s = attention_shape(att)
    layout = {name: Image.from_json(att.meta["images"][name]) for name in "qkv"}
    address = {name: att.meta["images"][name]["address"] for name in "qkv"}
    zero = {name: np.zeros(int(np.prod(operand.shape)), np.uint32)
            for name, operand in zip("qkv", node.inputs, strict=True)}
    constants = {name: _floats(attention_images(s)[name].matrix(zero)).reshape(
        layout[name].shape) for name in "qk"}
    offsets = {name: layout[name].byte_offsets() for name in "qkv"}
    passes = s.passes()
    built.b_columns = s.seq_pad                 # the keys': the widest B of the products
    if built.norm is not None and s.dim_pad != s.dim:
        raise CompileError(f"{node.where}: a norm before the projections with V of a "
                           f"head dimension of {s.dim} (padded to {s.dim_pad}); supported: "
                           f"whole dimension blocks")
    items = {"q": [], "k": []}
    for h in range(s.heads):
        mine = [p for p, (_, _, queries) in enumerate(passes) if queries[0][0] == h]
        block = np.concatenate([np.arange(p * s.lanes, (p + 1) * s.lanes) for p in mine])
        items["q"].append((h, 0, constants["q"][block].T, offsets["q"][block].T))
    for h in range(s.kv_heads):
        for copy in range(s.key_copies):
            keys = slice((h * s.key_copies + copy) * s.seq_pad,
                         (h * s.key_copies + copy + 1) * s.seq_pad)
            items["k"].append((h, copy, constants["k"][keys].T, offsets["k"][keys].T))
    for kind in "qk":
        if len(built.parts[kind]) == 2 and len({item[2].shape for item in items[kind]}) == 1:
            built.stacked(kind, s, items[kind], address[kind])
            continue
        for h, copy, target, wanted in items[kind]:
            built.operand(kind, h, s, target, address[kind], wanted, copy)
    for h in range(s.kv_heads):
        for chunk in range(s.chunks if not _one_v(s) else 0):
            _values(built, s, h, chunk, address["v"], offsets["v"][
                h * s.seq_pad + chunk * s.chunk:h * s.seq_pad + (chunk + 1) * s.chunk])
    if _one_v(s):
        _all_values(built, s, address["v"], offsets["v"])
    stages = built.stages
    produced = _gathered(built, s)
    att_index = first + len(stages)
    stages.append(Stage(f"{graph.name}_{att_index}_attention", att_graph, att, {},
                        produced, [(node, lambda words: words[att_index]["o"])]))
    _observe_operands(built, s, node, produced)
    if not tail:
        return stages, None
    start = max(end_of(stage.program) for stage in stages)
    return tail_stages(built, s, att, tail, out_name, first, start, stages)


def operand_outputs(graph, stages):
    """``{output name: function(per-stage outputs) -> words}`` of the model outputs that
    are an attention's K or V as the machine holds them (a cache's ``present``): the
    words the producers wrote into the attention's images, as ``(heads, keys, dim)``
    (the stage that completes each observes it, :func:`_observe_operands`)."""
    observed = {id(node): function for stage in stages for node, function in stage.observes}
    found = {}
    for name, node in graph.outputs.items():
        if node.op == "unary" and node.attrs.get("fn") == "cast" and id(node) in observed:
            found[name] = observed[id(node)]
    return found


def _observe_operands(built, s, node, produced):
    """The attention's Q, K and V (``(heads, rows, dim)``) observed at the last stage
    that writes each, and the norm before the projections at its own."""
    first = built.first
    for name, operand in zip("qkv", node.inputs, strict=True):
        last = max(value[0] for key, value in built.final.items() if key[0] == name)
        built.stages[last - first].observes.append((operand, produced[name][2]))
    if built.norm is not None:
        norm_b, rows, width = built.norm_b(None), built.rows, built.width
        built.stages[norm_b.index - first].observes.append((built.norm, lambda words: (
            norm_b.matrix(words)[:width, :rows].T)))


def _one_v(s):
    """Whether V of every head is one product ``x @ Wv``: one chunk of keys and whole
    dimension blocks, so its column tiles (head, dimension block) are V's image."""
    return s.chunks == 1 and s.dim_pad == s.dim


def _all_values(built, s, address, offsets):
    """V of every head, one chunk: ``x_pad @ Wv`` in V's image."""
    width, rows, heads = built.width, built.rows, s.kv_heads
    w_name = built.parts["v"][0][1].name

    # with a norm, A is [x | I] read from the norm's B (written as its transpose) and
    # B is [Wv; 0]: depth rows
    depth = width if built.norm is None else built.norm_b(None).depth

    def x_pad(inputs):
        x = np.zeros((s.seq_pad, width), np.float32)
        x[:rows] = _floats(inputs[built.x]).reshape(rows, width)
        return _bf16(x)

    def weight(inputs):
        w = np.zeros((depth, heads * s.dim), np.float32)
        w[:width] = _floats(inputs[w_name]).reshape(width, heads * s.dim)
        return _bf16(w)

    wanted = offsets.reshape(heads, s.seq_pad, s.dim).transpose(1, 0, 2).reshape(
        s.seq_pad, heads * s.dim)
    index = built.produce("v", address, x_pad if built.norm is None else None, weight,
                          (s.seq_pad, depth), (depth, heads * s.dim), wanted)
    for h in range(heads):
        built.final[("v", h, f"v{h}_0")] = (index, "out", lambda words, h=h: np.asarray(
            words)[:, h * s.dim:(h + 1) * s.dim])


def _values(built, s, h, chunk, address, wanted):
    """V of head ``h``, keys of ``chunk``: ``x_chunk @ Wv_h`` in V's image."""
    width, rows, dim = built.width, built.rows, s.dim
    w_name = built.parts["v"][0][1].name

    def x_chunk(inputs):
        x = np.zeros((s.chunk, width), np.float32)
        part = _floats(inputs[built.x]).reshape(rows, width)[
            chunk * s.chunk:(chunk + 1) * s.chunk]
        x[:len(part)] = part
        return _bf16(x)

    depth = width if built.norm is None else built.norm_b(None).depth   # [Wv_h; 0]

    def w_head(inputs):
        w = np.zeros((depth, dim), np.float32)
        w[:width] = _floats(inputs[w_name]).reshape(width, -1)[:, h * dim:(h + 1) * dim]
        return _bf16(w)

    index = built.produce(f"v{h}_{chunk}", address, x_chunk if built.norm is None else None,
                          w_head, (s.chunk, depth), (depth, dim), wanted,
                          a_row=chunk * s.chunk)        # the norm's B: the chunk's keys
    built.final[("v", h, f"v{h}_{chunk}")] = (index, "out", lambda words: words)


def _gathered(built, s):
    """``{q, k, v: (stage, "out", function)}``: each operand's ``(heads, rows, dim)``
    words from the producers' results (for the stage-by-stage reference)."""
    final, dim = built.final, s.dim

    def matrix(produced, kind, h, tag=None):
        index, output, to_matrix = next(value for (k, head, t), value in final.items()
                                        if k == kind and head == h and
                                        (tag is None or t == tag))
        return np.asarray(to_matrix(np.asarray(produced[index][output], np.uint32)))

    def q(produced):
        return np.stack([matrix(produced, "q", h)[:dim, :s.rows].T for h in range(s.heads)])

    def k(produced):
        return np.stack([matrix(produced, "k", h, f"k{h}_0")[:dim, :s.seq].T
                         for h in range(s.kv_heads)])

    def v(produced):
        return np.stack([np.concatenate([matrix(produced, "v", h, f"v{h}_{c}")
                                         for c in range(s.chunks)])[:s.seq, :dim]
                         for h in range(s.kv_heads)])

    first = {kind: next(value[0] for key, value in final.items() if key[0] == kind)
             for kind in "qkv"}
    return {name: (first[name], "out", function)
            for name, function in (("q", q), ("k", k), ("v", v))}


def tail_stages(built, s, att, tail, out_name, first, start, stages):
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
    views = continued = out_name is None      # the residual read by more of the model
    # a row-major y^T (a model output) walks whole beats of FP32 rows; views: tiles
    if dim % lanes or rows % (lanes if continued else 2 * lanes):
        raise CompileError(f"{where}: o_proj after attention of {rows} rows of dim {dim}; "
                           f"supported: dim a multiple of {lanes}, rows a multiple of "
                           f"{2 * lanes} (of {lanes} read by more of the model)")
    name = built.graph.name
    y_name = "yT" if len(tail) == 4 else out_name       # o_proj's result (transposed)
    # o_proj first: its B image is what the cast-only row group writes
    o_graph = Graph(f"{name}_o_proj")
    o_graph.output(y_name, o_graph.input("wo_t", (hidden, heads * dim)) @
                   o_graph.input("ob", (heads * dim, rows)))
    row_major = Image((hidden, rows), (), None, None, "fp32")
    o_prog = compile_graph(o_graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                           plan=ImagePlan(start=start, layouts={} if views else
                                          {y_name: row_major}),
                           max_pcus=1 if views else None)
    b_image = Image.from_json(o_prog.meta["images"]["ob"])
    if b_image.shape != (heads * dim, rows):
        raise CompileError(f"{where}: o_proj pads its K {heads * dim} or N {rows}; the row "
                           f"group before it would have to write the padding")
    count = heads * tiles * dim // 2
    # the passes, (key/value head, query head of its group, tile) in that order, or
    # (causal) (key/value head, tile, query head): ``order`` of those three axes
    order = (0, 2, 1) if s.causal else (0, 1, 2)
    axes = (s.kv_heads, s.group, tiles)
    split = tuple(axes[i] for i in order) + (dim // 2, 2, lanes)
    at = [order.index(i) for i in range(3)]             # where each axis is in split
    to_b = (at[0], at[1], 3, 4, at[2], 5)               # (head, dim, tile, lane)
    view_in = Image((count, 2 * lanes), (), None, None, "fp32")
    view_out = Image((count, 2 * lanes), (), split, (at[2], at[0], at[1], 3, 4, 5), "bf16")
    o_image = Image.from_json(att.meta["images"]["o"])
    _same_bytes(where, view_in, o_image, lambda m: m.reshape(split).transpose(
        0, 1, 2, 5, 3, 4).reshape(heads * tiles * lanes, dim))
    _same_bytes(where, view_out, b_image, lambda m: m.reshape(split).transpose(
        to_b).reshape(heads * dim, rows))
    m_graph, m_prog = merge_heads_program(built, att, o_prog, view_in, view_out)
    att_index = first + len(stages) - 1

    def o_view(produced):
        o = np.asarray(produced[att_index]["o"], np.uint32)     # (heads, rows, dim)
        return o.reshape(axes + (lanes, dim // 2, 2)).transpose(
            *order, 4, 5, 3).reshape(count, 2 * lanes)

    def b_of(produced):
        view = np.asarray(produced[att_index + 1]["ob"], np.uint32)
        return view.reshape(split).transpose(to_b).reshape(heads * dim, rows)

    def wo_t(inputs):
        return np.ascontiguousarray(np.asarray(inputs[wo.name], np.uint32).reshape(
            heads * dim, hidden).T)

    stages.append(Stage(f"{name}_{att_index + 1}_merge_heads", m_graph, m_prog, {},
                        {"o": (att_index, "o", o_view)}))
    stages.append(Stage(f"{name}_{att_index + 2}_o_proj", o_graph, o_prog, {"wo_t": wo_t},
                        {"ob": (att_index + 1, "ob", b_of)}, [(matmul, lambda words: np.asarray(
                            words[att_index + 2][y_name])[:hidden].T)]))
    if len(tail) < 4:
        return stages, lambda words: np.ascontiguousarray(np.asarray(words)[:hidden].T)
    stages.append(residual_stage(built, tail, o_prog, end_of(m_prog), out_name, continued,
                                  att_index, (hidden, rows, lanes)))
    return stages, lambda words: np.ascontiguousarray(np.asarray(words).T)


def merge_heads_program(built, att, o_prog, view_in, view_out):
    """``(graph, program)`` of the cast-only row group that reads the attention's FP32
    ``O^T`` (``att``'s ``o``) as ``view_in`` and writes ``o_proj``'s (``o_prog``) BF16 B
    as ``view_out``."""
    graph = Graph(f"{built.graph.name}_merge_heads")
    graph.output("ob", graph.input("o", view_in.shape, "fp32").astype("bf16"))
    return graph, compile_graph(graph, built.machine, kernel=KERNEL_NAME,
                                params=built.params, plan=ImagePlan(
                                    start=end_of(o_prog),
                                    addresses={"o": att.meta["images"]["o"]["address"],
                                               "ob": o_prog.meta["images"]["ob"]["address"]},
                                    layouts={"o": view_in, "ob": view_out}))


def residual_stage(built, tail, o_prog, start, out_name, continued, att_index, sizes):
    """The residual row group ``x^T + o_proj(.)^T`` (``sizes``: hidden, rows, lanes):
    ``x`` a model input (packed transposed by the host) or the residual of the layer
    before (``built.values``: read where it is); its view (``continued``: more of the
    model reads it) or the transposed matrix."""
    hidden, rows, lanes = sizes
    where, name, matmul = built.node.where, built.graph.name, tail[2]
    x = next(i for i in tail[3].inputs if i is not matmul)
    shape = (hidden * rows // (2 * lanes), 2 * lanes) if continued else (hidden, rows)
    if continued and hidden % 2:
        raise CompileError(f"{where}: a residual of odd width {hidden} read by more of the "
                           f"model; supported: an even width")
    source = None if x.op == "input" else built.values.get(id(x))
    if x.op != "input" and (source is None or not continued or source.depth != hidden or
                            not source.rows_view):
        raise CompileError(f"{where}: a residual of a computed value {x.op} "
                           f"{x.attrs.get('fn', '')}; supported: a model input, or the "
                           f"residual of the layer before when more of the model follows")
    r_graph = Graph(f"{name}_residual")
    r_graph.output(out_name or "h", r_graph.input("yT", shape, "fp32") +
                   r_graph.input("xT", shape, "bf16" if source is None else source.fmt))
    y_image = Image.from_json(o_prog.meta["images"]["yT"])
    addresses = {"yT": o_prog.meta["images"]["yT"]["address"]}
    layouts = {"yT": Image(shape, (), None, None, "fp32") if continued else y_image}
    if source is not None:
        addresses["xT"] = source.address
        layouts["xT"] = Image(shape, (), None, None, source.fmt)
    r_prog = compile_graph(r_graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                           plan=ImagePlan(start=start, addresses=addresses,
                                          layouts=layouts))
    if continued and y_image.byte_offsets().shape != (hidden, rows):
        raise CompileError(f"{where}: o_proj pads its result ({hidden} x {rows}); "
                           f"supported: whole passes")

    def x_t(inputs):
        x_t = np.asarray(inputs[x.name], np.uint32).reshape(rows, hidden).T
        return np.ascontiguousarray(_view(x_t, lanes) if continued else x_t)

    def y_t(produced):
        words = np.asarray(produced[att_index + 2]["yT"], np.uint32)
        return _view(words, lanes) if continued else words

    h_name = out_name or "h"

    def h_rows(words):
        got = np.asarray(words[att_index + 3][h_name], np.uint32)
        return (_unview(got, hidden, lanes) if continued else got).T

    user, produced = {"xT": x_t}, {"yT": (att_index + 2, "yT", y_t)}
    if source is not None:
        user, produced["xT"] = {}, source.produced(lanes, True)
    return Stage(f"{name}_{att_index + 3}_residual", r_graph, r_prog, user, produced,
                 [(tail[3], h_rows)])


def _same_bytes(where, view, image, arrange):
    """``view`` and ``image`` place every element at the same byte: ``arrange`` turns
    a matrix of ``view``'s shape into ``image``'s logical one (padding aside)."""
    ours = arrange(view.byte_offsets())
    theirs = image.byte_offsets()[:ours.shape[0], :ours.shape[1]]
    if not np.array_equal(ours, theirs):
        raise CompileError(f"{where}: the merged heads' view {view.describe()} is not the "
                           f"layout of {image.describe()}")

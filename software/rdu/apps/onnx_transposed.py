"""The rest of a model after attention of projections, in transposed space (``docs/onnx.md``,
"A decoder layer"): ``h = x + o_proj(attention(...))`` leaves the attention's
configurations as ``h^T`` (features down, ``lanes`` queries across: the residual row group
writes the view of its column tiles, :func:`rdu.apps.onnx_views.view`), so every value
after it is kept transposed, a ``(features, rows)`` matrix stored in column tiles of
``lanes`` rows of the model (queries), and read and written by row groups as its view
(rows of two features of a tile):

* a matrix product ``a @ W`` (W a weight) is ``W^T a^T``: a matmul whose A is ``W^T``
  (packed by the host) and whose B is ``a^T``, which the row group before it wrote (in
  BF16: the cast the graph has there); its FP32 result is in column tiles, its view
  what the next row group reads;
* a row group of per-element operators runs over the views (a vector, a norm's weight,
  is a table of the view; the model's own input of the rows' shape is packed
  transposed by the host);
* a row group with the sum of squares of an RMSNorm: the squares to BF16 (a row group),
  a matmul by ones for the sums over the features (every row of a column tile then holds
  its queries' sums), and the norm's operators over the views (:mod:`rdu.apps.onnx_norm`
  does the same before the projections).

The model's output is the last view, turned back into rows by the host. A feature count
that is not a multiple of ``2 lanes`` (an FFN width of 72) is padded with zero features:
zero rows of a product's ``W^T`` (its padded features are exact zeros), zero columns
past the real ones where a product or a norm's sums read them, zero tables; the host
drops them from the output. Supported: rows a multiple of ``lanes``; other operators
(a reduction other than that sum, a product by a computed B) are refused in one line
naming the node.
"""

import re
from dataclasses import dataclass

import numpy as np

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..frontend.graph import Graph
from ..layout import Image
from ..onnx import KERNEL_NAME
from .onnx_norm import replay, same_view, sum_rows, sums_image, sums_read, sums_shape
from .onnx_views import bf16, floats, product_pcus, unview, view
from .unfused import Stage, end_of

__all__ = ["Transposed", "compile_transposed"]


@dataclass
class Transposed:
    """A value kept transposed: ``depth`` features, written by stage ``stage`` as its
    output ``output`` at ``address`` in ``fmt``; ``rows_view``: the stage's result is
    the view (a row group's) rather than the column tiles (a matmul's)."""
    stage: int
    output: str
    address: int
    depth: int
    fmt: str
    rows_view: bool

    def produced(self, lanes, as_view):
        """``(stage, output, function)``: the words as the view or as the matrix."""
        index, output, depth = self.stage, self.output, self.depth

        def words(produced):
            got = np.asarray(produced[index][output], np.uint32)
            if self.rows_view == as_view:
                return got
            return view(got, lanes) if as_view else unview(got, depth, lanes)
        return index, output, words


def _label(node, family):
    """The ONNX node's name of ``node`` as a stage name's tail, else ``family``."""
    found = re.search(r": node (.+) \(\w+\)$", node.where or "")
    return re.sub(r"\W+", "_", found.group(1)).strip("_") if found else family


class _Cut:
    """The configurations after the attention (module docstring)."""

    def __init__(self, graph, machine, params, rows, start, first):
        self.graph, self.machine, self.params = graph, machine, params
        self.rows, self.lanes, self.start, self.first = rows, machine.lanes, start, first
        self.stages, self.values = [], {}

    def name(self, what, ahead=0):
        return f"{self.graph.name}_{self.first + len(self.stages) + ahead}_{what}"

    def add(self, stage):
        self.stages.append(stage)
        self.start = max(self.start or 0, end_of(stage.program))
        return self.first + len(self.stages) - 1

    def shape(self, depth):
        return depth * self.rows // (2 * self.lanes), 2 * self.lanes

    def check(self, node, depth):
        """``depth`` features padded with zero features to whole beats (``2 lanes``);
        a one-line error when the rows are not whole tiles."""
        if self.rows % self.lanes:
            raise CompileError(f"{node.where}: {depth} features of {self.rows} rows after "
                               f"attention; supported: rows a multiple of {self.lanes} "
                               f"(features padded to a multiple of {2 * self.lanes})")
        return -(-depth // (2 * self.lanes)) * 2 * self.lanes

    def matmul(self, node, out_name):
        """``W^T a^T``: A the transposed weight, B the view a row group wrote."""
        a, w = node.inputs
        if id(a) not in self.values or w.op != "input":
            raise CompileError(f"{node.where}: a matrix product after attention of "
                               f"{a.op} and {w.op}; supported: a computed value times a "
                               f"weight")
        source = self.values[id(a)]
        k, n = w.shape
        k_pad, n_pad = source.depth, self.check(node, n)    # zero features past k and n
        graph = Graph(self.name(_label(node, "matmul")))
        graph.output(out_name, graph.input("a", (n_pad, k_pad)) @
                     graph.input("b", (k_pad, self.rows)))
        program = compile_graph(graph, self.machine, kernel=KERNEL_NAME, params=self.params,
                                plan=ImagePlan(start=self.start,
                                               addresses={"b": source.address}),
                                max_pcus=product_pcus(n_pad, self.rows, self.lanes))
        for image, shape in (("b", (k_pad, self.rows)), (out_name, (n_pad, self.rows))):
            same_view(node.where, Image.from_json(program.meta["images"][image]),
                      self.lanes, shape, program.meta.get("tile_group", 1))
        if source.fmt != "bf16" or not source.rows_view:
            raise CompileError(f"{node.where}: a matrix product of an FP32 value after "
                               f"attention; supported: of a row group's BF16 result")

        def w_t(inputs):
            a = np.zeros((n_pad, k_pad), np.float32)
            a[:n, :k] = floats(inputs[w.name]).reshape(k, n).T
            return bf16(a)

        index = self.add(Stage(graph.name, graph, program, {"a": w_t},
                               {"b": source.produced(self.lanes, False)}))
        self.values[id(node)] = Transposed(index, out_name, program.meta["images"][
            out_name]["address"], n_pad, "fp32", False)
        self.observe(node)

    def members(self, sink):
        """The operators of the row group of ``sink`` down to known values, inputs and
        constants; its reductions; its inputs."""
        members, reduces, inputs, seen, stack = [], [], [], set(), [sink]
        while stack:
            node = stack.pop()
            if id(node) in seen or (id(node) in self.values and node is not sink):
                continue
            seen.add(id(node))
            if node.op == "input":
                inputs.append(node)
            elif node.op == "reduce":
                inner = node.inputs[0]
                if node.attrs["fn"] != "sum" or inner.op != "binary" or \
                        inner.attrs["fn"] != "mul" or inner.inputs[0] is not inner.inputs[1] \
                        or id(inner.inputs[0]) not in self.values:
                    raise CompileError(f"{node.where}: a reduction after attention other "
                                       f"than a sum of squares (RMSNorm); supported: that")
                reduces.append(node)
            elif node.op in ("binary", "unary", "const", "broadcast"):
                members.append(node)
                stack.extend(node.inputs)
            else:
                raise CompileError(f"{node.where}: {node.op} after attention; supported: "
                                   f"row operators, RMSNorm, products by weights")
        order = {id(node): index for index, node in enumerate(self.graph.nodes)}
        return sorted(members, key=lambda node: order[id(node)]), reduces, inputs

    def squared_first(self, sink):
        """The operands of the sums of squares in ``sink``'s group that the group itself
        computes (a norm of the residual that ends a layer: the final norm) as row groups
        of their own first, so that :meth:`sums` reads them."""
        stack, seen = [sink], set()
        while stack:
            node = stack.pop()
            if id(node) in seen or (id(node) in self.values and node is not sink):
                continue
            seen.add(id(node))
            inner = node.inputs[0] if node.op == "reduce" else None
            if inner is not None and inner.op == "binary" and inner.attrs["fn"] == "mul" \
                    and inner.inputs[0] is inner.inputs[1]:
                operand = inner.inputs[0]
                if id(operand) not in self.values and operand.op in ("binary", "unary"):
                    self.rows_group(operand, "out")
            if node.op in ("binary", "unary", "broadcast", "reduce"):
                stack.extend(node.inputs)

    def rows_group(self, sink, out_name):
        """A row group over the views (a norm's sums first: :meth:`sums`)."""
        self.squared_first(sink)
        members, reduces, inputs = self.members(sink)
        features = sink.shape[-1]
        depth = self.check(sink, features)
        shape = self.shape(depth)
        sums = [self.sums(reduce, depth, features) for reduce in reduces]
        graph = Graph(self.name(_label(sink, "rows" if not reduces else "norm")))
        mapped, user, produced, addresses, layouts = {}, {}, {}, {}, {}
        for number, (reduce, value) in enumerate(zip(reduces, sums, strict=True)):
            name = f"c{number}"
            mapped[id(reduce)] = graph.input(name, sums_shape(value.depth, shape, self.lanes),
                                             "fp32")
            produced[name] = (value.stage, value.output, lambda produced, value=value:
                              sums_read(value.depth, produced[value.stage][value.output],
                                        self.lanes))
            addresses[name] = value.address
            layouts[name] = sums_image(value.depth, shape, self.lanes)
        for number, parent in enumerate(parent for parent in self._parents(members)
                                        if id(parent) in self.values):
            value = self.values[id(parent)]
            name = f"s{number}"
            mapped[id(parent)] = graph.input(name, shape, value.fmt)
            produced[name] = value.produced(self.lanes, True)
            addresses[name] = value.address
            layouts[name] = Image(shape, (), None, None, value.fmt)
        for node in inputs:
            mapped[id(node)] = graph.input(node.name, shape, node.dtype)
            user[node.name] = self._packed(sink, node, features, depth)
        replay(graph, members, mapped, shape)
        graph.output(out_name, mapped[id(sink)])
        program = compile_graph(graph, self.machine, kernel=KERNEL_NAME, params=self.params,
                                plan=ImagePlan(start=self.start, addresses=addresses,
                                               layouts=layouts))
        index = self.add(Stage(graph.name, graph, program, user, produced))
        self.values[id(sink)] = Transposed(index, out_name, program.meta["images"][
            out_name]["address"], depth, "bf16" if sink.dtype == "bf16" else "fp32", True)
        self.observe(sink)

    def observe(self, node):
        """``node``'s value (kept transposed) observed as rows at the stage writing it."""
        _, _, words = self.values[id(node)].produced(self.lanes, False)
        self.stages[-1].observes.append((node, lambda produced: np.asarray(
            words(produced)).T[:, :node.shape[-1]]))     # the features, not the padding

    def _parents(self, members):
        seen, parents = set(), []
        for node in members:
            for parent in node.inputs:
                if id(parent) not in seen:
                    seen.add(id(parent))
                    parents.append(parent)
        return parents

    def _packed(self, sink, node, features, depth):
        """The host's view of a model input of the group: a vector as a table, the
        rows' own shape transposed; zero past ``features`` (of ``depth``)."""
        rows, lanes, name = self.rows, self.lanes, node.name
        if node.shape in ((features,), (1, features)):
            def values(inputs):
                return np.repeat(floats(inputs[name]).reshape(features, 1), rows, axis=1)
        elif node.shape == (rows, features):
            def values(inputs):
                return floats(inputs[name]).reshape(rows, features).T
        else:
            raise CompileError(f"{sink.where}: input {name} of shape {node.shape} in a row "
                               f"group after attention; supported: vectors of {features}, "
                               f"rows of {rows} x {features}")

        def make(inputs):
            full = np.zeros((depth, rows), np.float32)
            full[:features] = values(inputs)
            return view(full, lanes).view(np.uint32) if node.dtype == "fp32" else \
                bf16(view(full, lanes))
        return make

    def sums(self, reduce, depth, features):
        """The squares of the reduction's operand to BF16 (a row group) and the matmul by
        ones (zero columns past ``features``: the padding masked) that sums them over the
        features; the sums' :class:`Transposed`."""
        source = self.values[id(reduce.inputs[0].inputs[0])]
        shape = self.shape(depth)
        rows = sum_rows(depth, self.rows, self.lanes)
        s_graph = Graph(self.name("sums", 1))
        s_graph.output("out", s_graph.input("a", (rows, depth)) @
                       s_graph.input("b", (depth, self.rows)))
        s_prog = compile_graph(s_graph, self.machine, kernel=KERNEL_NAME, params=self.params,
                               plan=ImagePlan(start=self.start),
                               max_pcus=product_pcus(rows, self.rows, self.lanes))
        b_image = s_prog.meta["images"]["b"]
        for image in ("b", "out") if rows == depth else ("b",):
            same_view(reduce.where, Image.from_json(s_prog.meta["images"][image]), self.lanes,
                      (depth, self.rows), s_prog.meta.get("tile_group", 1))
        q_graph = Graph(self.name("squares"))
        x = q_graph.input("x", shape, source.fmt)
        q_graph.output("out", (x * x).astype("bf16"))
        q_prog = compile_graph(q_graph, self.machine, kernel=KERNEL_NAME, params=self.params,
                               plan=ImagePlan(start=end_of(s_prog), addresses={
                                   "x": source.address, "out": b_image["address"]},
                                   layouts={"x": Image(shape, (), None, None, source.fmt)}))
        q_index = self.add(Stage(q_graph.name, q_graph, q_prog, {},
                                 {"x": source.produced(self.lanes, True)}))
        ones = np.zeros((rows, depth), np.float32)
        ones[:, :features] = 1.0
        ones = bf16(ones)
        squares = Transposed(q_index, "out", b_image["address"], depth, "bf16", True)
        s_index = self.add(Stage(s_graph.name, s_graph, s_prog, {"a": lambda inputs: ones},
                                 {"b": squares.produced(self.lanes, False)}))
        # depth: the sums' rows (2 with one tile: read as a vector, onnx_norm.sum_rows)
        return Transposed(s_index, "out", s_prog.meta["images"]["out"]["address"], rows,
                          "fp32", False)


def compile_transposed(graph, groups, h_node, h_stage, h_address, machine, params, start,
                       first, rows, values=None):
    """``(stages, {output name: transform}, {output name: stage index})`` of ``groups``
    (the cut's groups after the attention whose residual ``h_node`` stage ``h_stage``
    wrote as the view of ``h^T`` at ``h_address``), in graph order; ``first`` the index
    of the first stage; ``values`` (updated): ``{id(node): Transposed}`` of every value
    kept transposed, for the layers after."""
    cut = _Cut(graph, machine, params, rows, start, first)
    if values is not None:
        cut.values = values
    cut.values[id(h_node)] = Transposed(h_stage, "h", h_address, h_node.shape[-1], "fp32",
                                        True)
    outputs = {id(node): name for name, node in graph.outputs.items()}
    transforms, producers = {}, {}
    for group in groups:
        sink = group.sink
        out_name = outputs.get(id(sink), "out")
        if group.family == "matmul" and sink.op == "matmul":
            cut.matmul(sink, out_name)
        elif group.family == "rows":
            cut.rows_group(sink, out_name)
        else:
            raise CompileError(f"{sink.where}: {group.family} after attention; supported: "
                               f"row groups and products by weights")
        if id(sink) in outputs:
            value = cut.values[id(sink)]
            transforms[out_name] = _back(value, machine.lanes, sink.shape[-1])
            producers[out_name] = value.stage
    return cut.stages, transforms, producers


def _back(value, lanes, features):
    """The output's words (rows) from the last stage's (its view or column tiles), its
    first ``features`` (the padding dropped)."""
    def transform(words):
        words = np.asarray(words, np.uint32)
        matrix = unview(words, value.depth, lanes) if value.rows_view else words
        return np.ascontiguousarray(matrix[:features].T)
    return transform

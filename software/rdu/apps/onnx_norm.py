"""The projections' x computed by a norm (``docs/onnx.md``, "Attention of projections"):
``x = cast(RMSNorm(x0))`` of a model input ``x0``, as the exporters write it (``Pow`` or
``Mul``, ``ReduceMean``, ``Add``, ``Sqrt``, ``Reciprocal`` or ``Div``, ``Mul`` by the
weight; or opset 23's ``RMSNormalization``).

The Q and K producers read ``[x^T; I]`` as their B (column tiles of ``lanes`` queries,
the features down a tile) and V's producer reads x as its A (rows). A row group writes
rows (each beat ``2 lanes`` consecutive values of one row), so it cannot write ``x^T``;
the norm is computed where B lives instead, on the *view* of B as rows of two features
of a column tile (:func:`rdu.apps.onnx_views.view`). Every operator of the norm is
per element there except the sum over the features, which a matmul does:

* ``sq`` (rows): ``x0^T * x0^T`` to BF16 on the view of the host-packed ``x0^T``,
  written as the B of
* ``sums`` (matmul): ``ones (width + columns, width) @ sq`` in FP32: every row of its
  column tile ``j`` holds the sums of the queries of tile ``j``, so its view has each
  query's sum of squares where the view of ``x0^T`` has the query;
* ``norm`` (rows): the model's operators of the norm over the views, the sum read from
  ``sums``, the weight a table of the view, plus the identity rows of B (a table), to
  BF16, written where every Q and K producer reads its B.

V's producer reads ``[x | I]``, B's transpose, as its A (the matmul's A given
transposed), its B ``[Wv; 0]``: a key chunk's column tiles of B. Padding: B's rows padded
with zero rows to whole beats (:func:`b_depth`), one B of the keys' columns whose first
column tiles Q reads (the keys past the rows: zero columns of ``x0^T``). The sums add
the squares rounded to BF16 (the model's are exact in FP32): a relative error of at
most ``2^-9`` in the sum, ``2^-10`` in the scale.
"""

import numpy as np

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..frontend.graph import Graph
from ..layout import Image
from ..onnx import KERNEL_NAME
from .onnx_views import bf16 as _bf16
from .onnx_views import floats as _floats
from .onnx_views import product_pcus
from .onnx_views import unview as _unview
from .onnx_views import view as _view
from .unfused import Stage, end_of

__all__ = ["norm_of", "norm_members", "NormB", "b_depth", "replay", "sum_rows",
           "sums_shape", "sums_image", "sums_read",
           "same_view"]


def b_depth(width, columns, lanes):
    """The rows of ``[x^T; I; 0]``: ``width + columns`` padded with zero rows to whole
    beats (``2 lanes``), so that a row group writes B as rows of two of its rows."""
    return -(-(width + columns) // (2 * lanes)) * 2 * lanes


def sum_rows(depth, columns, lanes):
    """The rows of a norm's sums ``ones (rows, features) @ squares``: with one column
    tile (``columns == lanes``: a decode step's queries) ``2``, one row of the view (every
    row of a tile holds the same sums), which the norm reads as a *vector* (loaded once
    into a PMU and streamed again for every row: ``rdu.compiler.families.rows``);
    with more tiles every row of the view, ``depth``. The sums' A (the ones) is then
    ``2 x features`` instead of ``depth x features`` (the HBM bytes of the norm)."""
    return 2 if columns == lanes else depth


def sums_shape(rows, view, lanes):
    """The norm's input shape of the sums: one view row (a vector) or the view."""
    return (2 * lanes,) if rows == 2 else view


def sums_image(rows, view, lanes):
    """The norm's image of the sums where the matmul wrote them: its first view row
    (rows 0 and 1 of the one column tile: each query's sum twice) or the whole view."""
    return Image((1, 2 * lanes) if rows == 2 else view, (), None, None, "fp32")


def sums_read(rows, words, lanes):
    """The norm's words of the sums from the matmul's result (``(rows, columns)``)."""
    words = np.asarray(words, np.uint32)
    return words.reshape(-1)[:2 * lanes] if rows == 2 else _view(words, lanes)


def _squared(x):
    """The operand ``y`` of the one sum of ``y * y`` under ``x`` (through per-element
    operators, not into other products or reductions), or None."""
    found, seen, stack = [], set(), [x.inputs[0]]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op == "reduce":
            inner = node.inputs[0]
            if node.attrs["fn"] == "sum" and inner.op == "binary" and \
                    inner.attrs["fn"] == "mul" and inner.inputs[0] is inner.inputs[1]:
                found.append(inner.inputs[0])
        elif node.op in ("binary", "unary", "broadcast"):
            stack.extend(node.inputs)
    return found[0] if len({id(node) for node in found}) == 1 else None


def norm_of(x):
    """``(x0, reduce, vectors, nodes)`` when ``x`` is ``cast(n)``, ``n`` per element of
    one value ``x0`` of ``x``'s shape (a model input, or a value computed before: the
    residual of the layer before), of per-row scalars of one sum of ``x0 * x0``,
    constants and vectors (inputs of ``(width,)``): an RMSNorm; ``nodes`` the operators
    from ``x`` down to the sum (the square included). None otherwise."""
    if x.op != "unary" or x.attrs.get("fn") != "cast" or len(x.shape) != 2:
        return None
    width = x.shape[1]
    x0 = _squared(x)
    if x0 is None or x0.shape != x.shape:
        return None
    sources, reduces, vectors, nodes = {}, [], [], [x]
    seen, stack = set(), [x.inputs[0]]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node is x0:
            sources[id(node)] = node
        elif node.op == "input":
            if node.shape in ((width,), (1, width)):
                vectors.append(node)
            else:
                return None
        elif node.op == "reduce":
            inner = node.inputs[0]
            if node.attrs["fn"] != "sum" or inner.op != "binary" or \
                    inner.attrs["fn"] != "mul" or inner.inputs[0] is not x0 or \
                    inner.inputs[1] is not x0:
                return None
            reduces.append(node)
            nodes += [node, inner]
            sources[id(x0)] = x0
        elif node.op in ("binary", "unary", "const", "broadcast"):
            nodes.append(node)
            stack.extend(node.inputs)
        else:
            return None
    if len(sources) != 1 or len(reduces) != 1:
        return None
    return x0, reduces[0], vectors, nodes


def norm_members(x, users, outputs):
    """The ids of the nodes of the norm of ``x`` (:func:`norm_of`), or a one-line error
    when one of them is read elsewhere too."""
    _, _, _, nodes = norm_of(x)
    ids = {id(node) for node in nodes}
    for node in nodes[1:]:
        if id(node) in outputs or any(id(user) not in ids for user in
                                      users.get(id(node), ())):
            raise CompileError(f"{node.where}: a step of the norm before the projections "
                               f"read elsewhere too; supported: read by the norm alone")
    return ids


def replay(graph, nodes, mapped, shape):
    """``nodes`` (in graph order) again in ``graph``: every value of ``shape`` (the view)
    or a scalar constant; ``mapped`` ``{id(node): Tensor}`` the ones given."""
    for node in nodes:
        if id(node) in mapped:
            continue
        tensors = [mapped[id(parent)] for parent in node.inputs]
        if node.op == "const":
            mapped[id(node)] = graph._const(node.attrs["value"], node.where)
        elif node.op == "broadcast":
            mapped[id(node)] = tensors[0]
        else:
            size = shape if any(tensor.shape for tensor in tensors) else ()
            mapped[id(node)] = graph._add(node.op, [tensor.node for tensor in tensors],
                                          size, node.dtype, node.where, **node.attrs)
    return mapped


class NormB:
    """The configurations that write ``[x^T; I]`` (``columns`` columns) from
    ``x = cast(RMSNorm(x0))`` where the projections read B (module docstring), added to
    ``built`` (:class:`rdu.apps.onnx_attention.ProjectionBuilder`): :meth:`b` is what a
    producer's B is. ``source``: None when ``x0`` is a model input (the host packs
    ``x0^T``), else the value an earlier cut keeps transposed
    (:class:`rdu.apps.onnx_transposed.Transposed`: the residual of the layer before),
    which the squares and the norm read where it is: a row group first writes B's
    identity rows (and zeros), then the norm writes B's rows of ``x^T`` (the first
    rows of B's view taken feature-row-major: :func:`_feature_major`)."""

    def __init__(self, built, x, columns, source=None):
        self.built, self.columns, self.source = built, columns, source
        x0, reduce, vectors, nodes = norm_of(x)
        lanes = built.machine.lanes
        rows, width = x.shape
        depth = b_depth(width, columns, lanes)      # the rows of B, zero past the identity
        where = built.node.where
        if width % (2 * lanes) or columns % lanes or rows > columns:
            raise CompileError(f"{where}: a norm before the projections of width {width}, "
                               f"{columns} columns, {rows} rows; supported: width a "
                               f"multiple of {2 * lanes}, columns of {lanes}, columns at "
                               f"least the rows")
        if source is not None and (rows != columns or source.depth != width or
                                   not source.rows_view):
            raise CompileError(f"{where}: a norm before the projections of a computed "
                               f"value of {source.depth} features, {rows} rows in "
                               f"{columns} columns (the keys padded); supported: as many "
                               f"rows as columns, the features the norm's width")
        self.width, self.depth, self.x0 = width, depth, x0
        self.sum_rows = sum_rows(depth, columns, lanes)
        order = {id(node): index for index, node in enumerate(built.graph.nodes)}
        self.nodes = sorted(nodes, key=lambda node: order[id(node)])
        self.x, self.reduce, self.vectors = x, reduce, vectors
        s_index, s_prog = self._squares_and_sums()
        if source is None:
            self._norm_of_input(s_index, s_prog)
        else:
            self._norm_of_source(s_index, s_prog)

    def transposed(self, inputs, count):
        """The host's view of ``[x0^T; 0]`` (``count`` rows) from the model input."""
        rows, width, lanes = self.x.shape[0], self.width, self.built.machine.lanes
        full = np.zeros((count, self.columns), np.float32)
        full[:width, :rows] = _floats(inputs[self.x0.name]).reshape(rows, width).T
        return _bf16(_view(full, lanes))

    def _squares_and_sums(self):
        """The squares of ``x0^T`` (a row group over its view, to BF16) and their sums
        over the features (a matmul by ones); the sums' stage index and program."""
        built, width, columns = self.built, self.width, self.columns
        lanes, source = built.machine.lanes, self.source
        # sums first: it fixes the image sq writes
        s_name = f"{built.graph.name}_{built.first + len(built.stages) + 1}_norm_sums"
        s_graph = Graph(s_name)
        s_graph.output("out", s_graph.input("a", (self.sum_rows, width)) @
                       s_graph.input("b", (width, columns)))
        s_prog = compile_graph(s_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(start=built.start),
                               max_pcus=product_pcus(self.sum_rows, columns, lanes))
        sq_count = width * columns // (2 * lanes)
        q_graph = Graph(built.name("norm_squares"))
        fmt = "bf16" if source is None else source.fmt
        xt = q_graph.input("xT", (sq_count, 2 * lanes), fmt)
        q_graph.output("out", (xt * xt).astype("bf16"))
        b_image = s_prog.meta["images"]["b"]
        addresses, layouts = {"out": b_image["address"]}, {}
        if source is not None:      # x0's view where the layer before wrote it
            addresses["xT"] = source.address
            layouts["xT"] = Image((sq_count, 2 * lanes), (), None, None, fmt)
        q_prog = compile_graph(q_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(
                                   start=end_of(s_prog), addresses=addresses,
                                   layouts=layouts))
        same_view(built.node.where, Image.from_json(b_image), lanes, (width, columns),
                  s_prog.meta.get("tile_group", 1))
        if source is None:
            q_stage = Stage(q_graph.name, q_graph, q_prog, {
                "xT": lambda inputs: self.transposed(inputs, width)})
        else:
            q_stage = Stage(q_graph.name, q_graph, q_prog, {},
                            {"xT": source.produced(lanes, True)})
        q_index = built.add(q_stage)
        ones = _bf16(np.ones((self.sum_rows, width), np.float32))
        s_index = built.add(Stage(s_name, s_graph, s_prog, {"a": lambda inputs: ones}, {
            "b": (q_index, "out", lambda produced: _unview(np.asarray(
                produced[q_index]["out"], np.uint32), width, lanes))}))
        return s_index, s_prog

    def _norm_graph(self, name, view, x0_dtype):
        """The model's norm operators over views of ``view``: inputs ``xT`` (x0), ``c``
        (the sums), the vectors' tables; the normalised values (before any table of
        identity rows)."""
        graph = Graph(name)
        lanes = self.built.machine.lanes
        mapped = {id(self.x0): graph.input("xT", view, x0_dtype),
                  id(self.reduce): graph.input("c", sums_shape(self.sum_rows, view, lanes),
                                               "fp32")}
        for vector in self.vectors:
            mapped[id(vector)] = graph.input(vector.name, view, vector.dtype)
        skip = {id(self.x), id(self.reduce), id(self.reduce.inputs[0])}
        mapped = replay(graph, [node for node in self.nodes if id(node) not in skip],
                        mapped, view)
        return graph, mapped[id(self.x.inputs[0])]

    def _table(self, name, rows=None):
        """The host's table of vector ``name`` over B's view (its first ``rows`` rows
        taken feature-row-major, :func:`_feature_major`, when given)."""
        width, depth, columns = self.width, self.depth, self.columns
        lanes = self.built.machine.lanes

        def make(inputs):
            full = np.zeros((depth, columns), np.float32)
            full[:width] = _floats(inputs[name]).reshape(width, 1)
            viewed = _view(full, lanes)
            if rows is not None:
                viewed = _feature_major(viewed, depth, columns, lanes)[:rows]
            return _bf16(viewed)
        return make

    def _norm_of_input(self, s_index, s_prog):
        """The norm over the whole view of B, ``+ I`` (a table), to BF16: one row group
        reading the host's ``[x0^T; 0]``."""
        built, depth, columns = self.built, self.depth, self.columns
        lanes = built.machine.lanes
        view = (depth * columns // (2 * lanes), 2 * lanes)
        n_graph, normed = self._norm_graph(built.name("norm"), view, "bf16")
        n_graph.output("out", (normed + n_graph.input("itab", view)).astype("bf16"))
        n_prog = compile_graph(n_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(
                                   start=built.start, addresses={
                                       "c": s_prog.meta["images"]["out"]["address"]},
                                   layouts={"c": sums_image(self.sum_rows, view, lanes)}))
        itab = _bf16(_view(self._identity(), lanes))
        user = {"xT": lambda inputs: self.transposed(inputs, depth),
                "itab": lambda inputs: itab,
                **{vector.name: self._table(vector.name) for vector in self.vectors}}
        self.index = built.add(Stage(n_graph.name, n_graph, n_prog, user, {
            "c": (s_index, "out", lambda produced: sums_read(
                self.sum_rows, produced[s_index]["out"], lanes))}))
        self.address = n_prog.meta["images"]["out"]["address"]
        index = self.index
        self.matrix = lambda produced: _unview(np.asarray(produced[index]["out"],
                                                          np.uint32), depth, lanes)

    def _identity(self):
        identity = np.zeros((self.depth, self.columns), np.float32)
        identity[self.width:self.width + self.columns] = np.eye(self.columns,
                                                                dtype=np.float32)
        return identity

    def _norm_of_source(self, s_index, s_prog):
        """B of a computed ``x0``: a row group writes the identity rows and zeros (all
        of B's view), then the norm writes the rows of ``x^T`` (the first rows of B's
        view taken feature-row-major), reading ``x0``'s view where it is."""
        built, depth, columns, width = self.built, self.depth, self.columns, self.width
        lanes, source = built.machine.lanes, self.source
        count, count_x = depth * columns // (2 * lanes), width * columns // (2 * lanes)
        i_graph = Graph(built.name("norm_identity"))
        i_graph.output("out", i_graph.input("itab", (count, 2 * lanes), "fp32").astype(
            "bf16"))
        i_prog = compile_graph(i_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(start=built.start))
        i_prog.meta["written_again"] = ["out"]     # the norm writes B's x rows over it
        itab = _view(self._identity(), lanes).view(np.uint32)
        i_index = built.add(Stage(i_graph.name, i_graph, i_prog,
                                  {"itab": lambda inputs: itab}))
        address = i_prog.meta["images"]["out"]["address"]
        tiles = columns // lanes

        def major(rows, fmt):       # a view of ``rows`` rows taken feature-row-major
            return Image((rows * tiles // 2, 2 * lanes), (), (rows // 2, tiles, 2 * lanes),
                         (1, 0, 2), fmt)
        view = (count_x, 2 * lanes)
        n_graph, normed = self._norm_graph(built.name("norm"), view, source.fmt)
        n_graph.output("out", normed.astype("bf16"))
        n_prog = compile_graph(n_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(
                                   start=built.start, addresses={
                                       "c": s_prog.meta["images"]["out"]["address"],
                                       "xT": source.address, "out": address},
                                   layouts={"c": major(depth, "fp32") if
                                            self.sum_rows == depth else
                                            sums_image(self.sum_rows, view, lanes),
                                            "xT": major(width, source.fmt),
                                            "out": major(depth, "bf16")}))
        user = {vector.name: self._table(vector.name, count_x) for vector in self.vectors}
        _, _, x0_view = source.produced(lanes, True)

        def sums(produced):
            if self.sum_rows != depth:
                return sums_read(self.sum_rows, produced[s_index]["out"], lanes)
            return _feature_major(_view(np.asarray(produced[s_index]["out"], np.uint32),
                                        lanes), depth, columns, lanes)[:count_x]
        self.index = built.add(Stage(n_graph.name, n_graph, n_prog, user, {
            "c": (s_index, "out", sums),
            "xT": (source.stage, source.output, lambda produced: _feature_major(
                np.asarray(x0_view(produced)), width, columns, lanes))}))
        self.address, index = address, self.index

        def matrix(produced):
            full = _feature_major(np.asarray(produced[i_index]["out"], np.uint32), depth,
                                  columns, lanes)
            full[:count_x] = np.asarray(produced[index]["out"], np.uint32)
            return _unview(_feature_major(full, depth, columns, lanes, back=True), depth,
                           lanes)
        self.matrix = matrix

    def a(self, shape, program, first=0):
        """``(index, output, function)`` of a producer's A ``[x | I]`` of ``shape``
        (``(keys, depth)``: B's columns from ``first`` on) read as the transpose of B
        (the matmul's A given transposed,
        :func:`rdu.compiler.families.matmul.transposed_a_image`); a one-line error when
        its image is not those bytes of B."""
        where, lanes = self.built.node.where, self.built.machine.lanes
        image = Image.from_json(program.meta["images"]["a"])
        written = _unview(np.arange(self.depth * self.columns).reshape(-1, 2 * lanes) * 2,
                          self.depth, lanes)             # B's bytes, as the norm writes them
        keys = slice(first, first + shape[0])
        mine = written[:, keys] - first * self.depth * 2
        if shape[1] != self.depth or first % lanes or keys.stop > self.columns or \
                image.byte_offsets().T.shape != mine.shape or \
                not np.array_equal(image.byte_offsets().T, mine):
            raise CompileError(f"{where}: V's producer reads A {image.describe()} where "
                               f"the norm writes B ({self.depth} x {self.columns} in column "
                               f"tiles); supported: A of whole column tiles of B read as "
                               f"their transpose")
        return self.index, "out", lambda produced: np.ascontiguousarray(
            self.matrix(produced)[:, keys].T)

    def b(self, columns, program):
        """``(index, output, function)`` of B for a producer of ``columns`` columns (at
        most the norm's: its first column tiles) whose B image is ``program``'s; a
        one-line error when it is not the view written."""
        where, lanes = self.built.node.where, self.built.machine.lanes
        if columns > self.columns or columns % lanes:
            raise CompileError(f"{where}: a norm before projections of {columns} and "
                               f"{self.columns} columns; supported: at most as many queries "
                               f"as keys, whole tiles")
        # fewer columns (the queries, the keys padded): the first column tiles of B
        same_view(where, Image.from_json(program.meta["images"]["b"]), lanes,
                  (self.depth, columns), program.meta.get("tile_group", 1))
        return self.index, "out", lambda produced: self.matrix(produced)[:, :columns]


def _feature_major(rows, depth, columns, lanes, back=False):
    """The rows of the view of a ``(depth, columns)`` matrix (column tile by column
    tile) reordered feature-row-major: row ``i`` of every tile, then row ``i + 1``
    (``back``: the inverse). A row group walking the first rows of that order walks
    the first features of every tile."""
    tiles, half = columns // lanes, depth // 2
    rows = np.asarray(rows).reshape(-1, 2 * lanes)
    if back:
        return rows.reshape(half, tiles, 2 * lanes).transpose(1, 0, 2).reshape(-1, 2 * lanes)
    return np.ascontiguousarray(rows.reshape(tiles, half, 2 * lanes).transpose(
        1, 0, 2).reshape(-1, 2 * lanes))


def same_view(where, image, lanes, shape, tile_group=1):
    """``image`` (a matrix of ``shape`` in column tiles, no padding) is stored as its
    view: rows of two rows of a tile, in order (what a row group writes). ``tile_group``:
    the product's systolic tiles (its program's ``meta["tile_group"]``): a B laid out in
    groups of column tiles (``fp_latency`` on) is refused as such."""
    if tile_group > 1:
        raise CompileError(f"{where}: with fp_latency on, the product's B is laid out in "
                           f"groups of {tile_group} column tiles, which a row group does "
                           f"not write or read yet (--fp-latency off)")
    offsets = image.byte_offsets()
    rows = offsets.shape[0]
    size = 2 if image.format == "bf16" else 4
    if offsets.shape != tuple(shape) or rows % 2 or offsets.shape[1] % lanes or \
            not np.array_equal(
            _view(offsets - offsets.flat[0], lanes),
            np.arange(offsets.size).reshape(-1, 2 * lanes) * size):
        raise CompileError(f"{where}: a row group cannot write or read "
                           f"{image.describe()} as rows of {shape[0]} x {shape[1]} "
                           f"(column tiles of whole beats, no padding rows)")

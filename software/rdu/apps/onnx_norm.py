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

V's producer reads x as rows: the model's own norm operators as a row group write them
in its A. Padding: B's rows padded with zero rows to whole beats (:func:`b_depth`), one
B of the keys' columns whose first column tiles Q reads, and V's rows padded with zero
rows to the keys' (:func:`padded_rows`). The sums add the squares rounded to BF16 (the
model's are exact in FP32): a relative error of at most ``2^-9`` in the sum,
``2^-10`` in the scale.
"""

import numpy as np

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..frontend.graph import Graph
from ..layout import Image
from ..onnx import KERNEL_NAME
from .onnx_views import bf16 as _bf16
from .onnx_views import floats as _floats
from .onnx_views import unview as _unview
from .onnx_views import view as _view
from .unfused import Stage, end_of

__all__ = ["norm_of", "norm_members", "NormB", "b_depth", "padded_rows", "replay",
           "same_view"]


def b_depth(width, columns, lanes):
    """The rows of ``[x^T; I; 0]``: ``width + columns`` padded with zero rows to whole
    beats (``2 lanes``), so that a row group writes B as rows of two of its rows."""
    return -(-(width + columns) // (2 * lanes)) * 2 * lanes


def norm_of(x):
    """``(x0, reduce, vectors, nodes)`` when ``x`` is ``cast(n)``, ``n`` per element of
    one model input ``x0`` of ``x``'s shape, of per-row scalars of one sum of ``x0 * x0``,
    constants and vectors (inputs of ``(width,)``): an RMSNorm; ``nodes`` the operators
    from ``x`` down to the sum (the square included). None otherwise."""
    if x.op != "unary" or x.attrs.get("fn") != "cast" or len(x.shape) != 2:
        return None
    width = x.shape[1]
    sources, reduces, vectors, nodes = {}, [], [], [x]
    seen, stack = set(), [x.inputs[0]]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.op == "input":
            if node.shape == x.shape:
                sources[id(node)] = node
            elif node.shape in ((width,), (1, width)):
                vectors.append(node)
            else:
                return None
        elif node.op == "reduce":
            inner = node.inputs[0]
            if node.attrs["fn"] != "sum" or inner.op != "binary" or \
                    inner.attrs["fn"] != "mul" or inner.inputs[0] is not inner.inputs[1] or \
                    inner.inputs[0].op != "input" or inner.inputs[0].shape != x.shape:
                return None
            reduces.append(node)
            nodes += [node, inner]
            sources[id(inner.inputs[0])] = inner.inputs[0]
        elif node.op in ("binary", "unary", "const", "broadcast"):
            nodes.append(node)
            stack.extend(node.inputs)
        else:
            return None
    if len(sources) != 1 or len(reduces) != 1:
        return None
    return next(iter(sources.values())), reduces[0], vectors, nodes


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


def padded_rows(graph, name, x, rows):
    """The norm ``x`` (:func:`norm_of`) of ``graph`` as a graph ``name`` over ``rows``
    rows of its input: every value that depends on the input has ``rows`` rows (the
    host pads the input with zero rows; the norm of a zero row is zero)."""
    wanted, stack = set(), [x]
    while stack:
        node = stack.pop()
        if id(node) not in wanted:
            wanted.add(id(node))
            stack.extend(node.inputs)
    x0 = norm_of(x)[0]
    padded, mapped, per_row = Graph(name), {}, {id(x0)}
    for node in graph.nodes:
        if id(node) not in wanted:
            continue
        if any(id(parent) in per_row for parent in node.inputs):
            per_row.add(id(node))
        shape = (rows,) + node.shape[1:] if id(node) in per_row else node.shape
        if node.op == "input":
            mapped[id(node)] = padded.input(node.name, shape, node.dtype)
            continue
        mapped[id(node)] = padded._add(node.op, [mapped[id(parent)].node for parent in
                                                 node.inputs], shape, node.dtype,
                                       node.where, **node.attrs)
    padded.output("out", mapped[id(x)])
    return padded


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
    ``built`` (:class:`rdu.apps.onnx_attention._Builder`): :meth:`b` is what a
    producer's B is."""

    def __init__(self, built, x, columns):
        self.built, self.columns = built, columns
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
        self.depth = depth
        order = {id(node): index for index, node in enumerate(built.graph.nodes)}
        nodes = sorted(nodes, key=lambda node: order[id(node)])

        def transposed(inputs, count):
            full = np.zeros((count, columns), np.float32)
            full[:width, :rows] = _floats(inputs[x0.name]).reshape(rows, width).T
            return _bf16(_view(full, lanes))

        # sums first: it fixes the image sq writes
        s_name = f"{built.graph.name}_{built.first + len(built.stages) + 1}_norm_sums"
        s_graph = Graph(s_name)
        s_graph.output("out", s_graph.input("a", (depth, width)) @
                       s_graph.input("b", (width, columns)))
        s_prog = compile_graph(s_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(start=built.start),
                               max_pcus=1)
        sq_count = width * columns // (2 * lanes)
        q_graph = Graph(built.name("norm_squares"))
        xt = q_graph.input("xT", (sq_count, 2 * lanes))
        q_graph.output("out", (xt * xt).astype("bf16"))
        b_image = s_prog.meta["images"]["b"]
        q_prog = compile_graph(q_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(
                                   start=end_of(s_prog), addresses={"out": b_image["address"]}))
        same_view(where, Image.from_json(b_image), lanes, (width, columns))
        q_index = built.add(Stage(q_graph.name, q_graph, q_prog, {
            "xT": lambda inputs: transposed(inputs, width)}))
        ones = _bf16(np.ones((depth, width), np.float32))
        s_index = built.add(Stage(s_name, s_graph, s_prog, {"a": lambda inputs: ones}, {
            "b": (q_index, "out", lambda produced: _unview(np.asarray(
                produced[q_index]["out"], np.uint32), width, lanes))}))
        # the norm over the views, into B
        count = depth * columns // (2 * lanes)
        view = (count, 2 * lanes)
        n_graph = Graph(built.name("norm"))
        mapped = {id(x0): n_graph.input("xT", view), id(reduce): n_graph.input(
            "c", view, "fp32")}
        for vector in vectors:
            mapped[id(vector)] = n_graph.input(vector.name, view, vector.dtype)
        skip = {id(x), id(reduce), id(reduce.inputs[0])}
        mapped = replay(n_graph, [node for node in nodes if id(node) not in skip], mapped,
                         view)
        normed = mapped[id(x.inputs[0])] + n_graph.input("itab", view)
        n_graph.output("out", normed.astype("bf16"))
        c_layout = Image(view, (), None, None, "fp32")
        n_prog = compile_graph(n_graph, built.machine, kernel=KERNEL_NAME,
                               params=built.params, plan=ImagePlan(
                                   start=end_of(q_prog), addresses={
                                       "c": s_prog.meta["images"]["out"]["address"]},
                                   layouts={"c": c_layout}))
        identity = np.zeros((depth, columns), np.float32)
        identity[width:width + columns] = np.eye(columns, dtype=np.float32)
        itab = _bf16(_view(identity, lanes))

        def table(name):
            def make(inputs):
                full = np.zeros((depth, columns), np.float32)
                full[:width] = _floats(inputs[name]).reshape(width, 1)
                return _bf16(_view(full, lanes))
            return make

        user = {"xT": lambda inputs: transposed(inputs, depth),
                "itab": lambda inputs: itab,
                **{vector.name: table(vector.name) for vector in vectors}}
        self.index = built.add(Stage(n_graph.name, n_graph, n_prog, user, {
            "c": (s_index, "out", lambda produced: _view(np.asarray(
                produced[s_index]["out"], np.uint32), lanes))}))
        self.address = n_prog.meta["images"]["out"]["address"]
        self.unview = lambda words: _unview(np.asarray(words, np.uint32), depth, lanes)

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
                  (self.depth, columns))
        index = self.index
        return index, "out", lambda produced: self.unview(produced[index]["out"])[:, :columns]


def same_view(where, image, lanes, shape):
    """``image`` (a matrix of ``shape`` in column tiles, no padding) is stored as its
    view: rows of two rows of a tile, in order (what a row group writes)."""
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

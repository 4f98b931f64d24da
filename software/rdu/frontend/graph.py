"""The front end: a kernel written in Python as tensor operators over named tensors.

Nothing is computed when a kernel is written: each operator records a node of a
:class:`Graph` (its operator, inputs, shape, dtype and the user's source line), and
:func:`rdu.compiler.compile_graph` lowers the graph onto a machine. Example, the second
kernel of ``docs/compiler.md``::

    g = Graph("linear_relu")
    x = g.input("x", (m, k))                 # BF16 in HBM
    w = g.input("w", (k, n))
    bias = g.input("bias", (n,))
    g.output("y", relu(x @ w + bias))        # FP32 in HBM

and a row softmax (a reduction keeps its axis, so it broadcasts back over the row)::

    g = Graph("softmax")
    x = g.input("x", (rows, length))
    e = exp(x - x.max())
    g.output("y", e * reciprocal(e.sum()))

Operators (numpy broadcasting of trailing dimensions; a Python number is a constant):

=====================================  ==============================================
``a @ b``, :func:`matmul`              matrix product, FP32 accumulation
``a + b``, ``a - b``, ``a * b``        element-wise (the PCU's ADD, SUB, MUL)
``a / c`` (c a number)                 scaling by the constant ``1 / c``
:func:`maximum`, :func:`minimum`       element-wise MAX, MIN
:func:`relu`                           ``maximum(x, 0)``
:func:`exp`, :func:`reciprocal`,       the PCU's special functions
:func:`rsqrt`                          (``rsqrt(x) = 1 / sqrt(x)``)
:func:`sqrt`                           ``reciprocal(rsqrt(x))`` (two special functions)
``x.sum()``, ``x.max()``               row reductions (last axis, kept as size 1)
``x.astype("bf16" | "fp32")``          casts (round to nearest even to BF16)
``x.T``                                transpose of a matrix
``x.broadcast_to(shape)``              explicit broadcast
:func:`attention`                      ``softmax(q k^T * scale) v`` per head (fused)
:func:`heads`                          ``(rows, H * D)`` as ``(H, rows, D)``
:func:`merge_heads`                    ``(H, rows, D)`` as ``(rows, H * D)``
=====================================  ==============================================

Errors name the user's line: ``kernel.py:12: cannot add shapes (4, 8) and (5,)``.
"""

import inspect
import os
from dataclasses import dataclass, field

__all__ = ["FrontendError", "Node", "Tensor", "Graph", "matmul", "maximum", "minimum",
           "relu", "exp", "reciprocal", "rsqrt", "sqrt", "attention", "heads", "merge_heads",
           "DTYPES",
           "DTYPE_BYTES", "ELEMENTWISE"]

DTYPES = ("bf16", "fp32")
#: Bytes of one element of each dtype as stored in memory.
DTYPE_BYTES = {"bf16": 2, "fp32": 4}
MEMORIES = ("hbm", "ddr")
#: Element-wise binary operators -> the PCU's :class:`hdl.fp.Op` name.
ELEMENTWISE = {"add": "ADD", "sub": "SUB", "mul": "MUL", "max": "MAX", "min": "MIN"}
UNARY = ("exp", "reciprocal", "rsqrt", "cast")
REDUCTIONS = ("sum", "max")

_HERE = os.path.dirname(os.path.abspath(__file__))


class FrontendError(ValueError):
    """A kernel that is malformed; the message starts with the user's ``file:line``."""


def _user_line():
    """``file:line`` of the first frame outside the ``rdu`` package (the user's code)."""
    for frame in inspect.stack()[2:]:
        path = os.path.abspath(frame.filename)
        if not path.startswith(_HERE):
            return f"{os.path.basename(path)}:{frame.lineno}"
    return "<rdu>"


@dataclass(eq=False)
class Node:
    """One operator of a graph: ``op`` over ``inputs`` (Nodes), giving ``shape``/``dtype``.

    ``op`` is ``input``, ``const``, ``matmul``, ``binary`` (``attrs["fn"]`` in
    :data:`ELEMENTWISE`), ``unary`` (``attrs["fn"]`` in ``exp``, ``reciprocal``,
    ``rsqrt``, ``cast``), ``reduce`` (``attrs["fn"]`` in ``sum``, ``max``), ``transpose`` or
    ``broadcast``. ``where`` is the user's source line.
    """
    op: str
    inputs: tuple
    shape: tuple
    dtype: str
    attrs: dict = field(default_factory=dict)
    where: str = ""
    name: str = ""

    def describe(self):
        args = ", ".join(node.name for node in self.inputs)
        extra = "".join(f" {key}={value}" for key, value in sorted(self.attrs.items())
                        if key != "value" or self.op == "const")
        return (f"{self.name} = {self.op}({args}){extra} : {self.dtype}"
                f"{list(self.shape)}  # {self.where}")


def _broadcast_shape(a, b, where, what):
    result = []
    for index in range(1, max(len(a), len(b)) + 1):
        x = a[-index] if index <= len(a) else 1
        y = b[-index] if index <= len(b) else 1
        if x != y and 1 not in (x, y):
            raise FrontendError(f"{where}: cannot {what} shapes {a} and {b}")
        result.append(max(x, y))
    return tuple(reversed(result))


class Tensor:
    """A value of the kernel being written (a handle on a :class:`Node`)."""

    __array_priority__ = 100        # numpy scalars defer to our operators

    def __init__(self, graph, node):
        self.graph, self.node = graph, node

    @property
    def shape(self):
        return self.node.shape

    @property
    def dtype(self):
        return self.node.dtype

    def __repr__(self):
        return f"<Tensor {self.node.name} {self.dtype}{list(self.shape)}>"

    # -- operators ----------------------------------------------------------------------
    def _operand(self, other, where):
        if isinstance(other, Tensor):
            if other.graph is not self.graph:
                raise FrontendError(f"{where}: operands come from different graphs")
            return other
        if isinstance(other, (int, float)) and not isinstance(other, bool):
            return self.graph._const(float(other), where)
        raise FrontendError(f"{where}: cannot combine a tensor with {type(other).__name__}")

    def _binary(self, fn, other, reverse=False):
        where = _user_line()
        other = self._operand(other, where)
        a, b = (other, self) if reverse else (self, other)
        shape = _broadcast_shape(a.shape, b.shape, where, ELEMENTWISE[fn].lower())
        return self.graph._add("binary", (a.node, b.node), shape, "fp32", where, fn=fn)

    def __add__(self, other):
        return self._binary("add", other)

    def __radd__(self, other):
        return self._binary("add", other, reverse=True)

    def __sub__(self, other):
        return self._binary("sub", other)

    def __rsub__(self, other):
        return self._binary("sub", other, reverse=True)

    def __mul__(self, other):
        return self._binary("mul", other)

    def __rmul__(self, other):
        return self._binary("mul", other, reverse=True)

    def __truediv__(self, other):
        if isinstance(other, (int, float)) and not isinstance(other, bool) and other != 0:
            return self._binary("mul", 1.0 / float(other))
        raise FrontendError(f"{_user_line()}: only division by a non-zero number is an "
                            f"operator (use reciprocal(x) for tensors)")

    def __neg__(self):
        return self._binary("mul", -1.0)

    def __matmul__(self, other):
        return matmul(self, other)

    @property
    def T(self):  # noqa: N802 (numpy's name)
        where = _user_line()
        if len(self.shape) != 2:
            raise FrontendError(f"{where}: transpose needs a matrix, not shape {self.shape}")
        return self.graph._add("transpose", (self.node,), self.shape[::-1], self.dtype,
                               where)

    def sum(self, axis=-1):
        return self._reduce("sum", axis)

    def max(self, axis=-1):
        return self._reduce("max", axis)

    def _reduce(self, fn, axis):
        where = _user_line()
        if axis not in (-1, len(self.shape) - 1):
            raise FrontendError(f"{where}: {fn} reduces the last axis only, not axis {axis}")
        return self.graph._add("reduce", (self.node,), self.shape[:-1] + (1,), "fp32",
                               where, fn=fn)

    def exp(self):
        return exp(self)

    def reciprocal(self):
        return reciprocal(self)

    def rsqrt(self):
        return rsqrt(self)

    def relu(self):
        return relu(self)

    def astype(self, dtype):
        where = _user_line()
        if dtype not in DTYPES:
            raise FrontendError(f"{where}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        return self.graph._add("unary", (self.node,), self.shape, dtype, where, fn="cast")

    def broadcast_to(self, shape):
        where = _user_line()
        shape = tuple(shape)
        if _broadcast_shape(self.shape, shape, where, "broadcast") != shape:
            raise FrontendError(f"{where}: cannot broadcast {self.shape} to {shape}")
        return self.graph._add("broadcast", (self.node,), shape, self.dtype, where)


def _tensor(value, what):
    if not isinstance(value, Tensor):
        raise FrontendError(f"{_user_line()}: {what} takes tensors, not "
                            f"{type(value).__name__}")
    return value


def matmul(a, b):
    """``a @ b``: (M, K) x (K, N) -> (M, N) FP32 (BF16 operands, FP32 accumulation)."""
    where = _user_line()
    a, b = _tensor(a, "matmul"), _tensor(b, "matmul")
    if len(a.shape) != 2 or len(b.shape) != 2 or a.shape[1] != b.shape[0]:
        raise FrontendError(f"{where}: cannot multiply shapes {a.shape} and {b.shape}")
    return a.graph._add("matmul", (a.node, b.node), (a.shape[0], b.shape[1]), "fp32", where)


def maximum(a, b):
    return _tensor(a, "maximum")._binary("max", b)


def minimum(a, b):
    return _tensor(a, "minimum")._binary("min", b)


def relu(x):
    """``maximum(x, 0)``."""
    return _tensor(x, "relu")._binary("max", 0.0)


def exp(x):
    x = _tensor(x, "exp")
    return x.graph._add("unary", (x.node,), x.shape, "fp32", _user_line(), fn="exp")


def reciprocal(x):
    x = _tensor(x, "reciprocal")
    return x.graph._add("unary", (x.node,), x.shape, "fp32", _user_line(), fn="reciprocal")


def rsqrt(x):
    """``1 / sqrt(x)``, the PCU's reciprocal square root (RMSNorm's
    ``x * rsqrt(mean(x * x) + eps)``)."""
    x = _tensor(x, "rsqrt")
    return x.graph._add("unary", (x.node,), x.shape, "fp32", _user_line(), fn="rsqrt")


def sqrt(x):
    """``sqrt(x)`` as ``reciprocal(rsqrt(x))``: exact at 0 (``1 / inf``) and at +inf, two
    special functions (two PCU tails, within 2.5 ulp); ``1 / sqrt(x)`` is :func:`rsqrt`."""
    return reciprocal(rsqrt(x))


def attention(q, k, v, scale=None, causal=False, kv_layout="blocks", valid=None):
    """``softmax(q k^T * scale) v`` for each head: ``q`` (heads, rows, dim), ``k`` and
    ``v`` (kv_heads, seq, dim), heads a multiple of kv_heads (query head ``h`` reads
    key/value head ``h // (heads / kv_heads)``: grouped-query attention); FP32 result
    (heads, rows, dim). ``scale`` defaults to ``1 / sqrt(dim)``; ``causal``: row ``r``
    sees keys ``0 .. r`` only (rows = seq). One operator, fused by the compiler into one
    streaming configuration (``docs/attention.md``).

    ``kv_layout``: how K and V lie in HBM, ``"blocks"`` (the chain's own order) or
    ``"rows"``: a position-major KV cache of capacity ``seq`` (decode: every query row
    sees the whole cache), of which the first ``valid`` keys of each head are filled
    (default all; the rest are empty slots, masked)."""
    where = _user_line()
    q, k, v = (_tensor(x, "attention") for x in (q, k, v))
    if len(q.shape) != 3 or len(k.shape) != 3 or len(v.shape) != 3:
        raise FrontendError(f"{where}: attention takes q (heads, rows, dim), k and v "
                            f"(kv_heads, seq, dim), not shapes {q.shape}, {k.shape}, "
                            f"{v.shape}")
    if k.shape != v.shape or q.shape[2] != k.shape[2]:
        raise FrontendError(f"{where}: attention: k {k.shape} and v {v.shape} must agree, "
                            f"and their dim with q's {q.shape[2]}")
    if q.shape[0] % k.shape[0]:
        raise FrontendError(f"{where}: attention: {q.shape[0]} query heads are not a "
                            f"multiple of {k.shape[0]} key/value heads")
    if scale is not None and not (isinstance(scale, (int, float)) and scale > 0):
        raise FrontendError(f"{where}: attention: scale must be a positive number, not "
                            f"{scale!r}")
    if causal and q.shape[1] != k.shape[1]:
        raise FrontendError(f"{where}: causal attention takes one query row per key "
                            f"({q.shape[1]} rows, {k.shape[1]} keys)")
    _check_cache(where, q.shape[1], k.shape[1], causal, kv_layout, valid)
    extra = {} if kv_layout == "blocks" else {"kv_layout": kv_layout, "valid": valid}
    return q.graph._add("attention", (q.node, k.node, v.node), q.shape, "fp32", where,
                        scale=scale, causal=bool(causal), **extra)


def _check_cache(where, rows, seq, causal, kv_layout, valid):
    """Refuse a ``kv_layout`` or ``valid`` :func:`attention` cannot take (one line)."""
    if kv_layout not in ("blocks", "rows"):
        raise FrontendError(f"{where}: attention: kv_layout must be 'blocks' or 'rows', "
                            f"not {kv_layout!r}")
    if kv_layout == "rows" and causal:
        raise FrontendError(f"{where}: attention: kv_layout 'rows' (a KV cache) is for "
                            f"decode: every query row sees the whole cache (not causal)")
    if valid is None:
        return
    if kv_layout != "rows":
        raise FrontendError(f"{where}: attention: valid keys are those of a KV cache "
                            f"(kv_layout 'rows')")
    if isinstance(valid, bool) or not isinstance(valid, int) or not 1 <= valid <= seq:
        raise FrontendError(f"{where}: attention: valid must be 1 to the cache's "
                            f"capacity {seq}, not {valid!r}")


def heads(x, count):
    """``x`` ``(rows, count * dim)`` seen as ``count`` heads ``(count, rows, dim)``
    (head ``h`` is columns ``h * dim ..``): attention's operands from projections. A
    relayout: the configuration that computes ``x`` writes it where attention reads it
    (:mod:`rdu.apps.onnx_attention`)."""
    where = _user_line()
    x = _tensor(x, "heads")
    if len(x.shape) != 2 or not isinstance(count, int) or count < 1 or \
            x.shape[1] % count:
        raise FrontendError(f"{where}: heads of {x.shape} in {count}: needs a matrix of "
                            f"a multiple of {count} columns")
    return x.graph._add("heads", (x.node,), (count, x.shape[0], x.shape[1] // count),
                        x.dtype, where, count=count)


def merge_heads(x):
    """``x`` ``(H, rows, D)`` as ``(rows, H * D)`` (head ``h`` is columns ``h * D ..``):
    attention's result into ``o_proj``, the inverse of :func:`heads`."""
    where = _user_line()
    x = _tensor(x, "merge_heads")
    if len(x.shape) != 3:
        raise FrontendError(f"{where}: merge_heads of {x.shape}: needs (heads, rows, dim)")
    count, rows, dim = x.shape
    return x.graph._add("merge_heads", (x.node,), (rows, count * dim), x.dtype, where)


class Graph:
    """A kernel under construction: named inputs and outputs and the operators between.

    Parameters
    ----------
    name : str
        The kernel's name (letters, digits and underscores).
    """

    def __init__(self, name):
        if not isinstance(name, str) or not name or not name.replace("_", "").isalnum():
            raise FrontendError(f"{_user_line()}: kernel name must be letters, digits and "
                                f"underscores, not {name!r}")
        self.name = name
        self.nodes = []
        self.inputs = {}        # name -> Node (op "input")
        self.outputs = {}       # name -> Node
        self.memory = {}        # tensor name -> "hbm" | "ddr"

    def _add(self, op, inputs, shape, dtype, where, **attrs):
        node = Node(op, tuple(inputs), tuple(shape), dtype, attrs, where,
                    f"%{len(self.nodes)}")
        self.nodes.append(node)
        return Tensor(self, node)

    def _const(self, value, where):
        return self._add("const", (), (), "fp32", where, value=value)

    def input(self, name, shape, dtype="bf16", memory="hbm"):
        """A named input tensor in HBM (or DDR)."""
        where = _user_line()
        self._check_name(name, where)
        shape = tuple(shape)
        if not shape or any(not isinstance(d, int) or isinstance(d, bool) or d < 1
                            for d in shape):
            raise FrontendError(f"{where}: input {name!r}: shape {shape} must be positive "
                                f"integers")
        if dtype not in DTYPES:
            raise FrontendError(f"{where}: input {name!r}: dtype {dtype!r} is not one of "
                                f"{', '.join(DTYPES)}")
        if memory not in MEMORIES:
            raise FrontendError(f"{where}: input {name!r}: memory {memory!r} is not one of "
                                f"{', '.join(MEMORIES)}")
        tensor = self._add("input", (), shape, dtype, where, tensor=name)
        tensor.node.name = name
        self.inputs[name] = tensor.node
        self.memory[name] = memory
        return tensor

    def output(self, name, tensor, memory="hbm"):
        """Make ``tensor`` the named output (written to HBM or DDR)."""
        where = _user_line()
        self._check_name(name, where)
        tensor = _tensor(tensor, "output")
        if memory not in MEMORIES:
            raise FrontendError(f"{where}: output {name!r}: memory {memory!r} is not one "
                                f"of {', '.join(MEMORIES)}")
        if tensor.node.op in ("input", "const"):
            raise FrontendError(f"{where}: output {name!r} must be computed, not an "
                                f"{tensor.node.op}")
        self.outputs[name] = tensor.node
        self.memory[name] = memory
        return tensor

    def _check_name(self, name, where):
        if not isinstance(name, str) or not name.isidentifier():
            raise FrontendError(f"{where}: tensor name {name!r} is not an identifier")
        if name in self.inputs or name in self.outputs:
            raise FrontendError(f"{where}: tensor {name!r} is defined twice")

    def extract(self, name, sources, outputs):
        """A new graph ``name`` of the operators between ``sources`` and ``outputs``:
        ``sources`` ``{node: input name}`` become inputs (their shape and dtype),
        ``outputs`` ``{output name: node}`` its outputs (a kernel cut into stages, a
        reference of part of a fused group)."""
        graph = Graph(name)
        mapped = {}
        for node, input_name in sources.items():
            mapped[id(node)] = graph.input(input_name, node.shape, node.dtype)
        wanted, stack = set(), list(outputs.values())
        while stack:
            node = stack.pop()
            if id(node) not in wanted and id(node) not in mapped:
                wanted.add(id(node))
                stack.extend(node.inputs)
        for node in self.nodes:
            if id(node) not in wanted:
                continue
            if node.op == "input":       # its annotations too (a rotated weight's)
                mapped[id(node)] = graph.input(node.name, node.shape, node.dtype)
                mapped[id(node)].node.attrs.update(node.attrs)
                continue
            inputs = [mapped[id(i)].node for i in node.inputs]
            mapped[id(node)] = graph._add(node.op, inputs, node.shape, node.dtype,
                                          node.where, **node.attrs)
        for output_name, node in outputs.items():
            graph.output(output_name, mapped[id(node)])
        return graph

    def users(self, node):
        """The nodes that read ``node``."""
        return [other for other in self.nodes if node in other.inputs]

    def live_nodes(self):
        """The nodes the outputs depend on, in the order they were written."""
        live, stack = set(), list(self.outputs.values())
        while stack:
            node = stack.pop()
            if id(node) not in live:
                live.add(id(node))
                stack.extend(node.inputs)
        return [node for node in self.nodes if id(node) in live]

    def dump(self):
        """The graph as text, one operator per line (``rdu compile --dump-after``)."""
        lines = [f"graph {self.name}"]
        lines += [f"  {node.describe()}" for node in self.live_nodes()]
        lines += [f"  output {name} = {node.name}" for name, node in self.outputs.items()]
        return "\n".join(lines)

"""Pass ``fuse``: group the front-end graph into the work of one configuration.

Two steps, as in ``docs/compiler.md``: (1) decide what is materialised (the graph's
inputs and outputs: tensors in HBM or DDR; nothing else leaves the array), (2) match the
operators between them against the fusion rules below; each rule either takes a node
or says it is not its own. A graph no rule covers is refused with the user's line.

Rules (each a small function over one node):

* ``matmul``: ``a @ b`` of two BF16 inputs is the core of a :class:`MatmulGroup` (the
  systolic PCUs);
* ``bias``: ``matmul + v`` with ``v`` a BF16 input of shape ``(N,)`` or ``(1, N)`` is
  folded into the matmul: the compiler appends a column of ones to A and the row ``v``
  to B, so the systolic array adds ``v`` as its last accumulation step (the same FP32
  addition a SIMD ADD would do after the sum, exact: ``1 * v = v``);
* ``epilogue``: an element-wise operator of the group's value and a constant (``+ - *
  max min``, ``relu``, ``/ c``) or a cast to BF16 becomes a SIMD stage of the epilogue
  PCUs on the result streams (constants are rounded to FP32);
* ``rows``: a graph with no matmul whose operators all work row by row on one input of
  shape ``(R, L)`` (element-wise operators of rows, of per-row scalars ``(R, 1)`` and of
  constants; ``sum`` and ``max`` reductions; ``exp``, ``reciprocal``, casts) is a
  :class:`RowGroup`, streamed row by row through a chain of SIMD PCUs
  (:mod:`rdu.compiler.lower_rows`).
"""

from dataclasses import dataclass, field

import numpy as np

from ..frontend import ELEMENTWISE
from .core import CompileError, register

__all__ = ["MatmulGroup", "RowGroup", "AttentionGroup", "MlpGroup", "fuse"]


@dataclass
class MatmulGroup:
    """``out = epilogue(a @ b [+ bias])``, one configuration."""
    pattern = "matmul"          # the fusion rule: what the later passes dispatch on
    a: object                       # frontend.Node: input (M, K) BF16
    b: object                       # frontend.Node: input (K, N) BF16
    bias: object = None             # frontend.Node: input (N,) or (1, N) BF16, or None
    epilogue: list = field(default_factory=list)    # SIMD stages (op, a, b, c, constant)
    output: str = ""
    out_dtype: str = "fp32"
    nodes: list = field(default_factory=list)        # the frontend nodes covered

    @property
    def m(self):
        return self.a.shape[0]

    @property
    def k(self):
        return self.a.shape[1]

    @property
    def n(self):
        return self.b.shape[1]

    def describe(self):
        parts = [f"matmul {self.a.name}{list(self.a.shape)} @ {self.b.name}"
                 f"{list(self.b.shape)}"]
        if self.bias is not None:
            parts.append(f"+ {self.bias.name} (folded into K)")
        parts += [f"-> {op}({a}, {b}{', ' + hex(c) if 'CONST' in (a, b) else ''})"
                  for op, a, b, _, c in self.epilogue]
        return f"group {self.output}: " + " ".join(parts)


def _f32_word(value):
    return int(np.array([value], np.float32).view(np.uint32)[0])


def _unsupported(node, why):
    return CompileError(f"{node.where}: {why}")


def _is_bf16_input(node):
    return node.op == "input" and node.dtype == "bf16"


def _epilogue_step(node, chain):
    """The SIMD stage of ``node`` applied to ``chain`` (its other operand a constant), or
    None when ``node`` is not an epilogue operator."""
    if node.op == "binary":
        a, b = node.inputs
        fn = ELEMENTWISE[node.attrs["fn"]]
        if a is chain and b.op == "const":
            return (fn, "PREV", "CONST", "PREV", _f32_word(b.attrs["value"]))
        if b is chain and a.op == "const":
            return (fn, "CONST", "PREV", "PREV", _f32_word(a.attrs["value"]))
    if node.op == "unary" and node.attrs["fn"] == "cast" and node.dtype == "bf16":
        return ("TO_BF16", "PREV", "PREV", "PREV", 0)
    if node.op == "unary" and node.attrs["fn"] == "cast" and node.dtype == "fp32":
        return ()           # a cast to FP32 of an FP32 value: nothing to do
    return None


def _match_matmul(graph, name, out):
    """Walk back from output ``out``: epilogue operators, an optional bias, the matmul."""
    steps, covered, node = [], [out], out
    while node.op != "matmul":
        if node.op == "binary" and node.attrs["fn"] == "add":
            # the bias rule: matmul + row vector
            left, right = node.inputs
            for core, vector in ((left, right), (right, left)):
                if core.op == "matmul" and _is_bf16_input(vector) and \
                        vector.shape in ((core.shape[1],), (1, core.shape[1])):
                    group = _group(core, name)
                    group.bias = vector
                    group.epilogue = steps
                    group.nodes = covered + [core]
                    return group
        previous = [i for i in node.inputs if i.op != "const"]
        if len(previous) != 1:
            raise _unsupported(node, f"output {name!r}: {node.op} "
                               f"{node.attrs.get('fn', '')} of two computed tensors is "
                               f"not fused by this compiler yet (a matmul with a bias and "
                               f"element-wise operators with constants is)")
        step = _epilogue_step(node, previous[0])
        if step is None:
            raise _unsupported(node, f"output {name!r}: {node.op} "
                               f"{node.attrs.get('fn', '')} is not fused by this compiler "
                               f"yet (supported after a matmul: + - * max min relu with "
                               f"constants, a bias row, casts)")
        if step:
            steps.insert(0, step)
        node = previous[0]
        covered.append(node)
    group = _group(node, name)
    group.epilogue = steps
    group.nodes = covered
    return group


def _group(matmul, name):
    a, b = matmul.inputs
    for operand in (a, b):
        if not _is_bf16_input(operand):
            raise _unsupported(matmul, f"output {name!r}: matmul operands must be BF16 "
                               f"inputs (got {operand.op} {operand.dtype}); a matmul of "
                               f"computed values is not fused yet")
    return MatmulGroup(a, b, output=name)


@dataclass
class RowGroup:
    """``out = f(x)`` row by row: ``nodes`` in order, each a row ``(R, L)`` or a per-row
    scalar ``(R, 1)`` value."""
    pattern = "rows"
    x: object
    nodes: list
    output: str
    out_node: object = None

    @property
    def rows(self):
        return self.x.shape[0]

    @property
    def length(self):
        return self.x.shape[1]

    def kind(self, node):
        if node.op == "const":
            return "const"
        return "row" if node.shape == self.x.shape else "scalar"

    def describe(self):
        ops = ", ".join(f"{node.attrs.get('fn', node.op)}" for node in self.nodes)
        return (f"group {self.output}: rows of {self.x.name}{list(self.x.shape)} through "
                f"{ops}")


_ROW_OPS = ("binary", "unary", "reduce", "const")


def _match_rows(graph, name, out):
    nodes = [node for node in graph.live_nodes() if node.op not in ("input", "const")]
    inputs = [node for node in graph.live_nodes() if node.op == "input"]
    if len(inputs) != 1 or len(inputs[0].shape) != 2:
        raise _unsupported(out, f"output {name!r}: a row-wise kernel takes one input "
                           f"matrix (got {', '.join(i.name for i in inputs) or 'none'})")
    x = inputs[0]
    rows, length = x.shape
    for node in nodes:
        if node.op not in _ROW_OPS:
            raise _unsupported(node, f"output {name!r}: {node.op} is not a row-wise "
                               f"operator (row-wise kernels use element-wise operators, "
                               f"sum, max, exp, reciprocal and casts)")
        if node.shape not in ((rows, length), (rows, 1)):
            raise _unsupported(node, f"output {name!r}: shape {node.shape} is neither a "
                               f"row ({rows}, {length}) nor a per-row scalar ({rows}, 1)")
        if node.op == "reduce" and node.inputs[0].shape != (rows, length):
            raise _unsupported(node, f"output {name!r}: a reduction of a per-row scalar")
    if out.shape != (rows, length):
        raise _unsupported(out, f"output {name!r}: a row-wise kernel's output must be "
                           f"rows {(rows, length)}, not {out.shape}")
    return RowGroup(x, nodes, name, out)


@dataclass
class AttentionGroup:
    """``out = attention(q, k, v)``: the whole chain of ``docs/attention.md``, one
    configuration."""
    pattern = "attention"
    q: object
    k: object
    v: object
    scale: float
    output: str
    node: object
    causal: bool = False

    def describe(self):
        return (f"group {self.output}: attention q{list(self.q.shape)} "
                f"k{list(self.k.shape)} v{list(self.v.shape)}")


def _match_attention(graph, name, out):
    if out.op != "attention":
        node = next(n for n in graph.live_nodes() if n.op == "attention")
        raise _unsupported(node, f"output {name!r}: attention fuses on its own (its result "
                           f"is the output); operators around it are not fused yet")
    for operand in out.inputs:
        if not _is_bf16_input(operand):
            raise _unsupported(out, f"output {name!r}: attention operands must be BF16 "
                               f"inputs (got {operand.op} {operand.dtype})")
    q, k, v = out.inputs
    return AttentionGroup(q, k, v, out.attrs.get("scale"), name, out,
                          out.attrs.get("causal", False))


@dataclass
class MlpGroup:
    """``out = act(a @ w1).astype(bf16) @ w2``: two matmuls and the element-wise
    operators between them (an activation: SiLU, GELU, ...) in one configuration; the
    activated rows wait in a PMU as the second matmul's A panel."""
    pattern = "mlp"
    first: MatmulGroup          # a @ w1 (output: the hidden rows)
    chain: RowGroup             # the element-wise operators on them, ending in the cast
    second: MatmulGroup         # (the cast rows) @ w2
    output: str

    def describe(self):
        ops = ", ".join(node.attrs.get("fn", node.op) for node in self.chain.nodes)
        return (f"group {self.output}: matmul {self.first.a.name}{list(self.first.a.shape)} "
                f"@ {self.first.b.name}{list(self.first.b.shape)} -> {ops} -> matmul @ "
                f"{self.second.b.name}{list(self.second.b.shape)}")


def _match_mlp(graph, name, out):
    """Two matmuls: ``out = cast_bf16(f(a @ w1)) @ w2`` with ``f`` element-wise."""
    if out.op != "matmul":
        raise _unsupported(out, f"output {name!r}: a kernel of two matmuls must end in the "
                           f"second (operators after it are not fused yet)")
    cast, w2 = out.inputs
    if not _is_bf16_input(w2):
        raise _unsupported(out, f"output {name!r}: the second matmul's B must be a BF16 "
                           f"input (got {w2.op} {w2.dtype})")
    if not (cast.op == "unary" and cast.attrs["fn"] == "cast" and cast.dtype == "bf16"):
        raise _unsupported(cast, f"output {name!r}: round the first matmul's activated "
                           f"rows to BF16 (.astype('bf16')) before the second matmul")
    chain, stack, first = [], [cast], None
    while stack:
        node = stack.pop()
        if node.op == "matmul":
            if first is not None and node is not first:
                raise _unsupported(node, f"output {name!r}: more than two matmuls")
            first = node
            continue
        if node.op == "const" or any(node is c for c in chain):
            continue
        if node.op not in ("binary", "unary") or node.shape != cast.shape:
            raise _unsupported(node, f"output {name!r}: between two matmuls only "
                               f"element-wise operators of the rows are fused (got "
                               f"{node.op} {node.attrs.get('fn', '')} of shape {node.shape})")
        chain.append(node)
        stack.extend(node.inputs)
    if first is None:
        raise _unsupported(out, f"output {name!r}: the second matmul's A does not come from "
                           f"a matmul")
    order = {id(node): index for index, node in enumerate(graph.nodes)}
    chain.sort(key=lambda node: order[id(node)])
    group1 = _group(first, "%hidden")
    second = MatmulGroup(cast, w2, output=name, nodes=[out])
    return MlpGroup(group1, RowGroup(first, chain, "%activated", cast), second, name)


@register("fuse", "group the operators between inputs and outputs into configurations")
def fuse(state):
    graph = state.graph
    if not graph.outputs:
        raise CompileError(f"kernel {graph.name!r} has no outputs (Graph.output)")
    if len(graph.outputs) > 1:
        raise CompileError(f"kernel {graph.name!r} has {len(graph.outputs)} outputs; this "
                           f"compiler fuses kernels of one output")
    (name, out), = graph.outputs.items()
    if any(node.op == "attention" for node in graph.live_nodes()):
        group = _match_attention(graph, name, out)
    elif sum(node.op == "matmul" for node in graph.live_nodes()) == 2:
        group = _match_mlp(graph, name, out)
    elif any(node.op == "matmul" for node in graph.live_nodes()):
        group = _match_matmul(graph, name, out)
        group.out_dtype = out.dtype
    else:
        group = _match_rows(graph, name, out)
    if any(memory != "hbm" for memory in graph.memory.values()):
        raise CompileError(f"kernel {graph.name!r}: fused kernels stream from and to HBM; "
                           f"stage DDR tensors into HBM first (AGCU copy)")
    state.groups = [group]
    return "\n".join(g.describe() for g in state.groups)

"""The chain of SIMD PCUs of a row group (:class:`rdu.compiler.families.rows.RowGroup`),
shared by the rows and mlp families' lowerings.

The input streams from HBM row by row (``L / lanes`` beats a row); every value of the
group is either a *row* stream (one beat per input beat) or a per-row *scalar* (one word a
row on the scalar network). Operators become PCUs, walking the graph in order:

* an element-wise operator of a row joins the PCU that produces one of its row operands
  as one more SIMD stage when it can (that row has no other user, the PCU has a stage free, no
  tail and no reduction yet, and at most one per-row scalar, its ``scalar_in``); else it
  starts a new PCU. Operands: the row is ``PREV``, a second row ``IN1``, a per-row scalar
  ``SCALAR``, a constant ``CONST``;
* ``exp``, ``reciprocal`` and ``rsqrt`` of a row are the PCU's *tail* (after its stages:
  nothing joins the PCU after them);
* ``sum`` / ``max`` of a row is a PCU whose stage accumulates lane-wise over the row
  (``ADD`` / ``MAX`` with ``REG``, starting from ``0`` / ``-inf``) and whose reduction
  sends the row's value to ``scalar_out`` at the end of each row; its ``vector_out`` (one
  beat a row) is the *row clock* of scalar operators that follow;
* an operator of per-row scalars is a PCU clocked by its operand's producer (one beat a
  row on ``vector_in0``), the scalar on ``scalar_in``, a ``PASS(SCALAR)`` stage (or the
  operator with a constant), the tail for ``exp`` / ``reciprocal`` / ``rsqrt``, and a
  ``MAX`` reduction of its equal lanes to ``scalar_out``. A chain of them (RMSNorm's
  ``rsqrt(sum * (1 / L) + eps)``) is one such PCU while it has stages free and no tail:
  an operator of the scalar the PCU computes (its only user) joins it as one more stage
  reading ``PREV``, or as its tail.

Rows of any length are padded to whole beats (:func:`rdu.layout.padded_row`); the padding
words enter a reducing PCU as its stage 0's constant, the reduction's identity (the PCU's
``row_pad``), so with padding a reduction is always stage 0 of a PCU of its own (``padded``).

A row stream read by a PCU that also needs a scalar computed from that very row (``x -
max(x)``) must wait for the whole row: the compiler puts a PMU row buffer on that edge
(``buffers`` rows, so the next rows load while one is read). All PCUs start on the
load's launch token.
"""

from dataclasses import dataclass, field

from ..frontend.graph import ELEMENTWISE, Node
from ..models.fp import NEG_INF
from .core import CompileError
from .lower import f32_word

__all__ = ["RowPCU", "RowChainBuilder", "ancestors"]

_NEG_INF = int(NEG_INF)


@dataclass(eq=False)
class RowPCU:
    """One SIMD PCU of the chain being formed."""
    name: str
    in0: Node | None = None              # frontend Node whose stream feeds vector_in0
    in0_clock: bool = False         # in0 is a row clock (a producer's vector_out)
    in1: Node | None = None
    scalar: Node | None = None           # frontend Node (a per-row scalar) on scalar_in
    stages: list = field(default_factory=list)
    tail: str = "NONE"
    reduce: str = "NONE"
    row_value: Node | None = None        # the node its vector_out carries (row PCUs)
    scalar_value: Node | None = None     # the node its scalar_out carries
    per_row: bool = False           # one iteration a row (scalar PCUs)
    clock_users: int = 0

    @property
    def closed(self):
        return self.tail != "NONE" or self.reduce != "NONE"


def ancestors(node):
    """The ids of every node ``node`` depends on."""
    seen, stack = set(), [node]
    while stack:
        item = stack.pop()
        for parent in item.inputs:
            if id(parent) not in seen:
                seen.add(id(parent))
                stack.append(parent)
    return seen


class RowChainBuilder:
    """The PCUs of a row group's operators, in order (the rules above): ``build()``
    returns the :class:`RowPCU` list."""

    def __init__(self, group, stages, padded=False):
        self.group, self.stages, self.padded = group, stages, padded
        self.pcus = []
        self.row_of = {}            # node -> RowPCU producing it as a row stream
        self.scalar_of = {}         # node -> RowPCU producing it as a scalar
        self.users = {}
        for node in group.nodes:
            for parent in node.inputs:
                self.users.setdefault(id(parent), []).append(node)

    def new(self, **fields):
        pcu = RowPCU(f"row{len(self.pcus)}", **fields)
        self.pcus.append(pcu)
        return pcu

    def operand(self, pcu, node, where):
        """The stage source of ``node`` in ``pcu`` (adding it as in1 / scalar)."""
        kind = self.group.kind(node)
        if kind == "const":
            return "CONST", f32_word(node.attrs["value"])
        if pcu.per_row and node is pcu.scalar_value:
            return "PREV", 0            # the value of the scalar PCU's last stage
        if kind == "scalar":
            if pcu.scalar is not None and pcu.scalar is not node:
                raise CompileError(f"{where.where}: two per-row scalars in one PCU stage "
                                   f"chain (a PCU takes one scalar_in)")
            pcu.scalar = node
            return "SCALAR", 0
        if node is pcu.row_value or node is pcu.in0 and not pcu.stages:
            return "PREV", 0
        if pcu.in1 is not None and pcu.in1 is not node:
            raise CompileError(f"{where.where}: three row operands in one PCU")
        pcu.in1 = node
        return "IN1", 0

    def stage(self, pcu, fn, operands, where):
        """Append the SIMD stage ``fn`` of ``operands`` to ``pcu``."""
        sources = [self.operand(pcu, i, where) for i in operands]
        constant = next((c for s, c in sources if s == "CONST"), 0)
        names = [s for s, _ in sources] + ["PREV"] * (3 - len(sources))
        pcu.stages.append((fn, *names[:3], constant))

    def fusable(self, pcu, row, node):
        """Can ``node`` (using ``row``) join ``pcu`` as one more stage?"""
        if pcu is None or pcu.closed or pcu.per_row or len(pcu.stages) >= self.stages:
            return False
        if len(self.users.get(id(row), [])) != 1 or row is self.group.out_node:
            return False
        scalars = [i for i in node.inputs if self.group.kind(i) == "scalar"]
        # another row operand needs IN1: free, or already that row
        others = {id(i) for i in node.inputs if self.group.kind(i) == "row" and i is not row
                  and i is not pcu.in1}
        if len(others) > (pcu.in1 is None):
            return False
        return not scalars or pcu.scalar in (None, scalars[0])

    def row_pcu_for(self, node, row):
        pcu = self.row_of.get(id(row))
        if self.fusable(pcu, row, node):
            return pcu
        return self.new(in0=row)

    def elementwise(self, node):
        where = node
        kind = self.group.kind(node)
        if node.op == "binary":
            fn = ELEMENTWISE[node.attrs["fn"]]
            operands = list(node.inputs)
        elif node.attrs["fn"] == "cast":
            fn = "TO_BF16" if node.dtype == "bf16" else "PASS"
            operands = list(node.inputs)
        else:
            fn = None                   # exp / reciprocal: the tail
            operands = list(node.inputs)
        if kind == "row":
            rows = [i for i in operands if self.group.kind(i) == "row"]
            # join the PCU of a row operand that can take one more stage (in either
            # operand order: ``w * h`` joins h's PCU, w on IN1)
            row = next((r for r in rows if self.fusable(self.row_of.get(id(r)), r, node)),
                       rows[0])
            pcu = self.row_pcu_for(node, row)
            if fn is None:
                if pcu.closed or pcu.in0 is not row and pcu.row_value is not row:
                    pcu = self.new(in0=row)
                pcu.tail = node.attrs["fn"].upper()
            else:
                self.stage(pcu, fn, operands, where)
            pcu.row_value = node
            self.row_of[id(node)] = pcu
            return
        # a per-row scalar operator: clocked by its operand's producer
        scalars = [i for i in operands if self.group.kind(i) == "scalar"]
        if len(scalars) != 1:
            raise CompileError(f"{node.where}: an operator of {len(scalars)} per-row "
                               f"scalars (one is supported)")
        source = self.scalar_of[id(scalars[0])]
        if self.joins_scalar_pcu(source, scalars[0], fn):
            pcu = source            # one more stage (or the tail) of a scalar PCU
        else:
            source.clock_users += 1
            pcu = self.new(in0=scalars[0], in0_clock=True, per_row=True,
                           scalar=scalars[0], reduce="MAX")
            pcu.clock_source = source
        if fn is None:
            if not pcu.stages:
                pcu.stages.append(("PASS", "SCALAR", "PREV", "PREV", 0))
            pcu.tail = node.attrs["fn"].upper()
        else:
            self.stage(pcu, fn, operands, where)
        pcu.scalar_value = node
        self.scalar_of[id(node)] = pcu

    def joins_scalar_pcu(self, source, scalar, fn):
        """Can an operator of per-row scalar ``scalar`` (as a stage ``fn``, or the tail
        when ``fn`` is None) join ``source``, the scalar PCU computing it?"""
        return (source.per_row and source.tail == "NONE" and
                len(self.users.get(id(scalar), [])) == 1 and
                (fn is None or len(source.stages) < self.stages))

    def reduction(self, node):
        row, = node.inputs
        fn = node.attrs["fn"]
        op, start = ("ADD", 0) if fn == "sum" else ("MAX", _NEG_INF)
        pcu = self.row_of.get(id(row))
        if not (pcu is not None and not pcu.closed and not pcu.per_row and
                len(pcu.stages) < self.stages and
                len(self.users.get(id(row), [])) == 1 and row is not self.group.out_node
                and not (self.padded and pcu.stages)):
            pcu = self.new(in0=row)
        pcu.stages.append((op, "PREV", "REG", "PREV", start))
        pcu.reduce = "SUM" if fn == "sum" else "MAX"
        pcu.scalar_value = node
        pcu.row_value = None
        self.scalar_of[id(node)] = pcu

    def build(self):
        for node in self.group.nodes:
            if node.op == "reduce":
                self.reduction(node)
            else:
                self.elementwise(node)
        return self.pcus

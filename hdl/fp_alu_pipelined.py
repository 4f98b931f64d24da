"""The SIMD stage's ALU on the pipelined FP operators (:mod:`hdl.fp_pipelined`).

:class:`PipelinedFPALU` computes every :class:`hdl.fp.Op` as :class:`hdl.fp.FPALU` does,
bit for bit, but each op's result leaves after the latency of its operator's kind
(:func:`hdl.fp_latency.op_latency`): the multiplier, the adder (``ADD``, ``SUB`` and the
second half of ``MADD``, which takes the product and ``c`` delayed beside the
multiplier), the comparator (``MAX``, ``MIN``, ``LT``, ``LE``, ``EQ``), the BF16
conversions, and one register for the ops of no FP operator (``PASS``, ``SELECT``, the
INT32 ops). A stage's op is fixed for a run, so the stage takes its result at the op's
latency (``hdl.pcu_simd``). It has no enable of its own: the PCU wraps it in an
``EnableInserter`` (the SIMD pipeline's ``advance``).

See also: ``docs/pcu.md`` ("SIMD stages on the pipelined operators"), tests
``tests/test_pcu_components.py::test_pipelined_alu``.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .fp import Op
from .fp_latency import DEFAULT_LATENCY, FPKind
from .fp_pipelined import (
    PipelinedBF16ToFP32,
    PipelinedFP32Add,
    PipelinedFP32Compare,
    PipelinedFP32Mul,
    PipelinedFP32ToBF16,
)

__all__ = ["PipelinedFPALU", "check_latency_table"]


def check_latency_table(table):
    """Raise ``ValueError`` unless ``table``'s multiply-add is its multiplier then its
    adder (the ALU shares them: one multiplier and one adder per lane)."""
    if table[FPKind.MADD] != table[FPKind.MUL] + table[FPKind.ADD]:
        raise ValueError(f"the multiply-add latency must be the multiplier's plus the "
                         f"adder's, not {table[FPKind.MADD]} (mul {table[FPKind.MUL]}, "
                         f"add {table[FPKind.ADD]})")


class PipelinedFPALU(wiring.Component):
    """One lane's ALU on the pipelined operators of latencies ``table``.

    Parameters
    ----------
    table : dict or None
        ``{FPKind: latency}``; every latency at least 1 (the result is registered).
        ``None``: :data:`hdl.fp_latency.DEFAULT_LATENCY`.

    Attributes
    ----------
    op : In(5)
        Operation code (:class:`hdl.fp.Op`), held for as long as a beat is inside.
    a, b, c : In(32)
        Operands of this cycle's beat.
    result : Out(32)
        The result of ``op`` on the operands of ``op_latency(op, table)`` cycles before.
    """

    def __init__(self, table=None):
        table = DEFAULT_LATENCY if table is None else table
        check_latency_table(table)
        for kind, latency in table.items():
            if latency < 1:
                raise ValueError(f"a pipelined ALU needs every latency at least 1, not "
                                 f"{latency} for {kind.name}")
        self._table = table
        super().__init__({"op": In(5), "a": In(32), "b": In(32), "c": In(32),
                          "result": Out(32)})

    def elaborate(self, platform):
        m = Module()
        table, op, a, b = self._table, self.op, self.a, self.b
        madd = op == Op.MADD
        mul = m.submodules.mul = PipelinedFP32Mul(table[FPKind.MUL])
        add = m.submodules.add = PipelinedFP32Add(table[FPKind.ADD])
        cmp = m.submodules.cmp = PipelinedFP32Compare(table[FPKind.COMPARE])
        to_bf16 = m.submodules.to_bf16 = PipelinedFP32ToBF16(table[FPKind.TO_BF16])
        from_bf16 = m.submodules.from_bf16 = PipelinedBF16ToFP32(table[FPKind.FROM_BF16])
        # c waits beside the multiplier for the multiply-add's adder
        c = self.c
        for stage in range(table[FPKind.MUL]):
            delayed = Signal(32, name=f"c_s{stage + 1}", reset_less=True)
            m.d.sync += delayed.eq(c)
            c = delayed
        m.d.comb += [
            mul.i.payload.a.eq(a), mul.i.payload.b.eq(b),
            # one adder serves ADD, SUB and the second half of MADD (op fixed for a run)
            add.i.payload.a.eq(Mux(madd, mul.o.payload, a)),
            add.i.payload.b.eq(Mux(madd, c, Mux(op == Op.SUB, b ^ 0x80000000, b))),
            cmp.i.payload.a.eq(a), cmp.i.payload.b.eq(b),
            to_bf16.i.payload.a.eq(a), from_bf16.i.payload.a.eq(a),
        ]
        simple = Signal(32, name="simple")
        with m.Switch(op):
            with m.Case(Op.PASS):
                m.d.sync += simple.eq(a)
            with m.Case(Op.SELECT):
                m.d.sync += simple.eq(Mux(a != 0, b, self.c))
            with m.Case(Op.IADD):
                m.d.sync += simple.eq(a + b)
            with m.Case(Op.ISUB):
                m.d.sync += simple.eq(a - b)
            with m.Case(Op.ILT):
                m.d.sync += simple.eq(a.as_signed() < b.as_signed())
            with m.Case(Op.IEQ):
                m.d.sync += simple.eq(a == b)
            with m.Default():
                m.d.sync += simple.eq(0)
        compared = cmp.o.payload
        with m.Switch(op):
            with m.Case(Op.ADD, Op.SUB, Op.MADD):
                m.d.comb += self.result.eq(add.o.payload)
            with m.Case(Op.MUL):
                m.d.comb += self.result.eq(mul.o.payload)
            with m.Case(Op.MAX):
                m.d.comb += self.result.eq(compared.max)
            with m.Case(Op.MIN):
                m.d.comb += self.result.eq(compared.min)
            with m.Case(Op.LT):
                m.d.comb += self.result.eq(compared.less)
            with m.Case(Op.LE):
                m.d.comb += self.result.eq(compared.less_equal)
            with m.Case(Op.EQ):
                m.d.comb += self.result.eq(compared.equal)
            with m.Case(Op.TO_BF16):
                m.d.comb += self.result.eq(to_bf16.o.payload)
            with m.Case(Op.FROM_BF16):
                m.d.comb += self.result.eq(from_bf16.o.payload)
            with m.Default():
                m.d.comb += self.result.eq(simple)
        return m

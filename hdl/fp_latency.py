"""The latencies of the FP operators, written once.

Each kind of FP operator (:class:`FPKind`) has a default number of register stages
(:data:`DEFAULT_LATENCY`): its result leaves the operator that many cycles after its
operands enter, one result per cycle. These are the one copy that the PCU, the
compiler's timing estimates and the functional model read; the pipelined operators of
:mod:`hdl.fp_pipelined` take them as their default ``latency``.

The defaults come from the measurements of ``docs/fpga.md`` ("Pipelined FP
operators"): the fewest stages with which each operator alone reaches 100 MHz on the
ECP5-85k (nextpnr-ecp5, speed grade 6), or its deepest pipeline where none does.
Today's PCU still computes every operator in one cycle (``docs/pcu.md``).

Plain Python (no Amaranth): the software reads it too.
"""

import enum

__all__ = ["FPKind", "DEFAULT_LATENCY", "latency_of"]


class FPKind(enum.Enum):
    """The kinds of FP operator, each with a latency of its own."""
    ADD = "add"                 #: FP32 a + b (and a - b)
    MUL = "mul"                 #: FP32 a * b
    MADD = "madd"               #: FP32 (a * b) + c, unfused: the multiplier then the adder
    COMPARE = "compare"         #: FP32 max, min, <, <=, == (one comparator)
    TO_BF16 = "to_bf16"         #: FP32 -> BF16, round to nearest even
    FROM_BF16 = "from_bf16"     #: BF16 -> FP32
    BF16_MUL = "bf16_mul"       #: BF16 x BF16 -> FP32 (exact), the systolic MAC's product


_MUL, _ADD = 4, 7

#: Register stages of each kind of operator (``MADD``: the multiplier's then the adder's).
DEFAULT_LATENCY = {
    FPKind.ADD: _ADD,
    FPKind.MUL: _MUL,
    FPKind.MADD: _MUL + _ADD,
    FPKind.COMPARE: 1,
    FPKind.TO_BF16: 1,
    FPKind.FROM_BF16: 1,
    FPKind.BF16_MUL: 2,
}


def latency_of(kind):
    """The default latency of ``kind`` (an :class:`FPKind` or its value, ``"add"``...)."""
    return DEFAULT_LATENCY[FPKind(kind)]

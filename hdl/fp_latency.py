"""The latencies of the FP operators, written once.

Each kind of FP operator (:class:`FPKind`) has a default number of register stages
(:data:`DEFAULT_LATENCY`): its result leaves the operator that many cycles after its
operands enter, one result per cycle. These are the one copy that the PCU, the
compiler's timing estimates and the functional model read; the pipelined operators of
:mod:`hdl.fp_pipelined` take them as their default ``latency``.

The defaults come from the measurements of ``docs/fpga.md`` ("Pipelined FP
operators"): the fewest stages with which each operator alone reaches 100 MHz on the
ECP5-85k (nextpnr-ecp5, speed grade 6), or its deepest pipeline where none does.
The PCU uses them when its ``fp_latency`` parameter is on (:func:`latency_table`):
each SIMD stage then takes its operator's latency (:func:`op_latency`), the lane
reduction tree its adder's or comparator's (:func:`reduction_latency`), each systolic
processing element a BF16 product then an FP32 add (:func:`systolic_pe_latency`), its
tiles interleaved by :func:`systolic_group` to hide the adder's loop; off, every
operator completes in the cycle of its stage's register (``docs/pcu.md``, "SIMD stages
on the pipelined operators").

Plain Python (no Amaranth): the software reads it too.
"""

import enum

__all__ = ["FPKind", "DEFAULT_LATENCY", "latency_of", "FP_LATENCY_CHOICES", "latency_table",
           "OP_KINDS", "op_latency", "reduction_latency", "simd_latency", "simd_in_flight",
           "interval_bound", "systolic_group", "systolic_pe_latency"]


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


#: The values of the PCU's ``fp_latency`` parameter (and ``Machine.fp_latency``):
#: ``"off"`` (today's combinational operators: every stage one register) or
#: ``"default"`` (:data:`DEFAULT_LATENCY`).
FP_LATENCY_CHOICES = ("off", "default")

#: The kind of operator each SIMD stage op (by its :class:`hdl.fp.Op` name) computes on;
#: ``None``: no FP operator (PASS, SELECT and the INT32 ops: the stage's register only,
#: one cycle, pipelined or not).
OP_KINDS = {
    "PASS": None, "ADD": FPKind.ADD, "SUB": FPKind.ADD, "MUL": FPKind.MUL,
    "MADD": FPKind.MADD, "MAX": FPKind.COMPARE, "MIN": FPKind.COMPARE,
    "LT": FPKind.COMPARE, "LE": FPKind.COMPARE, "EQ": FPKind.COMPARE, "SELECT": None,
    "TO_BF16": FPKind.TO_BF16, "FROM_BF16": FPKind.FROM_BF16, "IADD": None,
    "ISUB": None, "ILT": None, "IEQ": None,
}


def latency_table(fp_latency):
    """The latencies a PCU with parameter ``fp_latency`` computes with: ``None`` for
    ``"off"`` (or ``None``, ``0``: the combinational operators), :data:`DEFAULT_LATENCY`
    for ``"default"``. Raises ``ValueError`` for anything else."""
    if fp_latency in (None, 0, "off"):
        return None
    if fp_latency == "default":
        return DEFAULT_LATENCY
    raise ValueError(f"fp_latency must be one of {', '.join(FP_LATENCY_CHOICES)}, "
                     f"not {fp_latency!r}")


def op_latency(op, table):
    """Cycles a SIMD stage takes with op ``op`` (an :class:`hdl.fp.Op` or its name):
    1 (its register) with ``table = None`` or an op of no FP operator, else the
    latency of its kind in ``table`` (the operator's last register is the stage's)."""
    kind = OP_KINDS.get(getattr(op, "name", op))
    if table is None or kind is None:
        return 1
    return table[kind]


def reduction_latency(reduce, lanes, table):
    """Cycles the lane reduction tree adds before the tail register: 0 with ``table =
    None`` (combinational) or ``reduce`` ``"NONE"``; else ``log2(lanes)`` levels of the
    adder (``"SUM"``) or the comparator (``"MAX"``)."""
    name = getattr(reduce, "name", reduce)
    if table is None or name == "NONE":
        return 0
    kind = FPKind.ADD if name == "SUM" else FPKind.COMPARE
    return (lanes - 1).bit_length() * table[kind]


def simd_latency(ops, reduce, lanes, table, special_steps=0):
    """Cycles from a beat entering ``vector_in0`` of an idle SIMD PCU to its leaving
    ``vector_out`` without back-pressure: the header FIFO, the stages (:func:`op_latency`
    of each of ``ops``), the special-function path (one register, or ``special_steps +
    1``), the reduction tree (:func:`reduction_latency`), the tail register and FIFO.
    With ``table = None``: ``stages + 4`` (``+ special_steps``), as ``docs/pcu.md``."""
    stages = sum(op_latency(op, table) for op in ops)
    return stages + special_steps + reduction_latency(reduce, lanes, table) + 4


def simd_in_flight(ops, reduce, lanes, table):
    """Beats a SIMD PCU holds between its head and its tail FIFOs (the functional
    model's pipeline capacity): the stages' latencies, the special-function or bypass
    register, the reduction tree's latency and the tail register (``stages + 2`` with
    ``table = None``)."""
    return sum(op_latency(op, table) for op in ops) + reduction_latency(reduce, lanes,
                                                                        table) + 2


def interval_bound(table):
    """The most cycles the interlock of a pipelined SIMD PCU leaves between two beats (a
    loop-carried ``REG`` through the longest operator); 1 with ``table = None``. The
    runtime's watchdog estimate scales by it."""
    if table is None:
        return 1
    return max(1, *(op_latency(op, table) for op in OP_KINDS))


def systolic_group(table):
    """Column tiles a systolic PCU interleaves (the ``group`` of
    :class:`hdl.pcu_systolic_pipelined.PipelinedSystolicArray`): 1 with ``table = None``
    (one output per PE, the combinational MAC), else the smallest power of two at least
    the adder's latency. The adder's latency is the fewest independent sums that keep
    one accumulation per PE per cycle through the loop ``acc = acc + product``; a power
    of two (8 for the adder's 7) makes the padded columns of a power-of-two N none (a
    sum then waits a cycle in its slot's register; ``docs/pcu.md``, "Systolic array on
    the pipelined operators")."""
    if table is None:
        return 1
    return 1 << (max(1, table[FPKind.ADD]) - 1).bit_length()


def systolic_pe_latency(table):
    """Cycles from a PE's operands to its new sum: 0 with ``table = None`` (the
    combinational MAC, the sum registered in that cycle), else the BF16 product's and the
    FP32 adder's latencies."""
    if table is None:
        return 0
    return table[FPKind.BF16_MUL] + table[FPKind.ADD]

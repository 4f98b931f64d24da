"""The PCU's configuration: its layout, field codes and the sizes they depend on.

One home for what the RTL (:mod:`hdl.pcu` and its components), the encoder
(``software/rdu/units/pcu.py``), the functional model (``software/rdu/models/pcu.py``) and
the reference (``software/rdu/models/pcu_reference.py``) read of a PCU's configuration word; the
fields are described in ``docs/pcu.md``.
"""

from amaranth import unsigned
from amaranth.lib import data, enum

from .fp import Op
from .interfaces import check_lanes

__all__ = ["Mode", "Source", "Reduce", "Tail", "PCUError", "COUNTERS", "COUNTER_BITS",
           "ACC_DEPTH", "check_stages", "acc_stage_bits", "row_pad_bits", "counter_layout",
           "stage_layout", "pcu_config_layout"]

#: Number of nested counters in the counter chain.
COUNTERS = 3
#: Width of a counter and of its min/max/stride fields.
COUNTER_BITS = 16
#: Words (one FP32 per lane each) of the accumulator memory: with ``acc_stage`` set, that
#: stage's ``REG`` is word ``counter 0 mod ACC_DEPTH`` of it, kept across counter 1.
ACC_DEPTH = 128


class Mode(enum.IntEnum, shape=2):
    """Body of the PCU selected by the ``mode`` field."""
    SIMD = 0
    SYSTOLIC = 1        #: the systolic array; a tile's group spans column blocks of B
    SYSTOLIC_ROWS = 2   #: the systolic array, a tile's group spanning row blocks of A
                        #: (``vector_in0`` brings ``group`` beats a k step, ``vector_in1``
                        #: one, held); with groups of one (``fp_latency`` off) the same as
                        #: ``SYSTOLIC``


class Source(enum.IntEnum, shape=3):
    """Where a SIMD stage operand comes from (``src_a``/``src_b``/``src_c`` fields)."""
    PREV = 0        #: the previous stage's lane (stage 0: vector_in0)
    REG = 1         #: this stage's register: its own previous result in the inner loop
    SCALAR = 2      #: the scalar taken from scalar_in for this inner loop, all lanes
    CONST = 3       #: the stage's ``constant`` field, all lanes
    IN1 = 4         #: the lane of the vector_in1 beat consumed with this beat
    COUNTER = 5     #: the innermost counter's value (an INT32), all lanes
    LANE = 6        #: the lane's index (an INT32: 0 to lanes - 1), e.g. for causal masks
    LAST = 7        #: this stage's PREV of the previous iteration of counter 0 (REG's
                    #: ``constant`` on the first), e.g. a running max before its update


class Reduce(enum.IntEnum, shape=2):
    """Cross-lane reduction at the end of the SIMD pipeline (to scalar_out)."""
    NONE = 0
    SUM = 1
    MAX = 2


class Tail(enum.IntEnum, shape=2):
    """Special function of the tail (the ``tail`` field)."""
    NONE = 0
    EXP = 1         #: e**x (the PCU's ``special`` unit: :data:`hdl.special_function.SPECIAL_UNITS`)
    RECIPROCAL = 2  #: 1/x (the same unit)
    RSQRT = 3       #: 1/sqrt(x) (the same unit)


class PCUError(enum.IntEnum, shape=3):
    """Value of the ``error`` status output (sticky until the next configuration write)."""
    NONE = 0
    BAD_MODE = 1        #: ``mode`` is not a :class:`Mode`
    BAD_COUNTER = 2     #: a counter has ``stride == 0`` or ``max <= min``
    BAD_OP = 3          #: a stage ``op`` is not an :class:`hdl.fp.Op`
    BAD_ACC_STAGE = 4   #: ``acc_stage`` names no stage (it is above ``stages``); code 4
                        #: was ``BAD_SOURCE`` until every 3-bit code became a source
    BAD_REDUCE = 5      #: ``reduce`` is not a :class:`Reduce`
    BAD_TAIL = 6        #: ``tail`` is not a :class:`Tail`: no longer raised since every
                        #: 2-bit code is one (``RSQRT`` took the last, 3)
    WRITE_WHILE_BUSY = 7    #: a configuration write arrived during a run (it was dropped)


def counter_layout():
    """One counter of the chain: counts ``min, min + stride, ...`` while below ``max``."""
    return data.StructLayout({
        "min": unsigned(COUNTER_BITS),
        "max": unsigned(COUNTER_BITS),
        "stride": unsigned(COUNTER_BITS),
    })


def stage_layout():
    """Configuration of one SIMD stage."""
    return data.StructLayout({
        "op": Op.as_shape(),
        "src_a": Source.as_shape(),
        "src_b": Source.as_shape(),
        "src_c": Source.as_shape(),
        "constant": unsigned(32),
    })


def check_stages(stages):
    """Raise unless ``stages`` is a SIMD stage count (an integer from 1 to 16)."""
    if not isinstance(stages, int) or isinstance(stages, bool):
        raise TypeError(f"Stage count must be an integer, not {stages!r}")
    if not 1 <= stages <= 16:
        raise ValueError(f"Stage count must be between 1 and 16, not {stages}")


def acc_stage_bits(stages):
    """Width of the ``acc_stage`` field: it holds 0 (none) to ``stages``."""
    return stages.bit_length()


def row_pad_bits(lanes):
    """Width of the ``row_pad`` field: 0 to ``2 * lanes - 1`` padding words a row (a row
    is padded to whole AXI beats of BF16, ``2 * lanes`` values), so the padding lies in
    the last iteration of counter 0 and, beyond ``lanes`` words, the one before it."""
    return (2 * lanes - 1).bit_length()


def pcu_config_layout(lanes, stages):
    """Configuration layout of a PCU with ``lanes`` lanes and ``stages`` SIMD stages.

    ``emit_outer``: emit every iteration of the last iteration of counter 1 (instead of
    the last iteration of counter 0); ``acc_stage``: 0, or ``s + 1`` to make stage
    ``s``'s ``REG`` the accumulator memory (:data:`ACC_DEPTH` words, addressed by
    counter 0, its ``constant`` on the first iteration of counter 1); ``tail_bf16``:
    round what leaves the tail to BF16 (as ``TO_BF16``), e.g. probabilities on their way
    into a systolic PCU, which reads the high half of each word; ``row_pad``: the last
    ``row_pad`` words of every run of counter 0 on ``vector_in0`` (rows padded to whole
    beats) enter as stage 0's ``constant`` (:func:`row_pad_bits`)."""
    check_lanes(lanes)
    check_stages(stages)
    return data.StructLayout({
        "mode": Mode.as_shape(),
        "counters": data.ArrayLayout(counter_layout(), COUNTERS),
        "scalar_in": unsigned(1),
        "emit_every": unsigned(1),
        "vector_out": unsigned(1),
        "reduce": Reduce.as_shape(),
        "tail": Tail.as_shape(),
        "stages": data.ArrayLayout(stage_layout(), stages),
        "emit_outer": unsigned(1),
        "acc_stage": unsigned(acc_stage_bits(stages)),
        "tail_bf16": unsigned(1),
        "row_pad": unsigned(row_pad_bits(lanes)),
    })

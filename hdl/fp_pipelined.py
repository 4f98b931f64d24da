"""Pipelined FP operators: the steps of :mod:`hdl.fp` separated by registers.

Each operator takes its operands and a ``valid`` on ``i`` and gives its result and that
``valid`` on ``o`` exactly ``latency`` cycles later, one result per cycle (an
``always_ready`` stream: no back-pressure). Its result is bit for bit the
combinational function of :mod:`hdl.fp` (``formal/fp.py`` proves it for every input).
``latency`` counts register stages: 0 is the combinational operator, the default is
:data:`hdl.fp_latency.DEFAULT_LATENCY` of its kind.

Where the registers go: an operator is a list of steps (``hdl.fp.ADD_STEPS``, ...), and
a register may follow each step. Its ``CUTS[latency]`` names the steps followed by one:
the last step always (the result is registered), the others spread over the slow
parts (the adder: order | select | align | add | count leading zeros | normalise |
round | pack; the multiplier: 18 x 18 partial products (registered, so that they map
onto MULT18X18D) | middle sum | product | rounding bits | round | pack). The registers
cut the real paths: synthesis here does not retime.

See also: ``docs/pcu.md`` ("Pipelined FP operators"), the measurements in
``docs/fpga.md``, tests ``tests/test_fp_pipelined.py``.
"""

from amaranth import Module, Signal, Value, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.fp import (
    ADD_STEPS,
    BF16_MUL_STEPS,
    COMPARE_STEPS,
    FROM_BF16_STEPS,
    MUL_STEPS,
    TO_BF16_STEPS,
)
from hdl.fp_latency import DEFAULT_LATENCY, FPKind
from hdl.interfaces import check_int

__all__ = ["StagePipeline", "spread_cuts", "PipelinedOperator", "PipelinedFP32Add",
           "PipelinedFP32Mul", "PipelinedFP32MultiplyAdd", "PipelinedFP32Compare",
           "PipelinedFP32ToBF16", "PipelinedBF16ToFP32", "PipelinedBF16Mul",
           "PIPELINED_OPERATORS"]


def spread_cuts(steps, latency):
    """``latency`` step numbers (1-based) spread evenly over ``steps`` steps, the last
    one ``steps``: the registers of an operator without a table of its own."""
    return tuple(-(-steps * stage // latency) for stage in range(1, latency + 1))


class StagePipeline:
    """Run ``steps`` (``step(m, s, name) -> dict``) with a register after each step
    whose number (1-based) is in ``cuts``; ``valid`` travels beside them."""

    def __init__(self, steps, cuts):
        self.steps, self.cuts = steps, tuple(cuts)

    def register(self, m, value, name):
        """The register of one value (no reset: ``valid`` says what is meaningful)."""
        value = Value.cast(value)
        reg = Signal(value.shape(), name=name, reset_less=True)
        m.d.sync += reg.eq(value)
        return reg

    def register_bundle(self, m, bundle, number, name):
        """The registers after step ``number``: one per value of ``bundle``."""
        return {key: self.register(m, value, f"{name}_s{number}_{key}")
                for key, value in bundle.items()}

    def build(self, m, bundle, valid, name):
        """Returns ``(last step's dict, valid)``, both ``len(cuts)`` cycles late."""
        for number, step in enumerate(self.steps, 1):
            bundle = step(m, bundle, name)
            if number in self.cuts:
                bundle = self.register_bundle(m, bundle, number, name)
                delayed = Signal(name=f"{name}_s{number}_valid")
                m.d.sync += delayed.eq(valid)
                valid = delayed
        return bundle, valid


class PipelinedOperator(wiring.Component):
    """An operator of :mod:`hdl.fp` with ``latency`` register stages.

    Parameters
    ----------
    latency : int or None
        Register stages, from 0 (combinational) to the number of steps; ``None``: the
        default of the operator's kind (:data:`hdl.fp_latency.DEFAULT_LATENCY`).

    Attributes
    ----------
    i : In(stream.Signature(operands, always_ready=True))
        Operands (a struct of 32-bit words, or 16-bit for BF16) and ``valid``.
    o : Out(stream.Signature(result, always_ready=True))
        The result of the operands of ``latency`` cycles before, and their ``valid``.
    """
    #: The kind (:class:`hdl.fp_latency.FPKind`), steps and operand widths; set by each
    #: operator.
    KIND = None
    STEPS = ()
    OPERANDS = {}
    #: ``{latency: step numbers followed by a register}``; missing: :func:`spread_cuts`.
    CUTS = {}
    #: The pipeline builder (a broken one in the formal self-tests).
    pipeline_class = StagePipeline

    def __init__(self, latency=None):
        if latency is None:
            latency = DEFAULT_LATENCY[self.KIND]
        check_int("latency", latency, 0, self.max_latency())
        self._latency = latency
        operands = data.StructLayout({key: unsigned(width)
                                      for key, width in self.OPERANDS.items()})
        super().__init__({
            "i": In(stream.Signature(operands, always_ready=True)),
            "o": Out(stream.Signature(self.result_shape(), always_ready=True)),
        })

    @classmethod
    def max_latency(cls):
        """The most register stages: one after each step."""
        return len(cls.STEPS)

    @classmethod
    def cuts(cls, latency):
        """The step numbers followed by a register at ``latency``."""
        return cls.CUTS.get(latency, spread_cuts(len(cls.STEPS), latency) if latency else ())

    @property
    def latency(self):
        return self._latency

    def result_shape(self):
        return unsigned(32)

    def connect_result(self, m, out):
        m.d.comb += self.o.payload.eq(out["result"])

    def elaborate(self, platform):
        m = Module()
        bundle = {key: self.i.payload[key] for key in self.OPERANDS}
        out, valid = self.pipeline_class(self.STEPS, self.cuts(self._latency)).build(
            m, bundle, self.i.valid, self.KIND.value)
        m.d.comb += self.o.valid.eq(valid)
        self.connect_result(m, out)
        return m


class PipelinedFP32Add(PipelinedOperator):
    """FP32 ``a + b`` (:func:`hdl.fp.fp32_add`) in up to 8 stages: order | select |
    align | add | count leading zeros | normalise | round | pack."""
    KIND = FPKind.ADD
    STEPS = ADD_STEPS
    OPERANDS = {"a": 32, "b": 32}
    CUTS = {1: (8,), 2: (4, 8), 3: (3, 6, 8), 4: (2, 4, 6, 8), 5: (2, 3, 4, 6, 8),
            6: (2, 3, 4, 6, 7, 8), 7: (1, 2, 3, 4, 6, 7, 8), 8: (1, 2, 3, 4, 5, 6, 7, 8)}


class PipelinedFP32Mul(PipelinedOperator):
    """FP32 ``a * b`` (:func:`hdl.fp.fp32_mul`) in up to 6 stages: partial products |
    middle sum | product | rounding bits | round | pack; from latency 2 on, the four
    partial products are registered (MULT18X18D on an ECP5)."""
    KIND = FPKind.MUL
    STEPS = MUL_STEPS
    OPERANDS = {"a": 32, "b": 32}
    CUTS = {1: (6,), 2: (1, 6), 3: (1, 3, 6), 4: (1, 3, 5, 6), 5: (1, 2, 3, 5, 6),
            6: (1, 2, 3, 4, 5, 6)}


class PipelinedFP32Compare(PipelinedOperator):
    """FP32 ``max``, ``min``, ``<``, ``<=``, ``==`` of ``a`` and ``b`` at once
    (:func:`hdl.fp.fp32_max`, ``fp32_min``, ``fp32_compare``) in up to 2 stages: order |
    select. ``o.payload`` is a struct of the five: ``max``, ``min`` (32 bits), ``less``,
    ``less_equal``, ``equal`` (1 bit)."""
    KIND = FPKind.COMPARE
    STEPS = COMPARE_STEPS
    OPERANDS = {"a": 32, "b": 32}
    #: payload field: (the step's key, width)
    RESULTS = {"max": ("max", 32), "min": ("min", 32), "less": ("lt", 1),
               "less_equal": ("le", 1), "equal": ("eq", 1)}

    def result_shape(self):
        return data.StructLayout({field: unsigned(width)
                                  for field, (_, width) in self.RESULTS.items()})

    def connect_result(self, m, out):
        m.d.comb += [self.o.payload[field].eq(out[key])
                     for field, (key, _) in self.RESULTS.items()]


class PipelinedFP32ToBF16(PipelinedOperator):
    """FP32 -> BF16 (:func:`hdl.fp.fp32_to_bf16`) in up to 2 stages: round | pack."""
    KIND = FPKind.TO_BF16
    STEPS = TO_BF16_STEPS
    OPERANDS = {"a": 32}


class PipelinedBF16ToFP32(PipelinedOperator):
    """BF16 (high half of ``a``) -> FP32 (:func:`hdl.fp.bf16_to_fp32`): one step, 0 or 1
    stage."""
    KIND = FPKind.FROM_BF16
    STEPS = FROM_BF16_STEPS
    OPERANDS = {"a": 32}


class PipelinedBF16Mul(PipelinedOperator):
    """BF16 ``a * b`` -> FP32, exact (:func:`hdl.fp.bf16_mul`; ``a``, ``b`` 16 bits) in
    up to 2 stages: product | pack."""
    KIND = FPKind.BF16_MUL
    STEPS = BF16_MUL_STEPS
    OPERANDS = {"a": 16, "b": 16}


class PipelinedFP32MultiplyAdd(PipelinedOperator):
    """FP32 ``(a * b) + c``, unfused: a :class:`PipelinedFP32Mul` of ``mul_latency``
    stages, then a :class:`PipelinedFP32Add` of ``latency - mul_latency`` (``c`` waits
    beside the multiplier).

    Parameters
    ----------
    latency : int or None
        The whole latency (default :data:`~hdl.fp_latency.DEFAULT_LATENCY` of ``MADD``).
    mul_latency : int or None
        The multiplier's share (default :meth:`default_mul_latency`).
    """
    KIND = FPKind.MADD
    STEPS = MUL_STEPS + ADD_STEPS
    OPERANDS = {"a": 32, "b": 32, "c": 32}

    def __init__(self, latency=None, mul_latency=None):
        if latency is None:
            latency = DEFAULT_LATENCY[self.KIND]
        check_int("latency", latency, 0, self.max_latency())
        if mul_latency is None:
            mul_latency = self.default_mul_latency(latency)
        check_int("mul_latency", mul_latency, max(0, latency - PipelinedFP32Add.max_latency()),
                  min(latency, PipelinedFP32Mul.max_latency()))
        self._mul_latency = mul_latency
        super().__init__(latency)

    @staticmethod
    def default_mul_latency(latency):
        """The multiplier's default share of ``latency``: its kind's default, but at
        least one stage left to the adder (the result registered), and no more left to it
        than its 8 steps take."""
        low = max(0, latency - PipelinedFP32Add.max_latency())
        return max(low, min(DEFAULT_LATENCY[FPKind.MUL], latency - 1))

    @classmethod
    def cuts(cls, latency, mul_latency=None):
        """The step numbers (of ``MUL_STEPS + ADD_STEPS``) followed by a register."""
        if mul_latency is None:
            mul_latency = cls.default_mul_latency(latency)
        return PipelinedFP32Mul.cuts(mul_latency) + tuple(
            len(MUL_STEPS) + cut for cut in PipelinedFP32Add.cuts(latency - mul_latency))

    def elaborate(self, platform):
        m = Module()
        mul = m.submodules.mul = PipelinedFP32Mul(self._mul_latency)
        add = m.submodules.add = PipelinedFP32Add(self._latency - self._mul_latency)
        c = self.i.payload.c
        for stage in range(self._mul_latency):
            delayed = Signal(32, name=f"c_s{stage + 1}", reset_less=True)
            m.d.sync += delayed.eq(c)
            c = delayed
        m.d.comb += [
            mul.i.valid.eq(self.i.valid), mul.i.payload.a.eq(self.i.payload.a),
            mul.i.payload.b.eq(self.i.payload.b),
            add.i.valid.eq(mul.o.valid), add.i.payload.a.eq(mul.o.payload),
            add.i.payload.b.eq(c),
            self.o.valid.eq(add.o.valid), self.o.payload.eq(add.o.payload),
        ]
        return m


#: Every pipelined operator by its kind.
PIPELINED_OPERATORS = {cls.KIND: cls for cls in (
    PipelinedFP32Add, PipelinedFP32Mul, PipelinedFP32MultiplyAdd, PipelinedFP32Compare,
    PipelinedFP32ToBF16, PipelinedBF16ToFP32, PipelinedBF16Mul)}

"""The PCU's special-function units: exp, reciprocal and reciprocal square root of FP32
lanes.

The programs of unfused multiply-adds (:data:`PROGRAMS`) built of the operators of
:mod:`hdl.fp`, unrolled into a pipeline (:class:`SpecialFunctionPipeline`, one vector
per cycle) or run one step per cycle (:class:`SpecialFunctionIterative`, the FPGA area
option); both behind :class:`SpecialFunctionSignature` and the same bit for bit.

See also: the algorithms in ``docs/pcu.md`` (Tail special functions), the reference
``rdu.models.fp.exp`` / ``reciprocal`` / ``rsqrt``, the PCU that holds one
(:class:`hdl.pcu.PCU`, its ``special`` parameter), tests ``tests/test_fp.py`` and
``tests/test_pcu.py``.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from .clock_gate import gated_domain
from .fp import (
    CANONICAL_NAN,
    POS_INF,
    check_lane_count,
    fp32_add,
    fp32_max,
    fp32_min,
    fp32_mul,
    unpack,
)

__all__ = ["SpecialFunction", "PROGRAMS", "SPECIAL_STEPS", "SpecialFunctionSignature",
           "SpecialFunctionPipeline", "SpecialFunctionIterative", "SPECIAL_UNITS"]

class SpecialFunction(enum.IntEnum, shape=2):
    """Function of :class:`SpecialFunctionPipeline` (the PCU's ``tail`` field)."""
    NONE = 0
    EXP = 1
    RECIPROCAL = 2
    RSQRT = 3


# Constants (FP32 words); the algorithms are described in docs/pcu.md and mirrored by
# rdu.models.fp.exp / reciprocal / rsqrt.
_EXP_LOG2E, _EXP_MAGIC = 0x3FB8AA3B, 0x4B400000
_EXP_LN2_HI, _EXP_LN2_LO = 0x3F317200, 0x35BFBE8E
_EXP_LOW, _EXP_HIGH = 0xC2D00000, 0x42B20000
_EXP_COEFFS = [0x39500D01, 0x3AB60B61, 0x3C088889, 0x3D2AAAAB, 0x3E2AAAAB, 0x3F000000,
               0x3F800000, 0x3F800000]
_RCP_A, _RCP_B = 0xBFF0F0F1, 0x4034B4B5
#: rsqrt's seed: the minimax quadratic of 1/sqrt(2 h) for h = m / 2 in [1/8, 1/2)
#: (relative error 0.024), coefficients of h**2, h, 1.
_RSQ_C2, _RSQ_C1, _RSQ_C0 = 0x40D1BC98, 0xC0D24348, 0x402AEEF8
_HALF = 0x3F000000
_ONE, _NEG_ZERO, _SIGN = 0x3F800000, 0x80000000, 0x80000000

# Programs: one unfused multiply-add per step, dst = a * b + c. Operands name a
# register ("x", "nx" = x with its sign flipped, "r1", "r2", "r3") or are a constant.
_EXP_PROGRAM = [
    ("r1", "x", _EXP_LOG2E, _NEG_ZERO),           # t = x * log2(e)
    ("r2", "r1", _ONE, _EXP_MAGIC),               # s = t + 1.5 * 2**23 (n in its low bits)
    ("r1", "r2", _ONE, _EXP_MAGIC ^ _SIGN),       # n = s - 1.5 * 2**23
    ("r3", "r1", _EXP_LN2_HI ^ _SIGN, "x"),       # r = x - n * ln2_hi
    ("r3", "r1", _EXP_LN2_LO ^ _SIGN, "r3"),      # r = r - n * ln2_lo
    ("r1", _EXP_COEFFS[0], "r3", _EXP_COEFFS[1]),  # Horner, degree 7
] + [("r1", "r1", "r3", coeff) for coeff in _EXP_COEFFS[2:]]
_RCP_PROGRAM = [("r1", "x", _RCP_A, _RCP_B)] + [   # y0 = 48/17 - 32/17 * m
    step for _ in range(3) for step in (("r2", "r1", "nx", _ONE),   # e = 1 - m * y
                                        ("r1", "r1", "r2", "r1"))   # y = y + y * e
]
# rsqrt: "x" holds h = m / 2 (m in [1/4, 1), the exponent's parity folded into it)
_RSQ_PROGRAM = [("r1", "x", _RSQ_C2, _RSQ_C1),      # quadratic seed y0 by Horner
                ("r1", "r1", "x", _RSQ_C0)] + [
    step for _ in range(3) for step in (("r2", "nx", "r1", _NEG_ZERO),   # -h * y
                                        ("r2", "r2", "r1", _HALF),       # (1 - m y^2) / 2
                                        ("r1", "r1", "r2", "r1"))        # y += y * that
]
PROGRAMS = {SpecialFunction.EXP: _EXP_PROGRAM, SpecialFunction.RECIPROCAL: _RCP_PROGRAM,
            SpecialFunction.RSQRT: _RSQ_PROGRAM}


def _scale_exponent(m, p, n, name):
    """``p * 2**n`` for a positive normal ``p``: FTZ below, infinity above."""
    field = Signal(signed(12), name=f"{name}_field")
    m.d.comb += field.eq(p[23:31] + n)
    result = Signal(32, name=f"{name}_result")
    with m.If(field <= 0):
        m.d.comb += result.eq(Cat(Const(0, 31), p[31]))
    with m.Elif(field >= 255):
        m.d.comb += result.eq(Cat(Const(POS_INF, 31), p[31]))
    with m.Else():
        m.d.comb += result.eq(Cat(p[:23], field[:8], p[31]))
    return result


#: Multiply-add steps of the longest program: the special-function pipeline's depth
#: after its input register (a beat leaves it ``SPECIAL_STEPS + 1`` advances later).
SPECIAL_STEPS = max(len(program) for program in PROGRAMS.values())

#: The register state of one lane while a program runs.
_SPECIAL_STATE = data.StructLayout({"x": 32, "r1": 32, "r2": 32, "r3": 32,
                                    "nan": 1, "sign": 1, "field": 8})
_SPECIAL_REGISTERS = ("r1", "r2", "r3")


class SpecialFunctionSignature(wiring.Signature):
    """The port contract of the PCU's special-function units (exp / reciprocal / rsqrt of
    ``lanes`` FP32 words): :class:`SpecialFunctionPipeline` and
    :class:`SpecialFunctionIterative`.

    Members
    -------
    active : In(1)
        The unit is in use (a configuration bit): the enable of its gated clock.
    enable : In(1)
        The PCU's pipeline advances: a beat moves from ``x`` into the unit.
    valid : In(1)
        The beat at ``x`` is one (an iterating unit starts only on beats).
    func : In(2)
        :class:`SpecialFunction`.
    x : In(ArrayLayout(32, lanes))
    result : Out(ArrayLayout(32, lanes))
    busy : Out(1)
        The unit computes and the pipeline before it must hold (never for the pipeline).
    """
    def __init__(self, lanes):
        vec = data.ArrayLayout(unsigned(32), lanes)
        super().__init__({"active": In(1), "enable": In(1), "valid": In(1), "func": In(2),
                          "x": In(vec), "result": Out(vec), "busy": Out(1)})


class _SpecialFunctionUnit(wiring.Component):
    """What the special-function units share: the lane count and their ports."""

    def __init__(self, lanes=4):
        check_lane_count(lanes)
        self._lanes = lanes
        super().__init__(SpecialFunctionSignature(lanes))


def _special_prepared(m, x_in, func, name):
    """What a program starts from, given the word ``x_in`` (a register)."""
    inp = unpack(m, x_in, f"{name}_in")
    clamped = fp32_min(m, fp32_max(m, x_in, Const(_EXP_LOW, 32), f"{name}_lo"),
                       Const(_EXP_HIGH, 32), f"{name}_hi")
    regs = Signal(_SPECIAL_STATE, name=f"{name}_prepared")
    # rsqrt: m / 2, m in [1/4, 1) (field 125 or 124); the reciprocal: m in [1/2, 1)
    # (one expression, not a Switch: a Switch leaves the unassigned registers' bits in
    # an ``always @*`` of constants, which Verilator's lint refuses)
    halved = Cat(inp.frac, ~inp.exp[0], Const(0b0111110, 7), Const(0, 1))
    mantissa = Cat(inp.frac, Const(126, 8), Const(0, 1))
    m.d.comb += [
        regs.nan.eq(inp.is_nan), regs.sign.eq(inp.sign), regs.field.eq(inp.exp),
        regs.x.eq(Mux(func == SpecialFunction.EXP, clamped,
                      Mux(func == SpecialFunction.RSQRT, halved, mantissa))),
    ]
    return regs


def _special_operand(spec, regs):
    if isinstance(spec, int):
        return Const(spec, 32)
    if spec == "nx":
        return regs.x ^ _SIGN
    return getattr(regs, spec)


def _special_step(m, regs, a, b, c, dst, name):
    """The state after one step: ``a * b + c`` (unfused) into register ``dst``
    (1 to 3: r1 to r3), everything else of ``regs`` kept."""
    total = fp32_add(m, fp32_mul(m, a, b, f"{name}_mul"), c, f"{name}_add")
    nxt = Signal(_SPECIAL_STATE, name=f"{name}_next")
    m.d.comb += nxt.eq(regs)
    for number, key in enumerate(_SPECIAL_REGISTERS):
        with m.If(dst == number + 1):
            m.d.comb += getattr(nxt, key).eq(total)
    return nxt


def _special_select(m, regs, a, b, c, dst, step):
    """Within ``case`` (a ``m.Case`` body), drive the operands of program step ``step``."""
    target, sa, sb, sc = step
    m.d.comb += [a.eq(_special_operand(sa, regs)), b.eq(_special_operand(sb, regs)),
                 c.eq(_special_operand(sc, regs)),
                 dst.eq(_SPECIAL_REGISTERS.index(target) + 1)]


def _special_result(m, regs, func, result, name):
    """Drive ``result`` from the state after the last step of ``func``'s program."""
    n_exp = Signal(signed(12), name=f"{name}_n_exp")
    n_rcp = Signal(signed(12), name=f"{name}_n_rcp")
    twice_n_rsq = Signal(signed(12), name=f"{name}_2n_rsq")     # even
    m.d.comb += [n_exp.eq(regs.r2[:23] - 0x400000), n_rcp.eq(126 - regs.field),
                 twice_n_rsq.eq(126 - regs.field - regs.field[0])]
    exp_result = _scale_exponent(m, regs.r1, n_exp, f"{name}_exp")
    rcp_scaled = _scale_exponent(m, regs.r1, n_rcp, f"{name}_rcp")
    rsq_scaled = _scale_exponent(m, regs.r1, twice_n_rsq[1:].as_signed(), f"{name}_rsq")
    with m.Switch(func):
        with m.Case(SpecialFunction.EXP):
            m.d.comb += result.eq(Mux(regs.nan, CANONICAL_NAN, exp_result))
        with m.Case(SpecialFunction.RECIPROCAL):
            with m.If(regs.nan):
                m.d.comb += result.eq(CANONICAL_NAN)
            with m.Elif(regs.field == 0):
                m.d.comb += result.eq(Cat(Const(POS_INF, 31), regs.sign))
            with m.Elif(regs.field == 0xFF):
                m.d.comb += result.eq(Cat(Const(0, 31), regs.sign))
            with m.Else():
                m.d.comb += result.eq(rcp_scaled | (regs.sign << 31))
        with m.Case(SpecialFunction.RSQRT):
            with m.If(regs.field == 0):               # 1/sqrt(+-0) = +-inf
                m.d.comb += result.eq(Cat(Const(POS_INF, 31), regs.sign))
            with m.Elif(regs.nan | regs.sign):        # NaN, x < 0, -inf
                m.d.comb += result.eq(CANONICAL_NAN)
            with m.Elif(regs.field == 0xFF):          # 1/sqrt(+inf) = +0
                m.d.comb += result.eq(0)
            with m.Else():
                m.d.comb += result.eq(rsq_scaled)


class SpecialFunctionPipeline(_SpecialFunctionUnit):
    """Pipelined exp / reciprocal / rsqrt of ``lanes`` FP32 words: one vector per cycle.

    The programs of :data:`PROGRAMS` unrolled: an input register, then one register stage
    per step, each with one unfused multiply-add per lane (the step of the selected
    function; a function with fewer steps passes its registers on unchanged). Every
    ``enable`` advances all stages by one; ``result`` is the function of the value that
    entered ``SPECIAL_STEPS + 1`` advances earlier (``func`` must stay constant while values
    are in flight; ``NONE`` gives 0: the PCU bypasses the unit then). ``busy`` is 0 and
    ``valid`` unused. Ports: :class:`SpecialFunctionSignature`.

    The stages run in a clock domain of their own (:func:`hdl.clock_gate.gated_domain`):
    with the :class:`hdl.clock_gate.GatedClocks` platform of simulation builds it only
    ticks while ``active`` is high, and ``func`` reaches the stages through a register of
    that domain, so an unused unit costs no evaluation. ``func`` is therefore read one
    edge after it is set, by the stages; a beat entering on an edge already sees it.

    Cost: ``SPECIAL_STEPS`` FP32 multiply-adds per lane (on an ECP5, about 60 k LUTs
    and 192 multipliers for 4 lanes: ``docs/fpga.md``).
    """
    @property
    def latency(self):
        """Advances from ``x`` to ``result``."""
        return SPECIAL_STEPS + 1

    def elaborate(self, platform):
        m = Module()
        domain = gated_domain(m, platform, "special", self.active)
        stage_func = Signal(SpecialFunction, name="sfu_func")
        m.d[domain] += stage_func.eq(self.func)
        for lane in range(self._lanes):
            self._lane(m, lane, domain, stage_func)
        return m

    def _lane(self, m, lane, domain, stage_func):
        name = f"sfu{lane}"
        # the input register holds the word as it came; what the programs start from
        # is prepared after it, from registers of the unit's own domain only
        x_in = Signal(32, name=f"{name}_s0")
        with m.If(self.enable):
            m.d[domain] += x_in.eq(self.x[lane])
        regs = _special_prepared(m, x_in, stage_func, name)
        for index in range(SPECIAL_STEPS):
            nxt = Signal(_SPECIAL_STATE, name=f"{name}_s{index + 1}")
            a, b, c = (Signal(32, name=f"{name}_s{index}_{n}") for n in "abc")
            dst = Signal(2, name=f"{name}_s{index}_dst")
            with m.Switch(stage_func):
                for which, program in PROGRAMS.items():
                    if index < len(program):
                        with m.Case(which):
                            _special_select(m, regs, a, b, c, dst, program[index])
            stepped = _special_step(m, regs, a, b, c, dst, f"{name}_s{index}")
            with m.If(self.enable):
                m.d[domain] += nxt.eq(stepped)
            regs = nxt
        _special_result(m, regs, stage_func, self.result[lane], name)


class SpecialFunctionIterative(_SpecialFunctionUnit):
    """Iterating exp / reciprocal / rsqrt of ``lanes`` FP32 words: one multiply-add per
    lane.

    The same programs (:data:`PROGRAMS`) and results bit for bit as
    :class:`SpecialFunctionPipeline`, one step per cycle on one multiply-add per lane:
    a beat (``enable`` and ``valid``) enters the input register and the unit is ``busy``
    for as many cycles as its function's program has steps (exp 12, reciprocal 7, rsqrt
    11), while the PCU's pipeline holds; then ``result`` holds the function of that beat until the
    next beat enters. Its latency is one advance, plus the cycles it holds the pipeline:
    a vector every ``steps + 1`` cycles. ``func`` is taken with the beat. Ports:
    :class:`SpecialFunctionSignature`; clocks as the pipeline's.

    The area option of :class:`hdl.pcu.PCU` (``special="iterative"``, for FPGAs: about a
    twelfth of the pipeline's multiply-adds, ``docs/fpga.md``).
    """
    @property
    def latency(self):
        """Advances from ``x`` to ``result`` (the unit holds the pipeline in between)."""
        return 1

    def elaborate(self, platform):
        m = Module()
        domain = gated_domain(m, platform, "special", self.active)
        func = Signal(SpecialFunction, name="sfu_func")
        step = Signal(range(SPECIAL_STEPS), name="sfu_step")
        busy = Signal(name="sfu_busy")
        start = Signal(name="sfu_start")
        last = Signal(name="sfu_last_step")
        m.d.comb += [self.busy.eq(busy), start.eq(self.enable & self.valid & ~busy),
                     last.eq(1)]      # (NONE: a beat never starts the unit in a PCU)
        with m.Switch(func):
            for which, program in PROGRAMS.items():
                with m.Case(which):
                    m.d.comb += last.eq(step == len(program) - 1)
        with m.If(start):
            m.d[domain] += [func.eq(self.func), step.eq(0), busy.eq(1)]
        with m.Elif(busy):
            m.d[domain] += step.eq(step + 1)
            with m.If(last):
                m.d[domain] += busy.eq(0)
        for lane in range(self._lanes):
            name = f"sfu{lane}"
            x_in = Signal(32, name=f"{name}_x")
            with m.If(start):
                m.d[domain] += x_in.eq(self.x[lane])
            prepared = _special_prepared(m, x_in, func, name)
            state = Signal(_SPECIAL_STATE, name=f"{name}_state")
            regs = Signal(_SPECIAL_STATE, name=f"{name}_regs")
            m.d.comb += regs.eq(Mux(step == 0, prepared, state))
            a, b, c = (Signal(32, name=f"{name}_{n}") for n in "abc")
            dst = Signal(2, name=f"{name}_dst")
            with m.Switch(Cat(step, func)):
                for which, program in PROGRAMS.items():
                    for index, program_step in enumerate(program):
                        with m.Case(index | (which << len(step))):
                            _special_select(m, regs, a, b, c, dst, program_step)
            stepped = _special_step(m, regs, a, b, c, dst, name)
            with m.If(busy):
                m.d[domain] += state.eq(stepped)
            _special_result(m, state, func, self.result[lane], name)
        return m


#: The special-function units a PCU can hold (its ``special`` parameter).
SPECIAL_UNITS = {"pipelined": SpecialFunctionPipeline, "iterative": SpecialFunctionIterative}

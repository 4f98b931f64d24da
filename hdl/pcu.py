"""Pattern Compute Unit: header FIFOs -> SIMD pipeline or systolic array -> tail FIFOs.

See ``docs/pcu.md`` for the configuration layout field by field, the timing, the
systolic-mode streaming protocol and the error codes. :mod:`rdu.pcu_model` is the
bit-exact reference model.
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .clock_gate import gated_domain, gates_clocks
from .fp import (
    FPALU,
    OP_BITS,
    SPECIAL_UNITS,
    BF16MultiplyAccumulate,
    Op,
    fp32_add,
    fp32_max,
    fp32_to_bf16,
)
from .interfaces import (
    ConfigPort,
    ConfigRegister,
    _check_lanes,
    control_stream,
    scalar_stream,
    vector_stream,
)
from .stream_fifo import StreamFIFO

__all__ = ["Mode", "Source", "Reduce", "Tail", "PCUError", "COUNTERS", "FIFO_DEPTH",
           "ACC_DEPTH", "acc_stage_bits",
           "counter_layout", "stage_layout", "pcu_config_layout", "PCU",
           "fpga_pcu", "FPGA_PCU_OPTIONS", "check_shared_units", "PCU_KINDS"]

#: Number of nested counters in the counter chain.
COUNTERS = 3
#: Width of a counter and of its min/max/stride fields.
COUNTER_BITS = 16
#: Depth of every header and tail FIFO (the default ``fifo_depth``).
FIFO_DEPTH = 4
#: Words (one FP32 per lane each) of the accumulator memory: with ``acc_stage`` set, that
#: stage's ``REG`` is word ``counter 0 mod ACC_DEPTH`` of it, kept across counter 1.
ACC_DEPTH = 128


class Mode(enum.IntEnum, shape=2):
    """Body of the PCU selected by the ``mode`` field."""
    SIMD = 0
    SYSTOLIC = 1


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
    EXP = 1         #: e**x (the PCU's ``special`` unit: :data:`hdl.fp.SPECIAL_UNITS`)
    RECIPROCAL = 2  #: 1/x (the same unit)


class PCUError(enum.IntEnum, shape=3):
    """Value of the ``error`` status output (sticky until the next configuration write)."""
    NONE = 0
    BAD_MODE = 1        #: ``mode`` is not a :class:`Mode`
    BAD_COUNTER = 2     #: a counter has ``stride == 0`` or ``max <= min``
    BAD_OP = 3          #: a stage ``op`` is not an :class:`hdl.fp.Op`
    BAD_ACC_STAGE = 4   #: ``acc_stage`` names no stage (it is above ``stages``); code 4
                        #: was ``BAD_SOURCE`` until every 3-bit code became a source
    BAD_REDUCE = 5      #: ``reduce`` is not a :class:`Reduce`
    BAD_TAIL = 6        #: ``tail`` is not a :class:`Tail`
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


def _check_stages(stages):
    if not isinstance(stages, int) or isinstance(stages, bool):
        raise TypeError(f"Stage count must be an integer, not {stages!r}")
    if not 1 <= stages <= 16:
        raise ValueError(f"Stage count must be between 1 and 16, not {stages}")


def acc_stage_bits(stages):
    """Width of the ``acc_stage`` field: it holds 0 (none) to ``stages``."""
    return stages.bit_length()


def pcu_config_layout(lanes, stages):
    """Configuration layout of a PCU with ``lanes`` lanes and ``stages`` SIMD stages.

    ``emit_outer``: emit every iteration of the last iteration of counter 1 (instead of
    the last iteration of counter 0); ``acc_stage``: 0, or ``s + 1`` to make stage
    ``s``'s ``REG`` the accumulator memory (:data:`ACC_DEPTH` words, addressed by
    counter 0, its ``constant`` on the first iteration of counter 1); ``tail_bf16``:
    round what leaves the tail to BF16 (as ``TO_BF16``), e.g. probabilities on their way
    into a systolic PCU, which reads the high half of each word."""
    _check_lanes(lanes)
    _check_stages(stages)
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
    })


class _CounterChain:
    """Three nested counters (counter 0 innermost), built into a module."""

    def __init__(self, m, config):
        self.values = [Signal(COUNTER_BITS, name=f"counter{n}") for n in range(COUNTERS)]
        self.load = Signal(name="chain_load")      # set every counter to its min
        self.step = Signal(name="chain_step")      # advance by one iteration
        self.last = [Signal(name=f"counter{n}_last") for n in range(COUNTERS)]
        self.first_inner = Signal(name="chain_first_inner")
        self.first_outer = Signal(name="chain_first_outer")     # counter 1 at its min
        self.last_all = Signal(name="chain_last_all")
        self.bad = Signal(name="chain_bad")
        bad = Const(0)
        for n in range(COUNTERS):
            counter = config.counters[n]
            bad = bad | (counter.stride == 0) | (counter.max <= counter.min)
            m.d.comb += self.last[n].eq(self.values[n] + counter.stride >= counter.max)
        m.d.comb += [
            self.bad.eq(bad),
            self.first_inner.eq(self.values[0] == config.counters[0].min),
            self.first_outer.eq(self.values[1] == config.counters[1].min),
            self.last_all.eq(self.last[0] & self.last[1] & self.last[2]),
        ]
        with m.If(self.load):
            for n in range(COUNTERS):
                m.d.sync += self.values[n].eq(config.counters[n].min)
        with m.Elif(self.step):
            carry = Const(1)
            for n in range(COUNTERS):
                counter = config.counters[n]
                with m.If(carry):
                    m.d.sync += self.values[n].eq(
                        Mux(self.last[n], counter.min, self.values[n] + counter.stride))
                carry = carry & self.last[n]


class PCU(wiring.Component):
    """Pattern Compute Unit.

    Parameters
    ----------
    lanes : int
        Vector width (a power of two); the systolic array is ``lanes`` x ``lanes``.
    stages : int
        SIMD pipeline stages (1 to 16).
    fifo_depth : int
        Depth of every header and tail FIFO (at least 1).
    special : str
        The exp / reciprocal unit of the tail (:data:`hdl.fp.SPECIAL_UNITS`):
        ``"pipelined"`` (default: one vector per cycle, :class:`hdl.fp.SpecialFunctionPipeline`)
        or ``"iterative"`` (the FPGA area option: one multiply-add per lane, a vector every
        13 cycles for exp and 8 for reciprocal, :class:`hdl.fp.SpecialFunctionIterative`);
        the same results bit for bit.
    shared_units : bool
        The systolic array is built of the SIMD stages' ALUs (processing element
        ``(row, col)`` on stage ``row``'s ALU of lane ``col``, as in the paper's PCU)
        instead of a ``lanes x lanes`` array of MACs of its own: the FPGA area option
        (needs ``stages >= lanes``); the same results and cycles bit for bit.

    Attributes
    ----------
    vector_in0, vector_in1 : In(vector_stream(lanes))
    scalar_in : In(scalar_stream())
    control_in : In(control_stream())
        Any token starts one run of the configured work.
    vector_out : Out(vector_stream(lanes))
    scalar_out : Out(scalar_stream())
    control_out : Out(control_stream())
        One ``DONE`` token at the end of each run.
    cfg : In(ConfigPort())
    busy : Out(1)
        A run is in progress.
    pending : Out(1)
        Work the unit cannot finish alone: a run in progress, or input data waiting in
        ``vector_in0``, ``vector_in1`` or ``scalar_in`` (as the functional model's
        ``busy``); the array's ``host.units_busy`` ORs it.
    error : Out(PCUError)
        :class:`PCUError` of the last rejected start or dropped configuration write
        (0: none); cleared by a configuration write while idle.
    """

    def __init__(self, lanes=8, stages=4, fifo_depth=FIFO_DEPTH, *, special="pipelined",
                 shared_units=False):
        _check_lanes(lanes)
        _check_stages(stages)
        if not isinstance(shared_units, bool):
            raise TypeError(f"Shared units must be a bool, not {shared_units!r}")
        if shared_units:
            check_shared_units(lanes, stages)
        self._shared_units = shared_units
        if not isinstance(special, str):
            raise TypeError(f"Special-function unit must be a string, not {special!r}")
        if special not in SPECIAL_UNITS:
            raise ValueError(f"Special-function unit must be one of "
                             f"{', '.join(map(repr, SPECIAL_UNITS))}, not {special!r}")
        self._special = special
        if not isinstance(fifo_depth, int) or isinstance(fifo_depth, bool):
            raise TypeError(f"FIFO depth must be an integer, not {fifo_depth!r}")
        if fifo_depth < 1:
            raise ValueError(f"FIFO depth must be at least 1, not {fifo_depth}")
        self._lanes = lanes
        self._stages = stages
        self._fifo_depth = fifo_depth
        self._layout = pcu_config_layout(lanes, stages)
        super().__init__({
            "vector_in0": In(vector_stream(lanes)),
            "vector_in1": In(vector_stream(lanes)),
            "scalar_in": In(scalar_stream()),
            "control_in": In(control_stream()),
            "vector_out": Out(vector_stream(lanes)),
            "scalar_out": Out(scalar_stream()),
            "control_out": Out(control_stream()),
            "cfg": In(ConfigPort()),
            "busy": Out(1),
            "pending": Out(1),
            "error": Out(PCUError),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def special(self):
        """The kind of special-function unit (a key of :data:`hdl.fp.SPECIAL_UNITS`)."""
        return self._special

    @property
    def stages(self):
        return self._stages

    @property
    def shared_units(self):
        """The systolic array uses the SIMD ALUs (no MACs of its own)."""
        return self._shared_units

    @property
    def config_layout(self):
        """The ``lib.data.StructLayout`` of this unit's configuration."""
        return self._layout

    def elaborate(self, platform):
        m = Module()
        lanes, stages, depth = self._lanes, self._stages, self._fifo_depth
        vec_shape = data.ArrayLayout(unsigned(32), lanes)

        # configuration writes are taken only while idle (a write during a run is
        # dropped and reported as WRITE_WHILE_BUSY)
        m.submodules.config = config_reg = ConfigRegister(self._layout)
        m.d.comb += [
            config_reg.port.write.eq(self.cfg.write & ~self.busy),
            config_reg.port.index.eq(self.cfg.index),
            config_reg.port.data.eq(self.cfg.data),
            self.cfg.read_data.eq(config_reg.port.read_data),
        ]
        config = config_reg.value

        # -- header and tail FIFOs ---------------------------------------------------
        fifos = {}
        for name, shape in (("vector_in0", vec_shape), ("vector_in1", vec_shape),
                            ("scalar_in", unsigned(32)), ("control_in", unsigned(1)),
                            ("vector_out", vec_shape), ("scalar_out", unsigned(32)),
                            ("control_out", unsigned(1))):
            fifo = m.submodules[f"{name}_fifo"] = StreamFIFO(shape, depth)
            fifos[name] = fifo
            if name.endswith("_in") or name.startswith("vector_in"):
                wiring.connect(m, wiring.flipped(getattr(self, name)), fifo.i)
            else:
                wiring.connect(m, fifo.o, wiring.flipped(getattr(self, name)))
        in0, in1 = fifos["vector_in0"].o, fifos["vector_in1"].o
        scalar_in, control_in = fifos["scalar_in"].o, fifos["control_in"].o
        vec_out, scalar_out = fifos["vector_out"].i, fifos["scalar_out"].i
        control_out = fifos["control_out"].i

        chain = _CounterChain(m, config)

        # -- configuration check -----------------------------------------------------
        def beyond(value, largest):
            # A field value past ``largest``; none exists when ``largest`` fills the
            # field (a constant comparison there is a lint error).
            value = Value.cast(value)
            if largest == 2 ** len(value) - 1:
                return Const(0)
            return value > largest

        uses_in1 = Signal()
        bad_op = Const(0)
        in1_terms = Const(0)
        for stage in range(stages):
            cfg = config.stages[stage]
            bad_op = bad_op | beyond(cfg.op, max(Op))
            for src in (cfg.src_a, cfg.src_b, cfg.src_c):
                in1_terms = in1_terms | (src == Source.IN1)
        bad_acc_stage = beyond(config.acc_stage, stages)
        m.d.comb += uses_in1.eq(in1_terms)
        check = Signal(3)
        with m.If(beyond(config.mode, max(Mode))):
            m.d.comb += check.eq(PCUError.BAD_MODE)
        with m.Elif(chain.bad):
            m.d.comb += check.eq(PCUError.BAD_COUNTER)
        with m.Elif(config.mode == Mode.SIMD):
            with m.If(bad_op):
                m.d.comb += check.eq(PCUError.BAD_OP)
            with m.Elif(bad_acc_stage):
                m.d.comb += check.eq(PCUError.BAD_ACC_STAGE)
            with m.Elif(beyond(config.reduce, max(Reduce))):
                m.d.comb += check.eq(PCUError.BAD_REDUCE)
            with m.Elif(beyond(config.tail, max(Tail))):
                m.d.comb += check.eq(PCUError.BAD_TAIL)

        with m.If(self.cfg.write):
            m.d.sync += self.error.eq(Mux(self.busy, PCUError.WRITE_WHILE_BUSY, PCUError.NONE))

        # -- run control: IDLE -> RUN (counter chain) -> FINISH (drain, DONE) -> IDLE -
        state = Signal(2)
        idle, running, finishing = state == 0, state == 1, state == 2
        issue = Signal()            # one iteration of the counter chain happens now
        done_push = Signal()        # the DONE token enters the control_out FIFO
        m.d.comb += [
            self.busy.eq(~idle),
            # as the functional model's ``busy``: running, or idle with input waiting
            self.pending.eq(~idle | in0.valid | in1.valid | scalar_in.valid),
            control_in.ready.eq(idle),
            chain.step.eq(running & issue),
        ]
        with m.If(idle & control_in.valid):
            with m.If(check != PCUError.NONE):
                m.d.sync += self.error.eq(check)
            with m.Else():
                m.d.comb += chain.load.eq(1)
                m.d.sync += state.eq(1)
        with m.If(running & issue & chain.last_all):
            m.d.sync += state.eq(2)
        with m.If(finishing & done_push):
            m.d.sync += state.eq(0)

        simd = Signal()
        m.d.comb += simd.eq(config.mode == Mode.SIMD)
        # the systolic array's registers only change in systolic mode: in simulation
        # builds they are clocked only then (hdl.clock_gate)
        systolic_domain = gated_domain(m, platform, "systolic", ~simd)
        # the SIMD stage registers change only during a SIMD run or while a beat is in
        # them; their copies of the configuration on the edge after each write
        pipeline_busy = Signal(name="simd_pipeline_busy")
        config_written = Signal(name="config_written")
        m.d.sync += config_written.eq(self.cfg.write)
        simd_domain = gated_domain(m, platform, "simd",
                                   (simd & (~idle | pipeline_busy)) | config_written)
        # with ``shared_units`` one set of ALUs serves both modes (stage x lane)
        units = None
        if self._shared_units:
            units = [[_SharedALU(m, f"fu{stage}_{lane}", simd) for lane in range(lanes)]
                     for stage in range(stages)]
        with m.If(simd):
            self._simd(m, platform, simd_domain, simd, pipeline_busy, config, chain,
                       running, issue, done_push, uses_in1, in0, in1, scalar_in, vec_out,
                       scalar_out, control_out, units)
        with m.Else():
            self._systolic(m, systolic_domain, ~simd, chain, running, finishing, issue,
                           done_push, in0, in1, vec_out, control_out, units)
        return m

    def _simd(self, m, platform, domain, simd, pipeline_busy, config, chain, running,
              issue, done_push, uses_in1, in0, in1, scalar_in, vec_out, scalar_out,
              control_out, units):
        """Lanes x stages pipeline, then the cross-lane reduction tree, into the tail.

        The stage registers are in clock domain ``domain`` and take ``simd`` (the mode)
        as their enable; ``pipeline_busy`` is driven high while a beat is in them.
        ``units``: the shared ALUs (:class:`_SharedALU`, ``[stage][lane]``), or ``None``
        for ALUs of the pipeline's own."""
        lanes, stages = self._lanes, self._stages
        record = data.StructLayout({
            "valid": 1, "first": 1, "first_outer": 1, "emit": 1, "done": 1,
            "vec": data.ArrayLayout(unsigned(32), lanes),
            "in1": data.ArrayLayout(unsigned(32), lanes),
            "scalar": 32, "counter": COUNTER_BITS,
        })
        # the last (reduction) register empties into the tail FIFOs whenever all three
        # have room; everything before it advances together when that register is free
        out_ready = Signal(name="simd_out_ready")
        m.d.comb += out_ready.eq(vec_out.ready & scalar_out.ready & control_out.ready)
        tail = Signal(record, name="simd_tail")
        advance = Signal(name="simd_advance")
        # (an iterating special-function unit holds the pipeline while it computes)
        m.submodules.special = special = SPECIAL_UNITS[self._special](lanes)
        m.d.comb += advance.eq((~tail.valid | out_ready) & ~special.busy)
        need_scalar = Signal(name="simd_need_scalar")
        m.d.comb += need_scalar.eq(config.scalar_in & chain.first_inner)
        held_scalar = Signal(32, name="simd_held_scalar")
        m.d.comb += issue.eq(running & advance & in0.valid & (~uses_in1 | in1.valid) &
                             (~need_scalar | scalar_in.valid))
        m.d.comb += [
            in0.ready.eq(issue),
            in1.ready.eq(issue & uses_in1),
            scalar_in.ready.eq(issue & need_scalar),
        ]
        with m.If(scalar_in.valid & scalar_in.ready):
            m.d.sync += held_scalar.eq(scalar_in.payload)
        head = Signal(record, name="simd_head")
        m.d.comb += [
            head.valid.eq(issue),
            head.first.eq(chain.first_inner),
            head.first_outer.eq(chain.first_outer),
            head.emit.eq(config.emit_every |
                         Mux(config.emit_outer, chain.last[1], chain.last[0])),
            head.done.eq(chain.last_all),
            head.vec.eq(in0.payload),
            head.in1.eq(Mux(uses_in1, in1.payload, 0)),
            head.scalar.eq(Mux(config.scalar_in,
                               Mux(need_scalar, scalar_in.payload, held_scalar), 0)),
            head.counter.eq(chain.values[0]),
        ]
        # The stages after the first read the stage configuration from copies in the
        # ``simd`` domain (taken on every edge of it: the first beat reaches stage 1
        # two edges after a run starts) and their combinational logic is a submodule
        # out of the caller's mode condition, so that in simulation builds nothing of
        # them is evaluated while no SIMD run is on (``hdl.clock_gate``); stage 0 reads
        # the head, and the configuration itself.
        m.submodules.simd_stages = body = Module()
        stage_config = Signal(config.stages.shape(), name="simd_stage_config")
        acc_stage = Signal.like(config.acc_stage, name="simd_acc_stage")
        body.d[domain] += [stage_config.eq(config.stages), acc_stage.eq(config.acc_stage)]
        # the accumulator memory: one word of lanes FP32 per index, read (combinational)
        # and written by the stage ``acc_stage`` names, addressed by counter 0; with
        # gated clocks stage 0 has a read port of its own (its address comes from the
        # head, which would make every stage's REG operand read logic of ``sync``)
        m.submodules.acc = acc = Memory(shape=unsigned(32 * lanes), depth=ACC_DEPTH, init=[])
        acc_write = acc.write_port(domain=domain)
        acc_read_first = acc.read_port(domain="comb")
        acc_read_later = acc.read_port(domain="comb") if gates_clocks(platform) \
            else acc_read_first
        acc_index_bits = (ACC_DEPTH - 1).bit_length()
        busy_terms = []

        previous = head
        for stage in range(stages):
            # stage 0 on the configuration and the head; later stages on the copies
            cfg = config.stages[stage] if stage == 0 else stage_config[stage]
            here = config.acc_stage if stage == 0 else acc_stage
            acc_read = acc_read_first if stage == 0 else acc_read_later
            acc_data = Signal(data.ArrayLayout(unsigned(32), lanes),
                              name=f"stage{stage}_acc_data")
            body.d.comb += acc_data.eq(acc_read.data)
            out = Signal(record, name=f"simd_stage{stage}")
            busy_terms.append(out.valid)
            acc_here = Signal(name=f"stage{stage}_acc")
            first = Signal(name=f"stage{stage}_first")
            body.d.comb += [acc_here.eq(here == stage + 1),
                            first.eq(Mux(acc_here, previous.first_outer, previous.first))]
            with body.If(acc_here):
                body.d.comb += acc_read.addr.eq(previous.counter[:acc_index_bits])
            with body.If(simd & acc_here):
                body.d.comb += [acc_write.addr.eq(previous.counter[:acc_index_bits]),
                                acc_write.en.eq(advance & previous.valid)]
            results = []
            with body.If(simd & advance):
                body.d[domain] += [
                    out.valid.eq(previous.valid), out.first.eq(previous.first),
                    out.first_outer.eq(previous.first_outer),
                    out.emit.eq(previous.emit), out.done.eq(previous.done),
                    out.in1.eq(previous.in1), out.scalar.eq(previous.scalar),
                    out.counter.eq(previous.counter),
                ]
            for lane in range(lanes):
                if units is None:
                    alu = body.submodules[f"stage{stage}_alu{lane}"] = FPALU()
                else:
                    alu = units[stage][lane]
                register = Signal(32, name=f"stage{stage}_reg{lane}")
                last = Signal(32, name=f"stage{stage}_last{lane}")
                operands = []
                for src in (cfg.src_a, cfg.src_b, cfg.src_c):
                    operand = Signal(32, name=f"stage{stage}_lane{lane}_operand")
                    with body.Switch(src):
                        with body.Case(Source.PREV):
                            body.d.comb += operand.eq(previous.vec[lane])
                        with body.Case(Source.REG):
                            body.d.comb += operand.eq(Mux(
                                first, cfg.constant,
                                Mux(acc_here, acc_data[lane], register)))
                        with body.Case(Source.SCALAR):
                            body.d.comb += operand.eq(previous.scalar)
                        with body.Case(Source.CONST):
                            body.d.comb += operand.eq(cfg.constant)
                        with body.Case(Source.IN1):
                            body.d.comb += operand.eq(previous.in1[lane])
                        with body.Case(Source.COUNTER):
                            body.d.comb += operand.eq(previous.counter)
                        with body.Case(Source.LANE):
                            body.d.comb += operand.eq(lane)
                        with body.Case(Source.LAST):
                            body.d.comb += operand.eq(
                                Mux(previous.first, cfg.constant, last))
                    operands.append(operand)
                body.d.comb += [alu.op.eq(cfg.op), alu.a.eq(operands[0]),
                                alu.b.eq(operands[1]), alu.c.eq(operands[2])]
                results.append(alu.result)
                with body.If(simd & advance & previous.valid):
                    body.d[domain] += [out.vec[lane].eq(alu.result),
                                       register.eq(alu.result),
                                       last.eq(previous.vec[lane])]
            with body.If(simd & acc_here):
                body.d.comb += acc_write.data.eq(Cat(*results))
            previous = out
        m.d.comb += pipeline_busy.eq(Cat(*busy_terms).any())

        # tail special function: with ``tail = NONE`` a beat passes one register; else it
        # enters the special-function unit (the pipeline: SPECIAL_STEPS + 1 registers,
        # one beat per cycle; the iterating unit: one register), its flags beside it.
        # Each path only takes beats of its own kind, so a run never sees a beat left in
        # the other path by the run before.
        with_func = Signal(name="simd_with_func")
        m.d.comb += with_func.eq(config.tail != Tail.NONE)
        m.d.comb += [special.active.eq(with_func), special.enable.eq(advance),
                     special.valid.eq(previous.valid & with_func),
                     special.func.eq(config.tail),
                     special.x.eq(previous.vec)]
        flags = data.StructLayout({"valid": 1, "emit": 1, "done": 1})
        bypass = Signal(record, name="simd_bypass")
        with m.If(advance):
            m.d.sync += [
                bypass.valid.eq(previous.valid & ~with_func), bypass.emit.eq(previous.emit),
                bypass.done.eq(previous.done), bypass.vec.eq(previous.vec),
            ]
        carried = Signal(flags, name="simd_func_flags0")
        m.d.comb += [carried.valid.eq(previous.valid & with_func),
                     carried.emit.eq(previous.emit), carried.done.eq(previous.done)]
        for n in range(special.latency):
            delayed = Signal(flags, name=f"simd_func_flags{n + 1}")
            with m.If(advance):
                m.d.sync += delayed.eq(carried)
            carried = delayed
        func_result = Signal(data.ArrayLayout(unsigned(32), lanes), name="simd_func_result")
        func_out = Signal(data.ArrayLayout(unsigned(32), lanes), name="simd_func_out")
        previous = Signal(flags, name="simd_func")
        m.d.comb += func_result.eq(Mux(with_func, special.result, bypass.vec))
        for lane in range(lanes):
            rounded = fp32_to_bf16(m, func_result[lane], name=f"tail_bf16_{lane}")
            m.d.comb += func_out[lane].eq(Mux(config.tail_bf16, rounded, func_result[lane]))
        m.d.comb += [
            previous.valid.eq(Mux(with_func, carried.valid, bypass.valid)),
            previous.emit.eq(Mux(with_func, carried.emit, bypass.emit)),
            previous.done.eq(Mux(with_func, carried.done, bypass.done)),
        ]

        # reduction tree: pairs (0,1), (2,3), ... then pairs of those, one register stage
        level = [func_out[lane] for lane in range(lanes)]
        depth = 0
        while len(level) > 1:
            nxt = []
            for pair in range(len(level) // 2):
                left, right = level[2 * pair], level[2 * pair + 1]
                total = fp32_add(m, left, right, name=f"red_add{depth}_{pair}")
                largest = fp32_max(m, left, right, name=f"red_max{depth}_{pair}")
                nxt.append(Mux(config.reduce == Reduce.MAX, largest, total))
            level = nxt
            depth += 1
        with m.If(advance):
            m.d.sync += [
                tail.valid.eq(previous.valid), tail.emit.eq(previous.emit),
                tail.done.eq(previous.done), tail.vec.eq(func_out),
                tail.scalar.eq(level[0]),
            ]
        with m.Elif(out_ready):
            m.d.sync += tail.valid.eq(0)
        # the three FIFOs take a beat together (each valid is gated by all readies,
        # which depend only on FIFO levels)
        push = tail.valid & out_ready
        emit = push & tail.emit
        m.d.comb += [
            vec_out.valid.eq(emit & config.vector_out),
            vec_out.payload.eq(tail.vec),
            scalar_out.valid.eq(emit & (config.reduce != Reduce.NONE)),
            scalar_out.payload.eq(tail.scalar),
            control_out.valid.eq(push & tail.done),
            control_out.payload.eq(1),
            done_push.eq(push & tail.done),
        ]

    def _systolic(self, m, domain, active, chain, running, finishing, issue, done_push,
                  in0, in1, vec_out, control_out, units):
        """Output-stationary lanes x lanes array, BF16 x BF16 -> FP32, skewed inputs,
        double-buffered accumulators (drain of tile n overlaps tile n + 1).

        The data path (injection, skew, PE registers, accumulators, shadows) is a
        submodule of its own, out of the caller's mode condition (its registers take
        ``active``, the systolic mode, as their enable), in clock domain ``domain``, so
        that with a gated clock nothing of it is evaluated in SIMD mode; the drain
        control is in ``sync``. ``units``: the shared ALUs the PEs compute on
        (:class:`_SharedALU`, ``[row][col]``), or ``None`` for MACs of the array's own."""
        lanes = self._lanes
        m.submodules.systolic_array = array = Module()
        pending = Signal(name="sys_pending")      # a tile's results await draining
        m.d.comb += issue.eq(running & in0.valid & in1.valid & (~chain.last[0] | ~pending))
        m.d.comb += [in0.ready.eq(issue), in1.ready.eq(issue)]

        tag = data.StructLayout({"valid": 1, "first": 1, "last": 1})
        inject_tag = Signal(tag, name="sys_inject_tag")
        inject_a = Signal(data.ArrayLayout(unsigned(16), lanes), name="sys_inject_a")
        inject_b = Signal(data.ArrayLayout(unsigned(16), lanes), name="sys_inject_b")
        with array.If(active):
            array.d[domain] += [
                inject_tag.valid.eq(issue),
                inject_tag.first.eq(chain.first_inner),
                inject_tag.last.eq(chain.last[0]),
            ]
        for lane in range(lanes):
            with array.If(active & issue):
                array.d[domain] += [inject_a[lane].eq(in0.payload[lane][16:]),
                                    inject_b[lane].eq(in1.payload[lane][16:])]

        def delayed(value, cycles, name):
            for n in range(cycles):
                stage = Signal.like(value, name=f"{name}_d{n + 1}")
                with array.If(active):
                    array.d[domain] += stage.eq(value)
                value = stage
            return value

        west_tag = [delayed(inject_tag, row, f"sys_west_tag{row}") for row in range(lanes)]
        west_a = [delayed(inject_a[row], row, f"sys_west_a{row}") for row in range(lanes)]
        north_b = [delayed(inject_b[col], col, f"sys_north_b{col}") for col in range(lanes)]

        shadow = [[Signal(32, name=f"sys_shadow{row}_{col}") for col in range(lanes)]
                  for row in range(lanes)]
        row_full = Signal(lanes, name="sys_row_full")
        tag_reg = [[None] * lanes for _ in range(lanes)]
        a_reg = [[None] * lanes for _ in range(lanes)]
        b_reg = [[None] * lanes for _ in range(lanes)]
        for row in range(lanes):
            for col in range(lanes):
                tag_in = west_tag[row] if col == 0 else tag_reg[row][col - 1]
                a_in = west_a[row] if col == 0 else a_reg[row][col - 1]
                b_in = north_b[col] if row == 0 else b_reg[row - 1][col]
                name = f"pe{row}_{col}"
                tag_reg[row][col] = Signal(tag, name=f"{name}_tag")
                a_reg[row][col] = Signal(16, name=f"{name}_a")
                b_reg[row][col] = Signal(16, name=f"{name}_b")
                with array.If(active):
                    array.d[domain] += [tag_reg[row][col].eq(tag_in),
                                        a_reg[row][col].eq(a_in), b_reg[row][col].eq(b_in)]
                acc = Signal(32, name=f"{name}_acc")
                if units is None:
                    # one submodule per PE: Verilog generation then shares one module
                    mac = array.submodules[name] = BF16MultiplyAccumulate()
                else:
                    mac = units[row][col].systolic
                array.d.comb += [mac.a.eq(a_in), mac.b.eq(b_in), mac.acc.eq(acc),
                                 mac.first.eq(tag_in.first)]
                new = mac.result
                with array.If(active & tag_in.valid):
                    array.d[domain] += acc.eq(new)
                    with array.If(tag_in.last):
                        array.d[domain] += shadow[row][col].eq(new)
                if col == lanes - 1:
                    with m.If(tag_in.valid & tag_in.last):
                        m.d.sync += row_full[row].eq(1)

        drain_row = Signal(range(lanes), name="sys_drain_row")
        m.d.comb += vec_out.valid.eq(row_full.bit_select(drain_row, 1))
        with m.Switch(drain_row):
            for row in range(lanes):
                with m.Case(row):
                    m.d.comb += vec_out.payload.eq(Cat(*shadow[row]))
        with m.If(vec_out.valid & vec_out.ready):
            m.d.sync += row_full.bit_select(drain_row, 1).eq(0)
            m.d.sync += drain_row.eq(Mux(drain_row == lanes - 1, 0, drain_row + 1))
            with m.If(drain_row == lanes - 1):
                m.d.sync += pending.eq(0)
        with m.If(issue & chain.last[0]):
            m.d.sync += pending.eq(1)
        m.d.comb += [
            control_out.valid.eq(finishing & ~pending),
            control_out.payload.eq(1),
            done_push.eq(finishing & ~pending & control_out.ready),
        ]


class _SharedALU:
    """One :class:`hdl.fp.FPALU` of a PCU with ``shared_units``, in module ``m``: its
    operands come from a SIMD stage (``op``, ``a``, ``b``, ``c``: this object stands
    for the ALU there) while ``simd`` is high, else from a systolic processing element
    (``systolic``: the ports of a :class:`hdl.fp.BF16MultiplyAccumulate`). A PE's
    ``acc + a * b`` is the ALU's ``MADD`` of the BF16 words widened to FP32 (their
    product is exact: the MAC's ``bf16_mul`` is ``fp32_mul`` of them bit for bit,
    ``formal/fp.py``), and ``first``'s ``a * b`` its ``MUL``."""

    def __init__(self, m, name, simd):
        alu = m.submodules[name] = FPALU()
        self.op = Signal(OP_BITS, name=f"{name}_simd_op")
        self.a, self.b, self.c = (Signal(32, name=f"{name}_simd_{n}") for n in "abc")
        self.result = alu.result
        self.systolic = pe = SimpleNamespace(
            a=Signal(16, name=f"{name}_pe_a"), b=Signal(16, name=f"{name}_pe_b"),
            acc=Signal(32, name=f"{name}_pe_acc"), first=Signal(name=f"{name}_pe_first"),
            result=Signal(32, name=f"{name}_pe_result"))
        m.d.comb += [
            pe.result.eq(alu.result),
            alu.op.eq(Mux(simd, self.op, Mux(pe.first, Op.MUL, Op.MADD))),
            alu.a.eq(Mux(simd, self.a, Cat(Const(0, 16), pe.a))),
            alu.b.eq(Mux(simd, self.b, Cat(Const(0, 16), pe.b))),
            alu.c.eq(Mux(simd, self.c, pe.acc)),
        ]


def check_shared_units(lanes, stages):
    """Raise ``ValueError`` unless a PCU of ``lanes`` and ``stages`` can have
    ``shared_units`` (its ``lanes x lanes`` systolic array on the ``stages x lanes``
    ALUs). The runtime's machine check uses it too."""
    if stages < lanes:
        raise ValueError(f"Shared units need at least as many stages as lanes (the "
                         f"{lanes} x {lanes} systolic array on the stages' ALUs), not "
                         f"{stages} stages for {lanes} lanes")


#: The options of the FPGA configuration's PCU (:func:`fpga_pcu`).
FPGA_PCU_OPTIONS = {"special": "iterative", "shared_units": True}


def fpga_pcu(lanes=8, stages=4, fifo_depth=FIFO_DEPTH):
    """The compute unit of the FPGA configuration (``rdu.fpga``): a :class:`PCU` with
    both area options, the iterating special-function unit (``special="iterative"``)
    and the systolic array on the SIMD ALUs (``shared_units``; ``stages >= lanes``).
    As ``compute_unit="hdl.pcu:fpga_pcu"`` of a :class:`hdl.array.TileArray` or
    :class:`hdl.system.RDUSystem`."""
    return PCU(lanes, stages, fifo_depth, **FPGA_PCU_OPTIONS)


#: The compute units a system can be built with (``Machine.pcu``, ``rdu run --pcu``):
#: name -> ``compute_unit`` of :class:`hdl.system.RDUSystem`. ``standard``: the
#: simulated machines' PCU; ``fpga``: :func:`fpga_pcu` (the same words; exp and the
#: reciprocal take 13 and 8 cycles per vector).
PCU_KINDS = {"standard": "hdl.pcu:PCU", "fpga": "hdl.pcu:fpga_pcu"}

"""Pattern Compute Unit: header FIFOs -> SIMD pipeline or systolic array -> tail FIFOs.

The unit's pieces: its configuration (:mod:`hdl.pcu_config`), the counter chain
(:mod:`hdl.pcu_counters`), the SIMD body (:mod:`hdl.pcu_simd`), the systolic body
(:mod:`hdl.pcu_systolic`), the special-function units (:mod:`hdl.special_function`) and
the FP operators (:mod:`hdl.fp`); :class:`PCU` wires them. See ``docs/pcu.md`` for the
configuration layout field by field, the timing, the systolic-mode streaming protocol
and the error codes. :mod:`rdu.models.pcu_reference` is the bit-exact reference model.
"""

from types import SimpleNamespace

from amaranth import Const, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from . import defaults
from .clock_gate import gated_domain
from .fp import Op
from .fp_latency import latency_table
from .interfaces import (
    ConfigPort,
    ConfigRegister,
    check_lanes,
    config_changed,
    control_stream,
    scalar_stream,
    vector_stream,
)
from .pcu_config import (
    Mode,
    PCUError,
    Reduce,
    Tail,
    check_stages,
    pcu_config_layout,
)
from .pcu_counters import CounterChain
from .pcu_simd import SIMDPipeline
from .pcu_systolic import SharedALU, SystolicArray
from .pcu_systolic_pipelined import PipelinedSystolicArray
from .special_function import SPECIAL_UNITS
from .stream_fifo import StreamFIFO

__all__ = ["FIFO_DEPTH", "PCU", "FPGA_PCU_OPTIONS", "check_shared_units"]

#: Depth of every header and tail FIFO (the default ``fifo_depth``).
FIFO_DEPTH = 4

def _beyond(value, largest):
    """A field value past ``largest``; none exists when ``largest`` fills the field (a
    constant comparison there is a lint error)."""
    value = Value.cast(value)
    if largest == 2 ** len(value) - 1:
        return Const(0)
    return value > largest


class PCU(wiring.Component):
    """Pattern Compute Unit: the header and tail FIFOs, the configuration register, the
    run control (``IDLE`` -> ``RUN`` -> ``FINISH``, an ``m.FSM``) and the configuration
    check around its components: :class:`hdl.pcu_counters.CounterChain`,
    :class:`hdl.pcu_simd.SIMDPipeline` (with a unit of
    :mod:`hdl.special_function`), :class:`hdl.pcu_systolic.SystolicArray` and, with
    ``shared_units``, :class:`hdl.pcu_systolic.SharedALU`.

    See also: the configuration :mod:`hdl.pcu_config`; the encoder
    ``software/rdu/units/pcu.py``; the functional model ``software/rdu/models/pcu.py``
    (``PCUModel``); the bit-exact reference ``software/rdu/models/pcu_reference.py`` and
    ``software/rdu/models/fp.py``; all of them in ``rdu.units.registry.UNITS``;
    ``docs/pcu.md``; tests ``tests/test_pcu.py``,
    ``tests/test_pcu_components.py``, ``tests/test_fp.py`` (bodies in
    ``tb/suites/pcu.py``).

    Parameters
    ----------
    lanes : int
        Vector width (a power of two); the systolic array is ``lanes`` x ``lanes``.
    stages : int
        SIMD pipeline stages (1 to 16).
    fifo_depth : int
        Depth of every header and tail FIFO (at least 1).
    special : str
        The exp / reciprocal / rsqrt unit of the tail (a key of
        :data:`hdl.special_function.SPECIAL_UNITS`): ``"pipelined"`` (default: one vector
        per cycle, :class:`hdl.special_function.SpecialFunctionPipeline`) or
        ``"iterative"`` (the FPGA area option: one multiply-add per lane, a vector every
        13 cycles for exp, 8 for reciprocal and 12 for rsqrt,
        :class:`hdl.special_function.SpecialFunctionIterative`); the same results bit for
        bit.
    shared_units : bool
        The systolic array is built of the SIMD stages' ALUs (processing element
        ``(row, col)`` on stage ``row``'s ALU of lane ``col``, as in the paper's PCU)
        instead of a ``lanes x lanes`` array of MACs of its own: the FPGA area option
        (needs ``stages >= lanes``); the same results and cycles bit for bit.
    fp_latency : str or None
        ``"off"`` (or ``None``, 0; the default): the SIMD stages compute each operator in
        one cycle. ``"default"``: the SIMD stages and the lane reduction tree on the
        pipelined operators of :data:`hdl.fp_latency.DEFAULT_LATENCY` (a stage takes
        its op's latency, an interlock spaces beats whose ``REG`` would be read early):
        the same words, more latency (``docs/pcu.md``, "SIMD stages on the pipelined
        operators"); the systolic array on pipelined processing elements
        (:class:`hdl.pcu_systolic_pipelined.PipelinedSystolicArray`: tiles of ``lanes x
        group * lanes``, other streams; ``docs/pcu.md``, "Systolic array on the
        pipelined operators"). The tail special functions stay as they are; not with
        ``shared_units``.

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

    def __init__(self, lanes=defaults.LANES, stages=defaults.STAGES, fifo_depth=FIFO_DEPTH, *,
                 special="pipelined", shared_units=False, fp_latency=None):
        check_lanes(lanes)
        self._fp_latency = "off" if latency_table(fp_latency) is None else fp_latency
        if self._fp_latency != "off" and shared_units:
            raise ValueError("fp_latency needs the SIMD stages' own ALUs, not shared_units")
        check_stages(stages)
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
        """The kind of special-function unit (a key of
        :data:`hdl.special_function.SPECIAL_UNITS`)."""
        return self._special

    @property
    def stages(self):
        return self._stages

    @property
    def fp_latency(self):
        """``"off"`` or ``"default"``: the SIMD stages' operators (:mod:`hdl.fp_latency`)."""
        return self._fp_latency

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
        lanes, stages = self._lanes, self._stages

        # configuration writes are taken only while idle (a write during a run is
        # dropped and reported as WRITE_WHILE_BUSY)
        m.submodules.config = config_reg = ConfigRegister(self._layout)
        m.d.comb += [
            config_reg.port.write.eq(self.cfg.write & ~self.busy),
            config_reg.port.clear.eq(self.cfg.clear & ~self.busy),
            config_reg.port.index.eq(self.cfg.index),
            config_reg.port.data.eq(self.cfg.data),
            self.cfg.read_data.eq(config_reg.port.read_data),
        ]
        config = config_reg.value
        fifos = self._fifos(m)

        m.submodules.chain = chain = CounterChain()
        m.d.comb += chain.config.eq(config.counters)
        check = self._config_check(m, config, chain.bad)
        with m.If(config_changed(self.cfg)):
            m.d.sync += self.error.eq(Mux(self.busy, PCUError.WRITE_WHILE_BUSY, PCUError.NONE))

        simd = Signal()
        m.d.comb += simd.eq(config.mode == Mode.SIMD)
        # the systolic array's registers only change in systolic mode: in simulation
        # builds they are clocked only then (hdl.clock_gate)
        systolic_domain = gated_domain(m, platform, "systolic", ~simd)
        run = self._run_control(m, check, chain, fifos)
        # the SIMD stage registers change only during a SIMD run or while a beat is in
        # them; their copies of the configuration on the edge after each write
        pipeline_busy = Signal(name="simd_pipeline_busy")
        config_written = Signal(name="config_written")
        m.d.sync += config_written.eq(config_changed(self.cfg))
        simd_domain = gated_domain(m, platform, "simd",
                                   (simd & (~run.idle | pipeline_busy)) | config_written)
        m.submodules.simd = simd_body = SIMDPipeline(
            lanes, stages, special=self._special, shared_units=self._shared_units,
            domain=simd_domain, fp_latency=self._fp_latency)
        table = latency_table(self._fp_latency)
        if table is None:
            systolic_body = SystolicArray(lanes, shared_units=self._shared_units,
                                          domain=systolic_domain)
        else:
            systolic_body = PipelinedSystolicArray(lanes, table, domain=systolic_domain)
        m.submodules.systolic = systolic_body
        m.d.comb += pipeline_busy.eq(simd_body.busy)
        if self._shared_units:
            # one set of ALUs serves both modes (stage x lane)
            for stage in range(stages):
                for lane in range(lanes):
                    unit = m.submodules[f"fu{stage}_{lane}"] = SharedALU()
                    m.d.comb += unit.simd.eq(simd)
                    wiring.connect(m, simd_body.alus[stage][lane], unit.stage)
                    if stage < lanes:
                        wiring.connect(m, systolic_body.macs[stage][lane], unit.pe)
        self._connect_bodies(m, config, simd, chain, run, fifos, simd_body, systolic_body)
        return m

    def _fifos(self, m):
        """The header and tail FIFOs, connected to the unit's ports: name -> FIFO."""
        vec_shape = data.ArrayLayout(unsigned(32), self._lanes)
        fifos = {}
        for name, shape in (("vector_in0", vec_shape), ("vector_in1", vec_shape),
                            ("scalar_in", unsigned(32)), ("control_in", unsigned(1)),
                            ("vector_out", vec_shape), ("scalar_out", unsigned(32)),
                            ("control_out", unsigned(1))):
            fifo = m.submodules[f"{name}_fifo"] = StreamFIFO(shape, self._fifo_depth)
            fifos[name] = fifo
            if name.endswith("_in") or name.startswith("vector_in"):
                wiring.connect(m, wiring.flipped(getattr(self, name)), fifo.i)
            else:
                wiring.connect(m, fifo.o, wiring.flipped(getattr(self, name)))
        return fifos

    def _config_check(self, m, config, chain_bad):
        """The :class:`PCUError` a start with this configuration is rejected with (0:
        none)."""
        bad_op = Const(0)
        for stage in range(self._stages):
            bad_op = bad_op | _beyond(config.stages[stage].op, max(Op))
        bad_acc_stage = _beyond(config.acc_stage, self._stages)
        check = Signal(3)
        with m.If(_beyond(config.mode, max(Mode))):
            m.d.comb += check.eq(PCUError.BAD_MODE)
        with m.Elif(chain_bad):
            m.d.comb += check.eq(PCUError.BAD_COUNTER)
        with m.Elif(config.mode == Mode.SIMD):
            with m.If(bad_op):
                m.d.comb += check.eq(PCUError.BAD_OP)
            with m.Elif(bad_acc_stage):
                m.d.comb += check.eq(PCUError.BAD_ACC_STAGE)
            with m.Elif(_beyond(config.reduce, max(Reduce))):
                m.d.comb += check.eq(PCUError.BAD_REDUCE)
            with m.Elif(_beyond(config.tail, max(Tail))):
                m.d.comb += check.eq(PCUError.BAD_TAIL)
        return check

    def _run_control(self, m, check, chain, fifos):
        """Run control: ``IDLE`` -> ``RUN`` (the counter chain steps) -> ``FINISH`` (the
        body drains and pushes ``DONE``) -> ``IDLE``. A start token with a bad
        configuration (``check``) is consumed and sets ``error`` instead. Returns the
        state flags and the bodies' ``issue`` / ``done`` (driven by the caller)."""
        control_in = fifos["control_in"].o
        issue = Signal()            # one iteration of the counter chain happens now
        done_push = Signal()        # the DONE token enters the control_out FIFO
        with m.FSM(name="run") as fsm:
            with m.State("IDLE"):
                with m.If(control_in.valid):
                    with m.If(check != PCUError.NONE):
                        m.d.sync += self.error.eq(check)
                    with m.Else():
                        m.d.comb += chain.load.eq(1)
                        m.next = "RUN"
            with m.State("RUN"):
                with m.If(issue & chain.status.last_all):
                    m.next = "FINISH"
            with m.State("FINISH"):
                with m.If(done_push):
                    m.next = "IDLE"
        idle, running, finishing = Signal(), Signal(), Signal()
        m.d.comb += [idle.eq(fsm.ongoing("IDLE")), running.eq(fsm.ongoing("RUN")),
                     finishing.eq(fsm.ongoing("FINISH"))]
        m.d.comb += [
            self.busy.eq(~idle),
            # as the functional model's ``busy``: running, or idle with input waiting
            self.pending.eq(~idle | fifos["vector_in0"].o.valid |
                            fifos["vector_in1"].o.valid | fifos["scalar_in"].o.valid),
            control_in.ready.eq(idle),
            chain.step.eq(running & issue),
        ]
        return SimpleNamespace(idle=idle, running=running, finishing=finishing,
                               issue=issue, done=done_push)

    def _connect_bodies(self, m, config, simd, chain, run, fifos, simd_body, systolic_body):
        """Both bodies see the FIFOs, the chain and the run control; the body of the
        configured mode drives the shared streams' handshakes, ``issue`` and ``done``."""
        in0, in1 = fifos["vector_in0"].o, fifos["vector_in1"].o
        vec_out, control_out = fifos["vector_out"].i, fifos["control_out"].i
        for body in (simd_body, systolic_body):
            m.d.comb += [
                body.running.eq(run.running), body.chain.eq(chain.status),
                body.in0.valid.eq(in0.valid), body.in0.payload.eq(in0.payload),
                body.in1.valid.eq(in1.valid), body.in1.payload.eq(in1.payload),
                body.vector_out.ready.eq(vec_out.ready),
                body.control_out.ready.eq(control_out.ready),
            ]
        m.d.comb += [simd_body.active.eq(simd), simd_body.config.eq(config),
                     systolic_body.active.eq(~simd), systolic_body.finishing.eq(run.finishing),
                     systolic_body.group_rows.eq(config.mode == Mode.SYSTOLIC_ROWS)]
        wiring.connect(m, fifos["scalar_in"].o, simd_body.scalar_in)
        wiring.connect(m, simd_body.scalar_out, fifos["scalar_out"].i)
        for mode, body in ((simd, simd_body), (~simd, systolic_body)):
            with m.If(mode):
                m.d.comb += [
                    in0.ready.eq(body.in0.ready), in1.ready.eq(body.in1.ready),
                    vec_out.valid.eq(body.vector_out.valid),
                    vec_out.payload.eq(body.vector_out.payload),
                    control_out.valid.eq(body.control_out.valid),
                    control_out.payload.eq(body.control_out.payload),
                    run.issue.eq(body.issue), run.done.eq(body.done),
                ]


def check_shared_units(lanes, stages):
    """Raise ``ValueError`` unless a PCU of ``lanes`` and ``stages`` can have
    ``shared_units`` (its ``lanes x lanes`` systolic array on the ``stages x lanes``
    ALUs). The runtime's machine check uses it too."""
    if stages < lanes:
        raise ValueError(f"Shared units need at least as many stages as lanes (the "
                         f"{lanes} x {lanes} systolic array on the stages' ALUs), not "
                         f"{stages} stages for {lanes} lanes")


#: The options of the FPGA configuration's PCU (``rdu.units.registry.PCU_VARIANTS["fpga"]``:
#: the iterating special-function unit and the systolic array on the SIMD ALUs).
FPGA_PCU_OPTIONS = {"special": "iterative", "shared_units": True}


"""The PCU's SIMD body: stages x lanes ALUs, the tail special function, the reduction."""

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .clock_gate import gates_clocks
from .fp import FPALU, FPALU_SIGNATURE, fp32_add, fp32_max, fp32_to_bf16
from .fp_latency import latency_table
from .interfaces import control_stream, scalar_stream, vector_stream
from .pcu_config import (
    ACC_DEPTH,
    COUNTER_BITS,
    Reduce,
    Source,
    Tail,
    check_stages,
    pcu_config_layout,
)
from .pcu_counters import chain_status_layout
from .pcu_simd_pipelined import issue_interval, pipelined_reduction, pipelined_stage
from .special_function import SPECIAL_UNITS

__all__ = ["SIMDPipeline"]


def _beat_layout(lanes):
    """One beat in the pipeline: its flags, its vector and what its stages may read."""
    return data.StructLayout({
        "valid": 1, "first": 1, "first_outer": 1, "emit": 1, "done": 1,
        "vec": data.ArrayLayout(unsigned(32), lanes),
        "in1": data.ArrayLayout(unsigned(32), lanes),
        "scalar": 32, "counter": COUNTER_BITS,
    })


class SIMDPipeline(wiring.Component):
    """The SIMD body of a PCU: ``stages x lanes`` FP32 ALUs, then the special function
    of the tail, then the cross-lane reduction tree, into the tail streams.

    One beat per iteration of the counter chain (``issue``) enters from ``in0`` (and
    ``in1`` / ``scalar_in`` when the configuration reads them) and moves one stage per
    advance; a beat the configuration emits leaves on ``vector_out`` / ``scalar_out``,
    the run's last beat pushes a ``DONE`` token on ``control_out`` (``done``). The
    timing, the sources and the accumulator memory are described in ``docs/pcu.md``.

    See also: the PCU that holds it and its configuration (:class:`hdl.pcu.PCU`,
    :mod:`hdl.pcu_config`), the encoder ``software/rdu/units/pcu.py``, the functional
    model (``software/rdu/models/pcu.py``, ``PCUModel``), the reference
    ``rdu.models.pcu_reference.run_simd`` and ``rdu.models.fp``, ``docs/pcu.md``, tests
    ``tests/test_pcu_components.py`` and ``tests/test_pcu.py``.

    Parameters
    ----------
    lanes, stages : int
        As the PCU's.
    special : str
        The special-function unit (a key of :data:`hdl.special_function.SPECIAL_UNITS`).
    shared_units : bool
        The ALUs are outside (``alus``), shared with the systolic array.
    domain : str
        Clock domain of the stage registers, the accumulator memory's writes and the
        configuration copies (the PCU's gated ``simd`` domain in simulation builds).
    fp_latency : str or None
        ``"off"`` / ``None`` / 0: every stage's ALU is combinational (one register per
        stage); ``"default"``: the stages, the lane reduction tree and the interlock on
        the pipelined operators of :data:`hdl.fp_latency.DEFAULT_LATENCY`
        (:func:`hdl.fp_latency.latency_table`, :mod:`hdl.pcu_simd_pipelined`). Not with
        ``shared_units``.

    Attributes
    ----------
    config : In(pcu_config_layout(lanes, stages))
    active : In(1)
        SIMD mode: everything outside the stages is inactive (its outputs 0) without it.
    running : In(1)
        A run is on (the PCU's run control is in ``RUN``): beats may be issued.
    chain : In(chain_status_layout())
        The counter chain's current iteration.
    in0, in1 : In(vector_stream(lanes))
    scalar_in : In(scalar_stream())
    vector_out : Out(vector_stream(lanes))
    scalar_out : Out(scalar_stream())
    control_out : Out(control_stream())
    issue : Out(1)
        A beat enters now (the counter chain steps).
    done : Out(1)
        The run's ``DONE`` token enters ``control_out``.
    busy : Out(1)
        A beat is in a stage register.
    alus : In(FPALU_SIGNATURE).array(stages, lanes)
        With ``shared_units`` only: the ALU of each stage and lane.
    """

    def __init__(self, lanes, stages, *, special="pipelined", shared_units=False,
                 domain="sync", fp_latency=None):
        check_stages(stages)
        self.latency_table = latency_table(fp_latency)
        if self.latency_table is not None and shared_units:
            raise ValueError("fp_latency needs the SIMD stages' own ALUs, not shared_units")
        self._lanes, self._stages = lanes, stages
        self._special, self._shared_units, self._domain = special, shared_units, domain
        members = {
            "config": In(pcu_config_layout(lanes, stages)),
            "active": In(1),
            "running": In(1),
            "chain": In(chain_status_layout()),
            "in0": In(vector_stream(lanes)),
            "in1": In(vector_stream(lanes)),
            "scalar_in": In(scalar_stream()),
            "vector_out": Out(vector_stream(lanes)),
            "scalar_out": Out(scalar_stream()),
            "control_out": Out(control_stream()),
            "issue": Out(1),
            "done": Out(1),
            "busy": Out(1),
        }
        if shared_units:
            members["alus"] = In(FPALU_SIGNATURE).array(stages, lanes)
        super().__init__(members)

    @property
    def lanes(self):
        return self._lanes

    @property
    def domain(self):
        """The clock domain of the stage registers."""
        return self._domain

    def elaborate(self, platform):
        m = Module()
        lanes, config = self._lanes, self.config
        uses_in1 = Signal(name="simd_uses_in1")
        m.d.comb += uses_in1.eq(Cat(*[src == Source.IN1 for stage in config.stages
                                      for src in (stage.src_a, stage.src_b,
                                                  stage.src_c)]).any())
        # (an iterating special-function unit holds the pipeline while it computes)
        m.submodules.special = special = SPECIAL_UNITS[self._special](lanes)
        with m.If(self.active):
            flow = self._head(m, special, uses_in1)
        # The stages after the first read the stage configuration from copies in the
        # stage domain (taken on every edge of it: the first beat reaches stage 1 two
        # edges after a run starts) and their combinational logic is a submodule out
        # of the mode condition, so that in simulation builds nothing of them is
        # evaluated while no SIMD run is on (``hdl.clock_gate``); stage 0 reads the
        # head, and the configuration itself.
        m.submodules.simd_stages = body = Module()
        # the accumulator memory: one word of lanes FP32 per index, read (combinational)
        # and written by the stage ``acc_stage`` names, addressed by counter 0; with
        # gated clocks stage 0 has a read port of its own (its address comes from the
        # head, which would make every stage's REG operand read logic of ``sync``)
        m.submodules.acc = acc = Memory(shape=unsigned(32 * lanes), depth=ACC_DEPTH, init=[])
        previous, busy_terms = self._stages_body(body, platform, acc, flow)
        with m.If(self.active):
            m.d.comb += self.busy.eq(Cat(*busy_terms).any())
            previous = self._special_tail(m, special, previous, flow.advance)
            self._reduction(m, previous, flow)
        return m

    def _head(self, m, special, uses_in1):
        """The head: the beat of the iteration issued now, and when the pipeline
        advances (the last register is free, or empties into the tail streams)."""
        config, chain = self.config, self.chain
        record = _beat_layout(self._lanes)
        out_ready = Signal(name="simd_out_ready")
        m.d.comb += out_ready.eq(self.vector_out.ready & self.scalar_out.ready &
                                 self.control_out.ready)
        tail = Signal(record, name="simd_tail")
        advance = Signal(name="simd_advance")
        m.d.comb += advance.eq((~tail.valid | out_ready) & ~special.busy)
        need_scalar = Signal(name="simd_need_scalar")
        m.d.comb += need_scalar.eq(config.scalar_in & chain.first_inner)
        held_scalar = Signal(32, name="simd_held_scalar")
        in0, in1, scalar_in, issue = self.in0, self.in1, self.scalar_in, self.issue
        m.d.comb += issue.eq(self.running & advance & in0.valid & (~uses_in1 | in1.valid) &
                             (~need_scalar | scalar_in.valid) & self._interlock(m, advance))
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
            head.vec.eq(self._row_padded(m, in0.payload)),
            head.in1.eq(Mux(uses_in1, in1.payload, 0)),
            head.scalar.eq(Mux(config.scalar_in,
                               Mux(need_scalar, scalar_in.payload, held_scalar), 0)),
            head.counter.eq(chain.values[0]),
        ]
        return SimpleNamespace(record=record, head=head, tail=tail, advance=advance,
                               out_ready=out_ready)

    def _interlock(self, m, advance):
        """1 when the pipeline may take a beat without reading a ``REG`` before it is
        written: always with combinational stages; with ``fp_latency``, every
        :func:`hdl.pcu_simd_pipelined.issue_interval` cycles of ``advance``."""
        if self.latency_table is None:
            return 1
        interval = issue_interval(m, self.config, self.latency_table)
        wait = Signal.like(interval, name="simd_interlock_wait")
        with m.If(~self.running):
            m.d.sync += wait.eq(0)
        with m.Elif(self.issue):
            m.d.sync += wait.eq(interval - 1)
        with m.Elif(advance & (wait != 0)):
            m.d.sync += wait.eq(wait - 1)
        return wait == 0

    def _row_padded(self, m, payload):
        """``payload`` with the row's padding (``row_pad``: the last words of the run of
        counter 0, in its last iteration and, beyond ``lanes`` words, the one before)
        replaced by stage 0's ``constant``: the identity of a reduction stage 0
        accumulates, so padding never reaches a row's sum or maximum."""
        lanes, config, chain = self._lanes, self.config, self.chain
        counter = config.counters[0]
        last = chain.last[0]
        second = Signal(name="simd_row_second_last")
        m.d.comb += second.eq(~last & (chain.values[0] + 2 * counter.stride >= counter.max))
        padded = Signal(data.ArrayLayout(unsigned(32), lanes), name="simd_row_padded")
        for lane in range(lanes):
            pad = (last & (config.row_pad + lane >= lanes)) | \
                  (second & (config.row_pad + lane >= 2 * lanes))
            m.d.comb += padded[lane].eq(Mux(pad, config.stages[0].constant, payload[lane]))
        return padded

    def _stages_body(self, body, platform, acc, flow):
        """The stage registers and ALUs into module ``body``; returns the last stage's
        beat and each stage's ``valid``."""
        domain, config = self._domain, self.config
        stage_config = Signal(config.stages.shape(), name="simd_stage_config")
        acc_stage = Signal.like(config.acc_stage, name="simd_acc_stage")
        body.d[domain] += [stage_config.eq(config.stages), acc_stage.eq(config.acc_stage)]
        acc_write = acc.write_port(domain=domain)
        acc_read_first = acc.read_port(domain="comb")
        acc_read_later = acc.read_port(domain="comb") if gates_clocks(platform) \
            else acc_read_first
        busy_terms = []
        previous = flow.head
        for stage in range(self._stages):
            # stage 0 on the configuration and the head; later stages on the copies
            cfg = config.stages[stage] if stage == 0 else stage_config[stage]
            here = config.acc_stage if stage == 0 else acc_stage
            acc_read = acc_read_first if stage == 0 else acc_read_later
            out = Signal(flow.record, name=f"simd_stage{stage}")
            if self.latency_table is None:
                busy_terms.append(out.valid)
                self._stage(body, stage, cfg, here, acc_read, acc_write, previous, out,
                            flow.advance)
            else:
                busy_terms += pipelined_stage(self, body, stage, cfg, here, acc_read,
                                              acc_write, previous, out, flow.advance)
            previous = out
        return previous, busy_terms

    def _stage(self, body, stage, cfg, here, acc_read, acc_write, previous, out, advance):
        """Stage ``stage``: ``lanes`` ALUs on ``previous``, into register ``out``."""
        domain, simd = self._domain, self.active
        acc_index_bits = (ACC_DEPTH - 1).bit_length()
        acc_data = Signal(data.ArrayLayout(unsigned(32), self._lanes),
                          name=f"stage{stage}_acc_data")
        body.d.comb += acc_data.eq(acc_read.data)
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
        for lane in range(self._lanes):
            if self._shared_units:
                alu = self.alus[stage][lane]
            else:
                alu = body.submodules[f"stage{stage}_alu{lane}"] = FPALU()
            register = Signal(32, name=f"stage{stage}_reg{lane}")
            last = Signal(32, name=f"stage{stage}_last{lane}")
            reg_value = Mux(first, cfg.constant, Mux(acc_here, acc_data[lane], register))
            last_value = Mux(previous.first, cfg.constant, last)
            operands = [self.operand(body, src, f"stage{stage}_lane{lane}_operand", lane,
                                      cfg, previous, reg_value, last_value)
                        for src in (cfg.src_a, cfg.src_b, cfg.src_c)]
            body.d.comb += [alu.op.eq(cfg.op), alu.a.eq(operands[0]),
                            alu.b.eq(operands[1]), alu.c.eq(operands[2])]
            results.append(alu.result)
            with body.If(simd & advance & previous.valid):
                body.d[domain] += [out.vec[lane].eq(alu.result),
                                   register.eq(alu.result),
                                   last.eq(previous.vec[lane])]
        with body.If(simd & acc_here):
            body.d.comb += acc_write.data.eq(Cat(*results))

    @staticmethod
    def operand(body, src, name, lane, cfg, previous, reg_value, last_value):
        """The operand that source field ``src`` selects for lane ``lane``."""
        operand = Signal(32, name=name)
        with body.Switch(src):
            with body.Case(Source.PREV):
                body.d.comb += operand.eq(previous.vec[lane])
            with body.Case(Source.REG):
                body.d.comb += operand.eq(reg_value)
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
                body.d.comb += operand.eq(last_value)
        return operand

    def _special_tail(self, m, special, previous, advance):
        """The tail's special function. With ``tail = NONE`` a beat passes one register;
        else it enters the special-function unit (the pipeline: SPECIAL_STEPS + 1
        registers, one beat per cycle; the iterating unit: one register), its flags
        beside it. Each path only takes beats of its own kind, so a run never sees a
        beat left in the other path by the run before. Returns the beat's flags and
        (``vec``) its words, rounded to BF16 when ``tail_bf16`` says so."""
        config, lanes = self.config, self._lanes
        with_func = Signal(name="simd_with_func")
        m.d.comb += with_func.eq(config.tail != Tail.NONE)
        m.d.comb += [special.active.eq(with_func), special.enable.eq(advance),
                     special.valid.eq(previous.valid & with_func),
                     special.func.eq(config.tail),
                     special.x.eq(previous.vec)]
        flags = data.StructLayout({"valid": 1, "emit": 1, "done": 1})
        bypass = Signal(_beat_layout(lanes), name="simd_bypass")
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
        result = SimpleNamespace(flags=Signal(flags, name="simd_func"), vec=func_out)
        m.d.comb += func_result.eq(Mux(with_func, special.result, bypass.vec))
        for lane in range(lanes):
            rounded = fp32_to_bf16(m, func_result[lane], name=f"tail_bf16_{lane}")
            m.d.comb += func_out[lane].eq(Mux(config.tail_bf16, rounded, func_result[lane]))
        m.d.comb += [
            result.flags.valid.eq(Mux(with_func, carried.valid, bypass.valid)),
            result.flags.emit.eq(Mux(with_func, carried.emit, bypass.emit)),
            result.flags.done.eq(Mux(with_func, carried.done, bypass.done)),
        ]
        return result

    def _combinational_tree(self, m, previous):
        """The combinational lane reduction of ``previous.vec`` (``fp_latency`` off)."""
        level = [previous.vec[lane] for lane in range(self._lanes)]
        depth = 0
        while len(level) > 1:
            nxt = []
            for pair in range(len(level) // 2):
                left, right = level[2 * pair], level[2 * pair + 1]
                total = fp32_add(m, left, right, name=f"red_add{depth}_{pair}")
                largest = fp32_max(m, left, right, name=f"red_max{depth}_{pair}")
                nxt.append(Mux(self.config.reduce == Reduce.MAX, largest, total))
            level = nxt
            depth += 1
        return level[0]

    def _reduction(self, m, previous, flow):
        """The reduction tree (pairs (0,1), (2,3), ... then pairs of those) into the last
        register, which empties into the tail streams."""
        config, tail = self.config, flow.tail
        if self.latency_table is None:
            flags, vec = previous.flags, previous.vec
            scalar = self._combinational_tree(m, previous)
        else:
            flags, scalar = pipelined_reduction(m, previous, config.reduce, self._lanes,
                                                self.latency_table, flow.advance)
            vec = flags.vec
        with m.If(flow.advance):
            m.d.sync += [
                tail.valid.eq(flags.valid), tail.emit.eq(flags.emit),
                tail.done.eq(flags.done), tail.vec.eq(vec),
                tail.scalar.eq(scalar),
            ]
        with m.Elif(flow.out_ready):
            m.d.sync += tail.valid.eq(0)
        # the three streams take a beat together (each valid is gated by all readies,
        # which depend only on FIFO levels)
        push = tail.valid & flow.out_ready
        emit = push & tail.emit
        m.d.comb += [
            self.vector_out.valid.eq(emit & config.vector_out),
            self.vector_out.payload.eq(tail.vec),
            self.scalar_out.valid.eq(emit & (config.reduce != Reduce.NONE)),
            self.scalar_out.payload.eq(tail.scalar),
            self.control_out.valid.eq(push & tail.done),
            self.control_out.payload.eq(1),
            self.done.eq(push & tail.done),
        ]

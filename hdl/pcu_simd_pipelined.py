"""The SIMD body's pieces on the pipelined FP operators (the PCU's ``fp_latency``).

With ``fp_latency`` on, :class:`hdl.pcu_simd.SIMDPipeline` builds its stages, its
interlock and its reduction tree from these functions instead of the combinational ALU
and tree:

* :func:`pipelined_stage`: a stage's ``lanes`` :class:`hdl.fp_alu_pipelined.PipelinedFPALU`
  and a delay line of the beat's other fields, tapped at the latency of the stage's op
  (:func:`hdl.fp_latency.op_latency`: the op is fixed for a run, and a run starts with
  the pipeline empty). ``REG`` forwards the result leaving the operator this cycle.
* :func:`issue_interval`: the interlock's interval between issues: the longest latency
  of a stage whose ``REG`` would be read before its last result is out (a ``REG``
  operand outside the accumulator memory; the accumulator when counter 0 runs no more
  iterations than the latency). Additions then happen in the order of the combinational
  PCU: the same words.
* :func:`pipelined_reduction`: the lane tree on pipelined adders and comparators, the
  beat waiting beside it (tapped by ``reduce``).

Everything moves on the pipeline's ``advance`` (the operators under an
``EnableInserter``), so a stall freezes every beat in place. See ``docs/pcu.md``, "SIMD
stages on the pipelined operators".
"""

from amaranth import Cat, Mux, Signal, unsigned
from amaranth.hdl import DomainRenamer, EnableInserter
from amaranth.lib import data

from .fp import Op
from .fp_alu_pipelined import PipelinedFPALU
from .fp_latency import FPKind, op_latency
from .fp_pipelined import PipelinedFP32Add, PipelinedFP32Compare
from .pcu_config import ACC_DEPTH, Reduce, Source

__all__ = ["latency_signal", "issue_interval", "pipelined_stage", "pipelined_reduction",
           "stage_depth"]


def stage_depth(table):
    """The longest latency of a stage (its delay line's length)."""
    return max(op_latency(op, table) for op in Op)


def latency_signal(m, op, table, name):
    """A signal of the latency (cycles) of a stage doing ``op`` (a signal)."""
    latency = Signal(range(stage_depth(table) + 1), name=name)
    with m.Switch(op):
        for code in Op:
            with m.Case(code):
                m.d.comb += latency.eq(op_latency(code, table))
        with m.Default():
            m.d.comb += latency.eq(1)
    return latency


def _maximum(m, values, name):
    """The largest of ``values`` (signals of one shape)."""
    best = values[0]
    for number, value in enumerate(values[1:], 1):
        larger = Signal.like(best, name=f"{name}{number}")
        m.d.comb += larger.eq(Mux(value > best, value, best))
        best = larger
    return best


def issue_interval(m, config, table):
    """Cycles (of ``advance``) the head leaves between two issues so that no stage
    reads its ``REG`` before its previous result has left its operator: 1 if none."""
    counter = config.counters[0]
    intervals = []
    for stage, cfg in enumerate(config.stages):
        latency = latency_signal(m, cfg.op, table, f"simd_stage{stage}_latency")
        uses_reg = Cat(*[src == Source.REG for src in (cfg.src_a, cfg.src_b, cfg.src_c)]).any()
        # the accumulator memory's word comes back after counter 0's trip count: a
        # hazard only when that is at most the latency
        short_loop = Signal(name=f"simd_stage{stage}_short_loop")
        m.d.comb += short_loop.eq(counter.min + latency * counter.stride >= counter.max)
        hazard = uses_reg & ((config.acc_stage != stage + 1) | short_loop)
        interval = Signal.like(latency, name=f"simd_stage{stage}_interval")
        m.d.comb += interval.eq(Mux(hazard, latency, 1))
        intervals.append(interval)
    return _maximum(m, intervals, "simd_interval")


def _delay_line(body, domain, enable, value, depth, latency, name):
    """``value`` (a struct with ``valid``) and its copies 1 .. ``depth`` cycles (of
    ``enable``) old; a beat goes no further than tap ``latency`` (a signal), so that a
    run with a longer latency never finds one of the run before there."""
    taps = [value]
    for number in range(1, depth + 1):
        delayed = Signal.like(value, name=f"{name}_d{number}")
        with body.If(enable):
            body.d[domain] += [delayed.eq(taps[-1]),
                               delayed.valid.eq(taps[-1].valid & (latency >= number))]
        taps.append(delayed)
    return taps


def _tap(body, taps, latency, out):
    """Drive ``out`` from ``taps[latency]`` (``latency`` a signal)."""
    with body.Switch(latency):
        for number, tap in enumerate(taps):
            with body.Case(number):
                body.d.comb += out.eq(tap)


def _carried_layout(record):
    """The beat's fields but its vector: what waits beside a stage's operators."""
    return data.StructLayout({name: field.shape for name, field in record
                              if name != "vec"})


def pipelined_stage(pipe, body, stage, cfg, here, acc_read, acc_write, previous, out,
                    advance):
    """Stage ``stage`` of SIMD pipeline ``pipe`` on pipelined ALUs: ``previous`` enters
    the operators, ``out`` (combinational) is the beat leaving them. Returns the valid
    bits of the beats inside (for the pipeline's ``busy``)."""
    table, domain, simd, lanes = pipe.latency_table, pipe.domain, pipe.active, pipe.lanes
    enable = Signal(name=f"stage{stage}_enable")
    body.d.comb += enable.eq(simd & advance)
    latency = latency_signal(body, cfg.op, table, f"stage{stage}_op_latency")
    carried = Signal(_carried_layout(out.shape()), name=f"stage{stage}_in")
    body.d.comb += [getattr(carried, name).eq(getattr(previous, name))
                    for name, _ in carried.shape()]
    taps = _delay_line(body, domain, enable, carried, stage_depth(table), latency,
                       f"stage{stage}")
    leaving = Signal.like(carried, name=f"stage{stage}_out")
    _tap(body, taps, latency, leaving)
    body.d.comb += [getattr(out, name).eq(getattr(leaving, name))
                    for name, _ in carried.shape()]
    acc_index_bits = (ACC_DEPTH - 1).bit_length()
    acc_data = Signal(data.ArrayLayout(unsigned(32), lanes), name=f"stage{stage}_acc_data")
    body.d.comb += acc_data.eq(acc_read.data)
    acc_here, first = Signal(name=f"stage{stage}_acc"), Signal(name=f"stage{stage}_first")
    # the accumulator word being written as this beat enters is forwarded
    acc_forward = Signal(name=f"stage{stage}_acc_forward")
    body.d.comb += [acc_here.eq(here == stage + 1),
                    first.eq(Mux(acc_here, previous.first_outer, previous.first)),
                    acc_forward.eq(out.valid & (out.counter[:acc_index_bits] ==
                                                previous.counter[:acc_index_bits]))]
    with body.If(acc_here):
        body.d.comb += acc_read.addr.eq(previous.counter[:acc_index_bits])
    with body.If(simd & acc_here):
        body.d.comb += [acc_write.addr.eq(out.counter[:acc_index_bits]),
                        acc_write.en.eq(advance & out.valid)]
    results = []
    for lane in range(lanes):
        alu = PipelinedFPALU(table)
        body.submodules[f"stage{stage}_alu{lane}"] = DomainRenamer(domain)(
            EnableInserter(enable)(alu))
        register = Signal(32, name=f"stage{stage}_reg{lane}")
        last = Signal(32, name=f"stage{stage}_last{lane}")
        stored = Mux(acc_here, Mux(acc_forward, alu.result, acc_data[lane]),
                     Mux(out.valid, alu.result, register))
        reg_value = Mux(first, cfg.constant, stored)
        last_value = Mux(previous.first, cfg.constant, last)
        operands = [pipe.operand(body, src, f"stage{stage}_lane{lane}_operand", lane, cfg,
                                 previous, reg_value, last_value)
                    for src in (cfg.src_a, cfg.src_b, cfg.src_c)]
        body.d.comb += [alu.op.eq(cfg.op), alu.a.eq(operands[0]), alu.b.eq(operands[1]),
                        alu.c.eq(operands[2]), out.vec[lane].eq(alu.result)]
        results.append(alu.result)
        with body.If(enable & out.valid):
            body.d[domain] += register.eq(alu.result)
        with body.If(enable & previous.valid):
            body.d[domain] += last.eq(previous.vec[lane])
    with body.If(simd & acc_here):
        body.d.comb += acc_write.data.eq(Cat(*results))
    return [tap.valid for tap in taps[1:]]


def _tree(m, enable, level, operator, result, name):
    """A pairwise tree ((0,1), (2,3), ... then pairs of those) of ``operator``s."""
    depth = 0
    while len(level) > 1:
        nxt = []
        for pair in range(len(level) // 2):
            unit = operator()
            m.submodules[f"{name}{depth}_{pair}"] = EnableInserter(enable)(unit)
            m.d.comb += [unit.i.payload.a.eq(level[2 * pair]),
                         unit.i.payload.b.eq(level[2 * pair + 1])]
            nxt.append(result(unit.o.payload))
        level = nxt
        depth += 1
    return level[0]


def pipelined_reduction(m, previous, reduce, lanes, table, advance):
    """The lane reduction on pipelined adders (``SUM``) and comparators (``MAX``), the
    beat (``previous.flags``: ``valid``, ``emit``, ``done``; ``previous.vec``) waiting
    beside it. Returns ``(beat, scalar)``: the beat leaving the tree (``previous``'s
    with ``reduce = NONE``) and its reduction."""
    words = [previous.vec[lane] for lane in range(lanes)]
    total = _tree(m, advance, words, lambda: PipelinedFP32Add(table[FPKind.ADD]),
                  lambda payload: payload, "red_add")
    largest = _tree(m, advance, words, lambda: PipelinedFP32Compare(table[FPKind.COMPARE]),
                    lambda payload: payload.max, "red_max")
    levels = (lanes - 1).bit_length()
    latency = Signal(range(levels * table[FPKind.ADD] + 1), name="red_latency")
    with m.Switch(reduce):
        with m.Case(Reduce.SUM):
            m.d.comb += latency.eq(levels * table[FPKind.ADD])
        with m.Case(Reduce.MAX):
            m.d.comb += latency.eq(levels * table[FPKind.COMPARE])
        with m.Default():
            m.d.comb += latency.eq(0)
    beat = Signal(data.StructLayout({
        "valid": 1, "emit": 1, "done": 1,
        "vec": data.ArrayLayout(unsigned(32), lanes)}), name="red_beat")
    m.d.comb += [beat.valid.eq(previous.flags.valid), beat.emit.eq(previous.flags.emit),
                 beat.done.eq(previous.flags.done), beat.vec.eq(previous.vec)]
    taps = _delay_line(m, "sync", advance, beat, levels * table[FPKind.ADD], latency, "red")
    leaving = Signal.like(beat, name="red_out")
    _tap(m, taps, latency, leaving)
    scalar = Signal(32, name="red_result")
    m.d.comb += scalar.eq(Mux(reduce == Reduce.MAX, largest, total))
    return leaving, scalar

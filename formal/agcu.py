"""``hdl.agcu``: the AGCU's AXI channels and the burst generator behind ``ar``/``aw``.

:class:`BurstGeneratorHarness` (``AffineBurstGenerator``): the pattern (base, counts,
signed strides) and the ``start`` pulses are arbitrary (a restart may come at any time),
except that base and strides are multiples of the beat (the AGCU rejects anything else
with ``MISALIGNED``) and counts are non-zero (else ``BAD_CONFIG``). The consumer's
``ready`` is arbitrary. Asserted on every burst offered: it does not cross a 4 KiB
boundary (first and last byte in the same page, and the burst does not run past the
end of the address space), its length is 1..``max_burst`` beats, and ``valid``/
``payload`` are held until ``ready``.

:class:`AGCUHarness`: the same burst rules and the rest of the AXI manager's duties at
the ports of the whole ``AGCU`` (its docstring lists them).
"""

import re
import unittest.mock

from amaranth import Cat, Elaboratable, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

import hdl.agcu as agcu_module
import hdl.agcu_engines as engines_module
from formal.common import (
    AnyConst,
    AnySeq,
    Assert,
    Assume,
    Cover,
    elaborate_open,
    fifo_invariants,
    no_reset,
    open_submodule,
    stream_stable,
)
from hdl.agcu import AGCU, AGCUOp
from hdl.agcu_engines import (
    BURST_BOUNDARY,
    AffineBurstGenerator,
    dma_windows_layout,
    window_allows,
)
from hdl.interfaces import AXIBurst, ConfigPort

__all__ = ["AGCUHarness", "AnyConfig", "BurstGeneratorHarness", "EngineWindowsHarness"]


def check_burst(m, name, addr, beats, when, *, addr_width, beat_shift, max_burst):
    """Assert, while ``when``, that the burst of ``beats`` beats at byte ``addr`` stays in
    one 4 KiB page (first and last byte; a burst running past the end of the address
    space fails too), has 1..``max_burst`` beats and a beat-aligned address. Returns the
    burst's last byte address (``addr_width + 1`` bits)."""
    page_bits = BURST_BOUNDARY.bit_length() - 1
    last_byte = Signal(addr_width + 1, name=re.sub(r"\W+", "_", f"{name}_last_byte"))
    m.d.comb += last_byte.eq(addr + (beats << beat_shift) - 1)
    with m.If(when):
        m.d.comb += [
            Assert(last_byte[page_bits:] == addr[page_bits:],
                   f"{name}: burst crosses a 4 KiB boundary"),
            Assert((beats >= 1) & (beats <= max_burst),
                   f"{name}: burst not 1..max_burst beats"),
            Assert(addr[:beat_shift] == 0, f"{name}: burst address not beat aligned"),
        ]
    return last_byte


class BurstGeneratorHarness(Elaboratable):
    """Parameters: ``addr_width`` (at least 13, so that 4 KiB pages exist), ``beat_bytes``
    and ``max_burst`` as for the generator; ``generator``: the design under test (a
    mutant in the self-tests).

    With ``invariants=True`` the harness also asserts what the generator's state must be
    (read from its internal signals and its output FIFO's, ``formal.common.elaborate_open``
    and ``open_submodule``): the current beat, row and plane addresses are beat-aligned;
    while running the latched pattern has non-zero counts and aligned strides, a beat
    is left in the row and ``contiguous`` is ``stride[0]`` = the beat; the open burst's
    end and room are its address plus its beats and ``max_burst`` minus them; the open
    burst and every burst in the output FIFO satisfy the burst properties; the FIFO's
    pointers agree with its level and a stalled burst is the one in slot ``read_ptr``.
    These make the properties inductive (``mode prove``).
    """

    def __init__(self, addr_width=14, beat_bytes=64, max_burst=4,
                 generator=AffineBurstGenerator, invariants=False):
        self.addr_width = addr_width
        self.beat_bytes = beat_bytes
        self.max_burst = max_burst
        self.generator = generator
        self.invariants = invariants

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        aw = self.addr_width
        beat_shift = self.beat_bytes.bit_length() - 1
        dut = self.generator(addr_width=aw, beat_bytes=self.beat_bytes,
                             max_burst=self.max_burst)
        if self.invariants:
            m.submodules.dut, internals = elaborate_open(dut, platform)
        else:
            m.submodules.dut = dut
        pattern = dut.pattern
        m.d.comb += [dut.start.eq(AnySeq(1)), dut.bursts.ready.eq(AnySeq(1)),
                     pattern.base.eq(AnySeq(aw)),
                     Assume(pattern.base[:beat_shift] == 0)]
        for k in range(3):
            m.d.comb += [pattern.count[k].eq(AnySeq(32)), Assume(pattern.count[k] != 0),
                         pattern.stride[k].eq(AnySeq(32)),
                         Assume(pattern.stride[k].as_unsigned()[:beat_shift] == 0)]

        burst = dut.bursts.payload
        limits = dict(addr_width=aw, beat_shift=beat_shift, max_burst=self.max_burst)
        check_burst(m, "bursts", burst.addr, burst.len + 1, dut.bursts.valid, **limits)
        stalled, stalled_burst = stream_stable(m, dut.bursts, "bursts")
        if self.invariants:
            self.assert_invariants(m, dut, internals, stalled, stalled_burst, limits)
        return m

    def assert_invariants(self, m, dut, internals, stalled, stalled_burst, limits):
        generator_invariants(m, dut, m._named_submodules["dut"][0], internals, stalled,
                             stalled_burst, limits)


def generator_invariants(m, dut, module, internals, stalled, stalled_burst, limits,
                         prefix=""):
    """Assert the invariants of an ``AffineBurstGenerator`` ``dut`` whose elaborated
    ``module`` and ``internals`` came from ``elaborate_open``/``open_submodule``
    (:class:`BurstGeneratorHarness` lists them); ``stalled``, ``stalled_burst``: the
    ``stream_stable`` registers of its ``bursts``."""
    beat_shift = limits["beat_shift"]
    pattern = data.View(dut.pattern.shape(), internals["pattern"])
    running = internals["running"]
    for name in ("addr", "row", "plane"):
        m.d.comb += Assert(internals[name][:beat_shift] == 0,
                           f"{prefix}{name} not beat aligned")
    with m.If(running):
        for k in range(3):
            m.d.comb += [
                Assert(pattern.count[k] != 0, f"{prefix}running with count[{k}] = 0"),
                Assert(pattern.stride[k].as_unsigned()[:beat_shift] == 0,
                       f"{prefix}running with stride[{k}] not aligned"),
            ]
        m.d.comb += [
            Assert(internals["left0"] != 0, f"{prefix}running with no beat left in the row"),
            Assert(internals["contiguous"] == (pattern.stride[0] == 1 << beat_shift),
                   f"{prefix}contiguous is not stride[0] == beat"),
        ]
    with m.If(internals["open_valid"]):
        open_beats = internals["open_beats"]
        m.d.comb += [
            Assert(internals["open_end"] == internals["open_addr"] + (open_beats << beat_shift),
                   f"{prefix}open_end is not the open burst's end"),
            Assert(internals["room"] == limits["max_burst"] - open_beats,
                   f"{prefix}room is not max_burst - open_beats"),
        ]
    check_burst(m, f"{prefix}open", internals["open_addr"], internals["open_beats"],
                internals["open_valid"], **limits)
    # the output FIFO: pointers, every burst it holds, the stalled one
    _, fifo = open_submodule(module, "out_fifo")
    out_fifo = internals["submodule:out_fifo"]
    slots, head = fifo_invariants(m, out_fifo, fifo, f"{prefix}FIFO ")
    for slot, (contents, _position, held) in enumerate(slots):
        burst = data.View(out_fifo.shape, contents)
        check_burst(m, f"{prefix}fifo_slot{slot}", burst.addr, burst.len + 1, held, **limits)
    queued_checks(m, dut, slots, beat_shift, prefix)
    m.d.comb += [Assert(~stalled | (out_fifo.level != 0), f"{prefix}stalled without a burst"),
                 Assert(~stalled | (head == stalled_burst.as_value()),
                        f"{prefix}the stalled burst is not in slot read_ptr")]


def queued_checks(m, generator, slots, beat_shift, prefix=""):
    """With an ``access``, assert that each burst held in the output FIFO ``slots``
    (:func:`formal.common.fifo_invariants`) of ``generator`` carries its windows'
    answer (``allowed``, computed as it was queued; the windows are fixed per trace)."""
    if generator.access is None:
        return
    for slot, (contents, _position, held) in enumerate(slots):
        burst = data.View(generator.burst_layout, contents)
        m.d.comb += Assert(~held | (burst.allowed == window_allows(
            generator.windows, burst.addr, burst.len + 1, beat_shift, generator.access)),
            f"{prefix}fifo_slot{slot}: allowed is not the windows' answer")


class AnyConfig(wiring.Component):
    """Stands in for the AGCU's ``ConfigRegister`` in :class:`AGCUHarness`: the
    configuration is any value, constant for the whole trace (what a loaded bitstream
    gives; writing its 12 words through ``cfg`` would cost 12 cycles of proof depth).
    ``ConfigRegister`` itself is tested by the configuration tests."""

    def __init__(self, layout):
        self._layout = data.Layout.cast(layout)
        super().__init__({"port": In(ConfigPort()), "value": Out(self._layout)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.value.eq(AnyConst(self._layout.size))
        return m


class AGCUHarness(Elaboratable):
    """The whole ``AGCU`` with every input driven by the solver (``invariants=True``:
    also :meth:`assert_invariants`, for the induction proof): any command stream, any
    configuration (:class:`AnyConfig`), any ``ready`` on ``ar``/``aw``/``w`` and on the
    array-side outputs, any tokens and scalars (``abort_cmd`` held low: the abort's
    drain is tested by simulation). Constraints: ``vector_in`` obeys the
    stream rule (the switch feeding it is proven to); the subordinate answers ``r`` only
    while a read burst is outstanding and ``b`` only for a burst whose ``aw`` and last
    ``w`` beat it has taken; the harness's counters of bursts and vector beats
    (``seq_bits``) do not wrap.

    Asserted:

    * ``ar``, ``aw`` and ``w``: ``valid`` and ``payload`` held until ``ready``;
    * every ``ar``/``aw`` burst offered: within one 4 KiB page, 1..``max_burst`` beats,
      beat-aligned, ``size`` = the beat, ``INCR``;
    * ``w.last`` on the right beat: ``w`` burst N (the beats up to the Nth ``last``)
      has exactly ``len + 1`` beats of ``aw`` burst N, whichever channel goes first
      (tracked burst N, any N);
    * between ``vector_in`` and ``w`` during a kernel execute no beat is created or lost:
      vector beat M is write beat M (plain store) or the high halves of write beat
      M // 2's lanes, low half for even M (BF16 store), and at most one vector beat
      (the BF16 first half) is held (tracked vector beat M, any M).

    With ``windows=True`` the memory windows are any (``AnyConst``: fixed for the
    trace, as the host sets them per launch) and it is also asserted that no ``ar``
    burst is offered outside an enabled read window and no ``aw`` burst outside an
    enabled write window (with the invariants: nor is one queued for ``aw``); the
    vector beats are followed into ``w`` until a refused burst drains the command
    (its owed beats then leave with strobes clear). For BMC: the invariants do not
    cover the drain.
    """

    def __init__(self, *, lanes=1, addr_width=14, max_burst=4, max_outstanding=2,
                 buffer_depth=2, seq_bits=4, covers=False, agcu=AGCU,
                 generator=AffineBurstGenerator, invariants=False, windows=False):
        self.invariants = invariants
        self.windows = windows
        self.covers = covers
        self.agcu = agcu
        self.generator = generator
        self.lanes = lanes
        self.addr_width = addr_width
        self.max_burst = max_burst
        self.max_outstanding = max_outstanding
        self.buffer_depth = buffer_depth
        self.seq_bits = seq_bits

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        with (unittest.mock.patch.object(agcu_module, "ConfigRegister", AnyConfig),
              unittest.mock.patch.object(engines_module, "AffineBurstGenerator",
                                        self.generator)):
            dut = self.agcu(lanes=self.lanes, addr_width=self.addr_width,
                            max_burst=self.max_burst, max_outstanding=self.max_outstanding,
                            buffer_depth=self.buffer_depth)
            m.submodules.dut, internals = elaborate_open(dut, platform)
            # the engines build their generators when elaborated: open them here
            agcu = m._named_submodules["dut"][0]
            engines = {name: open_submodule(agcu, name, platform)
                       for name in ("read_engine", "write_engine")}
        conf = internals["submodule:config"].value
        axi = dut.axi
        beat_shift = dut.beat_bytes.bit_length() - 1
        seq = self.seq_bits

        def counter(name, event):
            count = Signal(seq, name=name)
            m.d.sync += count.eq(count + event)
            # no wrap: a trace has at most 2**seq - 2 bursts per channel and vector beats
            m.d.comb += Assume(count != 2 ** seq - 1)
            return count

        # every input from the solver but abort_cmd (held low: an abort drops the data
        # these properties follow; its drain is tested by simulation)
        m.d.comb += dut.abort_cmd.eq(0)
        windows = Signal(dma_windows_layout(self.addr_width), name="windows")
        if self.windows:
            m.d.comb += [Value.cast(windows).eq(AnyConst(len(Value.cast(windows)))),
                         dut.windows.eq(windows)]
        # any launch position, steady through the trace (as the host holds it)
        m.d.comb += dut.position.eq(AnyConst(len(dut.position)))
        for port in (dut.cmd, dut.control_in, dut.scalar_in, dut.vector_in):
            m.d.comb += [port.valid.eq(AnySeq(1)),
                         port.payload.eq(AnySeq(len(Value.cast(port.payload))))]
        m.d.comb += [dut.cfg.write.eq(AnySeq(1)), dut.cfg.index.eq(AnySeq(8)),
                     dut.cfg.data.eq(AnySeq(32))]
        for port in (axi.ar, axi.aw, axi.w, dut.vector_out, dut.scalar_out,
                     dut.control_out, dut.bitstream_out):
            m.d.comb += port.ready.eq(AnySeq(1))
        for port in (axi.r, axi.b):
            m.d.comb += [port.valid.eq(AnySeq(1)),
                         port.payload.eq(AnySeq(len(Value.cast(port.payload))))]
        stream_stable(m, dut.vector_in, "vector_in", rule=Assume)

        # the subordinate answers only what was asked
        ar_go = axi.ar.valid & axi.ar.ready
        aw_go = axi.aw.valid & axi.aw.ready
        w_go = axi.w.valid & axi.w.ready
        r_last = axi.r.valid & axi.r.ready & axi.r.payload.last
        b_go = axi.b.valid & axi.b.ready
        ar_count, r_bursts = counter("ar_count", ar_go), counter("r_bursts", r_last)
        aw_count = counter("aw_count", aw_go)
        w_bursts = counter("w_bursts", w_go & axi.w.payload.last)
        b_count = counter("b_count", b_go)
        m.d.comb += [Assume(~axi.r.valid | (ar_count != r_bursts)),
                     Assume(~axi.b.valid | ((aw_count != b_count) & (w_bursts != b_count)))]

        # ar, aw, w: held until ready; bursts within a page
        stalls = {name: stream_stable(m, channel, name)[0]
                  for name, channel in (("ar", axi.ar), ("aw", axi.aw), ("w", axi.w))}
        page_bits = BURST_BOUNDARY.bit_length() - 1
        limits = dict(addr_width=self.addr_width, beat_shift=beat_shift,
                      max_burst=self.max_burst)
        for name, channel in (("ar", axi.ar), ("aw", axi.aw)):
            burst = channel.payload
            last_byte = check_burst(m, name, burst.addr, burst.len + 1, channel.valid,
                                    **limits)
            with m.If(channel.valid):
                m.d.comb += [
                    Assert(burst.size == beat_shift, f"{name}: size is not the beat"),
                    Assert(burst.burst == AXIBurst.INCR, f"{name}: burst type is not INCR"),
                ]
            if self.covers:
                m.d.comb += Cover(channel.valid & channel.ready & (burst.len != 0) &
                                  (last_byte[:page_bits] == 2 ** page_bits - 1),
                                  f"{name}: a burst of several beats ends on a 4 KiB boundary")

        if self.windows:
            for name, channel, access in (("ar", axi.ar, "read"), ("aw", axi.aw, "write")):
                burst = channel.payload
                m.d.comb += Assert(~channel.valid | window_allows(
                    windows, burst.addr, burst.len + 1, beat_shift, access),
                    f"{name}: burst outside the enabled {access} windows")
        self._windows = windows

        # w.last: w burst N has the length of aw burst N (tracked burst N)
        burst_n = Signal(seq)
        m.d.comb += burst_n.eq(AnyConst(seq))
        n_len = Signal(8)           # len of aw burst N, once taken
        n_len_known = Signal()
        n_beats = Signal(9)         # w beats of burst N so far
        n_done = Signal()           # w burst N ended (its last beat taken)
        with m.If(aw_go & (aw_count == burst_n)):
            m.d.sync += [n_len.eq(axi.aw.payload.len), n_len_known.eq(1)]
            m.d.comb += Assert(Mux(n_done, n_beats == axi.aw.payload.len + 1,
                                   n_beats <= axi.aw.payload.len),
                               "w burst N does not have the length of aw burst N")
        with m.If(w_go & (w_bursts == burst_n)):
            m.d.sync += n_beats.eq(n_beats + 1)
            with m.If(axi.w.payload.last):
                m.d.sync += n_done.eq(1)
            with m.If(n_len_known):
                m.d.comb += Assert(axi.w.payload.last == (n_beats == n_len),
                                   "w.last not on beat len of its aw burst")

        # vector_in -> w during a kernel execute (tracked vector beat M)
        execute = Signal()          # the last accepted command is EXECUTE
        pack = Signal()             # ... with a BF16-packing store
        with m.If(dut.cmd.valid & dut.cmd.ready):
            m.d.sync += [execute.eq(dut.cmd.payload.op == AGCUOp.EXECUTE),
                         pack.eq(conf.store_bf16)]
        v_go = dut.vector_in.valid & dut.vector_in.ready
        # a refused burst (windows) drains the command: its owed beats leave with their
        # strobes clear, without vector beats; the data is followed until then
        followed = Signal()
        m.d.comb += followed.eq(1)
        if self.windows:
            drained = Signal()
            with m.If(internals["aborting"]):
                m.d.sync += drained.eq(1)
            m.d.comb += followed.eq(~drained & ~internals["aborting"])
        self._followed = followed
        w_exec = w_go & execute & followed
        vectors = counter("vectors", v_go)
        written = Signal(seq)       # vector beats that left on w (2 per BF16 write beat)
        m.d.sync += written.eq(written + Mux(w_exec, Mux(pack, 2, 1), 0))
        with m.If(followed):
            m.d.comb += [
                Assert(written <= vectors, "a write beat without its vector beat (created)"),
                Assert(vectors - written <= pack, "vector beats held back (lost)"),
            ]
        beat_m = Signal(seq)
        m.d.comb += beat_m.eq(AnyConst(seq))
        m_value = Signal.like(dut.vector_in.payload)
        m_in = Signal()
        with m.If(v_go & (vectors == beat_m)):
            m.d.sync += [m_value.eq(dut.vector_in.payload), m_in.eq(1)]
        m_now = Mux(v_go & (vectors == beat_m), Value.cast(dut.vector_in.payload),
                    Value.cast(m_value))
        m_in_now = m_in | (v_go & (vectors == beat_m))
        half = 16 * self.lanes
        highs = Cat(*(m_now[32 * lane + 16:32 * (lane + 1)] for lane in range(self.lanes)))
        data = axi.w.payload.data
        with m.If(w_exec & ~pack & (written == beat_m)):
            m.d.comb += Assert(m_in_now & (data == m_now),
                               "write beat M is not vector beat M")
        with m.If(w_exec & pack & (written == beat_m)):
            m.d.comb += Assert(m_in_now & (data[:half] == highs),
                               "BF16: low half of write beat M/2 is not vector beat M")
        with m.If(w_exec & pack & (written + 1 == beat_m)):
            m.d.comb += Assert(m_in_now & (data[half:] == highs),
                               "BF16: high half of write beat M/2 is not vector beat M")
        if self.covers:
            m.d.comb += [
                Cover(w_go & axi.w.payload.last & (w_bursts == burst_n) & n_len_known &
                      (n_len != 0), "w burst N of several beats ends after aw burst N"),
                Cover(aw_go & (aw_count == burst_n) & n_done,
                      "w burst N ends before aw burst N is taken"),
                Cover(w_exec & ~pack & (written == beat_m) & (beat_m != 0),
                      "plain store: write beat M checked"),
                Cover(w_exec & pack & (written + 1 == beat_m),
                      "BF16 store: the high half of a write beat checked"),
                Cover(stalls["ar"] & axi.ar.valid, "ar held through a stall"),
                Cover(stalls["w"] & axi.w.valid, "w held through a stall"),
            ]
        if self.invariants:
            self.assert_invariants(m, dut, internals, engines, limits,
                                   locals())   # the counters
        return m

    def assert_invariants(self, m, dut, internals, engines, limits, h):
        """The AGCU's state against the harness's counters (``h``: the locals of
        :meth:`elaborate`), which makes its properties inductive: both generators' and
        all three queues' invariants, every burst queued for ``aw`` obeys the burst rules;
        the write queues are in step (``aw`` bursts + queued addresses = ``w`` bursts +
        queued lengths) and agree on burst N, which has the length the harness saw on
        whichever channel went first, and the ``w`` beat counter is the beats of the
        burst in progress; vector beats in - beats written = the held BF16 first half,
        which holds vector beat M's high halves when M is next; the outstanding-burst
        counters are the harness's; an idle AGCU has no work left anywhere."""
        agcu = m._named_submodules["dut"][0]
        # the engines' and the BF16 packer's internals, by name, with the AGCU's
        internals = dict(internals)
        owner = {}          # submodule name -> the elaborated engine holding it
        for engine_module, engine_internals in engines.values():
            internals.update(engine_internals)
            owner.update({name: engine_module for name in engine_module._named_submodules})
        internals.update(open_submodule(agcu, "bf16_packer")[1])
        queues = {}
        for name in ("read_gen", "write_gen"):
            gen = internals[f"submodule:{name}"]
            module, gen_internals = open_submodule(owner[name], name)
            stalled, held = stream_stable(m, gen.bursts, f"{name}_bursts")
            generator_invariants(m, gen, module, gen_internals, stalled, held, limits,
                                 f"{name}: ")
        for name in ("write_addresses", "write_lengths", "read_fifo"):
            fifo = internals[f"submodule:{name}"]
            _, fifo_internals = open_submodule(owner[name], name)
            slots, head = fifo_invariants(m, fifo, fifo_internals, f"{name}: ")
            queues[name] = (fifo, slots, head)
            if name == "write_addresses":
                for slot, (contents, _position, held) in enumerate(slots):
                    burst = data.View(fifo.shape, contents)
                    check_burst(m, f"{name} slot{slot}", burst.addr, burst.len + 1, held,
                                **limits)
                    if self.windows:
                        m.d.comb += Assert(~held | window_allows(
                            self._windows, burst.addr, burst.len + 1,
                            limits["beat_shift"], "write"),
                            f"{name} slot{slot}: queued outside the write windows")
        busy, mode = dut.busy, internals["mode"]
        low_held, w_beat = internals["low_held"], internals["w_beat"]
        addresses, address_slots, _ = queues["write_addresses"]
        lengths, length_slots, length_head = queues["write_lengths"]
        execute, pack = h["execute"], h["pack"]
        n = h["burst_n"]
        m.d.comb += [
            # abort_cmd is held low here (the abort's drain is tested by simulation,
            # tests/test_agcu.py::test_abort_amaranth): never aborting
            # with windows only a refused burst (window_fault) starts a drain
            Assert(~internals["aborting"] |
                   (internals["window_fault"] if self.windows else 0),
                   "aborting without abort_cmd"),
            Assert(~internals["window_fault"] | internals["aborting"],
                   "a window fault outside a drain"),
            # vector_in -> w (until a drain)
            Assert(~self._followed | (h["vectors"] - h["written"] == low_held),
                   "vector beats taken - written is not the held BF16 half"),
            Assert(~self._followed | ~low_held |
                   (execute & pack & internals["pack_bf16"] & busy & (lengths.level != 0)),
                   "a BF16 half held outside a BF16 store"),
            Assert(execute == (mode == AGCUOp.EXECUTE),
                   "the harness's execute is not the AGCU's mode"),
            Assert(~(execute & busy) | (internals["pack_bf16"] == pack),
                   "the harness's pack is not the AGCU's"),
            Assert(h["m_in"] == (h["beat_m"] < h["vectors"]), "vector beat M recorded iff taken"),
            Assert(~self._followed | ~(low_held & (h["beat_m"] == h["written"])) |
                   (internals["low_half"] == Cat(*(
                       Value.cast(h["m_value"])[32 * lane + 16:32 * (lane + 1)]
                       for lane in range(self.lanes)))),
                   "the held BF16 half is not vector beat M's"),
            Assert((lengths.level == 0) | busy, "w beats owed while idle"),
            Assert(busy | (internals["submodule:read_gen"].idle &
                           internals["submodule:write_gen"].idle &
                           (internals["reads_in_flight"] == 0) &
                           (internals["writes_in_flight"] == 0) &
                           (queues["read_fifo"][0].level == 0)),
                   "idle with work left"),
            Assert((addresses.level == 0) | busy, "aw bursts owed while idle"),
            # the two write queues hold the same bursts, from different starts
            Assert(h["aw_count"] + addresses.level == h["w_bursts"] + lengths.level,
                   "the write queues are out of step"),
            Assert(h["written"] <= h["vectors"], "more vector beats written than taken"),
            # w beat counter
            Assert((lengths.level != 0) | (w_beat == 0), "w beat counter running without a burst"),
            Assert((lengths.level == 0) | (w_beat <= length_head),
                   "w beat counter past the burst's length"),
            Assert(h["n_done"] == (n < h["w_bursts"]),
                   "w burst N ended iff the harness counted it"),
            Assert(h["n_len_known"] == (n < h["aw_count"]), "aw burst N known iff taken"),
            Assert((n < h["w_bursts"]) | (n > h["w_bursts"]) | (h["n_beats"] == w_beat),
                   "w beats of burst N are not the beat counter"),
            Assert(~(n > h["w_bursts"]) | (h["n_beats"] == 0),
                   "w beats of burst N before it started"),
            # subordinate counters
            Assert(internals["reads_in_flight"] == h["ar_count"] - h["r_bursts"],
                   "reads in flight are not ar bursts - r bursts"),
            Assert(internals["reads_in_flight"] <= self.max_outstanding,
                   "more reads in flight than allowed"),
            Assert(internals["writes_in_flight"] ==
                   h["w_bursts"] + lengths.level - h["b_count"],
                   "writes in flight are not issued - b responses"),
            Assert(internals["writes_in_flight"] <= self.max_outstanding,
                   "more writes in flight than allowed"),
            Assert(h["b_count"] <= h["aw_count"], "more b responses than aw bursts"),
            Assert(h["b_count"] <= h["w_bursts"], "more b responses than w bursts"),
            Assert(h["r_bursts"] <= h["ar_count"], "more r bursts than ar bursts"),
        ]
        # burst N in the queues
        for contents, position, held in address_slots:
            burst = data.View(addresses.shape, contents)
            with m.If(held & (h["aw_count"] + position == n)):
                m.d.comb += Assert(Mux(h["n_done"], h["n_beats"] == burst.len + 1,
                                       h["n_beats"] <= burst.len),
                                   "queued aw burst N does not match its w beats")
                for contents_l, position_l, held_l in length_slots:
                    with m.If(held_l & (h["w_bursts"] + position_l == n)):
                        m.d.comb += Assert(contents_l == burst.len,
                                           "the write queues disagree on burst N")
        for contents, position, held in length_slots:
            with m.If(held & (h["w_bursts"] + position == n) & h["n_len_known"]):
                m.d.comb += Assert(contents == h["n_len"],
                                   "queued length of burst N is not aw burst N's")


class EngineWindowsHarness(Elaboratable):
    """The AGCU's read or write engine alone (``engine``: ``ReadEngine``,
    ``WriteEngine`` or a mutant) under any memory windows (``AnyConst``: fixed for the
    trace, as the host sets them per launch), with every input from the solver: any
    pattern and ``start`` at any time, any ``abort_cmd``, any ``ready`` and responses,
    any data. Asserted: no burst is offered on ``ar`` (read engine) or ``aw`` (write
    engine) outside an enabled window with that access. Invariants (for the
    induction): every burst in the generator's output FIFO carries the windows' answer
    for it, the open burst's end and room are its address plus its beats and
    ``max_burst`` minus them; write engine: every burst queued for ``aw`` lies inside
    one. The AGCU connects these channels to its AXI port unchanged
    (``wiring.connect``), so this is the AGCU's property."""

    def __init__(self, engine, *, addr_width=14, beat_bytes=4, max_burst=4,
                 max_outstanding=2):
        self.engine = engine
        self.params = dict(addr_width=addr_width, beat_bytes=beat_bytes,
                           max_burst=max_burst, max_outstanding=max_outstanding)

    def elaborate(self, platform):
        m = Module()
        no_reset(m)
        dut = self.engine(**self.params)
        m.submodules.dut, internals = elaborate_open(dut, platform)
        beat_shift = self.params["beat_bytes"].bit_length() - 1
        windows = Signal(dma_windows_layout(self.params["addr_width"]), name="windows")
        m.d.comb += [Value.cast(windows).eq(AnyConst(len(Value.cast(windows)))),
                     dut.windows.eq(windows)]
        for name, member in dut.signature.members.items():
            if name == "windows" or member.flow != In:
                continue
            port = getattr(dut, name)
            if hasattr(port, "valid"):          # a stream into the engine
                m.d.comb += [port.valid.eq(AnySeq(1)),
                             port.payload.eq(AnySeq(len(Value.cast(port.payload))))]
            else:
                m.d.comb += Value.cast(port).eq(AnySeq(len(Value.cast(port))))
        for name, member in dut.signature.members.items():
            port = getattr(dut, name)
            if member.flow == Out and hasattr(port, "ready"):
                m.d.comb += port.ready.eq(AnySeq(1))
        access = "read" if hasattr(dut, "ar") else "write"
        channel = dut.ar if access == "read" else dut.aw
        # the generator's queued bursts carry their windows' answer
        module = m._named_submodules["dut"][0]
        name = "read_gen" if access == "read" else "write_gen"
        generator = internals[f"submodule:{name}"]
        gen_module, gen_internals = open_submodule(module, name, platform)
        out_fifo = gen_internals["submodule:out_fifo"]
        _, fifo_internals = open_submodule(gen_module, "out_fifo", platform)
        slots, _ = fifo_invariants(m, out_fifo, fifo_internals, f"{name} FIFO: ")
        queued_checks(m, generator, slots, beat_shift, f"{name}: ")
        # ... checked from the open burst's end and room, which the generator keeps
        open_beats = gen_internals["open_beats"]
        with m.If(gen_internals["open_valid"]):
            m.d.comb += [
                Assert(gen_internals["open_end"] == gen_internals["open_addr"] +
                       (open_beats << beat_shift), f"{name}: open_end is not the end"),
                Assert(gen_internals["room"] == self.params["max_burst"] - open_beats,
                       f"{name}: room is not max_burst - open_beats"),
            ]
        m.d.comb += Assert(~channel.valid | window_allows(
            windows, channel.payload.addr, channel.payload.len + 1, beat_shift, access),
            f"{'ar' if access == 'read' else 'aw'}: burst outside the enabled {access} "
            f"windows")
        if access == "write":
            fifo = internals["submodule:write_addresses"]
            _, fifo_internals = open_submodule(module, "write_addresses", platform)
            slots, _ = fifo_invariants(m, fifo, fifo_internals, "write_addresses: ")
            for slot, (contents, _position, held) in enumerate(slots):
                burst = data.View(fifo.shape, contents)
                m.d.comb += Assert(~held | window_allows(
                    windows, burst.addr, burst.len + 1, beat_shift, "write"),
                    f"write_addresses slot{slot}: queued outside the write windows")
        return m

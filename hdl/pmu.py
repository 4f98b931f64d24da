"""Pattern Memory Unit: banked SRAM scratchpad with affine address generators.

See ``docs/pmu.md`` for the configuration layout field by field, the bank mapping,
the buffer handshake, timing and error codes.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from . import defaults
from .interfaces import (
    WORD_BITS,
    ConfigPort,
    ConfigRegister,
    ControlToken,
    config_changed,
    control_stream,
    scalar_stream,
    vector_layout,
    vector_stream,
)
from .pmu_beats import (
    AffineAddressGenerator,
    BankMapper,
    MappedBeats,
    bank_of,
    last_repeat_flag,
    log2,
)
from .pmu_config import (
    ADDRESS_BITS,
    BOUND_BITS,
    MAX_BUFFERS,
    PMUError,
    address_generator_layout,
    pmu_config_layout,
)
from .stream_fifo import StreamFIFO

__all__ = ["ADDRESS_BITS", "BOUND_BITS", "MAX_BUFFERS", "FIFO_DEPTH", "OUTPUT_FIFO_DEPTH",
           "SCALAR_OUT_FIFO_DEPTH", "READ_GATE_CREDITS", "PMUError",
           "address_generator_layout", "pmu_config_layout", "AffineAddressGenerator", "bank_of",
           "BankMapper", "MappedBeats", "PMUWriteSide", "PMUReadSide", "PMU"]

#: Vector beats the read pipeline may have issued but not yet delivered.
OUTPUT_FIFO_DEPTH = 4
#: Depth of the scalar lookup results' output FIFO.
SCALAR_OUT_FIFO_DEPTH = 2
#: Read-gate tokens a PMU holds at most (an 8-bit credit counter; ``control_in`` is not
#: ready while it is full).
READ_GATE_CREDITS = 255
#: Depth of the ``vector_in`` and ``scalar_in`` FIFOs (the default ``fifo_depth``).
FIFO_DEPTH = 2


def words_into_lanes(lanes_out, bank_words, banks):
    """Statements: lane ``l`` of ``lanes_out`` is ``bank_words[banks[l]]``."""
    return [lane_word.eq(bank_words.as_value().word_select(bank, WORD_BITS))
            for lane_word, bank in zip(lanes_out, banks, strict=True)]


class PMUWriteSide(wiring.Component):
    """The PMU's write side: each beat of ``beats`` goes to the current write buffer at
    the write generator's address (lanes inside the predicate range only); the last
    beat of the generator's loop nest ends a pass and moves to the next buffer.

    Parameters
    ----------
    lanes, bank_words : int
        As for :class:`BankMapper`.

    Attributes
    ----------
    config : In(pmu_config_layout())
    config_ok : In(1)
        The checks common to both sides pass (the side adds its own bounds).
    beats : In(vector_stream(lanes))
    room : In(1)
        A buffer is free to write.
    healthy : In(1)
        No sticky error (an error another side raises this cycle stops this side from
        the next cycle on: see ``docs/pmu.md``, "Error codes").
    clear : In(1)
        A configuration write: back to buffer 0, first iteration.
    error : Out(PMUError)
        The error this side raises this cycle (``OK``: none): a beat waits with
        ``write_enable`` and the configuration is bad, or (with room and inside the
        predicate) two lanes share a bank or a lane is out of the buffer.
    bank_addr, bank_data : Out(data.ArrayLayout(...))
        Per bank: the row and the word written there.
    bank_enable : Out(1)
        Write every bank (a beat is stored).
    fire : Out(1)
        A beat is taken.
    pass_done : Out(1)
        ... and it is the last of a pass.
    mid_pass : Out(1)
        A pass has begun and not ended.
    """

    def __init__(self, lanes=8, bank_words=2048):
        self.lanes = lanes
        self.bank_words = bank_words
        super().__init__({
            "config": In(pmu_config_layout()),
            "config_ok": In(1),
            "beats": In(vector_stream(lanes)),
            "room": In(1),
            "healthy": In(1),
            "clear": In(1),
            "error": Out(PMUError),
            "bank_addr": Out(data.ArrayLayout(range(bank_words), lanes)),
            "bank_data": Out(data.ArrayLayout(WORD_BITS, lanes)),
            "bank_enable": Out(1),
            "fire": Out(1),
            "pass_done": Out(1),
            "mid_pass": Out(1),
        })

    #: The address path (a :class:`MappedBeats`; a test replaces it with a broken one).
    beats_class = MappedBeats

    def elaborate(self, platform):
        m = Module()
        cfg, beats = self.config, self.beats
        m.submodules.ahead = ahead = self.beats_class(self.lanes, self.bank_words, "write")
        m.d.comb += [ahead.config.eq(cfg), ahead.clear.eq(self.clear)]
        head = ahead.beat
        # the checks of the configuration, a register (steady before a first beat is mapped)
        config_ok = Signal()
        m.d.sync += config_ok.eq(self.config_ok & (cfg.write.bound[0] != 0) &
                                 (cfg.write.bound[1] != 0) & (cfg.write.bound[2] != 0))
        in_pred = head.in_predicate
        with m.If(cfg.write_enable & self.healthy & beats.valid & ahead.valid):
            with m.If(~config_ok):
                m.d.comb += self.error.eq(PMUError.BAD_CONFIG)
            with m.Elif(self.room & in_pred & head.conflict):
                m.d.comb += self.error.eq(PMUError.WRITE_CONFLICT)
            with m.Elif(self.room & in_pred & head.out_of_range):
                m.d.comb += self.error.eq(PMUError.WRITE_RANGE)
        # the head beat would raise this side's error (registers only: the handshake does
        # not wait for the other sides' errors, which stop it from the next cycle on)
        bad = ~config_ok | (in_pred & (head.conflict | head.out_of_range))
        m.d.comb += [
            beats.ready.eq(cfg.write_enable & self.healthy & self.room & ahead.valid & ~bad),
            self.fire.eq(beats.valid & beats.ready),
            self.bank_enable.eq(self.fire & in_pred),
            ahead.take.eq(self.fire),
            self.pass_done.eq(self.fire & head.last),
        ]
        with m.If(self.pass_done):
            m.d.sync += self.mid_pass.eq(0)
        with m.Elif(self.fire):
            m.d.sync += self.mid_pass.eq(1)
        for bank in range(self.lanes):
            for lane in range(self.lanes):
                with m.If(head.bank[lane] == bank):
                    m.d.comb += [self.bank_addr[bank].eq(head.row[lane]),
                                 self.bank_data[bank].eq(beats.payload[lane])]
        with m.If(self.clear):
            m.d.sync += self.mid_pass.eq(0)
        return m


class PMUReadSide(wiring.Component):
    """The PMU's read side: once a buffer is full (and, with ``read_gate``, a token came),
    a pass walks the read generator, reading one beat per iteration inside the predicate
    range; ``read_repeat`` passes over a buffer release it (a ``STEP`` token, or ``DONE``
    after ``read_passes`` buffers).

    Attributes
    ----------
    config, config_ok, healthy, clear : In
        As for :class:`PMUWriteSide`.
    full : In(1)
        A buffer is written and not released.
    out_level : In(range(OUTPUT_FIFO_DEPTH + 1))
        Beats in the output FIFO.
    error : Out(PMUError)
        The error this side raises this cycle: a pass may step and the configuration is
        bad, or (inside the predicate) two lanes share a bank or a lane is out of range.
    issue : Out(1)
        Read the banks at ``bank_addr`` this cycle (the scalar lookups may use them
        otherwise).
    bank_addr : Out(data.ArrayLayout(...))
    bank_data : In(data.ArrayLayout(32, lanes))
        The banks' read data (one cycle after ``issue``).
    beats : Out(vector_stream(lanes))
        The beats read (``ready`` unused: ``out_level`` keeps room).
    beat_banks : Out(data.ArrayLayout(log2(lanes), lanes))
        Per lane, the bank its word of the beat on ``beats`` comes from (the PMU queues
        ``bank_data`` with it and puts the words into lanes behind its output FIFO).
    release : Out(1)
        A buffer is released.
    armed : Out(1)
        A pass may run.
    waiting : Out(1)
        A beat inside the predicate waits for room in the output FIFO.
    done : Out(1)
        ``read_passes`` buffers released (sticky until ``clear``).
    control_in : In(control_stream())
    control_out : Out(control_stream())
    """

    def __init__(self, lanes=8, bank_words=2048):
        self.lanes = lanes
        self.bank_words = bank_words
        super().__init__({
            "config": In(pmu_config_layout()),
            "config_ok": In(1),
            "full": In(1),
            "out_level": In(range(OUTPUT_FIFO_DEPTH + 1)),
            "healthy": In(1),
            "clear": In(1),
            "error": Out(PMUError),
            "issue": Out(1),
            "bank_addr": Out(data.ArrayLayout(range(bank_words), lanes)),
            "bank_data": In(data.ArrayLayout(WORD_BITS, lanes)),
            "beats": Out(vector_stream(lanes)),
            "beat_banks": Out(data.ArrayLayout(log2(lanes), lanes)),
            "release": Out(1),
            "armed": Out(1),
            "waiting": Out(1),
            "done": Out(1),
            "control_in": In(control_stream()),
            "control_out": Out(control_stream()),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.ahead = ahead = MappedBeats(self.lanes, self.bank_words, "read")
        m.d.comb += [ahead.config.eq(cfg), ahead.clear.eq(self.clear)]
        gate_credits = Signal(range(READ_GATE_CREDITS + 1))
        has_credit = Signal()           # gate_credits != 0, a register kept with the count
        can_arm = self.full & (~cfg.read_gate | has_credit)
        arm_now = ~self.armed & can_arm
        step = self._step(m, ahead, arm_now)
        last_pass = self._passes(m, ahead.beat.last, step, arm_now)
        self._tokens(m, step, arm_now, (gate_credits, has_credit), last_pass)
        with m.If(self.clear):
            m.d.sync += [self.armed.eq(0), self.done.eq(0), gate_credits.eq(0),
                         has_credit.eq(0)]
        return m

    def _step(self, m, ahead, arm_now):
        """Check, take the head beat and read the banks; returns ``read_step``."""
        cfg, head = self.config, ahead.beat
        inflight = Signal()             # a vector read was issued last cycle
        read_space = (self.out_level + inflight) < OUTPUT_FIFO_DEPTH
        read_ready = Signal()
        m.d.comb += read_ready.eq(cfg.read_enable & self.healthy & ~self.done &
                                  (self.armed | arm_now) & ahead.valid)
        # the checks of the configuration, a register (steady before a first beat is mapped)
        config_ok = Signal()
        m.d.sync += config_ok.eq(self.config_ok & (cfg.read.bound[0] != 0) &
                                 (cfg.read.bound[1] != 0) & (cfg.read.bound[2] != 0))
        in_pred = head.in_predicate
        with m.If(read_ready):
            with m.If(~config_ok):
                m.d.comb += self.error.eq(PMUError.BAD_CONFIG)
            with m.Elif(in_pred & head.conflict):
                m.d.comb += self.error.eq(PMUError.READ_CONFLICT)
            with m.Elif(in_pred & head.out_of_range):
                m.d.comb += self.error.eq(PMUError.READ_RANGE)
        # the head beat would raise this side's error (registers only, as the write side)
        bad = ~config_ok | (in_pred & (head.conflict | head.out_of_range))
        read_step = Signal()            # the head beat is taken this cycle
        m.d.comb += [
            read_step.eq(read_ready & ~bad & (read_space | ~in_pred)),
            self.issue.eq(read_step & in_pred),
            ahead.take.eq(read_step),
            self.waiting.eq(read_ready & in_pred & ~read_space),
        ]
        for bank in range(self.lanes):
            for lane in range(self.lanes):
                with m.If(head.bank[lane] == bank):
                    m.d.comb += self.bank_addr[bank].eq(head.row[lane])
        m.d.sync += inflight.eq(self.issue)
        with m.If(self.issue):
            m.d.sync += self.beat_banks.eq(head.bank)
        m.d.comb += [*words_into_lanes(self.beats.payload, self.bank_data, self.beat_banks),
                     self.beats.valid.eq(inflight)]
        return read_step

    def _passes(self, m, last_beat, read_step, arm_now):
        """Passes, repeats and released buffers (the generator follows the buffers on
        its own, :class:`MappedBeats`); returns ``last_pass``."""
        cfg = self.config
        passes_done = Signal(16)
        read_pass_done = read_step & last_beat
        # registers, each computed for the counts after this cycle's step (so the
        # handshakes do not wait for the counts' arithmetic)
        last_repeat = last_repeat_flag(m, cfg, read_pass_done, self.clear, "repeat")
        last_pass = Signal()            # passes_done + 1 == read_passes (not 0)
        m.d.sync += last_pass.eq((cfg.read_passes != 0) & Mux(
            self.release, passes_done + 2 == cfg.read_passes,
            passes_done + 1 == cfg.read_passes))
        m.d.comb += self.release.eq(read_pass_done & last_repeat)
        with m.If(read_pass_done):
            m.d.sync += self.armed.eq(0)
            with m.If(last_repeat):
                m.d.sync += passes_done.eq(passes_done + 1)
                with m.If(last_pass):
                    m.d.sync += self.done.eq(1)
        with m.Elif(read_step & arm_now):
            m.d.sync += self.armed.eq(1)
        with m.If(self.clear):
            m.d.sync += passes_done.eq(0)
        return last_pass

    def _tokens(self, m, read_step, arm_now, credits, last_pass):
        """Read-gate tokens in (``credits``: the count and its ``!= 0``), buffer-released
        tokens out."""
        cfg = self.config
        gate_credits, has_credit = credits
        step_tokens = Signal(16)        # STEP tokens not yet sent
        done_token = Signal()           # DONE token not yet sent
        gate_take = read_step & arm_now & cfg.read_gate
        gate_give = self.control_in.valid & self.control_in.ready
        m.d.comb += self.control_in.ready.eq(cfg.read_gate &
                                             (gate_credits != READ_GATE_CREDITS))
        # counters step by one, the handshakes choosing (no carry chain behind them)
        with m.If(gate_give & ~gate_take):
            m.d.sync += [gate_credits.eq(gate_credits + 1), has_credit.eq(1)]
        with m.Elif(gate_take & ~gate_give):
            m.d.sync += [gate_credits.eq(gate_credits - 1), has_credit.eq(gate_credits != 1)]
        pending_step = step_tokens != 0
        m.d.comb += [
            self.control_out.valid.eq(pending_step | done_token),
            self.control_out.payload.eq(Mux(pending_step, ControlToken.STEP,
                                            ControlToken.DONE)),
        ]
        token_sent = self.control_out.valid & self.control_out.ready
        step_sent = token_sent & pending_step
        step_added = self.release & ~last_pass
        with m.If(step_added & ~step_sent):
            m.d.sync += step_tokens.eq(step_tokens + 1)
        with m.Elif(step_sent & ~step_added):
            m.d.sync += step_tokens.eq(step_tokens - 1)
        with m.If(self.release & last_pass):
            m.d.sync += done_token.eq(1)
        with m.If(token_sent & ~pending_step):
            m.d.sync += done_token.eq(0)
        with m.If(self.clear):
            m.d.sync += [step_tokens.eq(0), done_token.eq(0)]


class PMU(wiring.Component):
    """Pattern Memory Unit: ``lanes`` SRAM banks, one vector beat in and out per cycle.

    See also
    --------
    Encoder: ``software/rdu/units/pmu.py``; functional model: ``PMUModel`` in
    ``software/rdu/models/pmu.py`` (every piece: ``rdu.units.registry.UNITS``); docs:
    ``docs/pmu.md``; tests: ``tests/test_pmu.py``
    and ``tests/test_pmu_sides.py`` (the pieces alone); tb suite: ``tb/suites/pmu.py``
    (and its Python model, ``PMUModel``).

    Parameters
    ----------
    lanes : int
        Vector lanes and SRAM banks (a power of two).
    capacity_bytes : int
        SRAM capacity; ``capacity_bytes / 4`` 32-bit words, ``capacity_bytes / (4 *
        lanes)`` words per bank (a power of two, at most ``2**ADDRESS_BITS`` words).
    fifo_depth : int
        Depth of the vector, scalar and control input FIFOs.

    Attributes
    ----------
    vector_in : In(vector_stream(lanes))
        Write data, one beat per write-generator iteration.
    vector_out : Out(vector_stream(lanes))
        Read data, one beat per read-generator iteration inside the predicate range.
    scalar_in : In(scalar_stream())
        Scalar lookups: a physical word address.
    scalar_out : Out(scalar_stream())
        The word at each looked-up address, in order.
    control_in : In(control_stream())
        Read-gate tokens: with ``read_gate`` set, each read pass waits for one token.
    control_out : Out(control_stream())
        One token per buffer released by the reader: ``STEP``, or ``DONE`` for the
        last of ``read_passes``.
    cfg : In(ConfigPort())
    error : Out(PMUError)
        Sticky :class:`PMUError` code; cleared by any configuration write. While it is
        non-zero the PMU accepts and produces nothing.
    done : Out(1)
        ``read_passes`` buffers have been released.
    pending : Out(1)
        Work the unit cannot finish alone: a write pass begun and not ended, an item in
        the vector or scalar input FIFO, or a read pass armed (as the functional model's
        ``busy``); the array's ``host.units_busy`` ORs it.
    beats_written, beats_read, write_stall_cycles, read_stall_cycles : Out(32)
        Performance counters: beats stored, beats delivered, cycles a write beat waited
        (no free buffer), cycles the reader waited on back-pressure.
    """
    def __init__(self, lanes=defaults.LANES, capacity_bytes=defaults.PMU_BYTES,
                 fifo_depth=FIFO_DEPTH):
        if not isinstance(lanes, int) or isinstance(lanes, bool):
            raise TypeError(f"Lane count must be an integer, not {lanes!r}")
        if lanes < 2 or lanes & (lanes - 1):
            raise ValueError(f"Lane count must be a power of two of at least 2, not {lanes}")
        if not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool):
            raise TypeError(f"PMU capacity must be an integer, not {capacity_bytes!r}")
        bank_words = capacity_bytes // (4 * lanes)
        if (capacity_bytes % (4 * lanes) or bank_words < 2 or bank_words & (bank_words - 1)
                or bank_words * lanes > 2 ** ADDRESS_BITS):
            raise ValueError(f"PMU capacity must be 4 * lanes * a power of two words per "
                             f"bank, at most {4 * 2 ** ADDRESS_BITS} bytes, not "
                             f"{capacity_bytes}")
        if not isinstance(fifo_depth, int) or fifo_depth < 2:
            raise ValueError(f"FIFO depth must be an integer of at least 2, not {fifo_depth!r}")
        self._lanes = lanes
        self._capacity_words = capacity_bytes // 4
        self._bank_words = bank_words
        self._fifo_depth = fifo_depth
        self.config_layout = pmu_config_layout()
        super().__init__({
            "vector_in": In(vector_stream(lanes)),
            "vector_out": Out(vector_stream(lanes)),
            "scalar_in": In(scalar_stream()),
            "scalar_out": Out(scalar_stream()),
            "control_in": In(control_stream()),
            "control_out": Out(control_stream()),
            "cfg": In(ConfigPort()),
            "error": Out(PMUError),
            "pending": Out(1),
            "done": Out(1),
            "beats_written": Out(32),
            "beats_read": Out(32),
            "write_stall_cycles": Out(32),
            "read_stall_cycles": Out(32),
        })

    @property
    def lanes(self):
        return self._lanes

    @property
    def capacity_words(self):
        return self._capacity_words

    def elaborate(self, platform):
        m = Module()
        lanes = self._lanes
        m.submodules.config = config_reg = ConfigRegister(self.config_layout)
        wiring.connect(m, wiring.flipped(self.cfg), config_reg.port)
        cfg = config_reg.value

        m.submodules.vector_in_fifo = vin = StreamFIFO(vector_layout(lanes), self._fifo_depth)
        # the read beats are queued as the banks give them, with each lane's bank, and
        # put into lanes behind the FIFO (no multiplexer after the banks' read data)
        m.submodules.vector_out_fifo = vout = StreamFIFO(data.StructLayout({
            "words": vector_layout(lanes),
            "banks": data.ArrayLayout(log2(lanes), lanes)}), OUTPUT_FIFO_DEPTH)
        # a lookup's range check is done as it enters the FIFO, and queued with it
        m.submodules.scalar_in_fifo = sin = StreamFIFO(WORD_BITS + 1, self._fifo_depth)
        m.submodules.scalar_out_fifo = sout = StreamFIFO(WORD_BITS, SCALAR_OUT_FIFO_DEPTH)
        wiring.connect(m, wiring.flipped(self.vector_in), vin.i)
        m.d.comb += [self.vector_out.valid.eq(vout.o.valid),
                     vout.o.ready.eq(self.vector_out.ready),
                     *words_into_lanes(self.vector_out.payload, vout.o.payload.words,
                                       vout.o.payload.banks)]
        # the capacity is a power of two: an address in range has its upper bits zero
        scalar_ok = self.scalar_in.payload[log2(self._capacity_words):] == 0
        m.d.comb += [sin.i.valid.eq(self.scalar_in.valid),
                     sin.i.payload.eq(Cat(self.scalar_in.payload, scalar_ok)),
                     self.scalar_in.ready.eq(sin.i.ready)]
        wiring.connect(m, sout.o, wiring.flipped(self.scalar_out))

        m.submodules.write_side = writer = PMUWriteSide(lanes, self._bank_words)
        m.submodules.read_side = reader = PMUReadSide(lanes, self._bank_words)
        wiring.connect(m, wiring.flipped(self.control_in), reader.control_in)
        wiring.connect(m, reader.control_out, wiring.flipped(self.control_out))
        new_error = Signal(PMUError)   # error raised this cycle (0 = none)
        config_ok = self._config_ok(m, cfg)
        for side in (writer, reader):
            m.d.comb += [side.config.eq(cfg), side.config_ok.eq(config_ok),
                         side.healthy.eq(self.error == 0),
                         side.clear.eq(config_changed(self.cfg))]
        self._full(m, cfg, writer, reader)
        m.d.comb += [reader.out_level.eq(vout.level), self.done.eq(reader.done)]
        wiring.connect(m, vin.o, writer.beats)
        m.d.comb += [vout.i.valid.eq(reader.beats.valid),
                     vout.i.payload.words.eq(reader.bank_data),
                     vout.i.payload.banks.eq(reader.beat_banks)]
        scalar_error = self._banks(m, writer, reader, sin, sout)
        with m.If(scalar_error != 0):
            m.d.comb += new_error.eq(scalar_error)
        with m.Elif(reader.error != 0):
            m.d.comb += new_error.eq(reader.error)
        with m.Else():
            m.d.comb += new_error.eq(writer.error)

        with m.If(config_changed(self.cfg)):
            # a configuration write restarts the unit with empty buffers
            m.d.sync += self.error.eq(0)
        with m.Elif(new_error != 0):
            m.d.sync += self.error.eq(new_error)

        m.d.comb += self.pending.eq(writer.mid_pass | vin.o.valid | sin.o.valid |
                                    reader.armed)
        for counter, event in ((self.beats_written, writer.fire),
                               (self.beats_read, self.vector_out.valid & self.vector_out.ready),
                               (self.write_stall_cycles, vin.o.valid & ~vin.o.ready),
                               (self.read_stall_cycles, reader.waiting)):
            with m.If(event):
                m.d.sync += counter.eq(counter + 1)
        return m

    def _full(self, m, cfg, writer, reader):
        """``full``, the buffers written and not yet released, and from it the sides'
        ``room`` and ``full``: registers computed with the count (the handshakes do not
        wait for a comparison of it)."""
        full = Signal(range(MAX_BUFFERS + 1))
        room, any_full = Signal(), Signal()
        filled = writer.pass_done & ~reader.release
        emptied = reader.release & ~writer.pass_done
        m.d.comb += [writer.room.eq(room), reader.full.eq(any_full)]
        m.d.sync += room.eq(Mux(filled, full + 1 < cfg.buffers,
                                Mux(emptied, full <= cfg.buffers, full < cfg.buffers)))
        with m.If(filled):
            m.d.sync += [full.eq(full + 1), any_full.eq(1)]
        with m.Elif(emptied):
            m.d.sync += [full.eq(full - 1), any_full.eq(full != 1)]
        with m.If(config_changed(self.cfg)):
            # a configuration write restarts the unit with empty buffers (``room`` follows
            # the new configuration the next cycle, before a first beat is mapped)
            m.d.sync += [full.eq(0), any_full.eq(0), room.eq(0)]

    def _config_ok(self, m, cfg):
        """The configuration checks both sides share: 1..4 buffers that fit the SRAM, a
        non-zero buffer size, a skew of 0 or in ``log2(lanes)..ADDRESS_BITS - 1``."""
        buffers_ok = (cfg.buffers >= 1) & (cfg.buffers <= MAX_BUFFERS)
        # buffers * buffer_words <= capacity, as one comparison per buffer count (no
        # multiplier on the path from the configuration to the handshakes)
        buffers_fit = Signal()
        with m.Switch(cfg.buffers):
            for count in range(1, MAX_BUFFERS + 1):
                with m.Case(count):
                    m.d.comb += buffers_fit.eq(
                        cfg.buffer_words <= self._capacity_words // count)
        config_ok = Signal()
        m.d.comb += config_ok.eq(
            buffers_ok & buffers_fit & (cfg.buffer_words != 0) &
            ((cfg.skew_shift == 0) |
             ((cfg.skew_shift >= log2(self._lanes)) & (cfg.skew_shift < ADDRESS_BITS))))
        return config_ok

    def _banks(self, m, writer, reader, sin, sout):
        """The SRAM banks: written by the write side, read by the read side or, when it
        does not read, by the scalar lookups. Returns the scalar lookups' error."""
        lanes, lane_bits = self._lanes, log2(self._lanes)
        cfg = m._named_submodules["config"][0].value
        read_ports = []
        for bank in range(lanes):
            mem = memory.Memory(shape=WORD_BITS, depth=self._bank_words, init=[])
            m.submodules[f"bank{bank}"] = mem
            write_port = mem.write_port()
            read_ports.append(mem.read_port(transparent_for=()))
            m.d.comb += [write_port.addr.eq(writer.bank_addr[bank]),
                         write_port.data.eq(writer.bank_data[bank]),
                         write_port.en.eq(writer.bank_enable)]
        scalar_inflight = Signal()
        scalar_bank = Signal(lane_bits)
        scalar_address = sin.o.payload[:WORD_BITS]
        scalar_ok = sin.o.payload[WORD_BITS]       # checked on entry to the FIFO
        scalar_issue = Signal()
        scalar_error = Signal(PMUError)
        with m.If(sin.o.valid & (self.error == 0) & ~scalar_ok):
            m.d.comb += scalar_error.eq(PMUError.SCALAR_RANGE)
        m.d.comb += [
            scalar_issue.eq(sin.o.valid & (self.error == 0) & scalar_ok & ~reader.issue &
                            ((sout.level + scalar_inflight) < 2)),
            sin.o.ready.eq(scalar_issue),
        ]
        for bank, port in enumerate(read_ports):
            with m.If(reader.issue):
                m.d.comb += port.addr.eq(reader.bank_addr[bank])
            with m.Else():
                m.d.comb += port.addr.eq(scalar_address[lane_bits:])
            m.d.comb += [port.en.eq(1), reader.bank_data[bank].eq(port.data)]
        m.d.sync += scalar_inflight.eq(scalar_issue)
        with m.If(scalar_issue):
            m.d.sync += scalar_bank.eq(bank_of(scalar_address, cfg.skew_shift))
        with m.Switch(scalar_bank):
            for bank, port in enumerate(read_ports):
                with m.Case(bank):
                    m.d.comb += sout.i.payload.eq(port.data)
        m.d.comb += sout.i.valid.eq(scalar_inflight)
        return scalar_error

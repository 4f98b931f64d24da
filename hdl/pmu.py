"""Pattern Memory Unit: banked SRAM scratchpad with affine address generators.

See ``docs/pmu.md`` for the configuration layout field by field, the bank mapping,
the buffer handshake, timing and error codes.
"""

from amaranth import Cat, Module, Mux, Signal, unsigned
from amaranth.lib import data, enum, memory, wiring
from amaranth.lib.wiring import In, Out

from .interfaces import (
    WORD_BITS,
    ConfigPort,
    ConfigRegister,
    ControlToken,
    control_stream,
    scalar_stream,
    vector_layout,
    vector_stream,
)
from .stream_fifo import StreamFIFO

__all__ = ["ADDRESS_BITS", "BOUND_BITS", "MAX_BUFFERS", "FIFO_DEPTH", "OUTPUT_FIFO_DEPTH",
           "SCALAR_OUT_FIFO_DEPTH", "READ_GATE_CREDITS", "PMUError",
           "address_generator_layout", "pmu_config_layout", "AffineAddressGenerator", "PMU"]

#: Width of every address, stride and range field (addresses wrap modulo 2**20, so a
#: stride of ``2**20 - k`` steps backwards by ``k``).
ADDRESS_BITS = 20
#: Width of a loop bound (iterations per level, 1..65535).
BOUND_BITS = 16
#: Most buffers an N-buffered PMU rotates through.
MAX_BUFFERS = 4
#: Vector beats the read pipeline may have issued but not yet delivered.
OUTPUT_FIFO_DEPTH = 4
#: Depth of the scalar lookup results' output FIFO.
SCALAR_OUT_FIFO_DEPTH = 2
#: Read-gate tokens a PMU holds at most (an 8-bit credit counter; ``control_in`` is not
#: ready while it is full).
READ_GATE_CREDITS = 255
#: Depth of the ``vector_in`` and ``scalar_in`` FIFOs (the default ``fifo_depth``).
FIFO_DEPTH = 2


class PMUError(enum.IntEnum, shape=3):
    """Codes of the PMU's sticky ``error`` output (0 = no error)."""
    OK = 0
    BAD_CONFIG = 1         # a loop bound of 0, buffers not in 1..4, buffers overflow, bad skew
    WRITE_CONFLICT = 2     # two lanes of a write beat map to the same bank
    READ_CONFLICT = 3      # two lanes of a read beat map to the same bank
    WRITE_RANGE = 4        # a lane of a write beat falls outside its buffer
    READ_RANGE = 5         # a lane of a read beat falls outside its buffer
    SCALAR_RANGE = 6       # a scalar lookup address is beyond the capacity


def address_generator_layout():
    """Configuration of one three-level affine address generator (level 0 innermost)."""
    return data.StructLayout({
        "start": unsigned(ADDRESS_BITS),
        "stride": data.ArrayLayout(unsigned(ADDRESS_BITS), 3),
        "bound": data.ArrayLayout(unsigned(BOUND_BITS), 3),
        "lane_stride": unsigned(ADDRESS_BITS),
    })


def pmu_config_layout():
    """The PMU's configuration layout (stored by a :class:`ConfigRegister`)."""
    return data.StructLayout({
        "write_enable": unsigned(1),
        "read_enable": unsigned(1),
        "read_gate": unsigned(1),
        "predicate_enable": unsigned(1),
        "skew_shift": unsigned(5),
        "buffers": unsigned(3),
        "read_repeat": unsigned(8),
        "read_passes": unsigned(16),
        "buffer_words": unsigned(ADDRESS_BITS),
        "predicate_low": unsigned(ADDRESS_BITS),
        "predicate_high": unsigned(ADDRESS_BITS),
        "write": address_generator_layout(),
        "read": address_generator_layout(),
    })


def _times_constant(value, factor):
    """``value * factor`` for a constant ``factor``, as shifted copies added (synthesis
    maps a ``*`` to a DSP multiplier even when one operand is a small constant)."""
    terms = [value << bit for bit in range(factor.bit_length()) if factor >> bit & 1]
    total = terms[0] if terms else 0
    for term in terms[1:]:
        total = total + term
    return total


class AffineAddressGenerator(wiring.Component):
    """Three-level affine loop: ``start + i0*stride[0] + i1*stride[1] + i2*stride[2]``.

    Level 0 is innermost; level ``k`` runs ``bound[k]`` iterations. The running
    address is kept with adders only (no multipliers).

    Attributes
    ----------
    config : In(address_generator_layout())
    advance : In(1)
        Step to the next iteration (from the last one, back to the first).
    clear : In(1)
        Return to the first iteration.
    address : Out(ADDRESS_BITS)
        Address of the current iteration.
    last : Out(1)
        The current iteration is the last of the loop nest.
    """
    def __init__(self):
        super().__init__({
            "config": In(address_generator_layout()),
            "advance": In(1),
            "clear": In(1),
            "address": Out(ADDRESS_BITS),
            "last": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        index = [Signal(BOUND_BITS, name=f"i{level}") for level in range(3)]
        offset = Signal(ADDRESS_BITS)          # address - start
        base1 = Signal(ADDRESS_BITS)           # offset of (i0=0) at the current i1, i2
        base2 = Signal(ADDRESS_BITS)           # offset of (i0=i1=0) at the current i2
        at_end = [index[level] == cfg.bound[level] - 1 for level in range(3)]
        m.d.comb += [
            self.address.eq(cfg.start + offset),
            self.last.eq(at_end[0] & at_end[1] & at_end[2]),
        ]
        with m.If(self.clear):
            m.d.sync += [offset.eq(0), base1.eq(0), base2.eq(0),
                         *(i.eq(0) for i in index)]
        with m.Elif(self.advance):
            with m.If(~at_end[0]):
                m.d.sync += [index[0].eq(index[0] + 1), offset.eq(offset + cfg.stride[0])]
            with m.Elif(~at_end[1]):
                m.d.sync += [index[0].eq(0), index[1].eq(index[1] + 1),
                             base1.eq(base1 + cfg.stride[1]),
                             offset.eq(base1 + cfg.stride[1])]
            with m.Elif(~at_end[2]):
                m.d.sync += [index[0].eq(0), index[1].eq(0), index[2].eq(index[2] + 1),
                             base2.eq(base2 + cfg.stride[2]),
                             base1.eq(base2 + cfg.stride[2]),
                             offset.eq(base2 + cfg.stride[2])]
            with m.Else():
                m.d.sync += [offset.eq(0), base1.eq(0), base2.eq(0),
                             *(i.eq(0) for i in index)]
        return m


def _log2(value):
    return value.bit_length() - 1


class PMU(wiring.Component):
    """Pattern Memory Unit: ``lanes`` SRAM banks, one vector beat in and out per cycle.

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
    def __init__(self, lanes=8, capacity_bytes=65536, fifo_depth=FIFO_DEPTH):
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
        lane_bits = _log2(lanes)
        bank_words = self._bank_words

        m.submodules.config = config_reg = ConfigRegister(self.config_layout)
        wiring.connect(m, wiring.flipped(self.cfg), config_reg.port)
        cfg = config_reg.value

        # ---- SRAM banks ----------------------------------------------------------------
        write_ports, read_ports = [], []
        for bank in range(lanes):
            mem = memory.Memory(shape=WORD_BITS, depth=bank_words, init=[])
            m.submodules[f"bank{bank}"] = mem
            write_ports.append(mem.write_port())
            read_ports.append(mem.read_port(transparent_for=()))

        # ---- input / output FIFOs ------------------------------------------------------
        m.submodules.vector_in_fifo = vin = StreamFIFO(vector_layout(lanes), self._fifo_depth)
        m.submodules.vector_out_fifo = vout = StreamFIFO(vector_layout(lanes),
                                                         OUTPUT_FIFO_DEPTH)
        m.submodules.scalar_in_fifo = sin = StreamFIFO(WORD_BITS, self._fifo_depth)
        m.submodules.scalar_out_fifo = sout = StreamFIFO(WORD_BITS, SCALAR_OUT_FIFO_DEPTH)
        wiring.connect(m, wiring.flipped(self.vector_in), vin.i)
        wiring.connect(m, vout.o, wiring.flipped(self.vector_out))
        wiring.connect(m, wiring.flipped(self.scalar_in), sin.i)
        wiring.connect(m, sout.o, wiring.flipped(self.scalar_out))

        # ---- configuration checks ------------------------------------------------------
        error = self.error
        buffers_ok = (cfg.buffers >= 1) & (cfg.buffers <= MAX_BUFFERS)
        # buffers * buffer_words <= capacity, as one comparison per buffer count (no
        # multiplier on the path from the configuration to the handshakes)
        buffers_fit = Signal()
        with m.Switch(cfg.buffers):
            for count in range(1, MAX_BUFFERS + 1):
                with m.Case(count):
                    m.d.comb += buffers_fit.eq(
                        cfg.buffer_words <= self._capacity_words // count)
        common_ok = (buffers_ok & buffers_fit &
                     (cfg.buffer_words != 0) &
                     ((cfg.skew_shift == 0) |
                      ((cfg.skew_shift >= lane_bits) & (cfg.skew_shift < ADDRESS_BITS))))
        write_cfg_ok = common_ok & (cfg.write.bound[0] != 0) & (cfg.write.bound[1] != 0) & \
            (cfg.write.bound[2] != 0)
        read_cfg_ok = common_ok & (cfg.read.bound[0] != 0) & (cfg.read.bound[1] != 0) & \
            (cfg.read.bound[2] != 0)

        new_error = Signal(PMUError)   # error raised this cycle (0 = none)

        # ---- buffer bookkeeping --------------------------------------------------------
        full = Signal(range(MAX_BUFFERS + 1))       # buffers written and not yet released
        write_buffer_base = Signal(ADDRESS_BITS)
        write_buffer_index = Signal(range(MAX_BUFFERS))
        read_buffer_base = Signal(ADDRESS_BITS)
        read_buffer_index = Signal(range(MAX_BUFFERS))

        def next_buffer(index, base):
            wrap = index == cfg.buffers - 1
            return [index.eq(Mux(wrap, 0, index + 1)),
                    base.eq(Mux(wrap, 0, base + cfg.buffer_words))]

        def lane_mapping(prefix, global_address, buffer_base):
            """Per-lane bank, bank row and range check of the beat at ``global_address``."""
            low = Mux(cfg.predicate_enable, cfg.predicate_low, 0)
            in_predicate = ~cfg.predicate_enable | (
                (global_address >= cfg.predicate_low) & (global_address < cfg.predicate_high))
            offset = Signal(ADDRESS_BITS, name=f"{prefix}_offset")
            m.d.comb += offset.eq(global_address - low)
            banks, rows = [], []
            out_of_range = []
            for lane in range(lanes):
                lane_offset = Signal(ADDRESS_BITS, name=f"{prefix}_offset{lane}")
                physical = Signal(ADDRESS_BITS, name=f"{prefix}_physical{lane}")
                bank = Signal(lane_bits, name=f"{prefix}_bank{lane}")
                row = Signal(range(bank_words), name=f"{prefix}_row{lane}")
                stride = cfg.write.lane_stride if prefix == "write" else cfg.read.lane_stride
                m.d.comb += [
                    lane_offset.eq(offset + _times_constant(stride, lane)),
                    physical.eq(buffer_base + lane_offset),
                    bank.eq(physical + Mux(cfg.skew_shift == 0, 0,
                                           physical >> cfg.skew_shift)),
                    row.eq(physical >> lane_bits),
                ]
                out_of_range.append(lane_offset >= cfg.buffer_words)
                banks.append(bank)
                rows.append(row)
            conflict = Signal(name=f"{prefix}_conflict")
            m.d.comb += conflict.eq(0)
            for a in range(lanes):
                for b in range(a + 1, lanes):
                    with m.If(banks[a] == banks[b]):
                        m.d.comb += conflict.eq(1)
            any_out = Signal(name=f"{prefix}_out_of_range")
            m.d.comb += any_out.eq(Cat(*out_of_range).any())
            return in_predicate, banks, rows, conflict, any_out

        # ---- write side ----------------------------------------------------------------
        m.submodules.write_ag = write_ag = AffineAddressGenerator()
        m.d.comb += write_ag.config.eq(cfg.write)
        w_in_pred, w_banks, w_rows, w_conflict, w_out = lane_mapping(
            "write", write_ag.address, write_buffer_base)
        write_room = full < cfg.buffers
        write_active = cfg.write_enable & (error == 0) & (new_error == 0)
        write_fire = Signal()
        write_store = Signal()
        write_pass_done = Signal()
        with m.If(cfg.write_enable & (error == 0) & vin.o.valid):
            with m.If(~write_cfg_ok):
                m.d.comb += new_error.eq(PMUError.BAD_CONFIG)
            with m.Elif(write_room & w_in_pred & w_conflict):
                m.d.comb += new_error.eq(PMUError.WRITE_CONFLICT)
            with m.Elif(write_room & w_in_pred & w_out):
                m.d.comb += new_error.eq(PMUError.WRITE_RANGE)
        m.d.comb += [
            vin.o.ready.eq(write_active & write_room),
            write_fire.eq(vin.o.valid & vin.o.ready),
            write_store.eq(write_fire & w_in_pred),
            write_ag.advance.eq(write_fire),
            write_pass_done.eq(write_fire & write_ag.last),
        ]
        mid_pass = Signal()             # a write pass has begun and not ended
        with m.If(write_pass_done):
            m.d.sync += mid_pass.eq(0)
        with m.Elif(write_fire):
            m.d.sync += mid_pass.eq(1)
        for bank in range(lanes):
            port = write_ports[bank]
            for lane in range(lanes):
                with m.If(w_banks[lane] == bank):
                    m.d.comb += [port.addr.eq(w_rows[lane]),
                                 port.data.eq(vin.o.payload[lane])]
            m.d.comb += port.en.eq(write_store)
        with m.If(write_pass_done):
            m.d.sync += next_buffer(write_buffer_index, write_buffer_base)

        # ---- read side -----------------------------------------------------------------
        m.submodules.read_ag = read_ag = AffineAddressGenerator()
        m.d.comb += read_ag.config.eq(cfg.read)
        r_in_pred, r_banks, r_rows, r_conflict, r_out = lane_mapping(
            "read", read_ag.address, read_buffer_base)
        armed = Signal()                 # a read pass may run (buffer full, gate passed)
        gate_credits = Signal(range(READ_GATE_CREDITS + 1))
        repeat_count = Signal(8)
        passes_done = Signal(16)
        step_tokens = Signal(16)        # STEP tokens not yet sent
        done_token = Signal()           # DONE token not yet sent
        inflight = Signal()             # a vector read was issued last cycle
        issued_banks = [Signal(lane_bits, name=f"issued_bank{lane}") for lane in range(lanes)]

        read_space = (vout.level + inflight) < OUTPUT_FIFO_DEPTH
        can_arm = (full != 0) & (~cfg.read_gate | (gate_credits != 0))
        arm_now = ~armed & can_arm
        read_ready = Signal()
        m.d.comb += read_ready.eq(cfg.read_enable & (error == 0) & ~self.done &
                                  (armed | arm_now))
        with m.If(read_ready):
            with m.If(~read_cfg_ok):
                m.d.comb += new_error.eq(PMUError.BAD_CONFIG)
            with m.Elif(r_in_pred & r_conflict):
                m.d.comb += new_error.eq(PMUError.READ_CONFLICT)
            with m.Elif(r_in_pred & r_out):
                m.d.comb += new_error.eq(PMUError.READ_RANGE)
        read_step = Signal()            # the read generator advances this cycle
        read_issue = Signal()           # ... and reads a beat from the banks
        m.d.comb += [
            read_step.eq(read_ready & (new_error == 0) & (read_space | ~r_in_pred)),
            read_issue.eq(read_step & r_in_pred),
            read_ag.advance.eq(read_step),
        ]
        read_pass_done = read_step & read_ag.last
        last_repeat = repeat_count + 1 >= Mux(cfg.read_repeat == 0, 1, cfg.read_repeat)
        release = Signal()
        m.d.comb += release.eq(read_pass_done & last_repeat)
        last_pass = (cfg.read_passes != 0) & (passes_done + 1 == cfg.read_passes)

        with m.If(read_pass_done):
            m.d.sync += armed.eq(0)
            with m.If(last_repeat):
                m.d.sync += [repeat_count.eq(0), passes_done.eq(passes_done + 1),
                             *next_buffer(read_buffer_index, read_buffer_base)]
                with m.If(last_pass):
                    m.d.sync += [self.done.eq(1), done_token.eq(1)]
            with m.Else():
                m.d.sync += repeat_count.eq(repeat_count + 1)
        with m.Elif(read_step & arm_now):
            m.d.sync += armed.eq(1)

        # control tokens in (read gate) and out (buffer released)
        gate_take = read_step & arm_now & cfg.read_gate
        gate_give = self.control_in.valid & self.control_in.ready
        m.d.comb += self.control_in.ready.eq(cfg.read_gate & (gate_credits != READ_GATE_CREDITS))
        m.d.sync += gate_credits.eq(gate_credits + gate_give - gate_take)
        pending_step = step_tokens != 0
        m.d.comb += [
            self.control_out.valid.eq(pending_step | done_token),
            self.control_out.payload.eq(Mux(pending_step, ControlToken.STEP,
                                            ControlToken.DONE)),
        ]
        token_sent = self.control_out.valid & self.control_out.ready
        step_sent = token_sent & pending_step
        step_added = release & ~last_pass
        m.d.sync += step_tokens.eq(step_tokens + step_added - step_sent)
        with m.If(token_sent & ~pending_step):
            m.d.sync += done_token.eq(0)

        with m.If(write_pass_done & ~release):
            m.d.sync += full.eq(full + 1)
        with m.Elif(release & ~write_pass_done):
            m.d.sync += full.eq(full - 1)

        # ---- scalar lookups (use the read ports when the vector reader does not) ---------
        scalar_inflight = Signal()
        scalar_bank = Signal(lane_bits)
        scalar_address = sin.o.payload
        scalar_bank_now = Signal(lane_bits)
        m.d.comb += scalar_bank_now.eq(
            scalar_address + Mux(cfg.skew_shift == 0, 0, scalar_address >> cfg.skew_shift))
        scalar_issue = Signal()
        scalar_ok = scalar_address < self._capacity_words
        with m.If(sin.o.valid & (error == 0) & ~scalar_ok):
            m.d.comb += new_error.eq(PMUError.SCALAR_RANGE)
        m.d.comb += [
            scalar_issue.eq(sin.o.valid & (error == 0) & scalar_ok & ~read_issue &
                            ((sout.level + scalar_inflight) < 2)),
            sin.o.ready.eq(scalar_issue),
        ]

        for bank in range(lanes):
            port = read_ports[bank]
            with m.If(read_issue):
                for lane in range(lanes):
                    with m.If(r_banks[lane] == bank):
                        m.d.comb += port.addr.eq(r_rows[lane])
            with m.Else():
                m.d.comb += port.addr.eq(scalar_address[lane_bits:])
            m.d.comb += port.en.eq(1)

        m.d.sync += [inflight.eq(read_issue), scalar_inflight.eq(scalar_issue)]
        with m.If(read_issue):
            m.d.sync += [issued.eq(bank) for issued, bank in zip(issued_banks, r_banks,
                                                                   strict=True)]
        with m.If(scalar_issue):
            m.d.sync += scalar_bank.eq(scalar_bank_now)
        bank_data = [port.data for port in read_ports]
        for lane in range(lanes):
            with m.Switch(issued_banks[lane]):
                for bank in range(lanes):
                    with m.Case(bank):
                        m.d.comb += vout.i.payload[lane].eq(bank_data[bank])
        with m.Switch(scalar_bank):
            for bank in range(lanes):
                with m.Case(bank):
                    m.d.comb += sout.i.payload.eq(bank_data[bank])
        m.d.comb += [vout.i.valid.eq(inflight), sout.i.valid.eq(scalar_inflight)]

        # ---- errors, reconfiguration, counters --------------------------------------------
        with m.If(self.cfg.write):
            # a configuration write restarts the unit with empty buffers
            m.d.sync += [error.eq(0), full.eq(0), armed.eq(0), self.done.eq(0),
                         mid_pass.eq(0),
                         write_buffer_index.eq(0), write_buffer_base.eq(0),
                         read_buffer_index.eq(0), read_buffer_base.eq(0),
                         repeat_count.eq(0), passes_done.eq(0), gate_credits.eq(0),
                         step_tokens.eq(0), done_token.eq(0)]
            m.d.comb += [write_ag.clear.eq(1), read_ag.clear.eq(1)]
        with m.Elif(new_error != 0):
            m.d.sync += error.eq(new_error)

        m.d.comb += self.pending.eq(mid_pass | vin.o.valid | sin.o.valid | armed)
        m.d.sync += [
            self.beats_written.eq(self.beats_written + write_fire),
            self.beats_read.eq(self.beats_read + (self.vector_out.valid &
                                                  self.vector_out.ready)),
            self.write_stall_cycles.eq(self.write_stall_cycles +
                                       (vin.o.valid & ~vin.o.ready)),
            self.read_stall_cycles.eq(self.read_stall_cycles +
                                      (read_ready & r_in_pred & ~read_space)),
        ]
        return m

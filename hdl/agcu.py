"""AGCU: the address generator and coalescing unit at the edge of the array.

An AXI4 manager (data width = the vector link) that streams tensors between off-chip
memory and the array's vector network, copies memory to memory (DDR -> HBM), and
runs the kernel-launch commands: program load, argument load, kernel execute.
``docs/agcu.md`` describes it in full.

Structure
---------
* two :class:`AffineBurstGenerator` (read side, write side): a three-level affine
  address generator whose beat addresses are coalesced into AXI INCR bursts (at most
  ``max_burst`` beats, never across 4 KiB);
* the read engine issues ``ar`` bursts (up to ``max_outstanding`` in flight, ID 0, so
  data returns in order) and routes ``r`` data to ``vector_out`` (kernel execute), to
  the write engine (copy) or to the word serializer (``bitstream_out`` for program
  load, ``scalar_out`` for argument load); with ``load_bf16`` the BF16 expander sends
  each read beat (``2 * lanes`` packed BF16 values) to ``vector_out`` as two vector
  beats whose lanes hold ``value << 16``;
* the write engine issues ``aw`` bursts (up to ``max_outstanding`` in flight) and
  sends their ``w`` data, independently of the ``aw`` handshake, from ``vector_in``
  (kernel execute) or from the read engine (copy).
"""

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .interfaces import (
    WORD_BITS,
    AXI4Signature,
    AXIBurst,
    AXIResp,
    ConfigPort,
    ConfigRegister,
    ControlToken,
    control_stream,
    scalar_stream,
    vector_stream,
)
from .stream_fifo import StreamFIFO

__all__ = ["BURST_BOUNDARY", "AGCUOp", "AGCUError", "pattern_layout", "agcu_config_layout",
           "agcu_command_layout", "AffineBurstGenerator", "AGCU"]

#: AXI4 bursts never cross a 4 KiB boundary.
BURST_BOUNDARY = 4096


class AGCUOp(enum.IntEnum, shape=3):
    """Host command opcodes (``cmd.op``; the field is ``unsigned(3)`` so that a bad opcode
    can be sent and reported as ``BAD_OPCODE``)."""
    COPY = 1            #: copy ``length`` bytes from ``src`` to ``dst``
    PROGRAM_LOAD = 2    #: read ``length`` bytes at ``src``, send them as 32-bit words
                        #: on ``bitstream_out``
    ARGUMENT_LOAD = 3   #: read ``length`` bytes at ``src``, send them as words on
                        #: ``scalar_out``
    EXECUTE = 4         #: run the configured load/store patterns (kernel execute)


class AGCUError(enum.IntEnum, shape=4):
    """Error codes on ``error`` (valid with ``done``; the first error of a command wins)."""
    NONE = 0
    BAD_OPCODE = 1      #: unknown ``cmd.op``
    MISALIGNED = 2      #: an address or stride is not a multiple of the beat size
    BAD_LENGTH = 3      #: zero length, or not a multiple of the beat (copy) / word
    BAD_CONFIG = 4      #: an enabled pattern has a zero count
    READ_SLVERR = 5     #: a read burst was answered SLVERR
    READ_DECERR = 6     #: a read burst was answered DECERR (unmapped address)
    WRITE_SLVERR = 7    #: a write burst was answered SLVERR
    WRITE_DECERR = 8    #: a write burst was answered DECERR
    ADDRESS_WRAP = 9    #: a pattern's address left the address space (wrapped around)


def pattern_layout(addr_width=32):
    """One three-level affine access pattern.

    Beat ``(i2, i1, i0)`` (``i0`` innermost) is at byte address
    ``base + i0 * stride[0] + i1 * stride[1] + i2 * stride[2]``, for ``ik < count[k]``.
    Base and strides are multiples of the beat size (strides are signed).
    """
    return data.StructLayout({
        "base": unsigned(addr_width),
        "count": data.ArrayLayout(unsigned(16), 3),
        "stride": data.ArrayLayout(signed(32), 3),
    })


def agcu_config_layout(addr_width=32):
    """The AGCU's configuration (per kernel), written through ``cfg``."""
    return data.StructLayout({
        "load_enable": unsigned(1),     # kernel execute streams ``load`` to vector_out
        "store_enable": unsigned(1),    # kernel execute streams vector_in to ``store``
        "wait_done": unsigned(1),       # kernel execute also waits for a DONE token
        "load": pattern_layout(addr_width),
        "store": pattern_layout(addr_width),
        "load_bf16": unsigned(1),       # kernel execute expands packed BF16 loads
        "store_bf16": unsigned(1),      # kernel execute packs BF16 stores
    })


def agcu_command_layout(addr_width=32):
    """A host command (``cmd`` payload)."""
    return data.StructLayout({
        "op": AGCUOp.as_shape(),
        "src": unsigned(addr_width),
        "dst": unsigned(addr_width),
        "length": unsigned(32),         # bytes
    })


class AffineBurstGenerator(wiring.Component):
    """Three-level affine address generator with burst coalescing.

    Stage 1 walks the pattern and emits *runs*: when ``stride[0]`` equals the beat
    size, as many beats of the innermost row as fit before the row end, the next
    4 KiB boundary and ``max_burst``; otherwise one beat. Stage 2 merges a run into
    the open burst when it starts where the open burst ends, in the same 4 KiB page,
    and the sum stays within ``max_burst`` (e.g. rows laid end to end); otherwise it
    emits the open burst. One run per cycle.

    Parameters
    ----------
    addr_width : int
    beat_bytes : int
        Bytes per beat (a power of two).
    max_burst : int
        Longest burst in beats (at most 256).

    Attributes
    ----------
    start : In(1)
        Pulse: load ``pattern`` and start.
    pattern : In(...)
        ``base``, ``count`` (3 x 32 bit) and ``stride`` (3 x signed 32 bit).
    bursts : Out(stream.Signature(...))
        ``addr`` and ``len`` (beats - 1) of each burst.
    idle : Out(1)
        Not started, or every burst has been handed out.
    wrapped : Out(1)
        A computed address left ``[0, 2**addr_width)`` (it was used modulo
        ``2**addr_width``); cleared by ``start``.
    """

    def __init__(self, *, addr_width=32, beat_bytes=32, max_burst=16):
        if not 1 <= max_burst <= 256:
            self._MustUse__silence = True     # a rejected object is not an unused one
            raise ValueError(f"Maximum burst must be between 1 and 256 beats, not {max_burst}")
        self._addr_width = addr_width
        self._beat_bytes = beat_bytes
        self._max_burst = max_burst
        self.burst_layout = data.StructLayout({"addr": unsigned(addr_width),
                                               "len": unsigned(8)})
        super().__init__({
            "start": In(1),
            "pattern": In(data.StructLayout({
                "base": unsigned(addr_width),
                "count": data.ArrayLayout(unsigned(32), 3),
                "stride": data.ArrayLayout(signed(32), 3),
            })),
            "bursts": Out(stream.Signature(self.burst_layout)),
            "idle": Out(1),
            "wrapped": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        aw = self._addr_width
        beat = self._beat_bytes
        beat_shift = beat.bit_length() - 1
        max_burst = self._max_burst
        page_beats = BURST_BOUNDARY // beat

        pattern = Signal.like(self.pattern)
        running = Signal()
        index = [Signal(32, name=f"i{k}") for k in range(3)]
        row = Signal(aw)        # address of beat (i2, i1, 0)
        plane = Signal(aw)      # address of beat (i2, 0, 0)
        addr = Signal(aw)       # address of beat (i2, i1, i0)

        # stage 1: the run starting at addr
        contiguous = Signal()
        m.d.comb += contiguous.eq(pattern.stride[0] == beat)
        row_left = Signal(32)
        to_page = Signal(range(page_beats + 1))
        run = Signal(range(max(max_burst, page_beats) + 1))
        m.d.comb += [
            row_left.eq(pattern.count[0] - index[0]),
            to_page.eq(page_beats - addr[beat_shift:12]),
        ]
        with m.If(~contiguous):
            m.d.comb += run.eq(1)
        with m.Elif((row_left <= to_page) & (row_left <= max_burst)):
            m.d.comb += run.eq(row_left)
        with m.Elif(to_page <= max_burst):
            m.d.comb += run.eq(to_page)
        with m.Else():
            m.d.comb += run.eq(max_burst)

        # stage 2: the open burst and the output FIFO
        m.submodules.out_fifo = out_fifo = StreamFIFO(self.burst_layout, 2)
        wiring.connect(m, out_fifo.o, wiring.flipped(self.bursts))
        open_valid = Signal()
        open_addr = Signal(aw)
        open_beats = Signal(range(max_burst + 1))
        open_end = Signal(aw)
        m.d.comb += open_end.eq(open_addr + (open_beats << beat_shift))
        merge = Signal()
        m.d.comb += merge.eq(open_valid & (addr == open_end) &
                             (addr[12:] == open_addr[12:]) &
                             (open_beats + run <= max_burst))
        take = Signal()
        m.d.comb += [
            take.eq(running & (~open_valid | merge | out_fifo.i.ready)),
            out_fifo.i.payload.addr.eq(open_addr),
            out_fifo.i.payload.len.eq(open_beats - 1),
        ]
        with m.If(take):
            with m.If(merge):
                m.d.sync += open_beats.eq(open_beats + run)
            with m.Else():
                m.d.comb += out_fifo.i.valid.eq(open_valid)
                m.d.sync += [open_valid.eq(1), open_addr.eq(addr), open_beats.eq(run)]
        with m.Elif(~running & open_valid):
            m.d.comb += out_fifo.i.valid.eq(1)
            with m.If(out_fifo.i.ready):
                m.d.sync += open_valid.eq(0)

        # stage 1 advance; the next address is computed exactly (aw + 2 bits, signed) so
        # that leaving the address space is reported on ``wrapped``, not hidden
        next_addr = Signal(signed(aw + 34))
        with m.If(take):
            with m.If(index[0] + run < pattern.count[0]):
                m.d.comb += next_addr.eq(Mux(contiguous, addr + (run << beat_shift),
                                             addr + pattern.stride[0]))
                m.d.sync += index[0].eq(index[0] + run)
            with m.Elif(index[1] + 1 < pattern.count[1]):
                m.d.comb += next_addr.eq(row + pattern.stride[1])
                m.d.sync += [index[0].eq(0), index[1].eq(index[1] + 1),
                             row.eq(row + pattern.stride[1])]
            with m.Elif(index[2] + 1 < pattern.count[2]):
                m.d.comb += next_addr.eq(plane + pattern.stride[2])
                m.d.sync += [index[0].eq(0), index[1].eq(0), index[2].eq(index[2] + 1),
                             plane.eq(plane + pattern.stride[2]),
                             row.eq(plane + pattern.stride[2])]
            with m.Else():
                m.d.comb += next_addr.eq(addr)
                m.d.sync += running.eq(0)
            m.d.sync += addr.eq(next_addr[:aw])
            with m.If((next_addr < 0) | (next_addr >= 2 ** aw)):
                m.d.sync += self.wrapped.eq(1)

        with m.If(self.start):
            m.d.sync += [pattern.eq(self.pattern), running.eq(1), open_valid.eq(0),
                         row.eq(self.pattern.base), plane.eq(self.pattern.base),
                         addr.eq(self.pattern.base), self.wrapped.eq(0)]
            m.d.sync += [i.eq(0) for i in index]
        m.d.comb += self.idle.eq(~running & ~open_valid & (out_fifo.level == 0))
        return m


class AGCU(wiring.Component):
    """Address generator and coalescing unit: AXI4 DMA between memory and the array.

    Parameters
    ----------
    lanes : int
        Vector lanes; the AXI data bus is ``lanes * 32`` bits.
    addr_width : int
        AXI byte-address width.
    id_width : int
        AXI ID width (the AGCU uses ID 0 for every burst, so data returns in order).
    max_burst : int
        Longest burst in beats.
    max_outstanding : int
        Bursts in flight per direction (reads and writes counted separately).
    buffer_depth : int
        Beats of read data buffered between ``axi.r`` and its consumer.

    Attributes
    ----------
    axi : Out(AXI4Signature)
        The memory port.
    vector_out : Out(vector_stream(lanes))
        Data loaded from memory into the array (kernel execute, ``load`` pattern; with
        ``load_bf16``, two expanded vector beats per read beat).
    vector_in : In(vector_stream(lanes))
        Data stored to memory (kernel execute, ``store`` pattern).
    scalar_out : Out(scalar_stream())
        Argument words (argument load).
    scalar_in : In(scalar_stream())
        Scalar results from the array: always accepted; the last one is held in
        ``scalar_result`` and counted in ``scalar_count``.
    control_out : Out(control_stream())
        One ``STEP`` token at the start of each kernel execute (the launch token).
    control_in : In(control_stream())
        Always accepted; a ``DONE`` token ends a kernel execute with ``wait_done``.
    cfg : In(ConfigPort())
        Configuration (:func:`agcu_config_layout`).
    bitstream_out : Out(stream.Signature(32))
        Bitstream words read from memory (program load).
    cmd : In(stream.Signature(agcu_command_layout()))
        Host commands, accepted only when idle.
    busy, done, error : Out
        A command is running; the last command finished (sticky until the next is
        accepted); its :class:`AGCUError` code (valid with ``done``).
    executing : Out(1)
        ``busy`` with an ``EXECUTE`` command (the array's watchdog counts while an AGCU
        executes).
    """

    def __init__(self, *, lanes=8, addr_width=32, id_width=4, max_burst=16,
                 max_outstanding=16, buffer_depth=32):
        for name, value in (("Maximum outstanding bursts", max_outstanding),
                            ("Buffer depth", buffer_depth)):
            if not isinstance(value, int) or value < 1:
                self._MustUse__silence = True
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        self.lanes = lanes
        self.addr_width = addr_width
        self.id_width = id_width
        self.max_burst = max_burst
        self.max_outstanding = max_outstanding
        self.buffer_depth = buffer_depth
        self.beat_bytes = lanes * WORD_BITS // 8
        self.config_layout = agcu_config_layout(addr_width)
        self.command_layout = agcu_command_layout(addr_width)
        super().__init__({
            "axi": Out(AXI4Signature(addr_width=addr_width, data_width=lanes * WORD_BITS,
                                     id_width=id_width)),
            "vector_out": Out(vector_stream(lanes)),
            "vector_in": In(vector_stream(lanes)),
            "scalar_out": Out(scalar_stream()),
            "scalar_in": In(scalar_stream()),
            "control_out": Out(control_stream()),
            "control_in": In(control_stream()),
            "cfg": In(ConfigPort()),
            "bitstream_out": Out(stream.Signature(WORD_BITS)),
            "cmd": In(stream.Signature(self.command_layout)),
            "busy": Out(1),
            "done": Out(1),
            "executing": Out(1),
            "error": Out(AGCUError),
            "scalar_result": Out(WORD_BITS),
            "scalar_count": Out(WORD_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        beat = self.beat_bytes
        beat_shift = beat.bit_length() - 1
        max_out = self.max_outstanding
        data_width = self.lanes * WORD_BITS

        m.submodules.config = config = ConfigRegister(self.config_layout)
        wiring.connect(m, wiring.flipped(self.cfg), config.port)
        conf = config.value

        gen_args = dict(addr_width=self.addr_width, beat_bytes=beat, max_burst=self.max_burst)
        m.submodules.read_gen = read_gen = AffineBurstGenerator(**gen_args)
        m.submodules.write_gen = write_gen = AffineBurstGenerator(**gen_args)
        m.submodules.read_fifo = read_fifo = StreamFIFO(data_width, self.buffer_depth)
        m.submodules.write_lengths = write_lengths = StreamFIFO(8, max_out)

        mode = Signal(AGCUOp.as_shape())
        busy = Signal()
        error = Signal(AGCUError)
        m.d.comb += [self.busy.eq(busy), self.error.eq(error),
                     self.executing.eq(busy & (mode == AGCUOp.EXECUTE))]

        def flag(code):
            with m.If(error == AGCUError.NONE):
                m.d.sync += error.eq(code)

        # -- command decode ------------------------------------------------------------
        cmd = self.cmd.payload
        check = Signal(4)
        beats = Signal(32)
        words = Signal(32)
        m.d.comb += [
            beats.eq(Mux(cmd.op == AGCUOp.COPY, cmd.length >> beat_shift,
                         (cmd.length + beat - 1) >> beat_shift)),
            words.eq(cmd.length >> 2),
        ]

        def misaligned(value):
            return value[:beat_shift] != 0

        def pattern_bad(pattern):
            aligned = misaligned(pattern.base)
            for k in range(3):
                aligned |= misaligned(pattern.stride[k])
            empty = Const(0)
            for k in range(3):
                empty |= pattern.count[k] == 0
            return aligned, empty

        load_misaligned, load_empty = pattern_bad(conf.load)
        store_misaligned, store_empty = pattern_bad(conf.store)
        with m.Switch(cmd.op):
            with m.Case(AGCUOp.COPY):
                with m.If((cmd.length == 0) | misaligned(cmd.length)):
                    m.d.comb += check.eq(AGCUError.BAD_LENGTH)
                with m.Elif(misaligned(cmd.src) | misaligned(cmd.dst)):
                    m.d.comb += check.eq(AGCUError.MISALIGNED)
            with m.Case(AGCUOp.PROGRAM_LOAD, AGCUOp.ARGUMENT_LOAD):
                with m.If((cmd.length == 0) | (cmd.length[:2] != 0)):
                    m.d.comb += check.eq(AGCUError.BAD_LENGTH)
                with m.Elif(misaligned(cmd.src)):
                    m.d.comb += check.eq(AGCUError.MISALIGNED)
            with m.Case(AGCUOp.EXECUTE):
                with m.If((conf.load_enable & load_misaligned) |
                          (conf.store_enable & store_misaligned)):
                    m.d.comb += check.eq(AGCUError.MISALIGNED)
                with m.Elif((conf.load_enable & load_empty) |
                            (conf.store_enable & store_empty)):
                    m.d.comb += check.eq(AGCUError.BAD_CONFIG)
            with m.Default():
                m.d.comb += check.eq(AGCUError.BAD_OPCODE)

        def linear(gen, base):
            m.d.comb += [gen.pattern.base.eq(base), gen.pattern.count[0].eq(beats),
                         gen.pattern.count[1].eq(1), gen.pattern.count[2].eq(1),
                         gen.pattern.stride[0].eq(beat)]

        def configured(gen, pattern):
            m.d.comb += gen.pattern.base.eq(pattern.base)
            for k in range(3):
                m.d.comb += [gen.pattern.count[k].eq(pattern.count[k]),
                             gen.pattern.stride[k].eq(pattern.stride[k])]

        accept = Signal()
        expand_bf16 = Signal()      # this kernel execute expands packed BF16 loads
        pack_bf16 = Signal()        # this kernel execute packs BF16 stores
        words_left = Signal(32)
        launch_pending = Signal()
        wait_done = Signal()
        m.d.comb += [self.cmd.ready.eq(~busy), accept.eq(self.cmd.valid & ~busy)]
        with m.If(cmd.op == AGCUOp.EXECUTE):
            configured(read_gen, conf.load)
            configured(write_gen, conf.store)
        with m.Else():
            linear(read_gen, cmd.src)
            linear(write_gen, cmd.dst)
        with m.If(accept):
            m.d.sync += [self.done.eq(0), mode.eq(cmd.op), error.eq(AGCUError.NONE)]
            with m.If(check != AGCUError.NONE):
                m.d.sync += [self.done.eq(1), error.eq(check)]
            with m.Else():
                m.d.sync += [busy.eq(1), words_left.eq(words)]
                with m.Switch(cmd.op):
                    with m.Case(AGCUOp.COPY):
                        m.d.comb += [read_gen.start.eq(1), write_gen.start.eq(1)]
                    with m.Case(AGCUOp.PROGRAM_LOAD, AGCUOp.ARGUMENT_LOAD):
                        m.d.comb += read_gen.start.eq(1)
                    with m.Case(AGCUOp.EXECUTE):
                        m.d.comb += [read_gen.start.eq(conf.load_enable),
                                     write_gen.start.eq(conf.store_enable)]
                        m.d.sync += [launch_pending.eq(1), wait_done.eq(conf.wait_done),
                                     expand_bf16.eq(conf.load_bf16),
                                     pack_bf16.eq(conf.store_bf16)]

        # -- read engine ---------------------------------------------------------------
        axi = self.axi
        reads_in_flight = Signal(range(max_out + 1))
        ar_go = Signal()
        m.d.comb += [
            axi.ar.valid.eq(read_gen.bursts.valid & (reads_in_flight < max_out)),
            axi.ar.payload.addr.eq(read_gen.bursts.payload.addr),
            axi.ar.payload.len.eq(read_gen.bursts.payload.len),
            axi.ar.payload.size.eq(beat_shift),
            axi.ar.payload.burst.eq(AXIBurst.INCR),
            read_gen.bursts.ready.eq(axi.ar.ready & (reads_in_flight < max_out)),
            ar_go.eq(axi.ar.valid & axi.ar.ready),
        ]
        r_last = Signal()
        m.d.comb += [
            read_fifo.i.valid.eq(axi.r.valid),
            read_fifo.i.payload.eq(axi.r.payload.data),
            axi.r.ready.eq(read_fifo.i.ready),
            r_last.eq(axi.r.valid & axi.r.ready & axi.r.payload.last),
        ]
        m.d.sync += reads_in_flight.eq(reads_in_flight + ar_go - r_last)
        with m.If(busy & (read_gen.wrapped | write_gen.wrapped)):
            flag(AGCUError.ADDRESS_WRAP)
        with m.If(axi.r.valid & axi.r.ready):
            with m.If(axi.r.payload.resp == AXIResp.SLVERR):
                flag(AGCUError.READ_SLVERR)
            with m.Elif(axi.r.payload.resp == AXIResp.DECERR):
                flag(AGCUError.READ_DECERR)

        # -- write engine --------------------------------------------------------------
        # A burst leaves the generator into two queues at once: its address for ``aw``
        # and its length for the ``w`` sender. ``w`` therefore never waits for the
        # ``aw`` handshake (AXI4 forbids a manager to make WVALID wait for AWREADY).
        m.submodules.write_addresses = write_addresses = StreamFIFO(
            write_gen.burst_layout, 2)
        writes_in_flight = Signal(range(max_out + 1))
        issue = Signal()
        m.d.comb += [
            issue.eq(write_gen.bursts.valid & (writes_in_flight < max_out) &
                     write_addresses.i.ready & write_lengths.i.ready),
            write_gen.bursts.ready.eq(issue),
            write_addresses.i.valid.eq(issue),
            write_addresses.i.payload.eq(write_gen.bursts.payload),
            write_lengths.i.valid.eq(issue),
            write_lengths.i.payload.eq(write_gen.bursts.payload.len),
            axi.aw.valid.eq(write_addresses.o.valid),
            axi.aw.payload.addr.eq(write_addresses.o.payload.addr),
            axi.aw.payload.len.eq(write_addresses.o.payload.len),
            axi.aw.payload.size.eq(beat_shift),
            axi.aw.payload.burst.eq(AXIBurst.INCR),
            write_addresses.o.ready.eq(axi.aw.ready),
        ]
        write_data_valid = Signal()
        write_data = Signal(data_width)
        write_data_taken = Signal()
        w_beat = Signal(8)
        m.d.comb += [
            axi.w.valid.eq(write_lengths.o.valid & write_data_valid),
            axi.w.payload.data.eq(write_data),
            axi.w.payload.strb.eq((1 << beat) - 1),
            axi.w.payload.last.eq(w_beat == write_lengths.o.payload),
            write_data_taken.eq(axi.w.valid & axi.w.ready),
        ]
        with m.If(write_data_taken):
            with m.If(axi.w.payload.last):
                m.d.sync += w_beat.eq(0)
                m.d.comb += write_lengths.o.ready.eq(1)
            with m.Else():
                m.d.sync += w_beat.eq(w_beat + 1)
        b_go = Signal()
        m.d.comb += [axi.b.ready.eq(1), b_go.eq(axi.b.valid)]
        m.d.sync += writes_in_flight.eq(writes_in_flight + issue - b_go)
        with m.If(b_go):
            with m.If(axi.b.payload.resp == AXIResp.SLVERR):
                flag(AGCUError.WRITE_SLVERR)
            with m.Elif(axi.b.payload.resp == AXIResp.DECERR):
                flag(AGCUError.WRITE_DECERR)

        # -- data routing --------------------------------------------------------------
        word_index = Signal(range(self.lanes))
        word = Signal(WORD_BITS)
        word_valid = Signal()
        word_taken = Signal()
        m.d.comb += word.eq(read_fifo.o.payload.word_select(word_index, WORD_BITS))
        # BF16 expander: a read beat holds 2 * lanes packed BF16 values (value i in bits
        # 16i..16i+15); it leaves as two vector beats, values 0..lanes-1 then
        # lanes..2*lanes-1, each lane ``value << 16``. The beat stays at the head of the
        # read buffer until its second half is taken (one vector beat per cycle, no
        # bubble), so the completion rule (read buffer empty) covers expanded beats.
        second_half = Signal()
        expanded = Signal(data_width)
        half_bits = self.lanes * 16
        for lane in range(self.lanes):
            m.d.comb += expanded.word_select(lane, WORD_BITS).eq(Mux(
                second_half,
                read_fifo.o.payload[half_bits + 16 * lane:half_bits + 16 * (lane + 1)],
                read_fifo.o.payload[16 * lane:16 * (lane + 1)]) << 16)
        with m.If(accept):
            m.d.sync += second_half.eq(0)
        # BF16 packer state: the high halves of a held first vector beat
        low_half = Signal(half_bits)
        low_held = Signal()
        high_halves = Signal(half_bits)
        vector_in_bits = Value.cast(self.vector_in.payload)
        m.d.comb += high_halves.eq(Cat(*(
            vector_in_bits[WORD_BITS * lane + 16:WORD_BITS * (lane + 1)]
            for lane in range(self.lanes))))
        with m.If(accept):
            m.d.sync += low_held.eq(0)
        with m.Switch(mode):
            with m.Case(AGCUOp.EXECUTE):
                m.d.comb += self.vector_out.valid.eq(read_fifo.o.valid)
                with m.If(expand_bf16):
                    m.d.comb += [
                        self.vector_out.payload.eq(expanded),
                        read_fifo.o.ready.eq(self.vector_out.ready & second_half),
                    ]
                    with m.If(self.vector_out.valid & self.vector_out.ready):
                        m.d.sync += second_half.eq(~second_half)
                with m.Else():
                    m.d.comb += [
                        self.vector_out.payload.eq(read_fifo.o.payload),
                        read_fifo.o.ready.eq(self.vector_out.ready),
                    ]
                with m.If(pack_bf16):
                    # BF16 packer: two vector beats make one write beat, the high halves
                    # of the first beat's lanes in the low half of the data word
                    # (a first half is taken only while a write burst waits for data:
                    # never between kernels)
                    take_low = Signal()
                    m.d.comb += [
                        take_low.eq(~low_held & write_lengths.o.valid),
                        write_data_valid.eq(low_held & self.vector_in.valid),
                        write_data.eq(Cat(low_half, high_halves)),
                        self.vector_in.ready.eq(take_low | write_data_taken),
                    ]
                    with m.If(self.vector_in.valid & take_low):
                        m.d.sync += [low_half.eq(high_halves), low_held.eq(1)]
                    with m.If(write_data_taken):
                        m.d.sync += low_held.eq(0)
                with m.Else():
                    m.d.comb += [
                        write_data_valid.eq(self.vector_in.valid),
                        write_data.eq(self.vector_in.payload),
                        self.vector_in.ready.eq(write_data_taken),
                    ]
            with m.Case(AGCUOp.COPY):
                m.d.comb += [
                    write_data_valid.eq(read_fifo.o.valid),
                    write_data.eq(read_fifo.o.payload),
                    read_fifo.o.ready.eq(write_data_taken),
                ]
            with m.Case(AGCUOp.PROGRAM_LOAD):
                m.d.comb += [
                    self.bitstream_out.valid.eq(word_valid),
                    self.bitstream_out.payload.eq(word),
                    word_taken.eq(self.bitstream_out.valid & self.bitstream_out.ready),
                ]
            with m.Case(AGCUOp.ARGUMENT_LOAD):
                m.d.comb += [
                    self.scalar_out.valid.eq(word_valid),
                    self.scalar_out.payload.eq(word),
                    word_taken.eq(self.scalar_out.valid & self.scalar_out.ready),
                ]
        # word serializer: lanes words per beat, words_left in total
        m.d.comb += word_valid.eq(read_fifo.o.valid & (words_left != 0))
        with m.If(word_taken):
            m.d.sync += words_left.eq(words_left - 1)
            with m.If((word_index == self.lanes - 1) | (words_left == 1)):
                m.d.sync += word_index.eq(0)
                m.d.comb += read_fifo.o.ready.eq(1)
            with m.Else():
                m.d.sync += word_index.eq(word_index + 1)

        # -- control and scalar ports --------------------------------------------------
        done_seen = Signal()
        m.d.comb += [
            self.control_out.valid.eq(launch_pending),
            self.control_out.payload.eq(ControlToken.STEP),
            self.control_in.ready.eq(1),
            self.scalar_in.ready.eq(1),
        ]
        with m.If(accept):
            m.d.sync += done_seen.eq(0)
        with m.If(self.control_out.valid & self.control_out.ready):
            m.d.sync += launch_pending.eq(0)
        with m.If(self.control_in.valid & (self.control_in.payload == ControlToken.DONE)):
            m.d.sync += done_seen.eq(1)
        with m.If(self.scalar_in.valid):
            m.d.sync += [self.scalar_result.eq(self.scalar_in.payload),
                         self.scalar_count.eq(self.scalar_count + 1)]

        # -- completion ----------------------------------------------------------------
        finished = Signal()
        m.d.comb += finished.eq(
            read_gen.idle & (reads_in_flight == 0) & (read_fifo.level == 0) &
            write_gen.idle & (writes_in_flight == 0) & (write_lengths.level == 0) &
            (write_addresses.level == 0) &
            ~launch_pending & (~wait_done | done_seen))
        with m.If(busy & finished & ~read_gen.start & ~write_gen.start):
            m.d.sync += [busy.eq(0), self.done.eq(1), done_seen.eq(0), wait_done.eq(0)]
        return m

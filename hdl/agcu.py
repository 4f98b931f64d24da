"""AGCU: the address generator and coalescing unit at the edge of the array.

An AXI4 manager (data width = the vector link) that streams tensors between off-chip
memory and the array's vector network, copies memory to memory (DDR -> HBM), and
runs the kernel-launch commands: program load, argument load, kernel execute.
``docs/agcu.md`` describes it in full.

Structure
---------
Submodules, each a ``wiring.Component`` (``hdl/agcu_engines.py`` but the decoder):

* :class:`CommandDecoder`: the command's checks (its :class:`AGCUError`) and patterns;
* ``ReadEngine``: an ``AffineBurstGenerator`` (a three-level affine address generator
  whose beat addresses are coalesced into AXI INCR bursts of at most ``max_burst``
  beats, never across 4 KiB) whose bursts it issues on ``ar`` (up to
  ``max_outstanding`` in flight, ID 0, so data returns in order); ``r`` into its read
  buffer;
* ``WriteEngine``: a generator whose bursts it issues on ``aw`` (up to
  ``max_outstanding``) while sending their ``w`` data independently of the ``aw``
  handshake;
* ``BF16Expander`` (``load_bf16``: each read beat of ``2 * lanes`` packed BF16 values
  -> two vector beats whose lanes hold ``value << 16``), ``BF16Packer``
  (``store_bf16``), ``WordSerializer`` (read beats -> ``bitstream_out`` for program
  load, ``scalar_out`` for argument load).

The AGCU routes the read beats to ``vector_out`` (kernel execute), to the write engine
(copy) or to the serializer, and the write engine's data from ``vector_in`` or the
read engine, by the command's mode; it flags the first error and decides completion.
"""

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal, signed, unsigned
from amaranth.lib import data, enum, stream, wiring
from amaranth.lib.wiring import In, Out

from . import defaults
from .agcu_engines import (
    BF16Expander,
    BF16Packer,
    ReadEngine,
    WordSerializer,
    WriteEngine,
    burst_pattern_layout,
    dma_windows_layout,
)
from .interfaces import (
    WORD_BITS,
    AXI4Signature,
    ConfigPort,
    ConfigRegister,
    ControlToken,
    control_stream,
    scalar_stream,
    vector_stream,
)

__all__ = ["AGCUOp", "AGCUError", "POSITION_BITS", "POSITION_STRIDE_BITS", "pattern_layout",
           "agcu_config_layout", "agcu_command_layout", "position_offset_shape",
           "CommandDecoder", "AGCU"]

#: Bits of the launch's position (the ``position`` port): the index a positioned pattern
#: is moved by, e.g. the token whose row of a KV cache a decode step writes.
POSITION_BITS = 16
#: Bits of a pattern's signed position stride (``load_position_stride``, in beats).
POSITION_STRIDE_BITS = 16


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
    ABORTED = 10        #: the command was aborted (``abort_cmd``): its bursts drained, stores
                        #: after the abort left memory unchanged
    WINDOW = 11         #: a burst fell outside the enabled memory windows (``windows``): it
                        #: was not issued, the command drained as aborted; ``error_addr``


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
        # the patterns' bases move by position * stride beats (0: not positioned)
        "load_position_stride": signed(POSITION_STRIDE_BITS),
        "store_position_stride": signed(POSITION_STRIDE_BITS),
    })


def position_offset_shape():
    """The signed shape of ``position * position_stride`` (beats)."""
    return signed(POSITION_BITS + POSITION_STRIDE_BITS + 1)


def agcu_command_layout(addr_width=32):
    """A host command (``cmd`` payload)."""
    return data.StructLayout({
        "op": AGCUOp.as_shape(),
        "src": unsigned(addr_width),
        "dst": unsigned(addr_width),
        "length": unsigned(32),         # bytes
    })


class CommandDecoder(wiring.Component):
    """The checks and patterns of a host command, combinationally.

    Parameters
    ----------
    addr_width : int
    beat_bytes : int
        Bytes per beat (a power of two).

    Attributes
    ----------
    command : In(agcu_command_layout(addr_width))
    config : In(agcu_config_layout(addr_width))
    error : Out(AGCUError)
        ``NONE``, or why the command is refused, checked in this order: ``COPY``: the
        length (non-zero, whole beats), then ``src``/``dst`` beat-aligned; the loads:
        the length (non-zero, whole words), then ``src``; ``EXECUTE``: the enabled
        patterns' bases and strides aligned, then their counts non-zero; any other
        opcode ``BAD_OPCODE``.
    words : Out(32)
        ``length`` in 32-bit words (program and argument loads).
    source, dest : Out(burst_pattern_layout(addr_width))
        The linear patterns of ``src`` and ``dst``: ``length`` in beats, whole beats
        read (a load's last beat may be partly used), stride one beat.
    load_offset, store_offset : In(position_offset_shape())
        Beats the configured patterns' bases move by (``position * position_stride``,
        registered by the AGCU a cycle ahead; in beats, so that a moved base keeps its
        alignment by construction).
    load, store : Out(burst_pattern_layout(addr_width))
        The configured patterns (kernel execute), their bases moved by the offsets; an
        enabled pattern whose moved base leaves the address space is ``ADDRESS_WRAP``
        (checked after ``MISALIGNED`` and ``BAD_CONFIG``).
    """

    def __init__(self, *, addr_width=32, beat_bytes=32):
        self.beat_bytes = beat_bytes
        self.addr_width = addr_width
        pattern = burst_pattern_layout(addr_width)
        super().__init__({
            "command": In(agcu_command_layout(addr_width)),
            "config": In(agcu_config_layout(addr_width)),
            "load_offset": In(position_offset_shape()),
            "store_offset": In(position_offset_shape()),
            "error": Out(AGCUError),
            "words": Out(32),
            "source": Out(pattern),
            "dest": Out(pattern),
            "load": Out(pattern),
            "store": Out(pattern),
        })

    def elaborate(self, platform):
        m = Module()
        beat = self.beat_bytes
        beat_shift = beat.bit_length() - 1
        cmd, conf = self.command, self.config
        beats = Signal(32)
        m.d.comb += [
            beats.eq(Mux(cmd.op == AGCUOp.COPY, cmd.length >> beat_shift,
                         (cmd.length + beat - 1) >> beat_shift)),
            self.words.eq(cmd.length >> 2),
        ]
        for linear, base in ((self.source, cmd.src), (self.dest, cmd.dst)):
            m.d.comb += [linear.base.eq(base), linear.count[0].eq(beats),
                         linear.count[1].eq(1), linear.count[2].eq(1),
                         linear.stride[0].eq(beat)]
        moved_bases = {}
        for side, configured, pattern, offset in (
                ("load", self.load, conf.load, self.load_offset),
                ("store", self.store, conf.store, self.store_offset)):
            moved = Signal(signed(len(offset) + beat_shift + 2), name=f"{side}_moved_base")
            m.d.comb += [moved.eq(pattern.base + (offset << beat_shift)),
                         configured.base.eq(moved)]
            moved_bases[side] = moved
            for k in range(3):
                m.d.comb += [configured.count[k].eq(pattern.count[k]),
                             configured.stride[k].eq(pattern.stride[k])]
        self._check(m, beat_shift, moved_bases)
        return m

    def _check(self, m, beat_shift, moved):
        cmd, conf, check = self.command, self.config, self.error

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

        def outside(moved):
            # < 0 or >= 2**addr_width: a bit at or above addr_width set (the sign bit
            # included), no comparator after the adder
            return moved[self.addr_width:].any()
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
                with m.Elif((conf.load_enable & outside(moved["load"])) |
                            (conf.store_enable & outside(moved["store"]))):
                    m.d.comb += check.eq(AGCUError.ADDRESS_WRAP)
            with m.Default():
                m.d.comb += check.eq(AGCUError.BAD_OPCODE)


class AGCU(wiring.Component):
    """Address generator and coalescing unit: AXI4 DMA between memory and the array.

    See also
    --------
    Engines: ``hdl/agcu_engines.py`` (tests ``tests/test_agcu_engines.py``); encoder:
    ``software/rdu/units/agcu.py``; functional model: ``AGCUModel`` in
    ``software/rdu/models/agcu.py`` (commands: ``software/rdu/models/machine.py``; every
    piece: ``rdu.units.registry.UNITS``); docs:
    ``docs/agcu.md``; tests: ``tests/test_agcu.py``; tb suite: ``tb/suites/agcu.py``.

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
    config_flush : In(1)
        The configuration back to zeros (the abort's flush: the next program's bitstream
        configures the AGCUs it uses, the others stay empty, as the functional model's).
    bitstream_out : Out(stream.Signature(32))
        Bitstream words read from memory (program load).
    cmd : In(stream.Signature(agcu_command_layout()))
        Host commands, accepted only when idle and ``abort_cmd`` is low.
    abort_cmd : In(1)
        Level: a busy AGCU aborts its command (``docs/agcu.md``, **Abort**): no new
        burst, the ``w`` beats still owed sent with strobes clear, the ``r`` beats
        dropped, the launch token and ``wait_done`` forgotten; once every burst issued
        is answered it ends with ``done`` and ``ABORTED``. No command is accepted while
        it is high; an idle AGCU is unaffected.
    position : In(POSITION_BITS)
        The launch's position: a kernel execute moves each pattern's base by
        ``position * <side>_position_stride`` beats (``docs/agcu.md``, **Positioned
        patterns**). Must be steady from the cycle before the command is accepted to its
        end.
    windows : In(hdl.agcu_engines.dma_windows_layout(addr_width))
        The memory windows of the launch (``enable`` 0, the reset value: every address
        allowed). A burst outside them is not issued: the command drains as an aborted
        one and ends with ``WINDOW``, its address in ``error_addr``. Must not change
        while a command runs.
    error_addr : Out(addr_width)
        The address of the burst refused by ``windows`` (valid with ``WINDOW``).
    busy, done, error : Out
        A command is running; the last command finished (sticky until the next is
        accepted); its :class:`AGCUError` code (valid with ``done``).
    executing : Out(1)
        ``busy`` with an ``EXECUTE`` command (the array's watchdog counts while an AGCU
        executes).
    """

    def __init__(self, *, lanes=defaults.LANES, addr_width=32, id_width=4, max_burst=16,
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
            "config_flush": In(1),
            "bitstream_out": Out(stream.Signature(WORD_BITS)),
            "cmd": In(stream.Signature(self.command_layout)),
            "abort_cmd": In(1),
            "position": In(POSITION_BITS),
            "windows": In(dma_windows_layout(addr_width)),
            "error_addr": Out(addr_width),
            "busy": Out(1),
            "done": Out(1),
            "executing": Out(1),
            "error": Out(AGCUError),
            "scalar_result": Out(WORD_BITS),
            "scalar_count": Out(WORD_BITS),
        })


    #: The engines' classes (a formal mutant substitutes its own).
    read_engine_class = ReadEngine
    write_engine_class = WriteEngine

    def elaborate(self, platform):
        m = Module()
        m.submodules.config = config = ResetInserter(self.config_flush)(
            ConfigRegister(self.config_layout))
        wiring.connect(m, wiring.flipped(self.cfg), config.port)
        engine_args = dict(addr_width=self.addr_width, id_width=self.id_width,
                           beat_bytes=self.beat_bytes, max_burst=self.max_burst,
                           max_outstanding=self.max_outstanding)
        m.submodules.read_engine = reader = self.read_engine_class(
            **engine_args, buffer_depth=self.buffer_depth)
        m.submodules.write_engine = writer = self.write_engine_class(**engine_args)
        m.submodules.decoder = decoder = CommandDecoder(
            addr_width=self.addr_width, beat_bytes=self.beat_bytes)
        m.submodules.bf16_expander = BF16Expander(self.lanes)
        m.submodules.bf16_packer = BF16Packer(self.lanes)
        m.submodules.word_serializer = WordSerializer(self.lanes)
        for channel in ("ar", "r"):
            wiring.connect(m, getattr(reader, channel), wiring.flipped(getattr(self.axi, channel)))
        for channel in ("aw", "w", "b"):
            wiring.connect(m, getattr(writer, channel), wiring.flipped(getattr(self.axi, channel)))
        m.d.comb += [decoder.command.eq(self.cmd.payload), decoder.config.eq(config.value),
                     reader.windows.eq(self.windows), writer.windows.eq(self.windows)]
        # the positioned patterns' offsets, a cycle ahead (the position and the
        # configuration are steady from before the command)
        position = Cat(self.position, Const(0, 1)).as_signed()
        for side in ("load", "store"):
            stride = config.value[f"{side}_position_stride"]
            m.d.sync += getattr(decoder, f"{side}_offset").eq(position * stride)

        state = self._state(m)
        self._accept(m, state, config.value, decoder)
        self._errors(m, state)
        self._route(m, state)
        self._control_ports(m, state)
        self._completion(m, state)
        return m

    def _state(self, m):
        """The command's registers: a dict by name (the signals keep these names)."""
        state = {
            "mode": Signal(AGCUOp.as_shape(), name="mode"),
            "busy": Signal(name="busy"),
            "error": Signal(AGCUError, name="error"),
            "accept": Signal(name="accept"),
            "expand_bf16": Signal(name="expand_bf16"),  # this execute expands BF16 loads
            "pack_bf16": Signal(name="pack_bf16"),      # this execute packs BF16 stores
            "launch_pending": Signal(name="launch_pending"),
            "wait_done": Signal(name="wait_done"),
            "done_seen": Signal(name="done_seen"),
            "aborting": Signal(name="aborting"),        # draining an aborted command
            "reading": Signal(name="reading"),          # this command started the reader
            "writing": Signal(name="writing"),          # ... the writer
            "window_fault": Signal(name="window_fault"),  # a burst refused by windows
        }
        busy, mode = state["busy"], state["mode"]
        idle = ~busy & ~self.abort_cmd
        m.d.comb += [self.busy.eq(busy), self.error.eq(state["error"]),
                     self.executing.eq(busy & (mode == AGCUOp.EXECUTE)),
                     self.cmd.ready.eq(idle), state["accept"].eq(self.cmd.valid & idle)]
        with m.If(busy & self.abort_cmd):
            m.d.sync += [state["aborting"].eq(1), state["launch_pending"].eq(0),
                         state["wait_done"].eq(0)]
        return state

    def _accept(self, m, state, conf, decoder):
        """Take a command: report a decode error at once, or start the engines."""
        reader = m._named_submodules["read_engine"][0]
        writer = m._named_submodules["write_engine"][0]
        serializer = m._named_submodules["word_serializer"][0]
        cmd = self.cmd.payload
        with m.If(cmd.op == AGCUOp.EXECUTE):
            m.d.comb += [reader.pattern.eq(decoder.load), writer.pattern.eq(decoder.store)]
        with m.Else():
            m.d.comb += [reader.pattern.eq(decoder.source), writer.pattern.eq(decoder.dest)]
        m.d.comb += serializer.count.eq(decoder.words)
        check = decoder.error
        with m.If(state["accept"]):
            m.d.sync += [self.done.eq(0), state["mode"].eq(cmd.op),
                         state["error"].eq(AGCUError.NONE)]
            with m.If(check != AGCUError.NONE):
                m.d.sync += [self.done.eq(1), state["error"].eq(check)]
            with m.Else():
                m.d.sync += [state["busy"].eq(1), state["reading"].eq(reader.start),
                             state["writing"].eq(writer.start)]
                m.d.comb += serializer.load.eq(1)
                with m.Switch(cmd.op):
                    with m.Case(AGCUOp.COPY):
                        m.d.comb += [reader.start.eq(1), writer.start.eq(1)]
                    with m.Case(AGCUOp.PROGRAM_LOAD, AGCUOp.ARGUMENT_LOAD):
                        m.d.comb += reader.start.eq(1)
                    with m.Case(AGCUOp.EXECUTE):
                        m.d.comb += [reader.start.eq(conf.load_enable),
                                     writer.start.eq(conf.store_enable)]
                        m.d.sync += [state["launch_pending"].eq(1),
                                     state["wait_done"].eq(conf.wait_done),
                                     state["expand_bf16"].eq(conf.load_bf16),
                                     state["pack_bf16"].eq(conf.store_bf16)]

    def _errors(self, m, state):
        """The first error of a command wins (of one cycle's, the last flagged here)."""
        reader = m._named_submodules["read_engine"][0]
        writer = m._named_submodules["write_engine"][0]
        error = state["error"]
        events = [
            # (an engine this command did not start keeps the flag of an earlier one)
            (state["busy"] & ((reader.wrapped & state["reading"]) |
                              (writer.wrapped & state["writing"])), AGCUError.ADDRESS_WRAP),
            (reader.slverr, AGCUError.READ_SLVERR),
            (reader.decerr, AGCUError.READ_DECERR),
            (writer.slverr, AGCUError.WRITE_SLVERR),
            (writer.decerr, AGCUError.WRITE_DECERR),
        ]
        for event, code in events:
            with m.If(event & (error == AGCUError.NONE)):
                m.d.sync += error.eq(code)

    def _route(self, m, state):
        """Connect the read beats and the write beats by the command's mode."""
        reader = m._named_submodules["read_engine"][0]
        writer = m._named_submodules["write_engine"][0]
        expander = m._named_submodules["bf16_expander"][0]
        packer = m._named_submodules["bf16_packer"][0]
        serializer = m._named_submodules["word_serializer"][0]
        beats = reader.data
        m.d.comb += [expander.clear.eq(state["accept"]), packer.clear.eq(state["accept"]),
                     expander.i.valid.eq(beats.valid), expander.i.payload.eq(beats.payload),
                     serializer.i.valid.eq(beats.valid),
                     serializer.i.payload.eq(beats.payload),
                     packer.burst_waiting.eq(writer.burst_waiting),
                     packer.i.payload.eq(self.vector_in.payload)]
        with m.Switch(state["mode"]):
            with m.Case(AGCUOp.EXECUTE):
                with m.If(state["expand_bf16"]):
                    self._join(m, expander.o, self.vector_out)
                    m.d.comb += beats.ready.eq(expander.i.ready)
                with m.Else():
                    self._join(m, beats, self.vector_out)
                with m.If(state["pack_bf16"]):
                    m.d.comb += packer.i.valid.eq(self.vector_in.valid)
                    self._join(m, packer.o, writer.data)
                    m.d.comb += self.vector_in.ready.eq(packer.i.ready)
                with m.Else():
                    self._join(m, self.vector_in, writer.data)
            with m.Case(AGCUOp.COPY):
                self._join(m, beats, writer.data)
            with m.Case(AGCUOp.PROGRAM_LOAD):
                self._join(m, serializer.o, self.bitstream_out)
            with m.Case(AGCUOp.ARGUMENT_LOAD):
                self._join(m, serializer.o, self.scalar_out)
        with m.If(serializer.i.ready):
            m.d.comb += beats.ready.eq(1)
        aborting = state["aborting"]
        m.d.comb += [reader.abort_cmd.eq(aborting), writer.abort_cmd.eq(aborting)]
        with m.If(aborting):
            # the read beats are dropped, nothing more goes to the array; but a copy's
            # beat already offered on w stays there until taken (AXI holds WDATA)
            m.d.comb += [self.vector_out.valid.eq(0), self.bitstream_out.valid.eq(0),
                         self.scalar_out.valid.eq(0)]
            with m.If(~((state["mode"] == AGCUOp.COPY) & writer.holding)):
                m.d.comb += beats.ready.eq(1)

    @staticmethod
    def _join(m, source, sink):
        """Drive stream ``sink`` from stream ``source`` (comb, in the current branch)."""
        m.d.comb += [sink.valid.eq(source.valid), sink.payload.eq(source.payload),
                     source.ready.eq(sink.ready)]

    def _control_ports(self, m, state):
        """The launch token, DONE tokens, and the scalar results."""
        launch_pending, done_seen = state["launch_pending"], state["done_seen"]
        m.d.comb += [
            self.control_out.valid.eq(launch_pending),
            self.control_out.payload.eq(ControlToken.STEP),
            self.control_in.ready.eq(1),
            self.scalar_in.ready.eq(1),
        ]
        with m.If(state["accept"]):
            m.d.sync += done_seen.eq(0)
        with m.If(self.control_out.valid & self.control_out.ready):
            m.d.sync += launch_pending.eq(0)
        with m.If(self.control_in.valid & (self.control_in.payload == ControlToken.DONE)):
            m.d.sync += done_seen.eq(1)
        with m.If(self.scalar_in.valid):
            m.d.sync += [self.scalar_result.eq(self.scalar_in.payload),
                         self.scalar_count.eq(self.scalar_count + 1)]

    def _completion(self, m, state):
        """A command ends when both engines are idle, the launch token is out and (with
        ``wait_done``) a DONE token came back."""
        reader = m._named_submodules["read_engine"][0]
        writer = m._named_submodules["write_engine"][0]
        finished = Signal()
        m.d.comb += finished.eq(reader.idle & writer.idle & ~state["launch_pending"] &
                                (~state["wait_done"] | state["done_seen"]))
        with m.If(state["busy"] & finished & ~reader.start & ~writer.start):
            m.d.sync += [state["busy"].eq(0), self.done.eq(1), state["done_seen"].eq(0),
                         state["wait_done"].eq(0)]
        # a burst the windows refuse: never issued; the command drains as an aborted one
        denied = Signal()
        m.d.comb += denied.eq(state["busy"] & ~state["aborting"] &
                              (reader.denied | writer.denied))
        with m.If(denied):
            m.d.sync += [state["aborting"].eq(1), state["window_fault"].eq(1),
                         state["launch_pending"].eq(0), state["wait_done"].eq(0),
                         self.error_addr.eq(Mux(reader.denied, reader.denied_addr,
                                                writer.denied_addr))]
        # an aborted command ends once every burst issued is answered and the read
        # buffer is empty; its code is ABORTED (whatever else it met while draining), or
        # WINDOW when a refused burst started the drain
        with m.If(state["aborting"] & reader.idle & writer.idle):
            m.d.sync += [state["busy"].eq(0), state["aborting"].eq(0), self.done.eq(1),
                         state["done_seen"].eq(0), state["wait_done"].eq(0),
                         state["launch_pending"].eq(0), state["window_fault"].eq(0),
                         state["error"].eq(Mux(state["window_fault"], AGCUError.WINDOW,
                                               AGCUError.ABORTED))]

"""Orchestrator: a static schedule of commands run from memory, without the host.

The SN40L's AGCUs can run a schedule of kernels on their own: the host writes the
schedule into memory, gives its address and length and pulses ``start``; the
:class:`Orchestrator` fetches it (a ``PROGRAM_LOAD`` on AGCU 0 whose words it captures
instead of the configuration network), then runs its commands one after the other:
program loads, argument loads and executes through the :class:`hdl.sequencer.Sequencer`
(the host's run sequence of ``docs/system.md`` in gateware), AGCU copies issued without
waiting, waits for AGCUs. An error ends the schedule with a status (the command's index,
an :class:`hdl.sequencer.ErrorSource` and a code), never a hang.

Command format (``docs/orchestrator.md``): four little-endian 32-bit words per command,

* word 0: bits 0..7 the :class:`ScheduleOp`, bits 8..31 its argument (an AGCU index for
  ``COPY``, an AGCU mask for ``EXECUTE`` and ``WAIT``);
* words 1, 2, 3: ``src``, ``dst``, ``length`` (bytes).

``rdu.schedule`` encodes and decodes these words with the definitions of this module.
"""

from amaranth import Cat, Module, Signal, unsigned
from amaranth.lib import enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .agcu import AGCUError, AGCUOp, agcu_command_layout
from .array import WATCHDOG_BITS, HostPort
from .sequencer import ErrorSource, Sequencer

__all__ = ["ScheduleOp", "ScheduleError", "COMMAND_WORDS", "COMMAND_BYTES", "OP_BITS",
           "ARGUMENT_BITS", "FETCH_INDEX", "MAX_AGCUS", "MAX_COMMANDS", "DEFAULT_COMMANDS",
           "ScheduleControl", "Orchestrator"]

#: 32-bit words per command.
COMMAND_WORDS = 4
#: Bytes per command.
COMMAND_BYTES = 4 * COMMAND_WORDS
#: Bits of word 0 that hold the opcode; the argument is the rest of the word.
OP_BITS = 8
#: Bits of the argument (an AGCU index or an AGCU mask).
ARGUMENT_BITS = 32 - OP_BITS
#: ``error_index`` of an error of the schedule's fetch itself (before any command).
FETCH_INDEX = 0xFFFF
#: Most AGCUs an orchestrator can address (one mask bit each in the argument).
MAX_AGCUS = ARGUMENT_BITS
#: Largest schedule memory (commands).
MAX_COMMANDS = 4096
#: The schedule memory of :class:`hdl.system.RDUSystem`'s orchestrator (commands).
DEFAULT_COMMANDS = 64


class ScheduleOp(enum.IntEnum, shape=OP_BITS):
    """Opcodes of the schedule (bits 0..7 of word 0)."""
    END = 0             #: end of the schedule (after every COPY still running is done)
    PROGRAM_LOAD = 1    #: clear the configuration, load the bitstream at ``src`` of
                        #: ``length`` bytes through AGCU 0, require the loader's LOADED
    ARGUMENT_LOAD = 2   #: argument words at ``src`` (``length`` bytes) for AGCU 0,
                        #: sent by the next EXECUTE
    EXECUTE = 3         #: ``start`` and EXECUTE on the AGCUs of the mask (argument) on
                        #: one edge, wait for all of them, then for the mesh to drain
    COPY = 4            #: AGCU ``argument`` copies ``length`` bytes ``src`` -> ``dst``;
                        #: issued without waiting for it to end
    WAIT = 5            #: wait until the AGCUs of the mask (argument) are idle


class ScheduleError(enum.IntEnum, shape=8):
    """``error_code`` of a bad schedule (``error_source`` ``REQUEST``)."""
    NONE = 0
    BAD_OPCODE = 1      #: word 0's opcode is not a :class:`ScheduleOp`
    BAD_LENGTH = 2      #: the schedule's length is 0 or not a multiple of 16 bytes
    TOO_LONG = 3        #: the schedule has more commands than the schedule memory
    NO_END = 4          #: the last command ran without an END
    BAD_AGCU = 5        #: COPY names an AGCU the system does not have
    BAD_MASK = 6        #: EXECUTE or WAIT: a mask naming no AGCU or a missing one


class ScheduleControl(wiring.Signature):
    """The host's control of the orchestrator (the host's view: it drives ``start``).

    Members
    -------
    start : Out(1)
        Pulse: fetch and run the schedule (ignored while ``busy``).
    addr, length : Out(32)
        Byte address (a multiple of the beat) and length (16 bytes per command) of the
        schedule in memory.
    busy : In(1)
        Fetching or running; the orchestrator owns the AGCU commands and the array's
        ``start``, ``config_clear`` and ``watchdog_cycles`` (the host's
        ``watchdog_cycles`` is passed on: set it before ``start``).
    done, error : In(1)
        The last schedule ended at its END / with an error (cleared by ``start``).
    error_index : In(16)
        The failing command's index (:data:`FETCH_INDEX`: the fetch).
    error_source : In(ErrorSource)
    error_code : In(8)
        ``ConfigStatus`` (``LOADER``), ``AGCUError`` (``AGCU``), :class:`ScheduleError`
        (``REQUEST``), else 0.
    error_unit : In(32)
        The AGCU (``AGCU``, ``STUCK``) or ``host.watchdog_unit`` (``WATCHDOG``).
    index : In(16)
        The command running now.
    completed : In(16)
        Commands finished since ``start`` (END included): a testbench records the cycle
        at which it steps to time each command.
    cycles : In(32)
        Clock edges since the one that sampled ``start`` (frozen at the end).
    """

    def __init__(self):
        super().__init__({
            "start": Out(1), "addr": Out(32), "length": Out(32),
            "busy": In(1), "done": In(1), "error": In(1),
            "error_index": In(16), "error_source": In(ErrorSource), "error_code": In(8),
            "error_unit": In(32), "index": In(16), "completed": In(16), "cycles": In(32),
        })


def _check_int(name, value, low, high):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}, not {value}")


class Orchestrator(wiring.Component):
    """Runs a schedule of commands held in memory, with no host between commands.

    Parameters
    ----------
    agcus : int
        Number of AGCUs of the system (1 to :data:`MAX_AGCUS`).
    commands : int
        Depth of the schedule memory in commands (1 to 4096): the longest schedule.
    addr_width : int
        AGCU address width.

    Attributes
    ----------
    control : In(ScheduleControl())
        Start, schedule address and length; status.
    capture : Out(1)
        High while the schedule is fetched: AGCU 0's ``bitstream_out`` must come to
        ``bitstream`` instead of the configuration network (the parent's mux).
    bitstream : In(stream.Signature(32))
        AGCU 0's ``bitstream_out`` while ``capture`` (always ready).
    watchdog_cycles : In(WATCHDOG_BITS)
        The array's watchdog during the schedule's executes (the host's setting).
    cmd : Out(stream.Signature(agcu_command_layout())).array(agcus)
        Commands of each AGCU (the parent gives them to the AGCUs while ``busy``).
    agcu_busy, agcu_done : In(1).array(agcus)
    agcu_error : In(AGCUError).array(agcus)
    host : Out(HostPort())
        The array's host port (``start``, ``config_clear``, ``watchdog_cycles`` are
        driven; ``perf_select`` and ``readback_start`` stay 0).
    """

    def __init__(self, agcus, *, commands=DEFAULT_COMMANDS, addr_width=32):
        _check_int("AGCU count", agcus, 1, MAX_AGCUS)
        _check_int("Schedule memory depth", commands, 1, MAX_COMMANDS)
        _check_int("Address width", addr_width, 16, 32)
        self.agcus, self.commands, self.addr_width = agcus, commands, addr_width
        self.sequencer = Sequencer(agcus, addr_width=addr_width)
        super().__init__({
            "control": In(ScheduleControl()),
            "capture": Out(1),
            "bitstream": In(stream.Signature(32)),
            "watchdog_cycles": In(WATCHDOG_BITS),
            "cmd": Out(stream.Signature(agcu_command_layout(addr_width))).array(agcus),
            "agcu_busy": In(1).array(agcus),
            "agcu_done": In(1).array(agcus),
            "agcu_error": In(AGCUError).array(agcus),
            "host": Out(HostPort()),
        })

    def elaborate(self, platform):
        m = Module()
        n, ctl, seq = self.agcus, self.control, self.sequencer
        m.submodules.sequencer = seq
        m.submodules.schedule = memory = Memory(shape=unsigned(32 * COMMAND_WORDS),
                                                depth=self.commands, init=[])
        write = memory.write_port()
        read = memory.read_port(transparent_for=())
        busy, done = Cat(*self.agcu_busy), Cat(*self.agcu_done)

        # -- the sequencer: host port, AGCU status; its commands while it runs --------
        wiring.connect(m, seq.host, wiring.flipped(self.host))
        m.d.comb += seq.watchdog_cycles.eq(self.watchdog_cycles)
        for k in range(n):
            m.d.comb += [seq.agcu_busy[k].eq(self.agcu_busy[k]),
                         seq.agcu_done[k].eq(self.agcu_done[k]),
                         seq.agcu_error[k].eq(self.agcu_error[k])]

        # the command being run: word 0 (op, argument), src, dst, length
        current = Signal(32 * COMMAND_WORDS)
        op, argument = current[:OP_BITS], current[OP_BITS:32]
        src, dst, length = current[32:64], current[64:96], current[96:128]
        mask_bad = (argument == 0) | (argument >> n != 0)
        arg_addr, arg_len = Signal(32), Signal(32)
        m.d.comb += [seq.prog_addr.eq(src), seq.prog_len.eq(length),
                     seq.arg_addr.eq(arg_addr), seq.arg_len.eq(arg_len),
                     seq.exec_mask.eq(argument),
                     # held for the whole sequence (the command stays in current)
                     seq.skip_execute.eq(op == ScheduleOp.PROGRAM_LOAD),
                     seq.skip_load.eq(op == ScheduleOp.EXECUTE)]

        # own commands (the fetch's PROGRAM_LOAD, COPY), packed whole (see Sequencer)
        layout = agcu_command_layout(self.addr_width)
        own_op = Signal(AGCUOp.as_shape())
        own_src, own_dst, own_len = Signal(self.addr_width), Signal(self.addr_width), Signal(32)
        packed = Signal(layout.size)
        own_valid = Signal(n)
        m.d.comb += packed.eq((own_op << layout["op"].offset) |
                              (own_src << layout["src"].offset) |
                              (own_dst << layout["dst"].offset) |
                              (own_len << layout["length"].offset))
        for k in range(n):
            with m.If(seq.busy):
                wiring.connect(m, seq.cmd[k], wiring.flipped(self.cmd[k]))
            with m.Else():
                m.d.comb += [self.cmd[k].valid.eq(own_valid[k]),
                             self.cmd[k].payload.eq(packed)]

        # -- status --------------------------------------------------------------------
        index = Signal(16)
        count = Signal(16)              # commands in the schedule
        address = Signal(32)            # of the schedule
        words = Signal(range(COMMAND_WORDS * self.commands + 1))
        staged = Signal(32 * (COMMAND_WORDS - 1))
        m.d.comb += [ctl.index.eq(index), read.addr.eq(index)]
        with m.If(ctl.busy):
            m.d.sync += ctl.cycles.eq(ctl.cycles + 1)

        # COPY commands in flight: their AGCU, their command index; the first that ends
        # with an error is kept and ends the schedule at the next command boundary
        copying = Signal(n)
        copy_index = [Signal(16, name=f"copy_index{k}") for k in range(n)]
        copy_failed = Signal()
        copy_code, copy_unit, copy_at = Signal(8), Signal(range(n)), Signal(16)
        issued_copy = Signal(n)
        ended = Signal(n)
        m.d.comb += ended.eq(copying & done)
        m.d.sync += copying.eq((copying & ~ended) | issued_copy)
        for k in reversed(range(n)):
            with m.If(ended[k] & (self.agcu_error[k] != AGCUError.NONE) & ~copy_failed):
                m.d.sync += [copy_failed.eq(1), copy_code.eq(self.agcu_error[k]),
                             copy_unit.eq(k), copy_at.eq(copy_index[k])]

        def fail(source, code, unit=0, at=index):
            m.d.sync += [ctl.error_source.eq(source), ctl.error_code.eq(code),
                         ctl.error_unit.eq(unit), ctl.error_index.eq(at), ctl.error.eq(1),
                         ctl.busy.eq(0)]
            m.next = "IDLE"

        def complete():
            m.d.sync += [index.eq(index + 1), ctl.completed.eq(ctl.completed + 1)]
            m.next = "FETCH_CMD"

        # -- the schedule's fetch: AGCU 0's words into the schedule memory ---------------
        m.d.comb += self.bitstream.ready.eq(1)
        with m.If(self.capture & self.bitstream.valid):
            m.d.sync += words.eq(words + 1)
            with m.Switch(words[:2]):
                for w in range(COMMAND_WORDS - 1):
                    with m.Case(w):
                        m.d.sync += staged[32 * w:32 * (w + 1)].eq(self.bitstream.payload)
                with m.Default():
                    m.d.comb += [write.addr.eq(words >> 2),
                                 write.data.eq(Cat(staged, self.bitstream.payload)),
                                 write.en.eq(words >> 2 < self.commands)]

        with m.FSM():
            with m.State("IDLE"):
                with m.If(ctl.start):
                    m.d.sync += [ctl.busy.eq(1), ctl.done.eq(0), ctl.error.eq(0),
                                 ctl.error_source.eq(ErrorSource.NONE), ctl.error_code.eq(0),
                                 ctl.error_unit.eq(0), ctl.error_index.eq(0),
                                 ctl.cycles.eq(0), ctl.completed.eq(0), index.eq(0),
                                 words.eq(0), count.eq(ctl.length >> 4), address.eq(ctl.addr),
                                 arg_len.eq(0),
                                 copy_failed.eq(0)]
                    with m.If((ctl.length == 0) | (ctl.length[:4] != 0)):
                        fail(ErrorSource.REQUEST, ScheduleError.BAD_LENGTH, at=FETCH_INDEX)
                    with m.Elif(ctl.length > COMMAND_BYTES * self.commands):
                        fail(ErrorSource.REQUEST, ScheduleError.TOO_LONG, at=FETCH_INDEX)
                    with m.Elif(busy.any()):
                        for k in reversed(range(n)):      # name the lowest busy AGCU
                            with m.If(self.agcu_busy[k]):
                                fail(ErrorSource.STUCK, 0, k, at=FETCH_INDEX)
                    with m.Else():
                        m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += [self.capture.eq(1), own_valid.eq(1), own_op.eq(AGCUOp.PROGRAM_LOAD),
                             own_src.eq(address), own_len.eq(count << 4)]
                with m.If(self.cmd[0].ready):
                    m.next = "FETCH_WAIT"
            with m.State("FETCH_WAIT"):
                m.d.comb += self.capture.eq(1)
                with m.If(self.agcu_done[0]):
                    with m.If(self.agcu_error[0] != AGCUError.NONE):
                        fail(ErrorSource.AGCU, self.agcu_error[0], 0, at=FETCH_INDEX)
                    with m.Else():
                        m.next = "FETCH_CMD"
            with m.State("FETCH_CMD"):
                # the read port's address is index: its data arrives in DECODE
                with m.If(copy_failed):
                    fail(ErrorSource.AGCU, copy_code, copy_unit, at=copy_at)
                with m.Elif(index == count):
                    fail(ErrorSource.REQUEST, ScheduleError.NO_END)
                with m.Else():
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += current.eq(read.data)
                m.next = "DISPATCH"
            with m.State("DISPATCH"):
                with m.Switch(op):
                    with m.Case(ScheduleOp.END):
                        m.next = "FINISH"
                    with m.Case(ScheduleOp.PROGRAM_LOAD):
                        m.d.comb += seq.start.eq(1)
                        m.next = "SEQUENCE"
                    with m.Case(ScheduleOp.ARGUMENT_LOAD):
                        m.d.sync += [arg_addr.eq(src), arg_len.eq(length)]
                        complete()
                    with m.Case(ScheduleOp.EXECUTE):
                        with m.If(mask_bad):
                            fail(ErrorSource.REQUEST, ScheduleError.BAD_MASK)
                        with m.Else():
                            m.d.comb += seq.start.eq(1)
                            m.next = "SEQUENCE"
                    with m.Case(ScheduleOp.COPY):
                        with m.If(argument >= n):
                            fail(ErrorSource.REQUEST, ScheduleError.BAD_AGCU)
                        with m.Else():
                            m.next = "COPY"
                    with m.Case(ScheduleOp.WAIT):
                        with m.If(mask_bad):
                            fail(ErrorSource.REQUEST, ScheduleError.BAD_MASK)
                        with m.Else():
                            m.next = "WAIT"
                    with m.Default():
                        fail(ErrorSource.REQUEST, ScheduleError.BAD_OPCODE)
            with m.State("SEQUENCE"):
                with m.If(seq.error_event):
                    fail(seq.error_source, seq.error_code, seq.error_unit)
                with m.Elif(seq.done_event):
                    with m.If(op == ScheduleOp.EXECUTE):
                        m.d.sync += arg_len.eq(0)         # the arguments were sent
                    complete()
            with m.State("COPY"):
                m.d.comb += [own_op.eq(AGCUOp.COPY), own_src.eq(src), own_dst.eq(dst),
                             own_len.eq(length)]
                for k in range(n):
                    with m.If(argument == k):
                        m.d.comb += own_valid[k].eq(1)
                        with m.If(self.cmd[k].ready):
                            m.d.comb += issued_copy[k].eq(1)
                            m.d.sync += copy_index[k].eq(index)
                            complete()
            with m.State("WAIT"):
                with m.If(copy_failed):
                    fail(ErrorSource.AGCU, copy_code, copy_unit, at=copy_at)
                with m.Elif(((copying | busy) & argument[:n]) == 0):
                    complete()
            with m.State("FINISH"):
                with m.If(copy_failed):
                    fail(ErrorSource.AGCU, copy_code, copy_unit, at=copy_at)
                with m.Elif(copying == 0):
                    m.d.sync += [ctl.done.eq(1), ctl.busy.eq(0),
                                 ctl.completed.eq(ctl.completed + 1)]
                    m.next = "IDLE"
        m.d.comb += seq.busy_ok.eq(copying)
        return m

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

from types import SimpleNamespace

from amaranth import Cat, Module, Signal, unsigned
from amaranth.lib import enum, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .agcu import AGCUError, AGCUOp, agcu_command_layout
from .array import BUDGET_BITS, WATCHDOG_BITS, HostPort
from .interfaces import check_int
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
DEFAULT_COMMANDS = 256


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


class Orchestrator(wiring.Component):
    """Runs a schedule of commands held in memory, with no host between commands.

    See also
    --------
    Encoder: ``software/rdu/schedule.py`` (``Command``, ``encode``); functional model:
    ``FunctionalMachine.run_schedule`` in ``software/rdu/models/machine.py``; host driver:
    ``run_orchestrated`` in ``software/rdu/sim/host.py``; docs: ``docs/orchestrator.md``;
    tests: ``tests/test_orchestrator.py``.

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
    cycle_budget : In(BUDGET_BITS)
        The array's run budget of each of the schedule's executes (the host's setting).
    cmd : Out(stream.Signature(agcu_command_layout())).array(agcus)
        Commands of each AGCU (the parent gives them to the AGCUs while ``busy``).
    agcu_busy, agcu_done : In(1).array(agcus)
    agcu_error : In(AGCUError).array(agcus)
    host : Out(HostPort())
        The array's host port (``start``, ``config_clear``, ``watchdog_cycles`` and
        ``cycle_budget`` are driven; ``perf_select`` and ``readback_start`` stay 0).
    abort_start : In(1)
        The system's abort pulse: a running program load or execute ends with
        ``ERROR.SOURCE`` ``ABORTED``, a copy with its AGCU's ``ABORTED``.
    """

    def __init__(self, agcus, *, commands=DEFAULT_COMMANDS, addr_width=32):
        check_int("AGCU count", agcus, 1, MAX_AGCUS)
        check_int("Schedule memory depth", commands, 1, MAX_COMMANDS)
        check_int("Address width", addr_width, 16, 32)
        self.agcus, self.commands, self.addr_width = agcus, commands, addr_width
        self.sequencer = Sequencer(agcus, addr_width=addr_width)
        super().__init__({
            "control": In(ScheduleControl()),
            "capture": Out(1),
            "bitstream": In(stream.Signature(32)),
            "watchdog_cycles": In(WATCHDOG_BITS),
            "cycle_budget": In(BUDGET_BITS),
            "cmd": Out(stream.Signature(agcu_command_layout(addr_width))).array(agcus),
            "agcu_busy": In(1).array(agcus),
            "agcu_done": In(1).array(agcus),
            "agcu_error": In(AGCUError).array(agcus),
            "host": Out(HostPort()),
            "abort_start": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.sequencer = self.sequencer
        m.submodules.schedule = memory = Memory(shape=unsigned(32 * COMMAND_WORDS),
                                                depth=self.commands, init=[])
        s = self._signals(memory)
        self._connect_sequencer(m, s)
        self._own_commands(m, s)
        self._status(m, s)
        self._copies(m, s)
        self._fetch_words(m, s)
        with m.FSM():
            with m.State("IDLE"):
                self._idle(m, s)
            with m.State("FETCH"):
                m.d.comb += [self.capture.eq(1), s.own_valid.eq(1),
                             s.own_op.eq(AGCUOp.PROGRAM_LOAD), s.own_src.eq(s.address),
                             s.own_len.eq(s.count << 4)]
                with m.If(self.cmd[0].ready):
                    m.next = "FETCH_WAIT"
            with m.State("FETCH_WAIT"):
                m.d.comb += self.capture.eq(1)
                with m.If(self.agcu_done[0]):
                    with m.If(self.agcu_error[0] != AGCUError.NONE):
                        self._fail(m, s, ErrorSource.AGCU, self.agcu_error[0], 0,
                                   at=FETCH_INDEX)
                    with m.Else():
                        m.next = "FETCH_CMD"
            with m.State("FETCH_CMD"):
                # the read port's address is index: its data arrives in DECODE
                with m.If(s.copy_failed):
                    self._fail(m, s, ErrorSource.AGCU, s.copy_code, s.copy_unit, at=s.copy_at)
                with m.Elif(s.index == s.count):
                    self._fail(m, s, ErrorSource.REQUEST, ScheduleError.NO_END)
                with m.Else():
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += s.current.eq(s.read.data)
                m.next = "DISPATCH"
            with m.State("DISPATCH"):
                self._dispatch(m, s)
            with m.State("SEQUENCE"):
                seq = self.sequencer
                with m.If(seq.error_event):
                    self._fail(m, s, seq.error_source, seq.error_code, seq.error_unit)
                with m.Elif(seq.done_event):
                    with m.If(s.op == ScheduleOp.EXECUTE):
                        m.d.sync += s.arg_len.eq(0)         # the arguments were sent
                    self._complete(m, s)
            with m.State("COPY"):
                self._copy(m, s)
            with m.State("WAIT"):
                with m.If(s.copy_failed):
                    self._fail(m, s, ErrorSource.AGCU, s.copy_code, s.copy_unit, at=s.copy_at)
                with m.Elif(((s.copying | s.agcus_busy) & s.argument[:self.agcus]) == 0):
                    self._complete(m, s)
            with m.State("FINISH"):
                ctl = self.control
                with m.If(s.copy_failed):
                    self._fail(m, s, ErrorSource.AGCU, s.copy_code, s.copy_unit, at=s.copy_at)
                with m.Elif(s.copying == 0):
                    m.d.sync += [ctl.done.eq(1), ctl.busy.eq(0),
                                 ctl.completed.eq(ctl.completed + 1)]
                    m.next = "IDLE"
        m.d.comb += self.sequencer.busy_ok.eq(s.copying)
        return m

    def _signals(self, memory):
        """The orchestrator's registers and wires, by name."""
        n = self.agcus
        current = Signal(32 * COMMAND_WORDS, name="current")   # the command being run
        return SimpleNamespace(
            write=memory.write_port(), read=memory.read_port(transparent_for=()),
            agcus_busy=Cat(*self.agcu_busy), agcus_done=Cat(*self.agcu_done),
            current=current, op=current[:OP_BITS], argument=current[OP_BITS:32],
            src=current[32:64], dst=current[64:96], length=current[96:128],
            arg_addr=Signal(32, name="arg_addr"), arg_len=Signal(32, name="arg_len"),
            # own commands (the fetch's PROGRAM_LOAD, COPY)
            own_op=Signal(AGCUOp.as_shape(), name="own_op"),
            own_src=Signal(self.addr_width, name="own_src"),
            own_dst=Signal(self.addr_width, name="own_dst"),
            own_len=Signal(32, name="own_len"), own_valid=Signal(n, name="own_valid"),
            index=Signal(16, name="index"),
            count=Signal(16, name="count"),             # commands in the schedule
            address=Signal(32, name="address"),         # of the schedule
            words=Signal(range(COMMAND_WORDS * self.commands + 1), name="words"),
            staged=Signal(32 * (COMMAND_WORDS - 1), name="staged"),
            # COPY commands in flight: their AGCU, their command index; the first that
            # ends with an error is kept and ends the schedule at the next boundary
            copying=Signal(n, name="copying"),
            copy_index=[Signal(16, name=f"copy_index{k}") for k in range(n)],
            copy_failed=Signal(name="copy_failed"), copy_code=Signal(8, name="copy_code"),
            copy_unit=Signal(range(n), name="copy_unit"), copy_at=Signal(16, name="copy_at"),
            issued_copy=Signal(n, name="issued_copy"), ended=Signal(n, name="ended"),
        )

    def _connect_sequencer(self, m, s):
        """The sequencer: host port, AGCU status, the current command's fields."""
        seq = self.sequencer
        wiring.connect(m, seq.host, wiring.flipped(self.host))
        m.d.comb += [seq.watchdog_cycles.eq(self.watchdog_cycles),
                     seq.cycle_budget.eq(self.cycle_budget),
                     seq.abort_start.eq(self.abort_start)]
        for k in range(self.agcus):
            m.d.comb += [seq.agcu_busy[k].eq(self.agcu_busy[k]),
                         seq.agcu_done[k].eq(self.agcu_done[k]),
                         seq.agcu_error[k].eq(self.agcu_error[k])]
        m.d.comb += [seq.prog_addr.eq(s.src), seq.prog_len.eq(s.length),
                     seq.arg_addr.eq(s.arg_addr), seq.arg_len.eq(s.arg_len),
                     seq.exec_mask.eq(s.argument),
                     # held for the whole sequence (the command stays in current)
                     seq.skip_execute.eq(s.op == ScheduleOp.PROGRAM_LOAD),
                     seq.skip_load.eq(s.op == ScheduleOp.EXECUTE)]

    def _own_commands(self, m, s):
        """The AGCU commands: the sequencer's while it runs, else the orchestrator's own
        (packed whole, see :class:`hdl.sequencer.Sequencer`)."""
        layout = agcu_command_layout(self.addr_width)
        packed = Signal(layout.size)
        m.d.comb += packed.eq((s.own_op << layout["op"].offset) |
                              (s.own_src << layout["src"].offset) |
                              (s.own_dst << layout["dst"].offset) |
                              (s.own_len << layout["length"].offset))
        for k in range(self.agcus):
            with m.If(self.sequencer.busy):
                wiring.connect(m, self.sequencer.cmd[k], wiring.flipped(self.cmd[k]))
            with m.Else():
                m.d.comb += [self.cmd[k].valid.eq(s.own_valid[k]),
                             self.cmd[k].payload.eq(packed)]

    def _status(self, m, s):
        ctl = self.control
        m.d.comb += [ctl.index.eq(s.index), s.read.addr.eq(s.index)]
        with m.If(ctl.busy):
            m.d.sync += ctl.cycles.eq(ctl.cycles + 1)

    def _copies(self, m, s):
        """Track the COPY commands in flight; keep the first that fails."""
        m.d.comb += s.ended.eq(s.copying & s.agcus_done)
        m.d.sync += s.copying.eq((s.copying & ~s.ended) | s.issued_copy)
        for k in reversed(range(self.agcus)):
            with m.If(s.ended[k] & (self.agcu_error[k] != AGCUError.NONE) & ~s.copy_failed):
                m.d.sync += [s.copy_failed.eq(1), s.copy_code.eq(self.agcu_error[k]),
                             s.copy_unit.eq(k), s.copy_at.eq(s.copy_index[k])]

    def _fetch_words(self, m, s):
        """The schedule's fetch: AGCU 0's words into the schedule memory."""
        m.d.comb += self.bitstream.ready.eq(1)
        with m.If(self.capture & self.bitstream.valid):
            m.d.sync += s.words.eq(s.words + 1)
            with m.Switch(s.words[:2]):
                for w in range(COMMAND_WORDS - 1):
                    with m.Case(w):
                        m.d.sync += s.staged[32 * w:32 * (w + 1)].eq(self.bitstream.payload)
                with m.Default():
                    m.d.comb += [s.write.addr.eq(s.words >> 2),
                                 s.write.data.eq(Cat(s.staged, self.bitstream.payload)),
                                 s.write.en.eq(s.words >> 2 < self.commands)]

    def _fail(self, m, s, source, code, unit=0, at=None):
        """End the schedule with an error (in an FSM state)."""
        ctl = self.control
        m.d.sync += [ctl.error_source.eq(source), ctl.error_code.eq(code),
                     ctl.error_unit.eq(unit), ctl.error_index.eq(s.index if at is None else at),
                     ctl.error.eq(1), ctl.busy.eq(0)]
        m.next = "IDLE"

    def _complete(self, m, s):
        """The current command is done: fetch the next (in an FSM state)."""
        m.d.sync += [s.index.eq(s.index + 1),
                     self.control.completed.eq(self.control.completed + 1)]
        m.next = "FETCH_CMD"

    def _idle(self, m, s):
        """``start``: check the request, clear the status, fetch."""
        ctl = self.control
        with m.If(ctl.start):
            m.d.sync += [ctl.busy.eq(1), ctl.done.eq(0), ctl.error.eq(0),
                         ctl.error_source.eq(ErrorSource.NONE), ctl.error_code.eq(0),
                         ctl.error_unit.eq(0), ctl.error_index.eq(0),
                         ctl.cycles.eq(0), ctl.completed.eq(0), s.index.eq(0),
                         s.words.eq(0), s.count.eq(ctl.length >> 4), s.address.eq(ctl.addr),
                         s.arg_len.eq(0),
                         s.copy_failed.eq(0)]
            with m.If((ctl.length == 0) | (ctl.length[:4] != 0)):
                self._fail(m, s, ErrorSource.REQUEST, ScheduleError.BAD_LENGTH, at=FETCH_INDEX)
            with m.Elif(ctl.length > COMMAND_BYTES * self.commands):
                self._fail(m, s, ErrorSource.REQUEST, ScheduleError.TOO_LONG, at=FETCH_INDEX)
            with m.Elif(s.agcus_busy.any()):
                for k in reversed(range(self.agcus)):      # name the lowest busy AGCU
                    with m.If(self.agcu_busy[k]):
                        self._fail(m, s, ErrorSource.STUCK, 0, k, at=FETCH_INDEX)
            with m.Else():
                m.next = "FETCH"

    def _dispatch(self, m, s):
        """Start the decoded command (or fail it)."""
        mask_bad = (s.argument == 0) | (s.argument >> self.agcus != 0)
        with m.Switch(s.op):
            with m.Case(ScheduleOp.END):
                m.next = "FINISH"
            with m.Case(ScheduleOp.PROGRAM_LOAD):
                m.d.comb += self.sequencer.start.eq(1)
                m.next = "SEQUENCE"
            with m.Case(ScheduleOp.ARGUMENT_LOAD):
                m.d.sync += [s.arg_addr.eq(s.src), s.arg_len.eq(s.length)]
                self._complete(m, s)
            with m.Case(ScheduleOp.EXECUTE):
                with m.If(mask_bad):
                    self._fail(m, s, ErrorSource.REQUEST, ScheduleError.BAD_MASK)
                with m.Else():
                    m.d.comb += self.sequencer.start.eq(1)
                    m.next = "SEQUENCE"
            with m.Case(ScheduleOp.COPY):
                with m.If(s.argument >= self.agcus):
                    self._fail(m, s, ErrorSource.REQUEST, ScheduleError.BAD_AGCU)
                with m.Else():
                    m.next = "COPY"
            with m.Case(ScheduleOp.WAIT):
                with m.If(mask_bad):
                    self._fail(m, s, ErrorSource.REQUEST, ScheduleError.BAD_MASK)
                with m.Else():
                    m.next = "WAIT"
            with m.Default():
                self._fail(m, s, ErrorSource.REQUEST, ScheduleError.BAD_OPCODE)

    def _copy(self, m, s):
        """Issue the COPY to its AGCU; done once the AGCU takes it."""
        m.d.comb += [s.own_op.eq(AGCUOp.COPY), s.own_src.eq(s.src), s.own_dst.eq(s.dst),
                     s.own_len.eq(s.length)]
        for k in range(self.agcus):
            with m.If(s.argument == k):
                m.d.comb += s.own_valid[k].eq(1)
                with m.If(self.cmd[k].ready):
                    m.d.comb += s.issued_copy[k].eq(1)
                    m.d.sync += s.copy_index[k].eq(s.index)
                    self._complete(m, s)

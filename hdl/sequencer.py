"""The host's run sequence of ``docs/system.md`` in gateware (:class:`Sequencer`).

The IP block (:class:`hdl.ip.RDUIP`) runs it on ``CONTROL.START``; the
:class:`hdl.orchestrator.Orchestrator` runs its program-load half and its execute half
as two commands of a schedule. :class:`ErrorSource` is what ``ERROR.SOURCE`` of the
register map (``hdl/rdu_ip.rdl``, ``rdu_error_source_e``) encodes; ``tests/test_ip.py``
checks that the two agree.
"""

from types import SimpleNamespace

from amaranth import Cat, Module, Signal
from amaranth.lib import enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .agcu import AGCUError, AGCUOp, agcu_command_layout
from .array import BUDGET_BITS, WATCHDOG_BITS, WATCHDOG_NONE, HostPort
from .config_net import LoaderState
from .interfaces import check_int

__all__ = ["ErrorSource", "Sequencer"]


class ErrorSource(enum.IntEnum, shape=4):
    """What ended a run with an error (``error_source``; ``ERROR.SOURCE`` of the IP)."""
    NONE = 0        #: no error
    LOADER = 1      #: the loader rejected the bitstream; the code is its ``ConfigStatus``
    AGCU = 2        #: an AGCU command ended with an error; unit: the AGCU, code: AGCUError
    WATCHDOG = 3    #: the array's watchdog stopped the run; unit: ``host.watchdog_unit``
    UNIT = 4        #: a PCU or PMU ended with an error status (``host.unit_error``)
    REQUEST = 5     #: a bad request: an execute mask naming no AGCU or a missing one
                    #: (code 0); a bad schedule command (code: ``ScheduleError``)
    STUCK = 6       #: an AGCU still busy from an earlier run; unit: the AGCU
    ABORTED = 7     #: the host aborted the run (``abort_start``; the IP's ``CONTROL.ABORT``)


class Sequencer(wiring.Component):
    """The host's run sequence of ``docs/system.md`` in gateware, started by a pulse.

    Parameters
    ----------
    agcus : int
        Number of AGCUs (1 to 32: ``EXEC_MASK`` has a bit per AGCU).
    addr_width : int
        AGCU address width.

    Attributes
    ----------
    start : In(1)
        Pulse: run (ignored while ``busy``).
    prog_addr, prog_len, arg_addr, arg_len, exec_mask : In(32)
        The program (``PROGRAM_LOAD`` on AGCU 0), the arguments (``ARGUMENT_LOAD`` on
        AGCU 0 when ``arg_len`` is not 0) and the AGCUs that ``EXECUTE``.
    watchdog_cycles : In(WATCHDOG_BITS)
        The array's watchdog during the run (0: off; then a stalled run waits for a
        soft reset, and the mesh is not waited for after the last ``done``).
    cycle_budget : In(BUDGET_BITS)
        The array's run budget (``host.cycle_budget``; 0: off).
    skip_load : In(1)
        1: no configuration clear and no ``PROGRAM_LOAD``: start with the argument load
        (if ``arg_len``) and the execute, on the configuration already loaded (the
        :class:`hdl.orchestrator.Orchestrator`'s ``EXECUTE``). 0 (the IP block): the
        whole sequence.
    skip_execute : In(1)
        1: end (``done``) after the loader's verdict: a ``PROGRAM_LOAD`` alone
        (``exec_mask`` and the arguments are not used).
    abort_start : In(1)
        Pulse: a running sequence ends at once with ``ABORTED`` (the system's abort
        drains the AGCUs and flushes the array meanwhile).
    busy_ok : In(agcus)
        AGCUs that may be busy at ``start`` (a ``COPY`` the orchestrator issued without
        waiting): not refused as ``STUCK``; the execute still waits for those in
        ``exec_mask`` (and the load for AGCU 0) to be idle. 0 (the IP block): every busy
        AGCU is refused.
    busy, done, error : Out(1)
        Running; the last run ended cleanly; the last run failed (both cleared by
        ``start``).
    error_source, error_code : Out(4), Out(8)
        ``ERROR.SOURCE`` (:class:`ErrorSource`) and its code.
    error_unit : Out(32)
        The AGCU (source ``AGCU``) or ``host.watchdog_unit`` (source ``WATCHDOG``).
    done_event, error_event : Out(1)
        One cycle at the end of a clean / failed run.
    run_cycles, load_cycles : Out(32)
        The measures of ``rdu.sim.host`` (``cycles``, ``load_cycles``).
    cmd : Out(stream.Signature(agcu_command_layout())).array(agcus)
    agcu_busy, agcu_done : In(1).array(agcus)
    agcu_error : In(4).array(agcus)
    host : Out(HostPort())
        The array's host port (``perf_select``, ``readback_start`` stay 0: the parent
        drives them).
    """

    def __init__(self, agcus, *, addr_width=32):
        check_int("AGCU count", agcus, 1, 32)
        self.agcus = agcus
        self.addr_width = addr_width
        self.sources = ErrorSource
        super().__init__({
            "start": In(1),
            "prog_addr": In(32), "prog_len": In(32), "arg_addr": In(32), "arg_len": In(32),
            "exec_mask": In(32),
            "watchdog_cycles": In(WATCHDOG_BITS),
            "cycle_budget": In(BUDGET_BITS),
            "skip_load": In(1), "skip_execute": In(1), "busy_ok": In(agcus),
            "abort_start": In(1),
            "busy": Out(1), "done": Out(1), "error": Out(1),
            "error_source": Out(4), "error_code": Out(8), "error_unit": Out(32),
            "done_event": Out(1), "error_event": Out(1),
            "run_cycles": Out(32), "load_cycles": Out(32),
            "cmd": Out(stream.Signature(agcu_command_layout(addr_width))).array(agcus),
            "agcu_busy": In(1).array(agcus),
            "agcu_done": In(1).array(agcus),
            "agcu_error": In(AGCUError).array(agcus),
            "host": Out(HostPort()),
        })

    def elaborate(self, platform):
        m = Module()
        n, host = self.agcus, self.host
        s = SimpleNamespace(
            busy=Cat(*self.agcu_busy), done=Cat(*self.agcu_done),
            mask=Signal(n, name="mask"),
            pending=Signal(n, name="pending"),      # EXECUTE not yet accepted
            issued=Signal(n, name="issued"),        # EXECUTE accepted
            counter=Signal(32, name="counter"),
            arg_bit=Signal(n, name="arg_bit"),
            op=Signal(AGCUOp.as_shape(), name="op"),
            address=Signal(self.addr_width, name="address"),
            length=Signal(32, name="length"),
        )
        m.d.comb += [host.watchdog_cycles.eq(self.watchdog_cycles),
                     host.cycle_budget.eq(self.cycle_budget),
                     s.arg_bit.eq(Cat(self.arg_len != 0))]
        # one command word for every AGCU, packed whole (its dst is always 0): fields
        # assigned one by one would leave constant-only slices, which Verilator's lint
        # rejects in the generated Verilog (ALWNEVER)
        layout = agcu_command_layout(self.addr_width)
        packed = Signal(layout.size)
        m.d.comb += [s.address.eq(self.prog_addr),
                     packed.eq((s.op << layout["op"].offset) |
                               (s.address << layout["src"].offset) |
                               (s.length << layout["length"].offset))]
        for k in range(n):
            m.d.comb += self.cmd[k].payload.eq(packed)

        m.d.sync += [self.done_event.eq(0), self.error_event.eq(0)]
        with m.FSM() as fsm:
            with m.State("IDLE"):
                self._idle(m, s)
            with m.State("CLEAR"):
                m.d.comb += host.config_clear.eq(1)
                m.next = "LOAD"
                self._aborted(m)
            with m.State("LOAD"):
                cmd = self.cmd[0]
                m.d.comb += [cmd.valid.eq(1), s.op.eq(AGCUOp.PROGRAM_LOAD),
                             s.length.eq(self.prog_len)]
                with m.If(cmd.ready):
                    m.d.sync += s.counter.eq(0)
                    m.next = "LOAD_WAIT"
                self._aborted(m)
            with m.State("LOAD_WAIT"):
                self._load_wait(m, s)
                self._aborted(m)
            with m.State("LOADED"):
                # (a state of its own: skip_execute is a constant in the IP block, and a
                # constant inside a priority chain makes Verilator's lint see overlapping
                # case items)
                with m.If(self.skip_execute):
                    self._succeed(m)
                with m.Elif(self.arg_len != 0):
                    m.next = "ARGS"
                with m.Else():
                    m.next = "READY"
                self._aborted(m)
            with m.State("ARGS"):
                cmd = self.cmd[0]
                m.d.comb += [cmd.valid.eq(1), s.op.eq(AGCUOp.ARGUMENT_LOAD),
                             s.address.eq(self.arg_addr), s.length.eq(self.arg_len)]
                with m.If(cmd.ready):
                    m.next = "READY"
                self._aborted(m)
            with m.State("READY"):
                # no configuration (an orchestrator's EXECUTE before any PROGRAM_LOAD):
                # the array ignores start and nothing would ever move; stopped at once
                # as the watchdog would stop a stall outside the mesh (found by fuzzing)
                with m.If(host.config_state != LoaderState.LOADED):
                    self._fail(m, self.sources.WATCHDOG, 0, WATCHDOG_NONE)
                # every executing AGCU idle (AGCU 0 may still be passing arguments: they
                # enter the array at start, and it takes EXECUTE when it is done)
                with m.Elif((s.busy & s.mask & ~s.arg_bit) == 0):
                    m.d.sync += [s.pending.eq(s.mask), s.issued.eq(0)]
                    m.next = "START"
                self._aborted(m)
            with m.State("START"):
                m.d.comb += host.start.eq(1)
                m.d.sync += s.counter.eq(0)
                m.next = "RUN"
                self._aborted(m)
            with m.State("RUN"):
                self._run(m, s)
                self._aborted(m)
            with m.State("DRAIN"):
                with m.If((self.watchdog_cycles == 0) | ~(host.holding | host.units_busy)):
                    with m.If(host.unit_error):
                        self._fail(m, self.sources.UNIT, 0)
                    with m.Else():
                        self._succeed(m)
                with m.Elif(host.watchdog):
                    self._fail(m, self.sources.WATCHDOG, 0, host.watchdog_unit)
                self._aborted(m)
        # EXECUTE on the first cycle of START (the edge that samples start) and, for an
        # AGCU still busy with the arguments, as soon as it takes it
        for k in range(n):
            with m.If(s.pending[k] & (fsm.ongoing("START") | fsm.ongoing("RUN"))):
                m.d.comb += [self.cmd[k].valid.eq(1), s.op.eq(AGCUOp.EXECUTE)]
                with m.If(self.cmd[k].ready):
                    m.d.sync += [s.pending[k].eq(0), s.issued[k].eq(1)]
        with m.If(self.busy == 0):
            m.d.sync += s.pending.eq(0)
        return m

    def _fail(self, m, source, code, unit=0):
        """End the sequence with an error (in an FSM state)."""
        m.d.sync += [self.error_source.eq(source), self.error_code.eq(code),
                     self.error_unit.eq(unit), self.error.eq(1), self.error_event.eq(1),
                     self.busy.eq(0), self.done.eq(0), self.done_event.eq(0)]
        m.next = "IDLE"

    def _aborted(self, m):
        """The last statement of a running state: ``abort_start`` overrides what it did."""
        with m.If(self.abort_start):
            self._fail(m, self.sources.ABORTED, 0)

    def _succeed(self, m):
        """End the sequence done (in an FSM state)."""
        m.d.sync += [self.done.eq(1), self.done_event.eq(1), self.busy.eq(0)]
        m.next = "IDLE"

    def _idle(self, m, s):
        """``start``: check the request, then load, pass arguments or execute."""
        n, src = self.agcus, self.sources
        with m.If(self.start):
            m.d.sync += [self.busy.eq(1), self.done.eq(0), self.error.eq(0),
                         self.error_source.eq(src.NONE), self.error_code.eq(0),
                         self.error_unit.eq(0), s.mask.eq(self.exec_mask)]
            bad = ~self.skip_execute & ((self.exec_mask == 0) |
                                        (self.exec_mask >> n != 0))
            stuck = Signal(n)
            m.d.comb += stuck.eq(s.busy & ~self.busy_ok)
            with m.If(bad):
                self._fail(m, src.REQUEST, 0)
            with m.Elif(stuck.any()):
                # a command would wait for it forever: refuse, naming the lowest
                for k in reversed(range(n)):
                    with m.If(stuck[k]):
                        self._fail(m, src.STUCK, 0, k)
            with m.Elif(~self.skip_load):
                m.next = "CLEAR"
            with m.Elif(self.arg_len != 0):
                m.next = "ARGS"
            with m.Else():
                m.next = "READY"

    def _load_wait(self, m, s):
        """Wait for the program load's AGCU and the loader; time the load."""
        host, src = self.host, self.sources
        with m.If(self.agcu_done[0] & (host.config_state != LoaderState.LOADING)):
            m.d.sync += self.load_cycles.eq(s.counter)
            with m.If(self.agcu_error[0] != AGCUError.NONE):
                self._fail(m, src.AGCU, self.agcu_error[0], 0)
            with m.Elif(host.config_state != LoaderState.LOADED):
                self._fail(m, src.LOADER, host.error)
            with m.Else():
                m.next = "LOADED"
        with m.Else():
            m.d.sync += s.counter.eq(s.counter + 1)

    def _run(self, m, s):
        """The kernel runs: an AGCU error, the watchdog, or every AGCU done -> DRAIN."""
        n, host, src = self.agcus, self.host, self.sources
        finished = Signal(n)
        m.d.comb += finished.eq(s.issued & s.done)
        failed = Signal(n)
        for k in range(n):
            m.d.comb += failed[k].eq(finished[k] & (self.agcu_error[k] != AGCUError.NONE))
        with m.If(failed.any()):
            for k in reversed(range(n)):      # the lowest AGCU wins
                with m.If(failed[k]):
                    m.d.sync += [self.error_code.eq(self.agcu_error[k]),
                                 self.error_unit.eq(k)]
            m.d.sync += [self.error_source.eq(src.AGCU), self.error.eq(1),
                         self.error_event.eq(1), self.busy.eq(0)]
            m.next = "IDLE"
        with m.Elif(host.watchdog):
            self._fail(m, src.WATCHDOG, 0, host.watchdog_unit)
        with m.Elif((s.pending == 0) & ((finished | ~s.mask) == (1 << n) - 1)):
            m.d.sync += self.run_cycles.eq(s.counter)
            m.next = "DRAIN"
        with m.Else():
            m.d.sync += s.counter.eq(s.counter + 1)

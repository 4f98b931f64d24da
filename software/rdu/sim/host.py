"""The host driver of :class:`hdl.system.RDUSystem`: what a host does to run programs.

:func:`run_programs` runs a sequence of compiled :class:`rdu.program.Program` (each
saved as a directory by :meth:`Program.save`) on one system with one memory: memory
models on every AGCU port; then, per program: its input images written, its
bitstream written and loaded through AGCU 0 (``PROGRAM_LOAD``, after a
``config_clear``), the loader's verdict read, ``start`` and ``EXECUTE`` on the
program's AGCUs on one edge, a wait with a watchdog, its outputs read. Memory is kept
between programs, so a program reads what an earlier one stored. :func:`run_program`
is the one-program case. :class:`HostDriver` is the driver itself, for bodies that
issue their own commands (``COPY`` DDR -> HBM, argument load). The bodies of an
orchestrated schedule (run once, or once per token) are :mod:`rdu.sim.orchestrated`.

All are :class:`rdu.sim.bench.Bench` bodies: the same code runs in the Amaranth
simulator and under cocotb + Verilator. Every failure is a :class:`RunError` whose
message is one line naming the unit and the cause; ``docs/system.md`` lists them.
"""

import time
from pathlib import Path

import numpy as np

from hdl.agcu import AGCUError, AGCUOp, agcu_command_layout
from hdl.agcu_engines import DMA_WINDOWS
from hdl.array import WATCHDOG_BUDGET, watchdog_location
from hdl.config_net import LoaderState
from hdl.pcu_config import PCUError
from hdl.pmu import PMUError
from sim_models.memory import ddr_model, hbm_model, host_link_model

from ..bitstream import ConfigStatus
from ..dma_windows import copy_windows, port_value
from ..program import Program
from ..unitconfig import code_name
from ..units.agcu import check_position
from .limits import BUDGET_SLACK, hardware_cycle_budget, hardware_watchdog_cycles
from .memory_system import MemorySystem
from .protocol import (
    CopyDone,
    CopyStep,
    HostSchedule,
    LaunchDone,
    LaunchStep,
    WriteDone,
    WriteStep,
)

__all__ = ["RunError", "HostDriver", "system_memory", "check_program", "run_program",
           "run_programs", "run_schedule", "load_outputs"]

WORD_BYTES = 4
#: Total output words returned inline in the result (more: only in the .npz file).
INLINE_OUTPUT_WORDS = 1 << 16

_COMMAND = agcu_command_layout()


class RunError(AssertionError):
    """A program that did not run to a clean end (a one-line message says why)."""


def system_memory(beat_bytes, overrides=None, regions=None, faults=None):
    """HBM, DDR and host link for ``beat_bytes``-wide AXI ports; ``regions`` (from
    :meth:`rdu.machine.Machine.regions`) sets their bases and sizes, ``overrides`` maps
    ``"hbm"``/``"ddr"``/``"host"`` to further model arguments (latencies...); ``faults``
    injects error responses (:class:`rdu.sim.memory_system.FaultInjector`)."""
    overrides = overrides or {}
    sizes = {region.name: {"base": region.base, "size": region.size}
             for region in regions or ()}
    return MemorySystem([
        hbm_model(beat_bytes=beat_bytes, **sizes.get("hbm", {}), **overrides.get("hbm", {})),
        ddr_model(beat_bytes=beat_bytes, **sizes.get("ddr", {}), **overrides.get("ddr", {})),
        host_link_model(beat_bytes=beat_bytes, **sizes.get("host", {}),
                        **overrides.get("host", {})),
    ], beat_bytes=beat_bytes, faults=faults)


def command_word(op, *, src=0, dst=0, length=0):
    """The ``cmd`` payload of one AGCU command as an integer."""
    return _COMMAND.const({"op": op, "src": src, "dst": dst,
                           "length": length}).as_value().value




def _error_name(code):
    return code_name(AGCUError, code)


def unit_errors(perf):
    """``["PMU(0,1) error WRITE_RANGE (code 4)", ...]`` for every unit whose error
    counter in ``perf`` (``pmu(r,c).error`` / ``pcu(r,c).error``) is not zero."""
    found = []
    for name, value in perf.items():
        if name.endswith(".error") and value:
            unit = name[:-len(".error")]
            codes = PMUError if unit.startswith("pmu") else PCUError
            found.append(f"{unit.upper()} error {code_name(codes, value)} (code {value})")
    return found


def check_program(program):
    """Raise :class:`RunError` if ``program`` cannot be run (before any simulation)."""
    problem = program.launch_problem()
    if problem:
        raise RunError(f"program {program.name!r}: {problem}")


class HostDriver:
    """The host side of one :class:`hdl.system.RDUSystem` run in a bench.

    Parameters
    ----------
    bench : rdu.sim.bench.Bench
    machine : rdu.machine.Machine
        The system (lanes, AGCUs and memory capacities are taken from it).
    memory : dict, optional
        Memory-model overrides (:func:`system_memory`).
    stall : str
        Stall pattern of the memory side of every AXI channel.
    perf_counters : list of str, optional
        The array's performance counter names in ``host.perf_select`` order.
    progress : bool or int
        Print a progress line (cycles done, cycles per second) every ``progress``
        cycles (an int) or ten times per watchdog period (``True``).
    faults : dict, optional
        AXI error responses to inject (:class:`rdu.sim.memory_system.FaultInjector`).
    launch_latency : int
        Cycles the host needs to issue each launch (:meth:`run`) and each copy
        (:meth:`copy`): it waits that long before their commands
        (:data:`sim_models.memory.HOST_LAUNCH_LATENCY` is the runtime's default; 0 here,
        so that bodies measuring the hardware alone are unchanged).
    windows : bool
        Confine each launch to the memory windows of its manifest
        (:meth:`rdu.program.Program.dma_windows`: inputs and bitstream read, outputs
        written), set on ``dma_windows`` before its program load; ``run(...,
        windows=[...])`` gives others. False (default): the windows stay off.
    position : int
        The launch position (``RDUSystem.position``), set now and kept for every launch.
    """

    def __init__(self, bench, machine, *, memory=None, stall="none", perf_counters=None,
                 progress=False, faults=None, launch_latency=0, windows=False, position=0):
        if not isinstance(launch_latency, int) or isinstance(launch_latency, bool) or \
                launch_latency < 0:
            raise RunError(f"launch latency must be a non-negative integer number of "
                           f"cycles, not {launch_latency!r}")
        self.launch_latency = launch_latency
        try:
            bench.set("position", check_position(position))
        except ValueError as error:
            raise RunError(str(error)) from None
        self.windows = windows
        self.windows_set = False            # dma_windows is enabled now
        self.bench, self.machine = bench, machine
        self.mem = bench.memory_system(
            system_memory(machine.beat_bytes, memory, machine.regions(), faults))
        for k in range(machine.agcus):
            self.mem.attach(bench, f"axi.{k}", stall=stall)
        self.perf_counters = list(perf_counters or [])
        self.progress = progress
        self.started = time.perf_counter()
        #: the note of the abort :meth:`run` made before its launch ("": none)
        self.recovered = ""
        #: memory errors recorded before the current launch (its messages name only
        #: its own)
        self.errors_before = 0

    # -- memory ----------------------------------------------------------------------------
    def write(self, address, words):
        self.mem.load(address, np.asarray(words, dtype=np.uint32))

    def read(self, address, count):
        return self.mem.dump(address, WORD_BYTES * count, dtype=np.uint32)

    # -- commands --------------------------------------------------------------------------
    async def _issue(self, agcus, command, timeout, what):
        """Drive ``command`` on ``cmd[k]`` of every AGCU in ``agcus`` for one cycle once
        none of them is busy (``cmd.ready`` is ``~busy``, so the edge at the end of that
        cycle accepts them all); the caller ends it with :meth:`_end_issue`."""
        bench = self.bench
        for _ in range(timeout):
            busy = [k for k in agcus if await bench.read(f"agcu_busy.{k}")]
            await bench.cycles(1)
            if not busy:
                break
        else:
            raise RunError(f"{what}: AGCU{'s' if len(busy) > 1 else ''} "
                           f"{', '.join(map(str, busy))} still busy after {timeout} cycles")
        for k in agcus:
            bench.set(f"cmd.{k}.valid", 1)
            bench.set(f"cmd.{k}.payload", command)

    async def _end_issue(self, agcus):
        await self.bench.cycles(1)
        for k in agcus:
            self.bench.set(f"cmd.{k}.valid", 0)

    async def command(self, agcu, op, *, src=0, dst=0, length=0, timeout=1_000_000,
                      what=None):
        """Run one AGCU command to its end; return the cycles it took (from the edge
        that accepted it to ``done``). Raises :class:`RunError` naming the AGCU and its
        :class:`AGCUError` when the command ends with an error."""
        op = AGCUOp(op)
        what = what or f"AGCU {agcu} command"
        await self._issue([agcu], command_word(op, src=src, dst=dst, length=length),
                          timeout, what)
        await self._end_issue([agcu])
        cycles = await self._wait_done([agcu], timeout, what)
        await self._check_agcu(agcu, what, op.name)
        return cycles[agcu]

    async def set_windows(self, windows):
        """``dma_windows`` = ``windows`` (``None``: off), unless they are off already."""
        if windows is None and not self.windows_set:
            return
        try:
            value = port_value(windows or [], enable=windows is not None)
        except ValueError as error:
            raise RunError(str(error)) from None
        await self.bench.cycles(1)          # no set() after a read() in the same cycle
        self.bench.set("dma_windows", value)
        self.windows_set = windows is not None

    async def copy(self, jobs, timeout=1_000_000):
        """``COPY`` commands ``[(agcu, src, dst, length)]`` (distinct AGCUs) issued on one
        edge; wait for all. Returns ``(cycles, {agcu: cycles})`` from that edge to the
        last ``done`` (to each AGCU's). Raises :class:`RunError` on an AGCU error. A
        driver that confines launches (``windows``) confines the copy to its sources
        (read) and destinations (written)."""
        bench = self.bench
        agcus = [job[0] for job in jobs]
        if len(set(agcus)) != len(agcus):
            raise RunError(f"copy jobs name an AGCU twice: {agcus}")
        await self.set_windows(copy_windows(jobs, self.machine.beat_bytes)
                               if self.windows else None)
        await self.issue_latency()
        what = f"copy on AGCU{'s' if len(agcus) > 1 else ''} {', '.join(map(str, agcus))}"
        await self._issue(agcus, 0, timeout, what)
        for agcu, src, dst, length in jobs:
            bench.set(f"cmd.{agcu}.payload", command_word(AGCUOp.COPY, src=src, dst=dst,
                                                          length=length))
        await self._end_issue(agcus)
        finished = await self._wait_done(agcus, timeout, what)
        for agcu in agcus:
            await self._check_agcu(agcu, what, "COPY")
        return max(finished.values()), finished

    async def _wait_done(self, agcus, timeout, what, *, name=None, hardware=False, op=None):
        """Wait until every AGCU in ``agcus`` is done; with ``op``, an AGCU that ends
        with an error fails the launch at once (the others may never finish)."""
        bench = self.bench
        pending, finished, elapsed = set(agcus), {}, 0
        every = (self.progress if isinstance(self.progress, int) and
                 not isinstance(self.progress, bool) else max(1, timeout // 10)
                 ) if self.progress else 0
        start = time.perf_counter()
        while True:
            for k in sorted(pending):
                if await bench.read(f"agcu_done.{k}"):
                    finished[k] = elapsed
                    pending.discard(k)
                    if op is not None:
                        await self._check_agcu(k, what, op)
            if not pending:
                return finished
            if hardware and await bench.read("host.watchdog"):
                raise RunError(await self._hardware_watchdog(what, sorted(pending), finished))
            if elapsed >= timeout:
                busy = sorted(pending)
                detail = await self._error_detail()
                raise RunError(
                    f"{what}: watchdog: AGCU{'s' if len(busy) > 1 else ''} "
                    f"{', '.join(map(str, busy))} still busy after {timeout} cycles from "
                    f"start (cycle {bench.cycle}); done: {sorted(finished) or 'none'}{detail}")
            if every and elapsed and elapsed % every == 0:
                rate = elapsed / max(time.perf_counter() - start, 1e-9)
                print(f"[run_program {name or what}] {elapsed} cycles, {rate:,.0f} cycles/s: "
                      f"busy AGCUs {sorted(pending)}, done {sorted(finished)}", flush=True)
            # on to the next cycle in which a signal checked above changes, the timeout or
            # the next progress line: nothing in between would be done differently
            limit = timeout - elapsed
            if every:
                limit = min(limit, every - elapsed % every)
            elapsed += await bench.advance_until_change(
                [f"agcu_done.{k}" for k in sorted(pending)] +
                (["host.watchdog"] if hardware else []), limit)

    async def _error_detail(self):
        """``"; PMU(0,1) error ... ; memory: ..."``: the units whose error counter is set
        and the first errored AXI burst, for a watchdog message."""
        detail = ""
        if await self.bench.read("host.unit_error"):
            errors = unit_errors(await self.read_counters(
                [c for c in self.perf_counters if c.endswith(".error")]))
            detail = "; " + ", ".join(errors) if errors else \
                "; a unit reports an error (host.unit_error)"
        errors = self.mem.errors[self.errors_before:]
        if errors:
            detail += f"; memory: {errors[0]}"
        return detail

    async def _wait_mesh_empty(self, what, finished, timeout):
        """After every AGCU finished: wait until the array has settled, no item waiting
        in the mesh (``host.holding``) and no unit busy (``host.units_busy``); an
        item left there for good (e.g. a token routed to a unit that never takes it) or
        a unit that never finishes makes the array's watchdog fire: that is the error."""
        bench = self.bench
        watched = ["host.holding", "host.units_busy", "host.watchdog"]
        elapsed = 0
        while elapsed < timeout:
            if not (await bench.read("host.holding") or await bench.read("host.units_busy")):
                return
            if await bench.read("host.watchdog"):
                raise RunError(await self._hardware_watchdog(what, [], finished))
            elapsed += await bench.advance_until_change(watched, timeout - elapsed)
        raise RunError(f"{what}: watchdog: the array still moving {timeout} cycles after "
                       f"every AGCU finished (cycle {bench.cycle}; items in the mesh or "
                       f"units busy); done: {sorted(finished) or 'none'}"
                       f"{await self._error_detail()}")

    async def _hardware_watchdog(self, what, busy, finished):
        """The message of a stop by the array's watchdog (``host.watchdog``)."""
        bench = self.bench
        code = await bench.read("host.watchdog_unit")
        cycles = await bench.read("host.watchdog_cycles")
        where = watchdog_location(code, self.machine.rows, self.machine.cols)
        agcus = f"AGCU{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))}"
        if code == WATCHDOG_BUDGET:
            budget = await bench.read("host.cycle_budget")
            return (f"{what}: hardware watchdog: run budget of {budget} cycles spent, the "
                    f"array still moving (cycle {bench.cycle}); busy: "
                    f"{agcus if busy else 'no AGCU (units or items in the mesh)'}; "
                    f"done: {sorted(finished) or 'none'}{await self._error_detail()}")
        if not busy:
            stalled = (f"{where} holds an item after every AGCU finished" if where else
                       "a unit still busy after every AGCU finished")
        elif where:
            stalled = f"{where} holds an item; busy: {agcus}"
        else:
            stalled = f"{agcus} (busy, no item waiting in the mesh)"
        return (f"{what}: hardware watchdog: no transfer for {cycles} cycles (cycle "
                f"{bench.cycle}); first stalled: {stalled}; done: {sorted(finished) or 'none'}"
                f"{await self._error_detail()}")

    def _memory_error(self, agcu):
        """The first errored AXI burst of AGCU ``agcu``'s port (else of any port)."""
        errors = self.mem.errors[self.errors_before:]
        own = [error for error in errors if error.port == f"axi.{agcu}"]
        return (own or errors or [None])[0]

    async def _refused(self, agcu, code):
        """``" at 0x..."``: the address AGCU ``agcu``'s windows refused, with
        ``WINDOW``."""
        if code != AGCUError.WINDOW:
            return ""
        return f" at {await self.bench.read(f'agcu_error_addr.{agcu}'):#x} (outside its windows)"

    async def _check_agcu(self, agcu, what, op):
        code = await self.bench.read(f"agcu_error.{agcu}")
        if code != AGCUError.NONE:
            record = self._memory_error(agcu)
            detail = await self._refused(agcu, code) + (f"; memory: {record}" if record
                                                        else "")
            raise RunError(f"{what}: AGCU {agcu} ended {op} with {_error_name(code)} "
                           f"(code {code}){detail}")

    async def issue_latency(self):
        """The host's time to issue a launch or a copy (``launch_latency`` cycles)."""
        if self.launch_latency:
            await self.bench.cycles(self.launch_latency)

    # -- programs --------------------------------------------------------------------------
    async def load_program(self, program, timeout=100_000):
        """Write ``program``'s bitstream into memory, clear the configuration, load it
        through AGCU 0 and wait for the loader's verdict; return the load cycles (from
        the edge that accepted ``PROGRAM_LOAD`` to the verdict)."""
        bench, name = self.bench, program.name
        self.write(program.bitstream_address, program.bitstream)
        await bench.cycles(1)               # no set() after a read() in the same cycle
        bench.set("host.config_clear", 1)
        await bench.cycles(1)
        bench.set("host.config_clear", 0)
        what = f"program {name!r}: program load"
        await self._issue([0], command_word(
            AGCUOp.PROGRAM_LOAD, src=program.bitstream_address,
            length=WORD_BYTES * len(program.bitstream)), timeout, what)
        await self._end_issue([0])          # the edge that accepted the command
        cycles = 0
        while True:
            done = await bench.read("agcu_done.0")
            state = await bench.read("host.config_state")
            if done and state != LoaderState.LOADING:
                break
            if cycles >= timeout:
                raise RunError(f"{what} not finished after {timeout} cycles (AGCU 0 "
                               f"done={done}, configuration state {state})")
            # the DMA may end before the loader's verdict (a bitstream cut short: the
            # loader waits ``idle_timeout`` cycles for words): watch both
            cycles += await bench.advance_until_change(["agcu_done.0", "host.config_state"],
                                                       timeout - cycles)
        code = await bench.read("agcu_error.0")
        if code != AGCUError.NONE:
            record = self._memory_error(0)
            raise RunError(f"program {name!r}: program load on AGCU 0 ended with "
                           f"{_error_name(code)} (bitstream at {program.bitstream_address:#x})"
                           + await self._refused(0, code)
                           + (f"; memory: {record}" if record else ""))
        if state != LoaderState.LOADED:
            code = await bench.read("host.error")
            raise RunError(f"program {name!r}: bitstream rejected by the configuration "
                           f"loader: {code_name(ConfigStatus, code)} (host.error = {code})")
        return cycles

    async def execute(self, program, timeout=200_000, watchdog_cycles=None):
        """``start`` and ``EXECUTE`` on ``program.execute`` on one edge; wait for every
        one of them, with the array's watchdog set to ``watchdog_cycles``
        (:func:`hardware_watchdog_cycles`). Returns ``{"cycles", "agcu_cycles",
        "array_cycles"}``."""
        bench, name = self.bench, program.name
        execute = list(program.execute)
        hardware = hardware_watchdog_cycles(timeout, watchdog_cycles)
        budget = hardware_cycle_budget(timeout, hardware)
        await self._issue(execute, command_word(AGCUOp.EXECUTE), timeout,
                          f"program {name!r}: execute")
        bench.set("host.watchdog_cycles", hardware)
        bench.set("host.cycle_budget", budget)
        bench.set("host.start", 1)
        await self._end_issue(execute)      # the edge that sampled start and the commands
        bench.set("host.start", 0)
        wait = timeout + BUDGET_SLACK if budget else timeout
        finished = await self._wait_done(execute, wait, f"program {name!r}", name=name,
                                         hardware=bool(hardware), op="EXECUTE")
        if hardware:
            await self._wait_mesh_empty(f"program {name!r}", finished, wait)
        for k in execute:
            await self._check_agcu(k, f"program {name!r}", "EXECUTE")
        array_done = await bench.read("host.done")
        array_cycles = await bench.read("host.cycles") if array_done else None
        return {"cycles": max(finished.values()),
                "agcu_cycles": {str(k): finished[k] for k in execute},
                "array_cycles": array_cycles,
                "unit_error": await bench.read("host.unit_error")}

    async def read_counters(self, names=None):
        """The array's performance counters by name (all of them by default)."""
        bench = self.bench
        wanted = self.perf_counters if names is None else names
        values = {}
        for counter in wanted:
            index = self.perf_counters.index(counter)
            await bench.cycles(1)
            bench.set("host.perf_select", index)
            await bench.cycles(1)
            values[counter] = await bench.read("host.perf_value")
        return values

    async def unsettled(self):
        """What a launch left behind, as words (empty: nothing): busy AGCUs, the
        watchdog's stop, items or work left in the array (``running`` is not: a kernel
        that sends no ``DONE`` token leaves it high)."""
        bench, found = self.bench, []
        busy = [k for k in range(self.machine.agcus) if await bench.read(f"agcu_busy.{k}")]
        if busy:
            found.append(f"AGCU{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} busy")
        for signal, what in (("host.watchdog", "watchdog stop"),
                             ("host.holding", "items in the mesh"),
                             ("host.units_busy", "units busy")):
            if await bench.read(signal):
                found.append(what)
        return found

    async def abort(self, timeout=100_000):
        """The system's abort (``abort_start`` pulse, ``docs/system.md`` **Abort**): every busy
        AGCU drains and ends with ``ABORTED``, then the array is flushed. Returns the
        one-line note of what it did; raises :class:`RunError` if ``aborting`` is still
        high after ``timeout`` cycles (a memory that never answers: then only a reset
        helps) or a busy AGCU ended with another code."""
        bench = self.bench
        busy = [k for k in range(self.machine.agcus) if await bench.read(f"agcu_busy.{k}")]
        await bench.cycles(1)               # no set() after a read() in the same cycle
        bench.set("abort_start", 1)
        await bench.cycles(1)               # the edge that samples it
        bench.set("abort_start", 0)
        elapsed = 0
        while await bench.read("aborting"):
            if elapsed >= timeout:
                still = [k for k in busy if await bench.read(f"agcu_busy.{k}")]
                raise RunError(f"abort not finished after {timeout} cycles: AGCU"
                               f"{'s' if len(still) > 1 else ''} {', '.join(map(str, still))} "
                               f"still draining (a reset is needed)")
            elapsed += await bench.advance_until_change(["aborting"], timeout - elapsed)
        for k in busy:
            code = await bench.read(f"agcu_error.{k}")
            if code != AGCUError.ABORTED:
                raise RunError(f"abort: AGCU {k} ended with {_error_name(code)}, not ABORTED")
        drained = (f"AGCU{'s' if len(busy) > 1 else ''} {', '.join(map(str, busy))} drained"
                   if busy else "no AGCU busy")
        return f"aborted: {drained}, array flushed in {elapsed + 1} cycles"

    async def recover(self, unit_error=False):
        """After a failed launch: :meth:`abort` if it left anything behind
        (:meth:`unsettled`; with ``unit_error``, also a unit's error status, which only
        a flush clears). Returns the abort's note, or ``""``."""
        left = await self.unsettled()
        if unit_error and await self.bench.read("host.unit_error"):
            left.append("unit error")
        if not left:
            return ""
        return await self.abort()

    async def reset(self, cycles=4):
        """Reset the system (the bench's reset for ``cycles`` cycles) and drop every
        burst the memory ports still hold: after a failed launch (a watchdog stop, an
        AGCU still busy) the next program starts from a clean machine. Memory contents
        are kept."""
        await self.bench.cycles(1)          # no set() after a read() in the same cycle
        self.mem.reset_ports()
        await self.bench.reset(cycles)
        self.mem.reset_ports()
        self.bench.set("host.watchdog_cycles", 0)
        self.bench.set("host.cycle_budget", 0)

    def memory_beats(self):
        """``{region: {"read_beats", "write_beats"}}`` the memory models have served so
        far (AXI traffic only: backdoor writes and reads are not counted)."""
        return {region.name: {kind: region.stats[kind] for kind in ("read_beats",
                                                                     "write_beats")}
                for region in self.mem.regions}

    async def run(self, program, *, timeout=200_000, load_timeout=100_000, outputs_file=None,
                  inline_output_words=INLINE_OUTPUT_WORDS, watchdog_cycles=None,
                  windows=None):
        """Images in, load, execute, outputs out: one launch of ``program``
        (``windows``: its memory windows, default from its manifest when the driver
        confines launches)."""
        check_program(program)
        if windows is None and self.windows:
            windows = program.dma_windows(DMA_WINDOWS)
        await self.set_windows(windows)
        for address, words in program.inputs.values():
            if words is not None:            # None: produced by an earlier program
                self.write(address, words)
        await self.issue_latency()
        # a launch starts from a settled machine: what an earlier one left (a kernel
        # that kept moving until the host's wait ended) is aborted first
        self.recovered = await self.recover()
        self.errors_before = len(self.mem.errors)
        try:
            load_cycles = await self.load_program(program, load_timeout)
            before = self.memory_beats()
            launch = await self.execute(program, timeout, watchdog_cycles)
            after = self.memory_beats()
            perf = await self.read_counters()
            errors = unit_errors(perf)
            if errors:
                raise RunError(f"program {program.name!r}: {errors[0]}"
                               + (f" (and {len(errors) - 1} more)" if len(errors) > 1
                                  else ""))
        except RunError as error:
            # a stop leaves AGCUs busy and state in the array: abort, say so, go on
            try:
                note = await self.recover(unit_error=True)
            except RunError as failed:
                raise RunError(f"{error}; {failed}") from None
            if not note:
                raise
            raise RunError(f"{error}; {note}") from None
        outputs = {out: self.read(address, words)
                   for out, (address, words) in program.outputs.items()}
        total_words = sum(array.size for array in outputs.values())
        if outputs_file:
            np.savez(outputs_file, **outputs)
        return {
            "program": program.name,
            **launch,
            "load_cycles": load_cycles,
            "launch_cycles": self.launch_latency,
            "execute_beats": {region: {kind: count - before[region][kind]
                                       for kind, count in counts.items()}
                              for region, counts in after.items()},
            "outputs": ({out: array.tolist() for out, array in outputs.items()}
                        if total_words <= inline_output_words else None),
            "outputs_file": str(outputs_file) if outputs_file else None,
            "perf": perf,
        }


async def run_programs(bench, program_dirs, *, timeout=200_000, progress=False, memory=None,
                       stall="none", perf_counters=None, load_timeout=100_000,
                       inline_output_words=INLINE_OUTPUT_WORDS, timeouts=None,
                       watchdog_cycles=None, faults=None, windows=False, position=0):
    """Run the programs saved in ``program_dirs``, in order, on one system and memory.

    Each launch's outputs go to ``<program_dir>/outputs.npz``. ``timeouts`` (one per
    program) overrides ``timeout``. ``watchdog_cycles`` programs the array's watchdog
    (default: half of each launch's timeout; 0: off). ``faults`` injects AXI error
    responses (:class:`rdu.sim.memory_system.FaultInjector`). ``windows``: each launch
    confined to its manifest's memory windows (``HostDriver(windows=True)``).
    ``position``: the launch position of every program. Returns
    ``{"launches": [per program: cycles, load_cycles, agcu_cycles, array_cycles,
    execute_beats (per region, the execution's AXI beats), outputs, outputs_file, perf],
    "memory":
    per-region statistics, "memory_errors": [...]}``.
    """
    programs = [Program.load(directory) for directory in program_dirs]
    if not programs:
        raise RunError("no program to run")
    machine = programs[0].machine
    for program in programs[1:]:
        difference = machine.mismatch(program.machine)
        if difference:
            raise RunError(f"program {program.name!r} is for another machine than "
                           f"{programs[0].name!r}: {difference}")
    driver = HostDriver(bench, machine, memory=memory, stall=stall,
                        perf_counters=perf_counters, progress=progress, faults=faults,
                        windows=windows, position=position)
    launches = []
    for index, (program, directory) in enumerate(zip(programs, program_dirs, strict=True)):
        launches.append(await driver.run(
            program, timeout=timeouts[index] if timeouts else timeout,
            load_timeout=load_timeout, outputs_file=Path(directory) / "outputs.npz",
            inline_output_words=inline_output_words, watchdog_cycles=watchdog_cycles))
    return {
        "launches": launches,
        "memory": {region.name: dict(region.stats) for region in driver.mem.regions},
        "memory_errors": [str(error) for error in driver.mem.errors],
    }


async def run_schedule(bench, schedule_file, *, progress=False, memory=None, stall="none",
                       perf_counters=None, load_timeout=100_000,
                       inline_output_words=INLINE_OUTPUT_WORDS, watchdog_cycles=None,
                       launch_latency=0, windows=False, position=0):
    """Run the steps of ``schedule_file`` (written by :func:`rdu.runtime.run_schedule`)
    in order on one system and memory: ``write`` (backdoor, no cycles), ``copy``
    (AGCU ``COPY`` jobs on one edge: :meth:`HostDriver.copy`), ``launch`` (a saved
    program: :meth:`HostDriver.run`); the host needs ``launch_latency`` cycles to issue
    each launch and each copy; ``windows``: each launch and copy confined to the memory
    windows of what it declares; ``position``: the launch position. Returns
    ``{"steps": [{"kind", "cycles", "launch_cycles", ...}], "cycles": clock edges of the
    whole schedule, "memory": per-region statistics}``."""
    schedule = HostSchedule.load(schedule_file)
    launches = [Program.load(step.dir) for step in schedule.steps
                if isinstance(step, LaunchStep)]
    if not launches:
        raise RunError("a schedule needs at least one launch")
    machine = launches[0].machine
    driver = HostDriver(bench, machine, memory=memory, stall=stall,
                        perf_counters=perf_counters, progress=progress,
                        launch_latency=launch_latency, windows=windows, position=position)
    done, programs = [], iter(launches)
    first = bench.cycle
    with np.load(schedule.writes) as writes:
        for step in schedule.steps:
            if isinstance(step, WriteStep):
                driver.write(step.address, writes[step.key])
                done.append(WriteDone())
            elif isinstance(step, CopyStep):
                cycles, per_agcu = await driver.copy([tuple(job) for job in step.jobs],
                                                     step.timeout)
                done.append(CopyDone(cycles, launch_latency,
                                     {str(k): v for k, v in per_agcu.items()}))
            else:
                program = next(programs)
                done.append(LaunchDone(await driver.run(
                    program, timeout=step.timeout, load_timeout=load_timeout,
                    outputs_file=Path(step.dir) / "outputs.npz",
                    inline_output_words=inline_output_words,
                    watchdog_cycles=watchdog_cycles)))
    return {"steps": [step.to_json() for step in done], "cycles": bench.cycle - first,
            "memory": {region.name: dict(region.stats) for region in driver.mem.regions},
            "memory_errors": [str(error) for error in driver.mem.errors]}


async def run_program(bench, program_dir, **params):
    """:func:`run_programs` of one program; returns its launch's result with the
    ``memory`` statistics. ``cycles`` counts edges from the one that sampled ``start``
    and the ``EXECUTE`` commands to the one that raised the last ``done``;
    ``load_cycles`` from the edge that accepted ``PROGRAM_LOAD`` to the loader's
    verdict; ``array_cycles`` is ``host.cycles`` (start to the first ``DONE`` token at
    the edge, or ``None``)."""
    result = await run_programs(bench, [program_dir], **params)
    return {**result["launches"][0], "memory": result["memory"],
            "memory_errors": result["memory_errors"]}


def load_outputs(result):
    """The outputs of a :func:`run_program` result as numpy arrays (from its .npz file)."""
    with np.load(result["outputs_file"]) as arrays:
        return {name: arrays[name] for name in arrays.files}

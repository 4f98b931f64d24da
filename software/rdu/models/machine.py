"""Functional model of a whole machine: memory, AGCU commands, a sequence of programs.

:class:`FunctionalMachine` is what a host sees of an :class:`hdl.system.RDUSystem`
and its memories (``docs/system.md``), at the level of the functional model
(:mod:`rdu.models.array`): one persistent byte memory (HBM, DDR and host window of the
:class:`rdu.machine.Machine`), one :class:`rdu.models.array.FunctionalArray` whose
configuration registers and PMU SRAM persist, the configuration loader
(:class:`rdu.models.loader.ConfigLoader`), and the AGCU commands of ``hdl/agcu.py``
(``COPY``, ``PROGRAM_LOAD``, ``ARGUMENT_LOAD``, ``EXECUTE``) with the hardware's
checks and error codes. ``docs/funcmodel.md`` documents it.

>>> from rdu.machine import Machine
>>> machine = FunctionalMachine(Machine(rows=2, cols=2, lanes=4))
>>> machine.write(0x4000_0000, [1, 2, 3, 4, 5, 6, 7, 8])
>>> machine.command(0, AGCUOp.COPY, src=0x4000_0000, dst=0x1000, length=32).error.name
'NONE'
>>> machine.read(0x1000, 8).tolist()
[1, 2, 3, 4, 5, 6, 7, 8]
"""

from dataclasses import dataclass, field

import numpy as np

from hdl import defaults
from hdl.agcu import AGCUError, AGCUOp, agcu_config_layout
from hdl.agcu_engines import DMA_WINDOWS
from hdl.config_net import LoaderState
from hdl.interfaces import config_words
from hdl.orchestrator import DEFAULT_COMMANDS

from ..bitstream import ConfigStatus
from ..dma_windows import first_refused
from ..machine import Machine
from ..memory_map import BURST_BOUNDARY
from ..units.agcu import check_position
from .array import FunctionalArray, RunResult
from .loader import ConfigLoader
from .shared import CommandError, FlatMemory, LoaderError, ModelError, UnitError

__all__ = ["FunctionalMachine", "CommandResult", "ScheduleRun", "AGCUOp", "AGCUError",
           "run_program"]

ADDRESS_SPACE = 1 << 32


@dataclass
class CommandResult:
    """What one AGCU command did (the hardware's ``agcu_done`` / ``agcu_error``).

    ``error``: the :class:`hdl.agcu.AGCUError` of the command (``NONE`` when it
    succeeded; a loader verdict is *not* a command error: see ``config_status``);
    ``detail``: one line on the error; ``words``: ``ARGUMENT_LOAD``: the words queued
    for the array's scalar edge input, ``PROGRAM_LOAD``: the words sent on
    ``bitstream_out``; ``config_state`` / ``config_status``: after a ``PROGRAM_LOAD``
    on AGCU 0, the loader's state name (``LOADED``, ``ERROR``, ...) and its
    :class:`rdu.bitstream.ConfigStatus` (``host.error``); ``run``: the
    :class:`rdu.models.array.RunResult` of an ``EXECUTE``.
    """
    agcu: int
    op: int
    error: AGCUError = AGCUError.NONE
    detail: str = ""
    words: list = field(default_factory=list)
    config_state: str = None
    config_status: ConfigStatus = None
    run: RunResult = None

    @property
    def ok(self):
        return self.error == AGCUError.NONE

    def message(self):
        """``AGCU 1: COPY ended with MISALIGNED (src 0x40000004 is not ...)``."""
        op = AGCUOp(self.op).name if self.op in AGCUOp._value2member_map_ else f"op {self.op}"
        detail = f" ({self.detail})" if self.detail else ""
        return f"AGCU {self.agcu}: {op} ended with {self.error.name}{detail}"

    def check(self):
        """Raise :class:`rdu.models.shared.CommandError` unless the command succeeded;
        returns the result otherwise."""
        if not self.ok:
            raise CommandError(self.agcu, self.error, self.message(), self.op)
        return self


@dataclass
class ScheduleRun:
    """What :meth:`FunctionalMachine.run_schedule` did: the decoded ``commands``, how many
    ``completed`` (END included), ``error`` ``(index, ErrorSource, code, unit)`` or
    ``None``, ``detail`` (the model's own words on an error, e.g. what deadlocked) and
    ``runs`` ``{command index: RunResult}`` of the executes."""
    commands: list
    completed: int = 0
    error: tuple = None
    detail: str = ""
    runs: dict = field(default_factory=dict)


class FunctionalMachine:
    """A machine with persistent memory and array state, driven by host commands.

    Parameters
    ----------
    machine : rdu.machine.Machine
        Array geometry, AGCUs and their positions, memory sizes.
    max_items : int
        Item transfers after which a kernel execute is stopped (:class:`ModelError`).

    Attributes
    ----------
    memory : rdu.models.shared.FlatMemory
        The HBM, DDR and host window (``machine.regions()``); kept across programs.
    array : rdu.models.array.FunctionalArray
        The tile array; its configuration words and PMU SRAM are kept across programs.
    loader : rdu.models.loader.ConfigLoader
        The configuration loader fed by AGCU 0's ``PROGRAM_LOAD``.
    execute_traffic : dict
        ``{region: {"read_bytes", "write_bytes"}}`` the last :meth:`execute` moved (the
        AGCUs' streams; not the host's writes or the program load).
    pending_arguments : dict
        ``{agcu: [words]}`` of ``ARGUMENT_LOAD`` commands not yet delivered: the
        array's edge inputs are held off until it is started, so they enter the array's
        scalar edge input of that AGCU at the next :meth:`execute`.
    """

    def __init__(self, machine, *, max_items=50_000_000):
        self.machine = machine
        self.lanes = machine.lanes
        self.beat = machine.beat_bytes
        self.max_items = max_items
        self.memory = FlatMemory(machine.regions())
        self.array = FunctionalArray(
            machine.rows, machine.cols, machine.lanes, compute=machine.compute,
            stages=machine.stages, capacity_bytes=machine.pmu_bytes, agcus=machine.agcus,
            agcu_config_words=config_words(agcu_config_layout()),
            agcu_positions=machine.positions(), fp_latency=machine.fp_latency)
        self.loader = ConfigLoader(self.array.geometry, self.array.units, self.array.words)
        self.pending_arguments = {}
        self.execute_traffic = {}

    # -- host memory access ----------------------------------------------------------------
    def write(self, address, words):
        """Host (backdoor) write of uint32 ``words`` at byte ``address``."""
        words = np.asarray(words, dtype=np.uint32).reshape(-1)
        try:
            self.memory.write_words(int(address), words)
        except ValueError:
            raise ModelError(f"host write of {len(words)} words at 0x{int(address):08x} is "
                             f"outside the mapped memory regions") from None

    def read(self, address, count):
        """Host (backdoor) read of ``count`` uint32 words at byte ``address``."""
        try:
            return self.memory.read_words(int(address), int(count))
        except ValueError:
            raise ModelError(f"host read of {count} words at 0x{int(address):08x} is "
                             f"outside the mapped memory regions") from None

    # -- AGCU data movement (beat by beat, checked per 4 KiB page) ---------------------------
    def _pages(self, base, nbytes):
        """``(offset, exact address, nbytes)`` pieces of ``[base, base + nbytes)`` that
        stay inside one 4 KiB page (an AXI burst never crosses one, and the regions are
        4 KiB aligned, so a piece is wholly mapped or wholly unmapped)."""
        offset = 0
        while offset < nbytes:
            address = base + offset
            chunk = min(nbytes - offset, BURST_BOUNDARY - address % BURST_BOUNDARY)
            yield offset, address, chunk
            offset += chunk

    def _mapped(self, address, nbytes):
        try:
            self.memory._check(address, nbytes)
        except ValueError:
            return False
        return True

    def _stream_read(self, base, nbytes):
        """Read as the AGCU's read engine: returns ``(bytes, error)`` where ``error`` is
        ``(beat, code, detail)`` of the first failing beat or ``None``. Unmapped pages
        read as zeros (the memory answers DECERR with zero data); addresses past
        ``2**32`` wrap (``ADDRESS_WRAP``); the bytes stop before the first beat the
        windows refuse (it and every later burst are never issued)."""
        out = bytearray()
        errors = []
        for offset, address, chunk in self._pages(base, nbytes):
            used = address % ADDRESS_SPACE
            if address >= ADDRESS_SPACE:
                errors.append((offset // self.beat, AGCUError.ADDRESS_WRAP,
                               f"read address 0x{address:x} leaves the 32-bit address "
                               f"space (used as 0x{used:08x})"))
            refused = self._window_errors(offset, used, chunk, False)
            if refused:
                allowed = refused[0][0] * self.beat - offset
                if allowed:
                    out += (self.memory.read(used, allowed) if self._mapped(used, allowed)
                            else bytes(allowed))
                return bytes(out), errors + refused
            if self._mapped(used, chunk):
                out += self.memory.read(used, chunk)
            else:
                out += bytes(chunk)
                errors.append((offset // self.beat, AGCUError.READ_DECERR,
                               f"read of beat {offset // self.beat} at 0x{used:08x}: not "
                               f"mapped"))
        return bytes(out), errors

    def _stream_write(self, base, raw):
        errors = []
        for offset, address, chunk in self._pages(base, len(raw)):
            used = address % ADDRESS_SPACE
            if address >= ADDRESS_SPACE:
                errors.append((offset // self.beat, AGCUError.ADDRESS_WRAP,
                               f"write address 0x{address:x} leaves the 32-bit address "
                               f"space (used as 0x{used:08x})"))
            refused = self._window_errors(offset, used, chunk, True)
            if refused:             # this burst and every later one are never issued
                allowed = refused[0][0] * self.beat - offset
                if allowed and self._mapped(used, allowed):
                    self.memory.write(used, raw[offset:offset + allowed])
                return errors + refused
            if self._mapped(used, chunk):
                self.memory.write(used, raw[offset:offset + chunk])
            else:
                errors.append((offset // self.beat, AGCUError.WRITE_DECERR,
                               f"write of beat {offset // self.beat} at 0x{used:08x}: not "
                               f"mapped"))
        return errors

    @property
    def dma_windows(self):
        """The AGCUs' memory windows (``RDUSystem.dma_windows``; :mod:`rdu.dma_windows`):
        ``None`` (off, the reset value) or ``[(base, size, read, write)]``. Every
        command's streams and every kernel execute's patterns are checked per beat; the
        first beat outside ends the command with ``WINDOW``."""
        return self.array.dma_windows

    @dma_windows.setter
    def dma_windows(self, windows):
        self.array.dma_windows = None if windows is None else [
            tuple(int(value) for value in window) for window in windows]

    @property
    def position(self):
        """The launch's position (``RDUSystem.position``, 0 at reset): every kernel
        execute moves its positioned patterns by it (``docs/agcu.md``, **Positioned
        patterns**)."""
        return self.array.position

    @position.setter
    def position(self, value):
        self.array.position = check_position(value)

    def _window_errors(self, offset, address, nbytes, write):
        """``[(beat, WINDOW, detail)]`` of the first beat of a chunk outside the windows."""
        refused = first_refused(self.array.dma_windows, address, nbytes, self.beat, write)
        if refused is None:
            return []
        beat = (offset + refused - address) // self.beat
        return [(beat, AGCUError.WINDOW, f"{'write' if write else 'read'} of beat {beat} "
                 f"at 0x{refused:08x} is outside its windows")]

    @staticmethod
    def _first_error(read_errors, write_errors=()):
        """The error the command reports. The address generators flag a wrap when they
        compute the address, and the windows refuse a burst before it is issued, ahead
        of any memory response, so ``ADDRESS_WRAP`` wins, then ``WINDOW``; otherwise the
        first failing beat, a read before the write of the same beat (its data comes
        from that read)."""
        errors = (*read_errors, *write_errors)
        for code in (AGCUError.ADDRESS_WRAP, AGCUError.WINDOW):
            found = [error for error in errors if error[1] == code]
            if found:
                return min(found, key=lambda error: error[0])
        ranked = [(beat, 0, code, detail) for beat, code, detail in read_errors] + \
                 [(beat, 1, code, detail) for beat, code, detail in write_errors]
        if not ranked:
            return None
        beat, _, code, detail = min(ranked, key=lambda entry: entry[:2])
        return beat, code, detail

    def _misaligned(self, name, value):
        return f"{name} 0x{value:08x} is not a multiple of {self.beat} bytes"

    # -- commands --------------------------------------------------------------------------
    def command(self, agcu, op, src=0, dst=0, length=0):
        """Send one command to AGCU ``agcu`` and run it to its end (``agcu_done``).

        ``op`` is an :class:`hdl.agcu.AGCUOp` (or any 3-bit value: others end with
        ``BAD_OPCODE``); ``src``, ``dst`` byte addresses, ``length`` bytes. Returns a
        :class:`CommandResult` whose ``error`` is the command's ``AGCUError`` (a failed
        command does not raise: call ``.check()`` for a :class:`CommandError`).
        ``EXECUTE`` runs :meth:`execute` ``([agcu])`` (which raises on failure).
        """
        self._check_agcu(agcu)
        op = int(op)
        for name, value, bits in (("op", op, 3), ("src", src, 32), ("dst", dst, 32),
                                  ("length", length, 32)):
            if not isinstance(value, (int, np.integer)) or not 0 <= value < 1 << bits:
                raise ModelError(f"AGCU {agcu}: command {name} {value!r} does not fit its "
                                 f"{bits}-bit field")
        src, dst, length = int(src), int(dst), int(length)
        result = CommandResult(agcu, op)
        if op == AGCUOp.COPY:
            self._copy(result, src, dst, length)
        elif op in (AGCUOp.PROGRAM_LOAD, AGCUOp.ARGUMENT_LOAD):
            self._word_load(result, src, length)
        elif op == AGCUOp.EXECUTE:
            result.run = self.execute([agcu])
        else:
            result.error = AGCUError.BAD_OPCODE
            result.detail = f"op {op} is not a command"
        return result

    def _copy(self, result, src, dst, length):
        # hdl.agcu: the length is checked before the addresses
        if length == 0 or length % self.beat:
            result.error = AGCUError.BAD_LENGTH
            result.detail = f"length {length} is not a non-zero multiple of {self.beat} bytes"
            return
        if src % self.beat or dst % self.beat:
            result.error = AGCUError.MISALIGNED
            result.detail = self._misaligned(*(("src", src) if src % self.beat
                                               else ("dst", dst)))
            return
        # the whole source is read before anything is written: an overlapping copy to
        # a lower address is what the RTL does; to a higher address it depends on timing
        raw, read_errors = self._stream_read(src, length)
        write_errors = self._stream_write(dst, raw)
        self._report(result, self._first_error(read_errors, write_errors))

    def _word_load(self, result, src, length, capture=False):
        if length == 0 or length % 4:
            result.error = AGCUError.BAD_LENGTH
            result.detail = f"length {length} is not a non-zero multiple of 4 bytes"
            return
        if src % self.beat:
            result.error = AGCUError.MISALIGNED
            result.detail = self._misaligned("src", src)
            return
        beats = -(-length // self.beat)           # whole beats are read
        raw, read_errors = self._stream_read(src, beats * self.beat)
        words = np.frombuffer(raw[:length], dtype="<u4").astype(np.uint32).tolist()
        result.words = words
        self._report(result, self._first_error(read_errors))
        if result.op == AGCUOp.ARGUMENT_LOAD:
            self.pending_arguments.setdefault(result.agcu, []).extend(words)
        elif result.agcu == 0 and not capture:
            # only AGCU 0's bitstream_out feeds the configuration network (not while the
            # orchestrator captures it: run_schedule)
            self.loader.feed(words)
            self.loader.end_of_stream()
            self.array.loaded = self.loader.state == LoaderState.LOADED
            result.config_state = self.loader.state_name
            result.config_status = self.loader.status

    @staticmethod
    def _report(result, error):
        if error is not None:
            _, result.error, result.detail = error

    def config_clear(self):
        """``host.config_clear``: the loader leaves ``LOADED`` / ``ERROR`` for ``EMPTY``
        and expects a new bitstream; the array stops (it cannot start until a bitstream
        is loaded). The units' configuration registers keep their words (the next
        bitstream overwrites the records it carries) and the PMU SRAM its data."""
        self.loader.clear()
        self.array.loaded = self.loader.state == LoaderState.LOADED

    def abort(self):
        """The system's abort (``RDUSystem.abort``): each AGCU the last execute left
        busy (it ended in a deadlock, an error or the item limit) ends its ``EXECUTE``
        with ``ABORTED``; then the array is flushed (:meth:`FunctionalArray.flush`: no
        configuration, the loader ``EMPTY``, PMU SRAM kept) and queued arguments are
        dropped. Returns the :class:`CommandResult` of each aborted AGCU."""
        aborted = [CommandResult(agcu, AGCUOp.EXECUTE, AGCUError.ABORTED, "aborted")
                   for agcu in self.array.busy_agcus]
        self.array.flush()
        self.loader = ConfigLoader(self.array.geometry, self.array.units, self.array.words)
        self.pending_arguments = {}
        return aborted

    @property
    def config_state(self):
        """``host.config_state`` name: ``EMPTY``, ``LOADING``, ``LOADED`` or ``ERROR``."""
        return self.loader.state_name

    def _check_agcu(self, agcu):
        if not isinstance(agcu, (int, np.integer)) or not 0 <= agcu < self.machine.agcus:
            raise ModelError(f"AGCU {agcu!r} does not exist: the machine has "
                             f"{self.machine.agcus} AGCUs")

    def execute(self, agcus, *, max_items=None):
        """``host.start`` and ``EXECUTE`` on each AGCU of ``agcus`` (the run sequence of
        ``docs/system.md``): queued ``ARGUMENT_LOAD`` words enter the array's scalar edge
        inputs, the AGCUs send their launch tokens and run their patterns. Returns the
        :class:`rdu.models.array.RunResult`; raises :class:`rdu.models.shared.ModelDeadlock`,
        :class:`rdu.models.shared.UnitError` (:class:`CommandError` for AGCU errors), or
        :class:`LoaderError` when the array cannot start (no loaded configuration: the
        hardware ignores ``start`` and the AGCUs' launch tokens never enter)."""
        agcus = list(agcus)
        if not agcus:
            raise ModelError("execute names no AGCU")
        for agcu in agcus:
            self._check_agcu(agcu)
        if len(set(agcus)) != len(agcus):
            raise ModelError(f"execute names an AGCU twice: {agcus}")
        if self.loader.state != LoaderState.LOADED:
            why = f" ({self.loader.status.name}: {self.loader.detail})" \
                if self.loader.state == LoaderState.ERROR else ""
            raise LoaderError(self.loader.status,
                              f"start ignored: the configuration is "
                              f"{self.loader.state_name}{why}; AGCU {agcus[0]}'s launch "
                              f"token would never enter the array",
                              self.loader.state_name)
        edge_inputs = {("scalar", self.array.agcu_edges[agcu]): words
                       for agcu, words in self.pending_arguments.items() if words}
        self.pending_arguments = {}
        before = {name: dict(counts) for name, counts in self.memory.traffic.items()}
        result = self.array.run(edge_inputs, memory=self.memory, execute=agcus,
                                max_items=self.max_items if max_items is None else max_items)
        self.execute_traffic = {name: {kind: count - before[name][kind]
                                       for kind, count in counts.items()}
                                for name, counts in self.memory.traffic.items()}
        return result

    # -- programs --------------------------------------------------------------------------
    def run_program(self, program, *, clear=True, windows=None):
        """Run one :class:`rdu.program.Program` on the persistent memory: clear the
        configuration (``clear``; as a host does between programs), write the input
        images and the bitstream, ``PROGRAM_LOAD`` it through AGCU 0, execute
        ``program.execute``, read ``program.outputs``. Returns ``({name: uint32
        array}, RunResult)``. Every failure is a :class:`ModelError` whose one-line
        message starts with ``program '<name>':``. ``windows``: ``True`` confines the
        launch to its manifest's windows (:meth:`rdu.program.Program.dma_windows`, as
        ``HostDriver(windows=True)``), a list sets those, ``None`` keeps
        :attr:`dma_windows`."""
        if windows is True:
            windows = program.dma_windows(DMA_WINDOWS)
        if windows is not None:
            self.dma_windows = windows
        try:
            return self._run_program(program, clear)
        except ModelError as error:
            prefix = f"program {program.name!r}: "
            if not str(error).startswith(prefix):
                error.args = (prefix + str(error),)
            raise

    def _run_program(self, program, clear):
        execute = list(program.execute)
        problem = program.launch_problem(self.machine)
        if problem:
            raise ModelError(problem)
        if clear:
            self.config_clear()
        for name, (address, words) in program.inputs.items():
            if words is None:              # produced by an earlier program
                continue
            try:
                self.write(address, words)
            except ModelError as error:
                raise ModelError(f"input {name!r}: {error}") from None
        bitstream = np.asarray(program.bitstream, dtype=np.uint32)
        try:
            self.write(program.bitstream_address, bitstream)
        except ModelError as error:
            raise ModelError(f"bitstream: {error}") from None
        load = self.command(0, AGCUOp.PROGRAM_LOAD, src=program.bitstream_address,
                            length=4 * len(bitstream))
        if not load.ok:
            raise CommandError(0, load.error, f"program load on AGCU 0 ended with "
                                              f"{load.error.name} ({load.detail})",
                               AGCUOp.PROGRAM_LOAD)
        if self.loader.state != LoaderState.LOADED:
            raise LoaderError(self.loader.status,
                              f"bitstream rejected by the configuration loader: "
                              f"{self.loader.status.name} ({self.loader.detail})",
                              self.loader.state_name)
        result = self.execute(execute)
        outputs = {}
        for name, (address, count) in program.outputs.items():
            try:
                outputs[name] = self.read(address, count)
            except ModelError as error:
                raise ModelError(f"output {name!r}: {error}") from None
        return outputs, result

    def run_schedule(self, address, length, *, capacity=DEFAULT_COMMANDS):
        """Run the orchestrator schedule of ``length`` bytes at ``address`` as
        :class:`hdl.orchestrator.Orchestrator` does (``docs/orchestrator.md``), with no
        timing: the words fetched through AGCU 0 (not into the loader), decoded with
        :func:`rdu.schedule.decode`, each command run in order; a ``COPY`` runs at once
        and its error is reported at the next command boundary, naming the ``COPY``.
        ``capacity``: the schedule memory in commands. Returns a :class:`ScheduleRun`;
        a failure is its ``error`` (never raised), as the hardware's status."""
        from hdl.orchestrator import COMMAND_BYTES, FETCH_INDEX, ScheduleError, ScheduleOp
        from hdl.sequencer import ErrorSource

        from ..schedule import agcus_of, decode
        run = ScheduleRun([])

        def fail(index, source, code=0, unit=0, detail=""):
            run.error, run.detail = (index, ErrorSource(source), int(code), int(unit)), detail
            return run

        request = ErrorSource.REQUEST
        if length == 0 or length % COMMAND_BYTES:
            return fail(FETCH_INDEX, request, ScheduleError.BAD_LENGTH)
        if length > COMMAND_BYTES * capacity:
            return fail(FETCH_INDEX, request, ScheduleError.TOO_LONG)
        fetch = CommandResult(0, AGCUOp.PROGRAM_LOAD)
        self._word_load(fetch, address, length, capture=True)
        if not fetch.ok:
            return fail(FETCH_INDEX, ErrorSource.AGCU, fetch.error, 0, fetch.detail)
        run.commands = commands = decode(fetch.words)
        arguments, copy_error = None, None
        n = self.machine.agcus
        for index, command in enumerate(commands):
            if copy_error:
                return fail(*copy_error)
            op, argument = command.op, command.argument
            mask_bad = argument == 0 or argument >> n != 0
            if op == ScheduleOp.END:
                run.completed += 1
                return run
            if op == ScheduleOp.PROGRAM_LOAD:
                self.config_clear()
                load = self.command(0, AGCUOp.PROGRAM_LOAD, src=command.src,
                                    length=command.length)
                if not load.ok:
                    return fail(index, ErrorSource.AGCU, load.error, 0, load.detail)
                if self.loader.state != LoaderState.LOADED:
                    return fail(index, ErrorSource.LOADER, self.loader.status, 0,
                                self.loader.detail)
            elif op == ScheduleOp.ARGUMENT_LOAD:
                arguments = (command.src, command.length)
            elif op == ScheduleOp.EXECUTE:
                if mask_bad:
                    return fail(index, request, ScheduleError.BAD_MASK)
                if arguments:
                    sent = self.command(0, AGCUOp.ARGUMENT_LOAD, src=arguments[0],
                                        length=arguments[1])
                    arguments = None
                    if not sent.ok:
                        return fail(index, ErrorSource.AGCU, sent.error, 0, sent.detail)
                try:
                    run.runs[index] = self.execute(agcus_of(argument))
                except CommandError as error:
                    return fail(index, ErrorSource.AGCU, error.error, error.agcu, str(error))
                except UnitError as error:
                    return fail(index, ErrorSource.UNIT, 0, 0, str(error))
                except ModelError as error:      # a deadlock, a start the array ignored
                    return fail(index, ErrorSource.WATCHDOG, 0, 0, str(error))
            elif op == ScheduleOp.COPY:
                if argument >= n:
                    return fail(index, request, ScheduleError.BAD_AGCU)
                done = self.command(argument, AGCUOp.COPY, src=command.src, dst=command.dst,
                                    length=command.length)
                if not done.ok:
                    copy_error = (index, ErrorSource.AGCU, done.error, argument, done.detail)
            elif op == ScheduleOp.WAIT:
                if mask_bad:
                    return fail(index, request, ScheduleError.BAD_MASK)
            else:
                return fail(index, request, ScheduleError.BAD_OPCODE)
            run.completed += 1
        if copy_error:
            return fail(*copy_error)
        return fail(len(commands), request, ScheduleError.NO_END)

    def run_programs(self, programs):
        """Run ``programs`` in order on this machine: memory (and PMU SRAM) kept between
        them, the configuration cleared and reloaded before each. A later program reads
        what an earlier one stored. Returns ``[(outputs, RunResult)]``, one per
        program; the first failure raises (its message names the program)."""
        return [self.run_program(program) for program in programs]


def run_program(program, *, compute=True, stages=defaults.STAGES,
                capacity_bytes=defaults.PMU_BYTES,
                max_items=50_000_000):
    """Run ``program`` on a fresh :class:`FunctionalMachine` of
    ``program.geometry`` (rows, cols, lanes, agcus, agcu_positions) with these
    parameters: the program is loaded through AGCU 0's ``PROGRAM_LOAD`` as the
    hardware does. Returns ``({name: uint32 array}, RunResult)``; a rejected bitstream
    raises :class:`LoaderError` (also a ``BitstreamError``)."""
    geometry = program.geometry
    machine = Machine(rows=geometry["rows"], cols=geometry["cols"], lanes=geometry["lanes"],
                      stages=stages, pmu_bytes=capacity_bytes, agcus=geometry.get("agcus", 2),
                      agcu_positions=geometry.get("agcu_positions"), compute=compute)
    return FunctionalMachine(machine, max_items=max_items).run_program(program)

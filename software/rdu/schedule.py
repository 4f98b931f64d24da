"""Schedules of the hardware orchestrator: commands <-> the words it fetches.

The one encoding of :class:`hdl.orchestrator.Orchestrator` schedules
(``docs/orchestrator.md``): four little-endian 32-bit words per command, word 0 the
:class:`hdl.orchestrator.ScheduleOp` in bits 0..7 and its argument in bits 8..31, then
``src``, ``dst``, ``length``. :func:`encode` turns :class:`Command` s into words,
:func:`decode` words into commands (for the functional model, which runs what the
hardware would fetch, and for error messages), :func:`error_message` turns an
orchestrator status (command index, :class:`hdl.sequencer.ErrorSource`, code, unit) into
the one line both tiers report.
"""

from dataclasses import dataclass

import numpy as np

from hdl.agcu import AGCUError
from hdl.orchestrator import (
    ARGUMENT_BITS,
    COMMAND_BYTES,
    COMMAND_WORDS,
    FETCH_INDEX,
    OP_BITS,
    ScheduleError,
    ScheduleOp,
)
from hdl.sequencer import ErrorSource

from .bitstream import ConfigStatus

__all__ = ["Command", "ScheduleFormatError", "encode", "decode", "error_message",
           "mask_of", "agcus_of", "COMMAND_BYTES"]


class ScheduleFormatError(ValueError):
    """Words or fields that are not a schedule (one line)."""


def mask_of(agcus):
    """The AGCU mask (bit ``k`` for AGCU ``k``) of an iterable of AGCU indices."""
    mask = 0
    for agcu in agcus:
        mask |= 1 << int(agcu)
    return mask


def agcus_of(mask):
    """The AGCU indices of ``mask``, ascending."""
    return [k for k in range(ARGUMENT_BITS) if mask >> k & 1]


def _name(enum_class, value):
    try:
        return enum_class(value).name
    except ValueError:
        return f"unknown code {value}"


@dataclass(frozen=True)
class Command:
    """One schedule command: ``op`` (a :class:`ScheduleOp`, or any 8-bit value when
    decoded), ``argument`` (AGCU index of ``COPY``, AGCU mask of ``EXECUTE``/``WAIT``),
    ``src``, ``dst``, ``length`` (bytes)."""
    op: int
    argument: int = 0
    src: int = 0
    dst: int = 0
    length: int = 0

    def words(self):
        """The four words of this command; raises :class:`ScheduleFormatError` if a
        field does not fit."""
        for name, value, bits in (("op", self.op, OP_BITS),
                                  ("argument", self.argument, ARGUMENT_BITS),
                                  ("src", self.src, 32), ("dst", self.dst, 32),
                                  ("length", self.length, 32)):
            if not isinstance(value, (int, np.integer)) or not 0 <= value < 1 << bits:
                raise ScheduleFormatError(f"schedule command {name} {value!r} does not fit "
                                          f"its {bits}-bit field")
        return [int(self.op) | int(self.argument) << OP_BITS, int(self.src), int(self.dst),
                int(self.length)]

    def describe(self):
        """``EXECUTE AGCUs 0, 1``, ``COPY on AGCU 1: 0x40000000 -> 0x10000, 4096 bytes``..."""
        try:
            op = ScheduleOp(self.op)
        except ValueError:
            return f"opcode {self.op}"
        if op == ScheduleOp.END:
            return "END"
        if op in (ScheduleOp.PROGRAM_LOAD, ScheduleOp.ARGUMENT_LOAD):
            return f"{op.name} of {self.length} bytes at {self.src:#x}"
        if op == ScheduleOp.COPY:
            return (f"COPY on AGCU {self.argument}: {self.src:#x} -> {self.dst:#x}, "
                    f"{self.length} bytes")
        agcus = agcus_of(self.argument)
        return f"{op.name} AGCU{'s' if len(agcus) != 1 else ''} " \
               f"{', '.join(map(str, agcus)) or 'none'}"


def encode(commands):
    """The uint32 words of ``commands`` (:class:`Command` s), four per command."""
    words = [word for command in commands for word in command.words()]
    return np.asarray(words, dtype=np.uint32)


def decode(words):
    """The :class:`Command` s of ``words`` (a multiple of four uint32 words)."""
    words = np.asarray(words, dtype=np.uint32).reshape(-1)
    if words.size % COMMAND_WORDS:
        raise ScheduleFormatError(f"a schedule has {COMMAND_WORDS} words per command, not "
                                  f"{words.size} words")
    commands = []
    for first, src, dst, length in words.reshape(-1, COMMAND_WORDS).tolist():
        commands.append(Command(first & ((1 << OP_BITS) - 1), first >> OP_BITS, src, dst,
                                length))
    return commands


def error_message(commands, index, source, code, unit=0, *, agcus=None, capacity=None,
                  length=None):
    """The one line of an orchestrator error, the same on every tier: ``schedule command
    2 (EXECUTE AGCUs 0, 1): AGCU 1 ended EXECUTE with READ_DECERR (code 6)``.

    ``commands``: the decoded schedule; ``index``, ``source``
    (:class:`hdl.sequencer.ErrorSource`), ``code``, ``unit``: the orchestrator's
    ``error_index``, ``error_source``, ``error_code``, ``error_unit``; ``agcus``,
    ``capacity`` (commands), ``length`` (bytes): the machine and the schedule, for the
    messages that name them."""
    source = ErrorSource(source)
    if index == FETCH_INDEX:
        where = "schedule fetch"
        op_name = "PROGRAM_LOAD"
    elif 0 <= index < len(commands):
        command = commands[index]
        where = f"schedule command {index} ({command.describe()})"
        op_name = _name(ScheduleOp, command.op)
        if op_name == "ARGUMENT_LOAD":
            op_name = "EXECUTE"
    else:
        where = f"schedule command {index}"
        op_name = "command"
    if source == ErrorSource.LOADER:
        cause = (f"bitstream rejected by the configuration loader: "
                 f"{_name(ConfigStatus, code)} (code {code})")
    elif source == ErrorSource.AGCU:
        cause = f"AGCU {unit} ended {op_name} with {_name(AGCUError, code)} (code {code})"
    elif source == ErrorSource.WATCHDOG:
        cause = "the array stopped making progress (the array's watchdog)"
    elif source == ErrorSource.UNIT:
        cause = "a unit ended with an error status (host.unit_error)"
    elif source == ErrorSource.STUCK:
        cause = f"AGCU {unit} is still busy from an earlier run"
    elif source == ErrorSource.ABORTED:
        cause = "the host aborted the schedule (abort)"
    elif source == ErrorSource.REQUEST:
        command = commands[index] if 0 <= index < len(commands) else Command(0)
        machine = f" (the machine has {agcus})" if agcus is not None else ""
        causes = {
            ScheduleError.BAD_OPCODE: f"unknown opcode {command.op}",
            ScheduleError.BAD_LENGTH: f"a schedule length of {length} bytes is not a "
                                      f"non-zero multiple of {COMMAND_BYTES}",
            ScheduleError.TOO_LONG: f"{(length or 0) // COMMAND_BYTES} commands do not fit "
                                    f"the schedule memory"
                                    + (f" ({capacity} commands)" if capacity else ""),
            ScheduleError.NO_END: "the schedule ends without an END command",
            ScheduleError.BAD_AGCU: f"AGCU {command.argument} does not exist{machine}",
            ScheduleError.BAD_MASK: f"AGCU mask {command.argument:#x} names no AGCU or a "
                                    f"missing one{machine}",
        }
        cause = causes.get(code, f"bad request (code {code})")
    else:
        cause = f"error source {source.name}, code {code}"
    return f"{where}: {cause}"

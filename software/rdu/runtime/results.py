"""What a run returns: :class:`RunResult` per launch, :class:`StepResult` per schedule
step, :class:`ScheduleResult` per schedule, and :class:`RunFailure` when it fails; each
launch and schedule with its :func:`roofline`."""

from dataclasses import dataclass, field

import numpy as np

from ..compiler.families import program_work
from ..roofline import Roofline, Work

__all__ = ["RunFailure", "RunResult", "StepResult", "ScheduleResult", "beat_bytes",
           "read_outputs", "roofline"]


class RunFailure(RuntimeError):
    """A run that did not end cleanly; ``str()`` is one line naming unit and cause."""

    def __init__(self, message, kind="error"):
        super().__init__(message)
        self.kind = kind


@dataclass(kw_only=True)
class RunResult:
    """One launch: its outputs by name (uint32 words) and what it cost; ``memory_bytes``:
    the bytes its execution (not its program load) read and wrote in each memory
    region, on every back end; ``roofline``: the program's :func:`roofline` against the
    launch's ``cycles`` (its execution; share ``None`` on the functional model)."""
    outputs: dict                     # name -> np.uint32 array
    cycles: int = None                # None for the functional model
    sim: str = "model"
    seconds: float = 0.0
    build_seconds: float = 0.0
    counters: dict = field(default_factory=dict)
    waves: str = None
    load_cycles: int = None
    program: str = None
    memory_bytes: dict = field(default_factory=dict)   # region -> {read_bytes, write_bytes}
    roofline: Roofline = None


@dataclass
class StepResult:
    """One step of a schedule: its kind, cycles (``None`` on the functional model and
    for writes) and, for a launch, its :class:`RunResult`. ``launch_cycles``: the part
    of ``cycles`` the host spent issuing the step (its launch latency; 0 when the
    orchestrator issues it)."""
    kind: str
    cycles: int = None
    launch: RunResult = None
    agcu_cycles: dict = field(default_factory=dict)
    launch_cycles: int = None


class ScheduleResult(list):
    """The :class:`StepResult` s of :func:`rdu.runtime.run_schedule` (a list), with
    ``cycles``: clock edges of the whole schedule on the RTL (host execution: from the
    first step's issue to the last step's end; orchestrated: ``orch.cycles``, start to
    done; ``None`` on the functional model), ``execution`` and ``host_commands``
    (orchestrated RTL: the commands and control pulses the host drove while the
    orchestrator ran, 0); ``roofline``: the :func:`roofline` of its launches' programs
    (their work summed) against ``cycles``."""

    def __init__(self, steps, *, cycles=None, execution="host", host_commands=None,
                 roofline=None):
        super().__init__(steps)
        self.cycles, self.execution, self.host_commands = cycles, execution, host_commands
        self.roofline = roofline


def beat_bytes(beats, machine):
    """``{region: {read_bytes, write_bytes}}`` of the RTL memory models' beat counts
    ``{region: {read_beats, write_beats}}``."""
    return {region: {kind.replace("beats", "bytes"): count * machine.beat_bytes
                     for kind, count in counts.items()} for region, counts in beats.items()}


def read_outputs(launch, program):
    """The outputs of a host body's launch report (inline or in its ``.npz`` file) as
    uint32 arrays, in the order of ``program.outputs``."""
    if launch.get("outputs_file"):
        with np.load(launch["outputs_file"]) as arrays:
            return {name: np.asarray(arrays[name], np.uint32) for name in program.outputs}
    return {name: np.asarray(launch["outputs"][name], np.uint32) for name in program.outputs}


def roofline(programs, cycles=None):
    """The :class:`rdu.roofline.Roofline` of running ``programs`` (one program, or the
    launches of a schedule: the sum of their work, :func:`rdu.compiler.families.
    program_work`) on their machine in ``cycles`` (``None``: not timed)."""
    programs = list(programs)
    work = Work.total(program_work(program) for program in programs)
    return Roofline.of(work, programs[0].machine, cycles)

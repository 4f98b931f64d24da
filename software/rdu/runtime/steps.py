"""The steps of a schedule (:class:`Launch`, :class:`Copy`, :class:`Write`; an
orchestrated schedule also takes a :class:`rdu.schedule.Command` as it is) and the
checks every run makes before it starts."""

from dataclasses import dataclass

from ..schedule import Command
from .results import RunFailure

__all__ = ["Launch", "Copy", "Write", "EXECUTIONS", "check_machine", "check_steps",
           "check_launch_latency"]

#: How :func:`rdu.runtime.run_schedule` issues the steps.
EXECUTIONS = ("host", "orchestrated")


@dataclass
class Launch:
    """A step of :func:`rdu.runtime.run_schedule`: load and execute ``program`` (as
    :func:`rdu.runtime.run_programs`: its packed input images written first, images of
    ``None`` already in memory)."""
    program: object


@dataclass
class Copy:
    """A step of :func:`rdu.runtime.run_schedule`: ``length`` bytes from ``src`` to
    ``dst`` by AGCU ``COPY`` commands. ``agcus`` > 1 cuts the copy into that many
    beat-aligned pieces, one per AGCU (0, 1, ...), issued on the same edge; the step
    ends when the last one is done. Lengths and addresses must be multiples of the
    machine's beat."""
    src: int
    dst: int
    length: int
    agcus: int = 1

    def jobs(self, machine):
        """``[(agcu, src, dst, length)]``: the commands of this step on ``machine``."""
        beat = machine.beat_bytes
        for name, value in (("src", self.src), ("dst", self.dst), ("length", self.length)):
            if value % beat or value < 0:
                raise RunFailure(f"copy {name} {value:#x} is not a multiple of the "
                                 f"{beat}-byte beat", "copy")
        if self.length == 0:
            raise RunFailure("copy of 0 bytes", "copy")
        if not 1 <= self.agcus <= machine.agcus:
            raise RunFailure(f"copy on {self.agcus} AGCUs: the machine has {machine.agcus}",
                             "copy")
        beats = self.length // beat
        pieces = min(self.agcus, beats)
        jobs, offset = [], 0
        for k in range(pieces):
            size = (beats // pieces + (k < beats % pieces)) * beat
            jobs.append((k, self.src + offset, self.dst + offset, size))
            offset += size
        return jobs


@dataclass
class Write:
    """A step of :func:`rdu.runtime.run_schedule`: the host writes uint32 ``words`` at
    ``address`` through the backdoor (no cycles: data placed before the measured work,
    e.g. the experts at rest in DDR)."""
    address: int
    words: object


def check_machine(programs, machine=None):
    """The machine to run ``programs`` on: ``machine`` or the first program's; raises
    :class:`RunFailure` naming the first parameter in which a program's differs."""
    machine = machine or programs[0].machine
    for program in programs:
        difference = program.machine.mismatch(machine)
        if difference:
            raise RunFailure(f"program {program.name!r} was compiled for another machine: "
                             f"{difference}", "machine")
    return machine


def check_launch_latency(launch_latency):
    """Raise ``ValueError`` unless ``launch_latency`` is ``None`` or a non-negative
    integer number of cycles."""
    if launch_latency is not None and (not isinstance(launch_latency, int) or
                                       isinstance(launch_latency, bool) or launch_latency < 0):
        raise ValueError(f"launch latency must be a non-negative integer number of cycles, "
                         f"not {launch_latency!r}")


def check_steps(steps, machine, execution):
    """Raise ``ValueError`` (or :class:`RunFailure` for a copy ``machine`` cannot do)
    for a step that ``execution`` cannot run."""
    for step in steps:
        if isinstance(step, Copy):
            step.jobs(machine)
        elif isinstance(step, Command) and execution == "host":
            raise ValueError(f"a schedule command ({step.describe()}) is a step of an "
                             f"orchestrated schedule only")
        elif not isinstance(step, (Launch, Write, Command)):
            raise ValueError(f"not a schedule step: {step!r}")

"""The back-end contract and its registry.

A back end is one object with one interface (:class:`Backend`): it runs a sequence of
programs, a host schedule and an orchestrated schedule (once, or once per token:
generation) on one machine and memory, and names its performance counters.
:func:`rdu.runtime.run_programs`, :func:`rdu.runtime.run_schedule`,
:func:`rdu.runtime.run_generation` and the command line's ``--sim`` choices reach them
by name through :data:`BACKENDS`; a new back end is a subclass and one
:func:`register_backend`.
"""

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["RunOptions", "Backend", "BACKENDS", "register_backend", "backend_named",
           "names_text"]


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What a caller may ask of any back end (each uses the ones it has).

    Parameters
    ----------
    seed : int
        Seed of the simulation's random stall patterns and pauses.
    work_dir : path, optional
        Where an RTL run keeps its files (default ``build/run/<name>``).
    waves : bool
        Write a waveform (RTL).
    timeout : int, optional
        Watchdog in cycles per launch and per copy (default:
        :mod:`rdu.runtime.watchdog`).
    progress : bool
        Show build and simulation progress on stderr.
    memory : dict, optional
        Memory-model overrides of the RTL (:func:`rdu.sim.host.system_memory`).
    launch_latency : int, optional
        Cycles the host needs to issue each launch and copy of a host schedule.
    windows : bool
        Confine each launch, copy and orchestrated schedule to the memory windows of
        what it declares (:mod:`rdu.dma_windows`): an access elsewhere ends its command
        with ``WINDOW``. Default on.
    position : int
        The launch position of every launch and schedule of the run (``RDUSystem.position``;
        ``docs/agcu.md``, **Positioned patterns**): the positioned tensors' entry read or
        written. Default 0.
    """
    seed: int = 1
    work_dir: object = None
    waves: bool = False
    timeout: int = None
    progress: bool = False
    memory: dict = None
    launch_latency: int = None
    windows: bool = True
    position: int = 0


class Backend:
    """One way to run programs: the contract every back end meets.

    ``name`` is its ``--sim`` name, ``timed`` whether it counts cycles (the RTL),
    ``native`` whether it runs on the native runner (a build of its own),
    ``orchestrates`` whether it runs an orchestrated schedule, ``schedules`` whether it
    takes host schedules from the command line's schedule-driven applications.
    """

    name: ClassVar[str] = None
    timed: ClassVar[bool] = False
    native: ClassVar[bool] = False
    orchestrates: ClassVar[bool] = True
    schedules: ClassVar[bool] = True

    def run_programs(self, programs, machine, options):
        """Load and run ``programs`` in order on ``machine`` with one memory: a list of
        :class:`rdu.runtime.RunResult`, one per program."""
        raise NotImplementedError

    def run_schedule(self, steps, machine, options):
        """Run the host schedule ``steps`` (checked): a
        :class:`rdu.runtime.ScheduleResult` with ``execution="host"``."""
        raise NotImplementedError

    def run_orchestrated(self, steps, plan, machine, options):
        """Run the orchestrated schedule ``plan`` (:class:`rdu.runtime.orchestrate.
        Orchestration`) of ``steps``: a :class:`rdu.runtime.ScheduleResult` with
        ``execution="orchestrated"``."""
        raise NotImplementedError

    def run_generation(self, steps, plan, generation, machine, options):
        """Run the orchestrated schedule ``plan`` of ``steps`` once per token as
        ``generation`` (:class:`rdu.runtime.generation.Generation`) says, on one machine
        and memory: a :class:`rdu.runtime.generation.GenerationResult`. Only back ends
        that orchestrate run it."""
        raise NotImplementedError

    def counter_figures(self, result):
        """The figures this back end reads from a launch's counters (``result``, a
        :class:`rdu.runtime.RunResult`) for a report: none without a cycle count."""
        return {}

    def counter_names(self, machine):
        """The names of the performance counters this back end reads after each
        launch on ``machine`` (in the order the hardware selects them)."""
        return []


#: The back ends by ``--sim`` name, in the order they are offered.
BACKENDS = {}


def register_backend(cls):
    """Class decorator: register one instance of ``cls`` under ``cls.name``."""
    if cls.name in BACKENDS:
        raise ValueError(f"back end {cls.name!r} is registered twice")
    BACKENDS[cls.name] = cls()
    return cls


def names_text(names):
    """``"'a', 'b' or 'c'"``: back-end names for a message."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"


def backend_named(sim):
    """The registered back end called ``sim``; ``ValueError`` naming the choices."""
    if sim not in BACKENDS:
        raise ValueError(f"unknown simulator {sim!r}; expected one of {', '.join(BACKENDS)}")
    return BACKENDS[sim]

"""The runtime's entry points: one code path over the back ends.

:func:`run_programs` launches a sequence of programs on one machine with one memory
(configuration cleared and reloaded before each, memory kept): a later program reads
what an earlier one stored. :func:`run_schedule` runs launches, AGCU copies and host
writes, issued by the host or by the on-chip orchestrator. Each checks its arguments,
then hands the run to the back end named by ``sim`` (:data:`rdu.runtime.BACKENDS`).
"""

from ..program import ProgramError
from ..units.agcu import check_position
from .backend import BACKENDS, RunOptions, backend_named, names_text
from .orchestrate import orchestrate
from .results import RunFailure, roofline
from .steps import EXECUTIONS, Launch, check_launch_latency, check_machine, check_steps

__all__ = ["run_program", "run_programs", "run_schedule", "system_params",
           "hbm_peak_bytes_per_cycle", "orchestrating_backends"]


def system_params(program):
    """Constructor arguments of the :class:`hdl.system.RDUSystem` a program needs."""
    return program.machine.system_params()


def hbm_peak_bytes_per_cycle(machine):
    """The HBM's peak bandwidth behind ``machine``'s AGCUs in bytes per cycle
    (:attr:`rdu.machine.Machine.hbm_bytes_per_cycle`: what the memory model the runs use
    is built with, :func:`sim_models.memory.hbm_model`)."""
    return machine.hbm_bytes_per_cycle


def _position(position):
    try:
        return check_position(position)
    except ValueError as error:
        raise RunFailure(str(error), "position") from None


def _at_position(program, position):
    """``program`` launched at ``position`` (:meth:`rdu.program.Program.at_position`)."""
    try:
        return program.at_position(position)
    except ProgramError as error:
        raise RunFailure(str(error), "position") from None


def run_program(program, sim="model", **options):
    """Run one program; return its :class:`RunResult` (see :func:`run_programs`)."""
    return run_programs([program], sim, **options)[0]


def run_programs(programs, sim="model", *, machine=None, seed=1, work_dir=None, waves=False,
                 timeout=None, progress=False, windows=True, position=0):
    """Run ``programs`` in order on one machine and memory; one :class:`RunResult` each.

    Parameters
    ----------
    programs : list of Program
        Each with its input images packed (an image of ``None`` is produced by an
        earlier program).
    sim : str
        A registered back end (:data:`rdu.runtime.SIMULATORS`).
    machine : Machine, optional
        The machine to run on (default: the first program's); every program must have
        been compiled for it.
    seed : int
        Seed of the simulation's random stall patterns (Verilator).
    work_dir : path, optional
        Where the Verilator run keeps its files (default ``build/run/<name>``).
    waves : bool
        Write a waveform (Verilator).
    timeout : int, optional
        Watchdog in cycles per launch (default: :func:`rdu.runtime.watchdog.
        launch_timeout`).
    progress : bool
        Show Verilator build and simulation progress on stderr.
    windows : bool
        Confine each launch to the memory windows of its manifest (inputs and bitstream
        read, outputs written; :meth:`rdu.program.Program.dma_windows`).
    position : int
        The launch position (``docs/agcu.md``, **Positioned patterns**): the entry of
        each positioned image (:class:`rdu.compiler.core.ImagePlan` ``positions``) the
        launches read and write.

    Raises
    ------
    RunFailure
        One line naming the unit and the cause.
    """
    backend = backend_named(sim)
    if not programs:
        raise ValueError("no program to run")
    position = _position(position)
    programs = [_at_position(program, position) for program in programs]
    machine = check_machine(programs, machine)
    results = backend.run_programs(programs, machine, RunOptions(
        seed=seed, work_dir=work_dir, waves=waves, timeout=timeout, progress=progress,
        windows=windows, position=position))
    for program, result in zip(programs, results, strict=True):
        result.roofline = roofline([program], result.cycles)
    return results


def run_schedule(steps, sim="model", *, machine=None, seed=1, work_dir=None, memory=None,
                 timeout=None, progress=False, execution="host", launch_latency=None,
                 windows=True, position=0):
    """Run a list of :class:`Launch`, :class:`Copy` and :class:`Write` steps in order on
    one machine and one memory; one :class:`StepResult` each.

    The general form of :func:`run_programs`: copies move data between HBM, DDR and the
    host window with AGCU ``COPY`` commands between launches (model switching).
    ``memory``: memory-model overrides for the RTL (``{"host": {"bytes_per_cycle": ..}}``,
    :func:`rdu.sim.host.system_memory`); the functional model has no timing.

    ``execution="host"``: the host issues every step. It needs ``launch_latency``
    cycles (default :data:`sim_models.memory.HOST_LAUNCH_LATENCY`) to issue each launch
    and each copy, counted in the step's ``cycles`` and reported as its
    ``launch_cycles``. A launch's cycles are then ``launch_cycles + load_cycles +
    cycles``; a copy's ``launch_cycles`` plus the edges from the one that accepted its
    commands to the last ``done``.

    ``execution="orchestrated"``: the steps become one schedule for the hardware
    orchestrator (``docs/orchestrator.md``; a launch is ``PROGRAM_LOAD`` + ``EXECUTE``,
    a copy its ``COPY`` commands + ``WAIT``, then ``END``); a
    :class:`rdu.schedule.Command` among the steps goes into the schedule as it is. Every
    image, bitstream (placed at the top of HBM with the schedule) and :class:`Write`
    is written before the one ``start``; writes after the first launch or copy, and
    images that a later step's images or outputs would overwrite before they are used
    or read, are refused. The outputs are read after the end. Step cycles come from the
    orchestrator's command completions (``launch_cycles`` 0).

    ``windows``: each launch and copy (host), or the whole schedule (orchestrated:
    :meth:`rdu.runtime.orchestrate.Orchestration.dma_windows`), confined to the memory
    windows of what it declares. ``position``: the launch position of every launch
    (:func:`run_programs`).

    Raises
    ------
    RunFailure
        One line: the unit and the cause (for a schedule, the command's index).
    """
    backend = backend_named(sim)
    if execution not in EXECUTIONS:
        raise ValueError(f"unknown execution {execution!r}; expected one of "
                         f"{', '.join(EXECUTIONS)}")
    check_launch_latency(launch_latency)
    position = _position(position)
    steps = [Launch(_at_position(step.program, position)) if isinstance(step, Launch)
             else step for step in steps]
    programs = [step.program for step in steps if isinstance(step, Launch)]
    if not programs:
        raise ValueError("a schedule needs at least one launch")
    machine = check_machine(programs, machine)
    check_steps(steps, machine, execution)
    options = RunOptions(seed=seed, work_dir=work_dir, memory=memory, timeout=timeout,
                         progress=progress, launch_latency=launch_latency, windows=windows,
                         position=position)
    if execution == "host":
        results = backend.run_schedule(steps, machine, options)
    elif not backend.orchestrates:
        raise ValueError(f"an orchestrated schedule runs on sim "
                         f"{names_text(orchestrating_backends())}")
    else:
        results = backend.run_orchestrated(steps, orchestrate(steps, machine), machine,
                                           options)
    return _with_rooflines(steps, results, programs)


def _with_rooflines(steps, results, programs):
    """``results`` (a :class:`ScheduleResult`) with the roofline of each launch and of
    the whole schedule (its programs' work summed, against its cycles)."""
    for step, result in zip(steps, results, strict=True):
        if isinstance(step, Launch) and result.launch is not None:
            result.launch.roofline = roofline([step.program], result.launch.cycles)
    results.roofline = roofline(programs, results.cycles)
    return results


def orchestrating_backends():
    """The names of the back ends that run an orchestrated schedule."""
    return [name for name, backend in BACKENDS.items() if backend.orchestrates]

"""The runtime: run compiled :class:`~rdu.program.Program` s on a model of the machine.

Two back ends, one result:

* ``model``: the functional model (:mod:`rdu.models.array`) executes the bitstreams in
  numpy, item by item: seconds even for large kernels, no cycle counts;
* ``verilator``: the generated Verilog of :class:`hdl.system.RDUSystem` (tile array +
  AGCUs) under cocotb + Verilator, with the HBM/DDR models behind the AGCUs, driven by
  the host driver :mod:`rdu.sim.host`. Cycle-accurate.
* ``native``: the same Verilated system with the memory models and AXI ports in C++
  (:mod:`rdu.sim.native`): the host driver runs in this process and Python acts once
  per host action, not per cycle. The same cycles as ``verilator``, several times
  faster; waves as there (``--waves``); no stall patterns or injected faults.
* ``ip``: the IP top :class:`hdl.ip.RDUIP` (the same system behind AXI4 manager ports
  and AXI4-Lite registers) under cocotb + Verilator, driven as a CPU driver drives it
  (:mod:`rdu.sim.ip_host`): registers over cocotbext-axi's ``AxiLiteMaster``, memory in
  cocotbext-axi ``AxiSlave`` models (no HBM/DDR timing), random pauses on every
  channel, the interrupt. Cycle-accurate; checks the IP's bus behaviour.

:func:`run_programs` launches a sequence of programs on one machine with one memory
(configuration cleared and reloaded before each, memory kept): a later program reads
what an earlier one stored. Each launch reports its configuration and execution
cycles. :func:`run_program` is the one-program case.

Every failure of a run is a :class:`RunFailure` whose message is one line naming the
unit and the cause (a deadlock, a unit's error status, a watchdog, the loader's
verdict, a program for another machine); the command line prints it and exits 2.
"""

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["RunResult", "RunFailure", "run_program", "run_programs", "SIMULATORS",
           "run_kernel", "hbm_peak_bytes_per_cycle",
           "system_params", "check_machine", "Launch", "Copy", "Write", "StepResult",
           "ScheduleResult", "EXECUTIONS", "run_schedule", "orchestration_files",
           "run_sequence"]

SIMULATORS = ("model", "verilator", "native", "ip")


class RunFailure(RuntimeError):
    """A run that did not end cleanly; ``str()`` is one line naming unit and cause."""

    def __init__(self, message, kind="error"):
        super().__init__(message)
        self.kind = kind


@dataclass
class RunResult:
    """One launch: its outputs by name (uint32 words) and what it cost; ``memory_bytes``:
    the bytes its execution (not its program load) read and wrote in each memory
    region, on both back ends."""
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


def system_params(program):
    """Constructor arguments of the :class:`hdl.system.RDUSystem` a program needs."""
    return program.machine.system_params()


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


def run_program(program, sim="model", **options):
    """Run one program; return its :class:`RunResult` (see :func:`run_programs`)."""
    return run_programs([program], sim, **options)[0]


def run_programs(programs, sim="model", *, machine=None, seed=1, work_dir=None, waves=False,
                 timeout=None, progress=False):
    """Run ``programs`` in order on one machine and memory; one :class:`RunResult` each.

    Parameters
    ----------
    programs : list of Program
        Each with its input images packed (an image of ``None`` is produced by an
        earlier program).
    sim : {"model", "verilator", "native", "ip"}
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
        Watchdog in cycles per launch (default: an estimate from the program).
    progress : bool
        Show Verilator build and simulation progress on stderr.

    Raises
    ------
    RunFailure
        One line naming the unit and the cause.
    """
    if sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {sim!r}; expected one of {', '.join(SIMULATORS)}")
    if not programs:
        raise ValueError("no program to run")
    machine = check_machine(programs, machine)
    if sim == "model":
        return _run_model(programs, machine)
    return _run_rtl(programs, machine, tier=sim, seed=seed, work_dir=work_dir, waves=waves,
                    timeout=timeout, progress=progress)


def _run_model(programs, machine):
    from .models.machine import FunctionalMachine
    from .models.shared import ModelError
    model = FunctionalMachine(machine)
    results = []
    for program in programs:
        start = time.perf_counter()
        try:
            outputs, result = model.run_program(program)
        except ModelError as error:
            raise RunFailure(f"{error} (functional model)", type(error).__name__) from None
        results.append(RunResult({name: np.asarray(words, np.uint32)
                                  for name, words in outputs.items()}, None, "model",
                                 time.perf_counter() - start, counters=result.counters,
                                 program=program.name, memory_bytes=model.execute_traffic))
    return results


def _run_rtl(programs, machine, *, tier, seed, work_dir, waves, timeout, progress):
    """The RTL back ends: ``verilator`` (:class:`hdl.system.RDUSystem` under cocotb, the
    host driver :func:`rdu.sim.host.run_programs`), ``native`` (the same build, the
    memory side in C++: :mod:`rdu.sim.native`) and ``ip`` (:class:`hdl.ip.RDUIP` under
    cocotb, driven over AXI4-Lite by :func:`rdu.sim.ip_host.run_ip_programs` on
    cocotbext-axi's models)."""
    from .sim.verilator import project_root
    if tier == "ip":
        try:
            import cocotbext.axi  # noqa: F401
            import systemrdl  # noqa: F401
        except ImportError:
            raise RunFailure("--sim ip needs the 'ip' extra (systemrdl-compiler, "
                             "cocotbext-axi): pip install -e '.[ip]'", "setup") from None
        from hdl.ip import RDUIP as design

        from .sim.ip_host import run_ip_programs as body
        toplevel, suffix, where, extra = "rdu_ip", "-ip", "IP top", {"pause": True}
    else:
        from hdl.system import RDUSystem as design

        from .sim.host import run_programs as body
        toplevel, suffix, where, extra = None, "", "RTL", {"progress": progress}
    native = tier == "native"
    start = time.perf_counter()
    name = programs[0].name if len(programs) == 1 else f"{programs[0].name}+{len(programs) - 1}"
    work_dir = Path(work_dir or project_root() / "build" / "run" / f"{name}{suffix}").resolve()
    program_dirs = [str(program.save(work_dir / f"program{index}"))
                    for index, program in enumerate(programs)]
    built, perf_counters = _build_rtl(design, machine, toplevel=toplevel, waves=waves,
                                      progress=progress)
    timeouts = [timeout or estimate_cycles(program) * 4 + 20000 for program in programs]
    sim_dir = work_dir / "sim"
    stats = _run_body(built, body, sim_dir, native=native, log_progress=progress,
                      seed=seed, where=where, program_dirs=program_dirs, timeouts=timeouts,
                      perf_counters=perf_counters,
                      timeout=sum(timeouts) + 200_000 * len(programs), **extra)
    wave_files = sorted(sim_dir.glob("dump.*")) if waves else []
    seconds = time.perf_counter() - start
    results = []
    for program, launch in zip(programs, stats.result["launches"], strict=True):
        outputs = _read_outputs(launch, program)
        counters = {key: value for key, value in launch.items()
                    if key not in ("outputs", "outputs_file")}
        if "memory" in stats.result:
            counters["memory"] = stats.result["memory"]
        counters["sim_cycles_per_second"] = stats.cycles_per_second
        beats = launch.get("execute_beats")
        results.append(RunResult(outputs, launch["cycles"], tier, seconds,
                                 built.seconds, counters,
                                 str(wave_files[0]) if wave_files else None,
                                 launch["load_cycles"], program.name,
                                 _beat_bytes(beats, machine) if beats is not None else {}))
    return results


def _build_rtl(design, machine, *, toplevel=None, waves=False, progress=False):
    """``(built, perf_counters)``: the cached Verilator build of ``design`` for
    ``machine`` and the names of its performance counters; a machine the RTL cannot have
    or a failed build is one :class:`RunFailure`."""
    from .sim.verilator import VerilatorError, build
    try:
        params = machine.system_params()
    except ValueError as error:
        raise RunFailure(str(error), "machine") from None
    try:
        built = build(design, toplevel=toplevel, waves=waves, progress=progress, **params)
    except VerilatorError as error:
        raise RunFailure(str(error).splitlines()[0], "build") from None
    return built, _perf_counter_names(design, params)


def _run_body(built, body, sim_dir, *, native, log_progress, seed, where="RTL", **params):
    """Run the host body ``body`` on ``built`` with ``params`` under cocotb (its log
    echoed with ``log_progress``), or with ``native`` on the native runner
    (:mod:`rdu.sim.native`); every failure becomes one :class:`RunFailure` (a failure of
    the body says ``(WHERE, cycle N)``)."""
    from .sim.native import NativeError, run_native
    from .sim.runner import BodyError, run_verilator
    try:
        with _LogProgress(sim_dir / "sim.log", enabled=log_progress and not native):
            return (run_native if native else run_verilator)(
                built, body, sim_dir, seed=seed, **params)
    except NativeError as error:
        raise RunFailure(str(error), "build") from None
    except BodyError as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else \
            error.error_type
        raise RunFailure(f"{message} ({where}, cycle {error.cycle})", error.error_type) \
            from None
    except AssertionError as error:
        first = str(error).strip().splitlines()[0]
        raise RunFailure(f"the RTL simulation failed: {first} (log: {sim_dir / 'sim.log'})",
                         "simulation") from None


def _beat_bytes(beats, machine):
    """``{region: {read_beats, write_beats}}`` of the RTL's memory models in bytes."""
    return {region: {kind.replace("beats", "bytes"): count * machine.beat_bytes
                     for kind, count in counts.items()} for region, counts in beats.items()}


def hbm_peak_bytes_per_cycle(machine):
    """The HBM's peak bandwidth behind ``machine``'s AGCUs in bytes per cycle: what the
    memory model the runs use is built with (:func:`sim_models.memory.hbm_model`)."""
    from sim_models.memory import hbm_model
    return hbm_model(beat_bytes=machine.beat_bytes).timing.peak_bytes_per_cycle


def run_kernel(kernel, program, inputs, sim="model", *, seed=1, **options):
    """Run ``program`` of ``kernel`` (:class:`rdu.kernels.Kernel`) on ``inputs``
    (``{tensor: uint32 BF16 words}``) and check the result: what ``rdu run`` and each
    point of ``rdu sweep`` measure.

    Returns ``(figures, results, run)``: ``figures`` a dict (``ok``, ``max_abs_err``,
    ``cycles``, ``utilization``, ``hbm_bytes``, ``hbm_peak_share``, ...; cycle figures
    are ``None`` on the functional model), ``results`` the outputs as float arrays,
    ``run`` the :class:`RunResult`. ``options`` go to :func:`run_program`."""
    kernel.pack(program, inputs)
    result = run_program(program, sim, seed=seed, **options)
    results = kernel.unpack(program, result.outputs)
    ok, max_abs_err = kernel.check(program, inputs, results)
    macs, peak = kernel.work(program)
    hbm = result.memory_bytes.get("hbm")          # None: a back end without the HBM model
    hbm_bytes = hbm["read_bytes"] + hbm["write_bytes"] if hbm else None
    cycles = result.cycles
    figures = {
        "ok": ok,
        "pcus_used": program.meta.get("pcus"),
        "cycles": cycles,
        "macs": macs,
        "peak_macs_per_cycle": peak,
        "utilization": round(macs / (cycles * peak), 4) if cycles and macs else None,
        "max_abs_err": max_abs_err,
        "hbm_bytes": hbm_bytes,
        "hbm_peak_share": (round(hbm_bytes / (cycles * hbm_peak_bytes_per_cycle(
            program.machine)), 4) if cycles and hbm_bytes is not None else None),
        "sim_seconds": round(result.seconds, 3),
    }
    if sim in ("verilator", "native", "ip"):
        figures["config_cycles"] = result.load_cycles
        perf = result.counters.get("perf", {})
        from hdl.interfaces import NETWORKS
        for network in NETWORKS:
            figures[f"switch_{network}_stall_cycles"] = sum(
                value for name, value in perf.items()
                if name.endswith(f".{network}_stall_cycles"))
        figures["pmu_read_stall_cycles"] = sum(
            value for name, value in perf.items() if name.endswith(".read_stall_cycles"))
        figures["sim_cycles_per_second"] = round(result.counters.get(
            "sim_cycles_per_second", 0))
        figures["verilator_build_seconds"] = round(result.build_seconds, 1)
    return figures, results, result


def run_sequence(kernel, sequence, inputs, sim="model", *, seed=1, timeout=None,
                 progress=False, work_dir=None, **schedule_options):
    """Run the unfused form of ``kernel`` (a :class:`rdu.unfused.Sequence`) on
    ``inputs`` and check it: the :func:`run_kernel` of kernel-by-kernel execution.

    Every stage is a :class:`Launch` of :func:`run_schedule` (``schedule_options`` go
    there). Returns ``(figures, results, steps)``: ``figures`` as :func:`run_kernel`'s
    (``ok``: bit-exact against the stages' arithmetic chained and within the kernel's
    float64 budget; ``cycles``: the whole schedule (:class:`ScheduleResult`: every
    program load and execution, the host's launch latencies or the orchestrator's
    fetch and commands); ``load_cycles``, ``execute_cycles``, ``host_launch_cycles``,
    ``launches``, ``stages`` (per stage: name, load and execute cycles))."""
    sequence.pack(inputs)
    machine = sequence.programs[0].machine
    steps = run_schedule([Launch(program) for program in sequence.programs], sim,
                         machine=machine, seed=seed, timeout=timeout, progress=progress,
                         work_dir=work_dir, **schedule_options)
    words = sequence.outputs([step.launch.outputs for step in steps])
    exact, _ = sequence.exact(inputs)
    results = {name: np.asarray(value, np.uint32).view(np.float32)
               for name, value in words.items()}
    from .models import reference
    ok, max_abs_err = reference.check(kernel.graph(sequence.params), inputs, results)
    ok = ok and all(np.array_equal(np.asarray(words[name], np.uint32), value)
                    for name, value in exact.items())
    timed = sim != "model"
    loads = [step.launch.load_cycles for step in steps]
    executes = [step.launch.cycles for step in steps]
    hbm = [step.launch.memory_bytes.get("hbm") for step in steps]
    hbm_bytes = (sum(h["read_bytes"] + h["write_bytes"] for h in hbm)
                 if all(h is not None for h in hbm) else None)
    cycles = steps.cycles if timed else None
    figures = {
        "ok": ok,
        "cycles": cycles,
        "max_abs_err": max_abs_err,
        "launches": len(steps),
        "load_cycles": sum(loads) if timed else None,
        "execute_cycles": sum(executes) if timed else None,
        "host_launch_cycles": sum(step.launch_cycles or 0 for step in steps) if timed
        else None,
        "hbm_bytes": hbm_bytes,
        "hbm_peak_share": (round(hbm_bytes / (cycles * hbm_peak_bytes_per_cycle(machine)), 4)
                           if cycles and hbm_bytes is not None else None),
        "stages": [{"name": stage.name, "program": stage.program.name,
                    "load_cycles": load, "execute_cycles": execute, "cycles": step.cycles}
                   for stage, step, load, execute in zip(sequence.stages, steps, loads,
                                                          executes, strict=True)],
    }
    return figures, results, steps


# -- schedules: program launches, AGCU copy jobs, host writes --------------------------------

@dataclass
class Launch:
    """A step of :func:`run_schedule`: load and execute ``program`` (as
    :func:`run_programs`: its packed input images written first, images of ``None``
    already in memory)."""
    program: object


@dataclass
class Copy:
    """A step of :func:`run_schedule`: ``length`` bytes from ``src`` to ``dst`` by AGCU
    ``COPY`` commands. ``agcus`` > 1 cuts the copy into that many beat-aligned pieces,
    one per AGCU (0, 1, ...), issued on the same edge; the step ends when the last one
    is done. Lengths and addresses must be multiples of the machine's beat."""
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
    """A step of :func:`run_schedule`: the host writes uint32 ``words`` at ``address``
    through the backdoor (no cycles: data placed before the measured work, e.g. the
    experts at rest in DDR)."""
    address: int
    words: object


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


#: How :func:`run_schedule` issues the steps.
EXECUTIONS = ("host", "orchestrated")


class ScheduleResult(list):
    """The :class:`StepResult` s of :func:`run_schedule` (a list), with ``cycles``: clock
    edges of the whole schedule on the RTL (host execution: from the first step's issue
    to the last step's end; orchestrated: ``orch.cycles``, start to done; ``None`` on
    the functional model), ``execution`` and ``host_commands`` (orchestrated RTL: the
    commands and control pulses the host drove while the orchestrator ran, 0)."""

    def __init__(self, steps, *, cycles=None, execution="host", host_commands=None):
        super().__init__(steps)
        self.cycles, self.execution, self.host_commands = cycles, execution, host_commands


def run_schedule(steps, sim="model", *, machine=None, seed=1, work_dir=None, memory=None,
                 timeout=None, progress=False, execution="host", launch_latency=None):
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

    Raises
    ------
    RunFailure
        One line: the unit and the cause (for a schedule, the command's index).
    """
    if sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {sim!r}; expected one of {', '.join(SIMULATORS)}")
    if execution not in EXECUTIONS:
        raise ValueError(f"unknown execution {execution!r}; expected one of "
                         f"{', '.join(EXECUTIONS)}")
    if launch_latency is not None and (not isinstance(launch_latency, int) or
                                       isinstance(launch_latency, bool) or launch_latency < 0):
        raise ValueError(f"launch latency must be a non-negative integer number of cycles, "
                         f"not {launch_latency!r}")
    from .schedule import Command
    steps = list(steps)
    programs = [step.program for step in steps if isinstance(step, Launch)]
    if not programs:
        raise ValueError("a schedule needs at least one launch")
    machine = check_machine(programs, machine)
    for step in steps:
        if isinstance(step, Copy):
            step.jobs(machine)
        elif isinstance(step, Command) and execution == "host":
            raise ValueError(f"a schedule command ({step.describe()}) is a step of an "
                             f"orchestrated schedule only")
        elif not isinstance(step, (Launch, Write, Command)):
            raise ValueError(f"not a schedule step: {step!r}")
    if execution == "orchestrated":
        if sim == "ip":
            raise ValueError("an orchestrated schedule runs on sim 'model', 'verilator' or "
                             "'native'")
        plan = _orchestrate(steps, machine)
        if sim == "model":
            return _orchestrated_model(steps, plan, machine)
        return _orchestrated_verilator(steps, plan, machine, seed=seed, work_dir=work_dir,
                                       memory=memory, timeout=timeout, progress=progress,
                                       native=sim == "native")
    if sim == "model":
        return _schedule_model(steps, machine)
    if launch_latency is None:
        from sim_models.memory import HOST_LAUNCH_LATENCY
        launch_latency = HOST_LAUNCH_LATENCY
    return _schedule_verilator(steps, machine, seed=seed, work_dir=work_dir, memory=memory,
                               timeout=timeout, progress=progress,
                               launch_latency=launch_latency, native=sim == "native")


@dataclass
class _Orchestration:
    """An orchestrated schedule: its commands and words, where they go, what to write
    first, and which commands belong to which step."""
    commands: list
    words: object
    address: int
    writes: list                # [(address, uint32 words)]
    step_commands: list         # per step: its command indices
    launches: list              # [(step index, program, EXECUTE command index)]


def _spans_overlap(a, b):
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def _orchestrate(steps, machine):
    """Steps -> :class:`_Orchestration` (commands, placement, checks)."""
    from hdl.orchestrator import COMMAND_BYTES, ScheduleOp

    from .schedule import Command, encode, mask_of
    beat = machine.beat_bytes
    images, writes, spans = [], [], []     # images: (step, what, address, nbytes, words)
    outputs = []                           # (step, what, address, nbytes)
    started = False
    for index, step in enumerate(steps):
        if isinstance(step, Write):
            if started:
                raise RunFailure(f"orchestrated schedule: step {index} (a host write at "
                                 f"{step.address:#x}) comes after the first launch or copy: "
                                 f"the host is idle during the run; write before it",
                                 "schedule")
            words = np.asarray(step.words, np.uint32).reshape(-1)
            writes.append((int(step.address), words))
            spans.append((int(step.address), 4 * words.size))
        elif isinstance(step, Launch):
            started = True
            program = step.program
            for name, (address, words) in program.inputs.items():
                if words is not None:
                    words = np.asarray(words, np.uint32).reshape(-1)
                    images.append((index, f"input {name!r} of {program.name!r}",
                                   int(address), 4 * words.size, words))
            for name, (address, count) in program.outputs.items():
                outputs.append((index, f"output {name!r} of {program.name!r}", int(address),
                                4 * int(count)))
        elif isinstance(step, Copy):
            started = True
            spans.append((step.src, step.length))
            spans.append((step.dst, step.length))
    # an image is written before the run: no later step may write over it before its
    # launch reads it, no output may be overwritten before the end reads it
    for i, (step_i, what_i, address_i, size_i, words_i) in enumerate(images):
        for step_j, what_j, address_j, size_j, words_j in images[i + 1:]:
            if step_j != step_i and _spans_overlap((address_i, size_i), (address_j, size_j)) \
                    and not (address_i == address_j and np.array_equal(words_i, words_j)):
                raise RunFailure(f"orchestrated schedule: {what_j} (step {step_j}) at "
                                 f"{address_j:#x} overlaps {what_i} (step {step_i}): every "
                                 f"image is written before the run; move one "
                                 f"(rdu.relocate)", "schedule")
        for step_o, what_o, address_o, size_o in outputs:
            if step_o < step_i and _spans_overlap((address_i, size_i), (address_o, size_o)):
                raise RunFailure(f"orchestrated schedule: {what_i} (step {step_i}) at "
                                 f"{address_i:#x} overlaps {what_o} (step {step_o}), which "
                                 f"is stored first; move one (rdu.relocate)", "schedule")
    for i, (step_i, what_i, address_i, size_i) in enumerate(outputs):
        for step_j, what_j, address_j, size_j in outputs[i + 1:]:
            if step_j != step_i and _spans_overlap((address_i, size_i), (address_j, size_j)):
                raise RunFailure(f"orchestrated schedule: {what_j} (step {step_j}) at "
                                 f"{address_j:#x} overlaps {what_i} (step {step_i}): outputs "
                                 f"are read after the end; move one "
                                 f"(rdu.relocate.relocate_output)", "schedule")
    # bitstreams and the schedule at the top of HBM
    def align(nbytes):
        return -(-nbytes // beat) * beat
    bitstreams = [np.asarray(step.program.bitstream, np.uint32) for step in steps
                  if isinstance(step, Launch)]
    count = 1 + sum(2 if isinstance(step, Launch) else
                    len(step.jobs(machine)) + 1 if isinstance(step, Copy) else
                    0 if isinstance(step, Write) else 1 for step in steps)
    hbm = machine.regions()[0]
    total = sum(align(4 * bits.size) for bits in bitstreams) + align(COMMAND_BYTES * count)
    base = (hbm.end - total) // beat * beat
    taken = spans + [(address, size) for _, _, address, size, _ in images] + \
        [(address, size) for _, _, address, size in outputs]
    for address, size in taken:
        if _spans_overlap((base, total), (address, size)):
            raise RunFailure(f"orchestrated schedule: its bitstreams and commands "
                             f"({total} bytes at the top of HBM, {base:#x}) overlap data at "
                             f"{address:#x}", "schedule")
    commands, step_commands, launches, address = [], [], [], base
    for index, step in enumerate(steps):
        first = len(commands)
        if isinstance(step, Launch):
            bits = np.asarray(step.program.bitstream, np.uint32)
            writes.append((address, bits))
            commands.append(Command(ScheduleOp.PROGRAM_LOAD, 0, address, 0, 4 * bits.size))
            commands.append(Command(ScheduleOp.EXECUTE, mask_of(step.program.execute)))
            launches.append((index, step.program, len(commands) - 1))
            address += align(4 * bits.size)
        elif isinstance(step, Copy):
            jobs = step.jobs(machine)
            for agcu, src, dst, length in jobs:
                commands.append(Command(ScheduleOp.COPY, agcu, src, dst, length))
            commands.append(Command(ScheduleOp.WAIT, mask_of(job[0] for job in jobs)))
        elif not isinstance(step, Write):
            commands.append(step)                     # a Command, as it is
        step_commands.append(list(range(first, len(commands))))
    commands.append(Command(ScheduleOp.END))
    words = encode(commands)
    writes.extend((a, w) for _, _, a, _, w in images)
    writes.append((address, words))
    return _Orchestration(commands, words, address, writes, step_commands, launches)


def _orchestrated_steps(steps, plan, ends, runs, sim, seconds=0.0, build_seconds=0.0,
                        outputs=None, beats=None, machine=None):
    """The :class:`StepResult` s of an orchestrated run: each step's cycles from the
    command ends (``ends[i]``: orch.cycles when command ``i`` ended; ``None`` on the
    model), each launch's outputs."""
    launch_of = {step: (program, execute) for step, program, execute in plan.launches}
    results, previous = [], 0
    for index, (step, commands) in enumerate(zip(steps, plan.step_commands, strict=True)):
        if not commands:
            results.append(StepResult("write"))
            continue
        last = commands[-1]
        cycles = ends[last] - previous if ends else None
        if isinstance(step, Launch):
            program, execute = launch_of[index]
            load_cycles = ends[execute - 1] - previous if ends else None
            run_cycles = ends[execute] - ends[execute - 1] if ends else None
            traffic = {}
            if beats:
                before, after = beats[execute - 1], beats[execute]
                traffic = _beat_bytes({region: {kind: count - before[region][kind]
                                                for kind, count in counts.items()}
                                       for region, counts in after.items()}, machine)
            run = RunResult(outputs[index], run_cycles, sim, seconds, build_seconds,
                            runs.get(execute, {}) if isinstance(runs, dict) else {}, None,
                            load_cycles, program.name, traffic)
            results.append(StepResult("launch", cycles, run, launch_cycles=0))
        else:
            results.append(StepResult("copy" if isinstance(step, Copy) else "command",
                                      cycles, launch_cycles=0))
        if ends:
            previous = ends[last]
    return results


def _orchestrated_model(steps, plan, machine):
    from hdl.orchestrator import DEFAULT_COMMANDS

    from .models.machine import FunctionalMachine
    from .models.shared import ModelError
    from .schedule import error_message
    model = FunctionalMachine(machine)
    start = time.perf_counter()
    try:
        for address, words in plan.writes:
            model.write(address, words)
    except ModelError as error:
        raise RunFailure(f"orchestrated schedule: {error} (functional model)",
                         "schedule") from None
    run = model.run_schedule(plan.address, 4 * plan.words.size)
    if run.error:
        message = error_message(run.commands, *run.error, agcus=machine.agcus,
                                capacity=DEFAULT_COMMANDS, length=4 * plan.words.size)
        detail = f": {run.detail}" if run.detail else ""
        raise RunFailure(f"{message} (functional model{detail})", "schedule")
    outputs = {}
    for step, program, _ in plan.launches:
        outputs[step] = {name: np.asarray(model.read(address, count), np.uint32)
                         for name, (address, count) in program.outputs.items()}
    counters = {index: result.counters for index, result in run.runs.items()}
    return ScheduleResult(_orchestrated_steps(steps, plan, None, counters, "model",
                                              time.perf_counter() - start, outputs=outputs),
                          execution="orchestrated")


def orchestration_files(steps, work_dir, *, machine=None, timeout=None):
    """Write the files of an orchestrated schedule into ``work_dir`` for the bench body
    :func:`rdu.sim.host.run_orchestrated` (what :func:`run_schedule` does before its
    Verilator run; for a body run in the Amaranth simulator). Returns ``(plan_file,
    timeout)``: the body's ``plan_file`` and the cycles it allows the schedule."""
    steps = list(steps)
    machine = check_machine([step.program for step in steps if isinstance(step, Launch)],
                            machine)
    return _write_orchestration(steps, _orchestrate(steps, machine), Path(work_dir),
                                timeout)


def _write_orchestration(steps, plan, work_dir, timeout):
    import json
    work_dir.mkdir(parents=True, exist_ok=True)
    arrays = {f"m{i}": np.asarray(words, np.uint32) for i, (_, words) in
              enumerate(plan.writes)}
    arrays["schedule"] = plan.words
    np.savez(work_dir / "writes.npz", **arrays)
    launches = []
    for step, program, _ in plan.launches:
        directory = work_dir / f"step{step}"
        program.save(directory)
        launches.append({"dir": str(directory.resolve()),
                         "outputs": {name: [int(a), int(c)]
                                     for name, (a, c) in program.outputs.items()}})
    limit = timeout or sum(estimate_cycles(program) * 4 + 20000
                           for _, program, _ in plan.launches) + \
        sum(4 * step.length + 50_000 for step in steps if isinstance(step, Copy))
    plan_file = work_dir / "plan.json"
    plan_file.write_text(json.dumps({
        "writes": str((work_dir / "writes.npz").resolve()), "address": plan.address,
        "memory": [{"address": int(address), "key": f"m{i}"}
                   for i, (address, _) in enumerate(plan.writes)],
        "launches": launches, "timeout": limit}))
    return plan_file.resolve(), limit


def _orchestrated_verilator(steps, plan, machine, *, seed, work_dir, memory, timeout,
                            progress, native=False):
    """The ``verilator`` (or ``native``) back end of an orchestrated schedule."""
    from hdl.system import RDUSystem

    from .sim.host import run_orchestrated as body
    from .sim.verilator import project_root
    start = time.perf_counter()
    work_dir = Path(work_dir or project_root() / "build" / "run" /
                    f"orchestrated-{plan.launches[0][1].name}").resolve()
    plan_file, limit = _write_orchestration(steps, plan, work_dir, timeout)
    built, perf_counters = _build_rtl(RDUSystem, machine, progress=progress)
    sim_dir = work_dir / "sim"
    stats = _run_body(built, body, sim_dir, native=native, log_progress=progress,
                      seed=seed, progress=progress,
                      plan_file=str(plan_file), perf_counters=perf_counters, memory=memory,
                      timeout=limit + 100_000)
    result = stats.result
    outputs = {step: _read_outputs(launch, program) for (step, program, _), launch in
               zip(plan.launches, result["launches"], strict=True)}
    counters = {"sim_cycles_per_second": stats.cycles_per_second, "perf": result["perf"],
                "memory": result["memory"]}
    runs = {execute: counters for _, _, execute in plan.launches}
    return ScheduleResult(
        _orchestrated_steps(steps, plan, result["ends"], runs,
                            "native" if native else "verilator",
                            time.perf_counter() - start, built.seconds, outputs,
                            result["beats"], machine),
        cycles=result["cycles"], execution="orchestrated",
        host_commands=result["host_commands"])


def _schedule_model(steps, machine):
    from hdl.agcu import AGCUOp

    from .models.machine import FunctionalMachine
    from .models.shared import ModelError
    model = FunctionalMachine(machine)
    results = []
    for step in steps:
        try:
            if isinstance(step, Write):
                model.write(step.address, step.words)
                results.append(StepResult("write"))
            elif isinstance(step, Copy):
                for agcu, src, dst, length in step.jobs(machine):
                    done = model.command(agcu, AGCUOp.COPY, src=src, dst=dst, length=length)
                    if not done.ok:
                        raise RunFailure(f"{done.message()} (functional model)", "copy")
                results.append(StepResult("copy"))
            else:
                start = time.perf_counter()
                outputs, result = model.run_program(step.program)
                results.append(StepResult("launch", launch=RunResult(
                    {name: np.asarray(words, np.uint32) for name, words in outputs.items()},
                    None, "model", time.perf_counter() - start, counters=result.counters,
                    program=step.program.name, memory_bytes=model.execute_traffic)))
        except ModelError as error:
            raise RunFailure(f"{error} (functional model)", type(error).__name__) from None
    return ScheduleResult(results, execution="host")


def _schedule_verilator(steps, machine, *, seed, work_dir, memory, timeout, progress,
                        launch_latency, native=False):
    import json

    from hdl.system import RDUSystem

    from .sim.host import run_schedule as body
    from .sim.verilator import project_root
    start = time.perf_counter()
    launches = [step for step in steps if isinstance(step, Launch)]
    work_dir = Path(work_dir or project_root() / "build" / "run" /
                    f"schedule-{launches[0].program.name}").resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    plan, writes, limit = [], {}, 0
    for index, step in enumerate(steps):
        if isinstance(step, Write):
            writes[f"w{index}"] = np.asarray(step.words, np.uint32).reshape(-1)
            plan.append({"kind": "write", "address": int(step.address), "key": f"w{index}"})
        elif isinstance(step, Copy):
            plan.append({"kind": "copy", "jobs": [list(map(int, job))
                                                  for job in step.jobs(machine)],
                         "timeout": timeout or 4 * step.length + 50_000})
            limit += plan[-1]["timeout"]
        else:
            directory = work_dir / f"step{index}"
            step.program.save(directory)
            plan.append({"kind": "launch", "dir": str(directory),
                         "timeout": timeout or estimate_cycles(step.program) * 4 + 20000})
            limit += plan[-1]["timeout"] + 200_000
        limit += launch_latency
    np.savez(work_dir / "writes.npz", **writes)
    (work_dir / "schedule.json").write_text(json.dumps(
        {"steps": plan, "writes": str(work_dir / "writes.npz")}))
    built, perf_counters = _build_rtl(RDUSystem, machine, progress=progress)
    sim_dir = work_dir / "sim"
    stats = _run_body(built, body, sim_dir, native=native, log_progress=progress,
                      seed=seed, progress=progress,
                      schedule_file=str(work_dir / "schedule.json"),
                      perf_counters=perf_counters, memory=memory,
                      launch_latency=launch_latency, timeout=limit + 100_000)
    seconds = time.perf_counter() - start
    results = []
    for step, done in zip(steps, stats.result["steps"], strict=True):
        if isinstance(step, Launch):
            launch = done["launch"]
            counters = {key: value for key, value in launch.items()
                        if key not in ("outputs", "outputs_file")}
            counters["sim_cycles_per_second"] = stats.cycles_per_second
            run = RunResult(_read_outputs(launch, step.program), launch["cycles"],
                            "native" if native else "verilator", seconds, built.seconds,
                            counters, None,
                            launch["load_cycles"], step.program.name,
                            _beat_bytes(launch["execute_beats"], machine))
            results.append(StepResult("launch", launch["launch_cycles"] +
                                      launch["load_cycles"] + launch["cycles"], run,
                                      launch_cycles=launch["launch_cycles"]))
        elif done["kind"] == "copy":
            results.append(StepResult("copy", done["launch_cycles"] + done["cycles"],
                                      agcu_cycles=done.get("agcu_cycles", {}),
                                      launch_cycles=done["launch_cycles"]))
        else:
            results.append(StepResult(done["kind"]))
    return ScheduleResult(results, cycles=stats.result["cycles"], execution="host")


def _perf_counter_names(system_class, params):
    """The array's performance counters (switch stalls, PMU beats and stalls, unit
    errors), read through ``host.perf_select`` after each launch. The names come from a
    system object that is never elaborated: Amaranth's warning about that is silenced."""
    import gc
    import warnings

    from amaranth.hdl import UnusedElaboratable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        system = system_class(**params)
        names = system.perf_counter_names()
        del system
        gc.collect()
    return names


class _LogProgress:
    """While the simulation runs in its own process, show its latest progress line
    (``[run_program ...] N cycles, R cycles/s``) on one updating stderr line."""

    def __init__(self, log_path, enabled):
        self.log_path, self.enabled = Path(log_path), enabled and sys.stderr.isatty()
        self.stop = threading.Event()

    def __enter__(self):
        if self.enabled:
            self.thread = threading.Thread(target=self._watch, daemon=True)
            self.thread.start()
        return self

    def _watch(self):
        shown = ""
        while not self.stop.wait(0.5):
            try:
                lines = self.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            latest = next((line for line in reversed(lines) if "[run_program" in line), "")
            if latest and latest != shown:
                shown = latest
                text = latest[latest.index("[run_program"):]
                print(f"\r{text[:100]:<100}", end="", file=sys.stderr, flush=True)
        if shown:
            print(file=sys.stderr)

    def __exit__(self, *exc):
        if self.enabled:
            self.stop.set()
            self.thread.join()
        return False


def _read_outputs(launch, program):
    if launch.get("outputs_file"):
        with np.load(launch["outputs_file"]) as arrays:
            return {name: np.asarray(arrays[name], np.uint32) for name in program.outputs}
    return {name: np.asarray(launch["outputs"][name], np.uint32) for name in program.outputs}


def estimate_cycles(program):
    """A rough cycle count of a program (for watchdogs): the items its AGCUs move."""
    meta = program.meta
    if meta.get("kernel") == "gemm":
        return meta["passes"] * meta["col_tiles"] * meta["k_pad"] + 4 * meta["m_pad"] + 2000
    if program.machine.pcu == "fpga":      # its exp iterates: one vector per steps + 1
        from hdl.special_function import PROGRAMS, SpecialFunction
        return 100000 * (len(PROGRAMS[SpecialFunction.EXP]) + 1)
    return 100000

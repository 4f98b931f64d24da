"""The RTL back ends, one cycle-accurate path with three variations:

* ``verilator``: the generated Verilog of :class:`hdl.system.RDUSystem` (tile array +
  AGCUs) under cocotb + Verilator, with the HBM/DDR models behind the AGCUs, driven by
  the host driver :mod:`rdu.sim.host`;
* ``native``: the same Verilated system with the memory models and AXI ports in C++
  (:mod:`rdu.sim.native`): the host driver runs in this process and Python acts once
  per host action, not per cycle. The same cycles as ``verilator``, several times
  faster; waves as there (``--waves``); no stall patterns or injected faults;
* ``ip``: the IP top :class:`hdl.ip.RDUIP` (the same system behind AXI4 manager ports
  and AXI4-Lite registers) under cocotb + Verilator, driven as a CPU driver drives it
  (:mod:`rdu.sim.ip_host`) on cocotbext-axi's models. Its host schedules run on
  ``verilator``'s system; it runs no orchestrated schedule, so no generation
  (:func:`rdu.runtime.run_generation` refuses it in one line).
"""

import time

import numpy as np

from hdl.agcu_engines import DMA_WINDOWS
from hdl.interfaces import NETWORKS
from hdl.ip import RDUIP
from hdl.system import RDUSystem
from sim_models.memory import HOST_LAUNCH_LATENCY

from ..sim import host, ip_host, orchestrated
from ..sim.protocol import (
    CopyDone,
    CopyStep,
    GenerationPlan,
    HostSchedule,
    LaunchDone,
    LaunchStep,
    WriteStep,
    done_from_json,
)
from .backend import BACKENDS, Backend, register_backend
from .generation import GenerationRun
from .orchestrate import orchestrated_steps, write_orchestration
from .results import RunFailure, RunResult, ScheduleResult, StepResult, beat_bytes, read_outputs
from .rtl import build_design, perf_counter_names, run_body, run_dir
from .steps import Copy, Launch, Write
from .watchdog import (
    LAUNCH_OVERHEAD_CYCLES,
    SIMULATION_SLACK_CYCLES,
    copy_timeout,
    launch_timeout,
    programs_timeout,
)

__all__ = ["RTLBackend", "VerilatorBackend", "NativeBackend", "IPBackend"]


def _launch_counters(launch, cycles_per_second, memory=None):
    """A launch report's counters: everything but its outputs, then the run's
    ``memory`` statistics (if given) and ``sim_cycles_per_second``."""
    counters = {key: value for key, value in launch.items()
                if key not in ("outputs", "outputs_file")}
    if memory is not None:
        counters["memory"] = memory
    counters["sim_cycles_per_second"] = cycles_per_second
    return counters


class RTLBackend(Backend):
    """A Verilated design driven by a host body: ``design`` and ``programs_body`` run
    programs (``toplevel``, ``suffix`` of the run directory, ``where`` in messages);
    ``native`` runs the body on the native runner instead of cocotb."""

    timed = True

    design = RDUSystem
    programs_body = staticmethod(host.run_programs)
    toplevel, suffix, where = None, "", "RTL"

    def check_setup(self):
        """Raise :class:`RunFailure` when a prerequisite of this back end is missing."""

    def body_options(self, options):
        """The back end's own keyword arguments of :attr:`programs_body`."""
        return {"progress": options.progress, "windows": options.windows,
                "position": options.position}

    def counter_names(self, machine):
        return perf_counter_names(self.design, machine.system_params())

    def counter_figures(self, result):
        """The configuration load's cycles, each network's switch stalls and the PMUs'
        read stalls summed over the array, the simulation's speed and build time."""
        figures = {"config_cycles": result.load_cycles}
        perf = result.counters.get("perf", {})
        for network in NETWORKS:
            figures[f"switch_{network}_stall_cycles"] = sum(
                value for name, value in perf.items()
                if name.endswith(f".{network}_stall_cycles"))
        figures["pmu_read_stall_cycles"] = sum(
            value for name, value in perf.items() if name.endswith(".read_stall_cycles"))
        figures["sim_cycles_per_second"] = round(result.counters.get(
            "sim_cycles_per_second", 0))
        figures["verilator_build_seconds"] = round(result.build_seconds, 1)
        return figures

    def run_programs(self, programs, machine, options):
        self.check_setup()
        start = time.perf_counter()
        name = (programs[0].name if len(programs) == 1
                else f"{programs[0].name}+{len(programs) - 1}")
        work_dir = run_dir(options.work_dir, f"{name}{self.suffix}")
        program_dirs = [str(program.save(work_dir / f"program{index}"))
                        for index, program in enumerate(programs)]
        built, perf_counters = build_design(self.design, machine, toplevel=self.toplevel,
                                            waves=options.waves, progress=options.progress)
        timeouts = [launch_timeout(program, options.timeout) for program in programs]
        sim_dir = work_dir / "sim"
        stats = run_body(built, self.programs_body, sim_dir, native=self.native,
                         log_progress=options.progress, seed=options.seed, where=self.where,
                         program_dirs=program_dirs, timeouts=timeouts,
                         perf_counters=perf_counters, timeout=programs_timeout(timeouts),
                         **self.body_options(options))
        wave_files = sorted(sim_dir.glob("dump.*")) if options.waves else []
        seconds = time.perf_counter() - start
        results = []
        for program, launch in zip(programs, stats.result["launches"], strict=True):
            counters = _launch_counters(launch, stats.cycles_per_second,
                                        stats.result.get("memory"))
            beats = launch.get("execute_beats")
            results.append(RunResult(
                outputs=read_outputs(launch, program), cycles=launch["cycles"],
                sim=self.name, seconds=seconds, build_seconds=built.seconds,
                counters=counters, waves=str(wave_files[0]) if wave_files else None,
                load_cycles=launch["load_cycles"], program=program.name,
                memory_bytes=beat_bytes(beats, machine) if beats is not None else {}))
        return results

    def _host_schedule(self, steps, machine, work_dir, timeout, launch_latency):
        """Write the host schedule of ``steps`` (:class:`HostSchedule`) into
        ``work_dir``; return its file and the cycles the whole run allows."""
        plan, writes, limit = [], {}, 0
        for index, step in enumerate(steps):
            if isinstance(step, Write):
                writes[f"w{index}"] = np.asarray(step.words, np.uint32).reshape(-1)
                plan.append(WriteStep(int(step.address), f"w{index}"))
            elif isinstance(step, Copy):
                plan.append(CopyStep([list(map(int, job)) for job in step.jobs(machine)],
                                     copy_timeout(step.length, timeout)))
                limit += plan[-1].timeout
            else:
                directory = work_dir / f"step{index}"
                step.program.save(directory)
                plan.append(LaunchStep(str(directory), launch_timeout(step.program, timeout)))
                limit += plan[-1].timeout + LAUNCH_OVERHEAD_CYCLES
            limit += launch_latency
        np.savez(work_dir / "writes.npz", **writes)
        HostSchedule(plan, str(work_dir / "writes.npz")).save(work_dir / "schedule.json")
        return work_dir / "schedule.json", limit

    def run_schedule(self, steps, machine, options):
        launch_latency = (HOST_LAUNCH_LATENCY if options.launch_latency is None
                          else options.launch_latency)
        start = time.perf_counter()
        launches = [step for step in steps if isinstance(step, Launch)]
        work_dir = run_dir(options.work_dir, f"schedule-{launches[0].program.name}")
        work_dir.mkdir(parents=True, exist_ok=True)
        schedule_file, limit = self._host_schedule(steps, machine, work_dir, options.timeout,
                                                   launch_latency)
        built, perf_counters = build_design(RDUSystem, machine, progress=options.progress)
        stats = run_body(built, host.run_schedule, work_dir / "sim", native=self.native,
                         log_progress=options.progress, seed=options.seed,
                         progress=options.progress, schedule_file=str(schedule_file),
                         perf_counters=perf_counters, memory=options.memory,
                         launch_latency=launch_latency, windows=options.windows,
                         position=options.position,
                         timeout=limit + SIMULATION_SLACK_CYCLES)
        seconds = time.perf_counter() - start
        results = []
        for step, data in zip(steps, stats.result["steps"], strict=True):
            done = done_from_json(data)
            if isinstance(done, LaunchDone):
                launch = done.launch
                run = RunResult(
                    outputs=read_outputs(launch, step.program), cycles=launch["cycles"],
                    sim=self.name, seconds=seconds, build_seconds=built.seconds,
                    counters=_launch_counters(launch, stats.cycles_per_second),
                    load_cycles=launch["load_cycles"], program=step.program.name,
                    memory_bytes=beat_bytes(launch["execute_beats"], machine))
                results.append(StepResult("launch", launch["launch_cycles"] +
                                          launch["load_cycles"] + launch["cycles"], run,
                                          launch_cycles=launch["launch_cycles"]))
            elif isinstance(done, CopyDone):
                results.append(StepResult("copy", done.launch_cycles + done.cycles,
                                          agcu_cycles=done.agcu_cycles,
                                          launch_cycles=done.launch_cycles))
            else:
                results.append(StepResult(done.kind))
        return ScheduleResult(results, cycles=stats.result["cycles"], execution="host")

    def run_orchestrated(self, steps, plan, machine, options):
        start = time.perf_counter()
        work_dir = run_dir(options.work_dir, f"orchestrated-{plan.launches[0][1].name}")
        plan_file, limit = write_orchestration(steps, plan, work_dir, options.timeout)
        built, perf_counters = build_design(RDUSystem, machine, progress=options.progress)
        stats = run_body(built, orchestrated.run_orchestrated, work_dir / "sim", native=self.native,
                         log_progress=options.progress, seed=options.seed,
                         progress=options.progress, plan_file=str(plan_file),
                         perf_counters=perf_counters, memory=options.memory,
                         windows=plan.dma_windows(DMA_WINDOWS, machine.beat_bytes)
                         if options.windows else None,
                         position=options.position,
                         timeout=limit + SIMULATION_SLACK_CYCLES)
        result = stats.result
        outputs = {step: read_outputs(launch, program) for (step, program, _), launch in
                   zip(plan.launches, result["launches"], strict=True)}
        counters = {"sim_cycles_per_second": stats.cycles_per_second, "perf": result["perf"],
                    "memory": result["memory"]}
        runs = {execute: counters for _, _, execute in plan.launches}
        return ScheduleResult(
            orchestrated_steps(steps, plan, result["ends"], runs, self.name,
                               time.perf_counter() - start, built.seconds, outputs,
                               result["beats"], machine),
            cycles=result["cycles"], execution="orchestrated",
            host_commands=result["host_commands"])

    def run_generation(self, steps, plan, generation, machine, options):
        start = time.perf_counter()
        work_dir = run_dir(options.work_dir, f"generation-{plan.launches[0][1].name}")
        plan_file, limit = write_orchestration(steps, plan, work_dir, options.timeout)
        np.savez(work_dir / "generation.npz", words=generation.words,
                 **{f"table{index}": table for index, (_, table)
                    in enumerate(generation.inputs)})
        GenerationPlan(str(work_dir / "generation.npz"),
                       [address for address, _ in generation.inputs],
                       generation.prompt, generation.count, generation.logits,
                       generation.read_back).save(work_dir / "generation.json")
        built, perf_counters = build_design(RDUSystem, machine, progress=options.progress)
        stats = run_body(built, orchestrated.run_generation, work_dir / "sim",
                         native=self.native, log_progress=options.progress,
                         seed=options.seed, progress=options.progress,
                         plan_file=str(plan_file),
                         generation_file=str(work_dir / "generation.json"),
                         perf_counters=perf_counters, memory=options.memory,
                         windows=plan.dma_windows(DMA_WINDOWS, machine.beat_bytes)
                         if options.windows else None,
                         timeout=generation.runs * (limit + SIMULATION_SLACK_CYCLES))
        result, seconds = stats.result, time.perf_counter() - start
        with np.load(result["outputs_file"]) as arrays:
            logits = arrays["logits"]
            regions = [(address, count, arrays[f"read{index}"]) for index, (address, count)
                       in enumerate(generation.read_back)]
        runs = []
        for run, words in zip(result["runs"], logits, strict=True):
            counters = {"sim_cycles_per_second": stats.cycles_per_second,
                        "perf": run["perf"], "memory": result["memory"]}
            steps_run = orchestrated_steps(
                steps, plan, run["ends"], {execute: counters for _, _, execute in plan.launches},
                self.name, seconds, built.seconds, {step: {} for step, _, _ in plan.launches},
                run["beats"], machine)
            runs.append(GenerationRun(run["position"], run["token"],
                                      np.asarray(words, np.uint32).view(np.float32),
                                      run["cycles"], ScheduleResult(
                                          steps_run, cycles=run["cycles"],
                                          execution="orchestrated",
                                          host_commands=run["host_commands"])))
        outcome = generation.result(runs, self.name, seconds, built.seconds,
                                    reader=lambda address, words: _read_back(regions, address,
                                                                             words))
        if outcome.tokens != result["tokens"]:
            raise RunFailure(f"generation: the host body chose tokens {result['tokens']}, "
                             f"the logits it read {outcome.tokens}", "generation")
        return outcome


def _read_back(regions, address, words):
    """``words`` words at ``address`` from the ``regions`` ``[(address, words, array)]``
    a generation read after its last run; ``ValueError`` outside them."""
    for base, count, array in regions:
        if base <= address and address + 4 * words <= base + 4 * count and \
                (address - base) % 4 == 0:
            first = (address - base) // 4
            return array[first:first + words]
    raise ValueError(f"memory at {address:#x} ({words} words) was not read back after the "
                     f"last run: pass read_back=[(address, words)] to run_generation")


@register_backend
class VerilatorBackend(RTLBackend):
    """:class:`hdl.system.RDUSystem` under cocotb + Verilator."""

    name = "verilator"


@register_backend
class NativeBackend(RTLBackend):
    """The same build with the memory side in C++ (:mod:`rdu.sim.native`)."""

    name = "native"
    native = True


@register_backend
class IPBackend(RTLBackend):
    """:class:`hdl.ip.RDUIP` under cocotb, driven over AXI4-Lite on cocotbext-axi's
    models (:func:`rdu.sim.ip_host.run_ip_programs`)."""

    name = "ip"
    orchestrates = False
    schedules = False
    design = RDUIP
    programs_body = staticmethod(ip_host.run_ip_programs)
    toplevel, suffix, where = "rdu_ip", "-ip", "IP top"

    def check_setup(self):
        # optional extras: imported only to tell the user what is missing
        try:
            import cocotbext.axi  # noqa: F401
            import systemrdl  # noqa: F401
        except ImportError:
            raise RunFailure("--sim ip needs the 'ip' extra (systemrdl-compiler, "
                             "cocotbext-axi): pip install -e '.[ip]'", "setup") from None

    def body_options(self, options):
        return {"pause": True, "windows": options.windows, "position": options.position}

    def run_schedule(self, steps, machine, options):
        """A host schedule runs on the ``verilator`` back end's system."""
        return BACKENDS["verilator"].run_schedule(steps, machine, options)

"""A kernel's run checked against its reference: what ``rdu run`` and each point of
``rdu sweep`` measure, fused (:func:`run_kernel`) or as a sequence of programs
(:func:`run_sequence`)."""

import numpy as np

from ..models import reference
from .backend import backend_named
from .launch import hbm_peak_bytes_per_cycle, run_program, run_schedule
from .steps import Launch

__all__ = ["run_kernel", "run_sequence"]


def run_kernel(kernel, program, inputs, sim="model", *, seed=1, **options):
    """Run ``program`` of ``kernel`` (:class:`rdu.frontend.kernels.Kernel`) on ``inputs``
    (``{tensor: uint32 BF16 words}``) and check the result: what ``rdu run`` and each
    point of ``rdu sweep`` measure.

    Returns ``(figures, results, run)``: ``figures`` a dict (``ok``, ``max_abs_err``,
    ``cycles``, ``utilization``, ``hbm_bytes``, ``hbm_peak_share``, ``roofline`` (the
    program's :meth:`rdu.roofline.Roofline.to_json`: ``macs``, ``hbm_bytes``,
    ``bound_cycles``, ``binding``, ``share``...), ...; cycle figures and the share are
    ``None`` on the functional model), ``results`` the outputs as float arrays,
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
        "roofline": result.roofline.to_json(),
        "sim_seconds": round(result.seconds, 3),
    }
    figures.update(backend_named(sim).counter_figures(result))
    return figures, results, result


def run_sequence(kernel, sequence, inputs, sim="model", *, seed=1, timeout=None,
                 progress=False, work_dir=None, **schedule_options):
    """Run the unfused form of ``kernel`` (a :class:`rdu.apps.unfused.Sequence`) on
    ``inputs`` and check it: the :func:`run_kernel` of kernel-by-kernel execution.

    Every stage is a :class:`Launch` of :func:`run_schedule` (``schedule_options`` go
    there). Returns ``(figures, results, steps)``: ``figures`` as :func:`run_kernel`'s
    (``ok``: bit-exact against the stages' arithmetic chained and within the kernel's
    float64 budget; ``cycles``: the whole schedule (:class:`ScheduleResult`: every
    program load and execution, the host's launch latencies or the orchestrator's
    fetch and commands); ``load_cycles``, ``execute_cycles``, ``host_launch_cycles``,
    ``launches``, ``roofline`` (the programs' work summed, against the schedule's
    cycles), ``stages`` (per stage: name, load and execute cycles))."""
    sequence.pack(inputs)
    machine = sequence.programs[0].machine
    steps = run_schedule([Launch(program) for program in sequence.programs], sim,
                         machine=machine, seed=seed, timeout=timeout, progress=progress,
                         work_dir=work_dir, **schedule_options)
    words = sequence.outputs([step.launch.outputs for step in steps])
    exact, _ = sequence.exact(inputs)
    results = {name: np.asarray(value, np.uint32).view(np.float32)
               for name, value in words.items()}
    ok, max_abs_err = reference.check(kernel.graph(sequence.params), inputs, results)
    ok = ok and all(np.array_equal(np.asarray(words[name], np.uint32), value)
                    for name, value in exact.items())
    timed = backend_named(sim).timed
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
        "roofline": steps.roofline.to_json(),
        "stages": [{"name": stage.name, "program": stage.program.name,
                    "load_cycles": load, "execute_cycles": execute, "cycles": step.cycles}
                   for stage, step, load, execute in zip(sequence.stages, steps, loads,
                                                          executes, strict=True)],
    }
    return figures, results, steps

"""The ``model`` back end: the functional model (:mod:`rdu.models.machine`) executes the
bitstreams in numpy, item by item: seconds even for large kernels, no cycle counts."""

import sys
import time

import numpy as np

from hdl.agcu import AGCUOp
from hdl.agcu_engines import DMA_WINDOWS
from hdl.orchestrator import DEFAULT_COMMANDS

from ..dma_windows import copy_windows
from ..models.machine import FunctionalMachine
from ..models.shared import ModelError
from ..schedule import error_message
from ..sim.orchestrated import next_token
from .backend import Backend, register_backend
from .generation import GenerationRun
from .orchestrate import orchestrated_steps
from .results import RunFailure, RunResult, ScheduleResult, StepResult
from .steps import Copy, Write

__all__ = ["ModelBackend"]

WHERE = "functional model"


def _launch(model, program, windows):
    """Run ``program`` on ``model`` (confined to its manifest's memory windows with
    ``windows``): its :class:`RunResult`."""
    start = time.perf_counter()
    outputs, result = model.run_program(program, windows=True if windows else None)
    return RunResult(outputs={name: np.asarray(words, np.uint32)
                              for name, words in outputs.items()},
                     sim=ModelBackend.name, seconds=time.perf_counter() - start,
                     counters=result.counters, program=program.name,
                     memory_bytes=model.execute_traffic)


def _machine(machine, options):
    """A :class:`FunctionalMachine` of ``machine`` at the run's launch position."""
    model = FunctionalMachine(machine)
    model.position = options.position       # checked by rdu.runtime.launch
    return model


def _failure(error, prefix=""):
    return RunFailure(f"{prefix}{error} ({WHERE})", type(error).__name__)


@register_backend
class ModelBackend(Backend):
    """The functional model: outputs and counters, no cycles."""

    name = "model"
    timed = False

    def run_programs(self, programs, machine, options):
        model = _machine(machine, options)
        try:
            return [_launch(model, program, options.windows) for program in programs]
        except ModelError as error:
            raise _failure(error) from None

    def run_schedule(self, steps, machine, options):
        model = _machine(machine, options)
        results = []
        for step in steps:
            try:
                if isinstance(step, Write):
                    model.write(step.address, step.words)
                    results.append(StepResult("write"))
                elif isinstance(step, Copy):
                    jobs = step.jobs(machine)
                    if options.windows:
                        model.dma_windows = copy_windows(jobs, machine.beat_bytes)
                    for agcu, src, dst, length in jobs:
                        done = model.command(agcu, AGCUOp.COPY, src=src, dst=dst,
                                             length=length)
                        if not done.ok:
                            raise RunFailure(f"{done.message()} ({WHERE})", "copy")
                    results.append(StepResult("copy"))
                else:
                    results.append(StepResult("launch", launch=_launch(
                        model, step.program, options.windows)))
            except ModelError as error:
                raise _failure(error) from None
        return ScheduleResult(results, execution="host")

    def run_orchestrated(self, steps, plan, machine, options):
        start = time.perf_counter()
        model = _planned(plan, machine, options)
        run = _run_plan(model, plan, machine)
        outputs = {}
        for step, program, _ in plan.launches:
            outputs[step] = {name: np.asarray(model.read(address, count), np.uint32)
                             for name, (address, count) in program.outputs.items()}
        counters = {index: result.counters for index, result in run.runs.items()}
        return ScheduleResult(orchestrated_steps(steps, plan, None, counters, self.name,
                                                 time.perf_counter() - start,
                                                 outputs=outputs),
                              execution="orchestrated")

    def run_generation(self, steps, plan, generation, machine, options):
        start = time.perf_counter()
        model = _planned(plan, machine, options)
        runs, token = [], generation.prompt[0]
        for position, (address, count) in enumerate(generation.logits):
            try:
                for where, words in generation.writes(token):
                    model.write(where, words)
            except ModelError as error:
                raise _failure(error, "token input: ") from None
            model.position = position
            run = _run_plan(model, plan, machine,
                            f"generation run at position {position}: ")
            words = np.asarray(model.read(address, count), np.uint32)[generation.words]
            counters = {index: result.counters for index, result in run.runs.items()}
            steps_run = orchestrated_steps(steps, plan, None, counters, self.name,
                                           outputs={step: {} for step, _, _ in plan.launches})
            runs.append(GenerationRun(position, int(token), words.view(np.float32),
                                      steps=ScheduleResult(steps_run,
                                                           execution="orchestrated")))
            if options.progress:
                print(f"[generation] run {position + 1} of {len(generation.logits)} "
                      f"(position {position}): token {token} -> {next_token(words)}",
                      file=sys.stderr, flush=True)
            token = generation.next_input(position, next_token(words))
        return generation.result(runs, self.name, time.perf_counter() - start,
                                 reader=model.read)


def _planned(plan, machine, options):
    """A :class:`FunctionalMachine` with the memory windows of ``plan`` (with
    ``options.windows``) and every image, bitstream and the schedule written."""
    model = _machine(machine, options)
    if options.windows:
        model.dma_windows = plan.dma_windows(DMA_WINDOWS, machine.beat_bytes)
    try:
        for address, words in plan.writes:
            model.write(address, words)
    except ModelError as error:
        raise RunFailure(f"orchestrated schedule: {error} ({WHERE})", "schedule") from None
    return model


def _run_plan(model, plan, machine, prefix=""):
    """Run the schedule of ``plan`` once on ``model``: its
    :class:`rdu.models.machine.ScheduleRun`; an error status raises :class:`RunFailure`
    (``prefix`` starts its message)."""
    run = model.run_schedule(plan.address, 4 * plan.words.size)
    if run.error:
        message = error_message(run.commands, *run.error, agcus=machine.agcus,
                                capacity=DEFAULT_COMMANDS, length=4 * plan.words.size)
        detail = f": {run.detail}" if run.detail else ""
        raise RunFailure(f"{prefix}{message} ({WHERE}{detail})", "schedule")
    return run

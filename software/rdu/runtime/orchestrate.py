"""An orchestrated schedule: steps -> the orchestrator's commands, where they and every
image go in memory (:func:`orchestrate`), the plan file of a host body
(:func:`write_orchestration`) and the step results from the commands' ends
(:func:`orchestrated_steps`)."""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hdl.orchestrator import COMMAND_BYTES, ScheduleOp

from ..dma_windows import merge_regions
from ..schedule import Command, encode, mask_of
from ..sim.protocol import MemoryImage, OrchestrationPlan, PlannedLaunch
from .results import RunFailure, RunResult, StepResult, beat_bytes
from .steps import Copy, Launch, Write, check_machine
from .watchdog import copy_timeout, launch_timeout

__all__ = ["Orchestration", "orchestrate", "orchestrated_steps", "write_orchestration",
           "orchestration_files"]


@dataclass
class Orchestration:
    """An orchestrated schedule: its commands and words, where they go, what to write
    first, and which commands belong to which step."""
    commands: list
    words: object
    address: int
    writes: list                # [(address, uint32 words)]
    step_commands: list         # per step: its command indices
    launches: list              # [(step index, program, EXECUTE command index)]

    def dma_windows(self, count, beat, address=None):
        """At most ``count`` memory windows (:func:`rdu.dma_windows.merge_regions`) for
        the whole schedule: its words and every ``PROGRAM_LOAD`` read, each launch's
        inputs and outputs (:meth:`rdu.program.Program.dma_regions`; its bitstream is read
        where the schedule placed it), each ``COPY``'s source
        read and destination written. The host sets them before ``orch.start``: a
        command damaged to leave them (a length of megabytes, an address elsewhere)
        ends with ``WINDOW`` instead of reading or writing another program's memory.
        ``address``: where the schedule's words are, if not at :attr:`address`."""
        regions = [(self.address if address is None else address, 4 * len(self.words),
                    1, 0)]
        for command in self.commands:
            if command.op in (ScheduleOp.PROGRAM_LOAD, ScheduleOp.ARGUMENT_LOAD):
                regions.append((command.src, command.length, 1, 0))
            elif command.op == ScheduleOp.COPY:
                regions += [(command.src, command.length, 1, 0),
                            (command.dst, command.length, 0, 1)]
        for _, program, _ in self.launches:     # its bitstream: the PROGRAM_LOAD's src
            regions += program.dma_regions(bitstream=False)
        return merge_regions(regions, count, beat)


def _spans_overlap(a, b):
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def orchestrate(steps, machine):
    """Steps -> :class:`Orchestration` (commands, placement, checks)."""
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
            again = program.meta.get("written_again", ())
            for name, (address, count) in program.outputs.items():
                outputs.append((index, f"output {name!r} of {program.name!r}", int(address),
                                4 * int(count), name in again))
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
        for step_o, what_o, address_o, size_o, _ in outputs:
            if step_o < step_i and _spans_overlap((address_i, size_i), (address_o, size_o)):
                raise RunFailure(f"orchestrated schedule: {what_i} (step {step_i}) at "
                                 f"{address_i:#x} overlaps {what_o} (step {step_o}), which "
                                 f"is stored first; move one (rdu.relocate)", "schedule")
    # an output its program declares ``written_again`` (meta) may be written whole again
    # by a later step (the norm of a layer's input completing the identity rows written
    # before it): the end reads the later step's words there
    for i, (step_i, what_i, address_i, size_i, again) in enumerate(outputs):
        for step_j, what_j, address_j, size_j, _ in outputs[i + 1:]:
            if step_j != step_i and not (again and (address_i, size_i) ==
                                         (address_j, size_j)) and \
                    _spans_overlap((address_i, size_i), (address_j, size_j)):
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
        [(address, size) for _, _, address, size, _ in outputs]
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
    return Orchestration(commands, words, address, writes, step_commands, launches)


def orchestrated_steps(steps, plan, ends, runs, sim, seconds=0.0, build_seconds=0.0,
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
                traffic = beat_bytes({region: {kind: count - before[region][kind]
                                               for kind, count in counts.items()}
                                      for region, counts in after.items()}, machine)
            run = RunResult(outputs=outputs[index], cycles=run_cycles, sim=sim,
                            seconds=seconds, build_seconds=build_seconds,
                            counters=runs.get(execute, {}), load_cycles=load_cycles,
                            program=program.name, memory_bytes=traffic)
            results.append(StepResult("launch", cycles, run, launch_cycles=0))
        else:
            results.append(StepResult("copy" if isinstance(step, Copy) else "command",
                                      cycles, launch_cycles=0))
        if ends:
            previous = ends[last]
    return results


def orchestration_files(steps, work_dir, *, machine=None, timeout=None):
    """Write the files of an orchestrated schedule into ``work_dir`` for the bench body
    :func:`rdu.sim.orchestrated.run_orchestrated` (what :func:`run_schedule` does before its
    Verilator run; for a body run in the Amaranth simulator). Returns ``(plan_file,
    timeout)``: the body's ``plan_file`` and the cycles it allows the schedule."""
    steps = list(steps)
    machine = check_machine([step.program for step in steps if isinstance(step, Launch)],
                            machine)
    return write_orchestration(steps, orchestrate(steps, machine), Path(work_dir),
                               timeout)


def write_orchestration(steps, plan, work_dir, timeout):
    """Write the ``writes.npz`` and ``plan.json`` (:class:`OrchestrationPlan`) of
    ``plan`` into ``work_dir``; return ``(plan_file, timeout)``."""
    work_dir.mkdir(parents=True, exist_ok=True)
    arrays = {f"m{i}": np.asarray(words, np.uint32) for i, (_, words) in
              enumerate(plan.writes)}
    arrays["schedule"] = plan.words
    np.savez(work_dir / "writes.npz", **arrays)
    launches = []
    for step, program, _ in plan.launches:
        directory = work_dir / f"step{step}"
        program.save(directory)
        launches.append(PlannedLaunch(str(directory.resolve()),
                                      {name: [int(a), int(c)]
                                       for name, (a, c) in program.outputs.items()}))
    limit = timeout or sum(launch_timeout(program) for _, program, _ in plan.launches) + \
        sum(copy_timeout(step.length) for step in steps if isinstance(step, Copy))
    plan_file = work_dir / "plan.json"
    OrchestrationPlan(str((work_dir / "writes.npz").resolve()), plan.address,
                      [MemoryImage(int(address), f"m{i}")
                       for i, (address, _) in enumerate(plan.writes)],
                      launches, limit).save(plan_file)
    return plan_file.resolve(), limit

"""The host bodies of an orchestrated schedule (``docs/orchestrator.md``): the host
writes the memory, pulses ``orch.start`` and only watches until the end.

:func:`run_orchestrated` runs the schedule once; :func:`run_generation` runs it once per
token on the same machine and memory (``docs/orchestrator.md``, **Generation: one
schedule per token**): between runs the host writes the next token's input, sets the
launch position, and reads the logits. Both start and watch a run with
:func:`start_and_watch`. Every failure is a :class:`rdu.sim.host.RunError` whose
message is one line.
"""

from pathlib import Path

import numpy as np

from hdl.orchestrator import DEFAULT_COMMANDS

from ..program import Program
from ..schedule import decode, error_message
from ..units.agcu import check_position
from .host import INLINE_OUTPUT_WORDS, HostDriver, RunError, unit_errors
from .limits import hardware_watchdog_cycles
from .protocol import GenerationPlan, OrchestrationPlan

__all__ = ["run_orchestrated", "run_generation", "start_and_watch", "load_plan",
           "next_token"]


def next_token(words):
    """The greedy choice of the logits ``words`` (FP32 bit patterns): the index of the
    largest value, the lowest such index on ties (``numpy.argmax``; a NaN wins, at its
    first index)."""
    return int(np.argmax(np.asarray(words, np.uint32).view(np.float32)))


def load_plan(bench, plan_file, *, memory=None, stall="none", perf_counters=None,
                    progress=False, position=0):
    """The :class:`OrchestrationPlan` of ``plan_file``, its programs, a
    :class:`HostDriver` on ``bench`` at ``position`` with every image, bitstream and the
    schedule written (backdoor), the schedule's words and its decoded commands:
    ``(plan, programs, driver, words, commands)``."""
    plan = OrchestrationPlan.load(plan_file)
    programs = [Program.load(launch.dir) for launch in plan.launches]
    driver = HostDriver(bench, programs[0].machine, memory=memory, stall=stall,
                        perf_counters=perf_counters, progress=progress, position=position)
    with np.load(plan.writes) as arrays:
        for image in plan.memory:
            driver.write(image.address, arrays[image.key])
        words = arrays["schedule"]
    return plan, programs, driver, words, decode(words)


async def start_and_watch(driver, plan, words, commands, *, windows=None, progress=False,
                          prefix="", position=None):
    """One run of the schedule written by :func:`load_plan`: the array's watchdog, the
    memory windows (``windows``; ``None``: off) and the launch position (``position``,
    ``RDUSystem.position``; ``None``: as it is) set, one pulse on ``orch.start``; then
    the host only watches ``orch`` until it is no longer busy (no command, no write).
    Each command's end is recorded from ``orch.completed`` and ``orch.cycles``. An error
    status, a schedule still busy after ``plan.timeout`` cycles or a unit's error
    counter raises :class:`RunError` (``prefix`` starts its message).

    Returns ``{"cycles": orch.cycles (start to done), "ends": [orch.cycles at each
    command's end], "beats": [memory beats at each command's end], "host_commands":
    commands and control pulses the host issued while the orchestrator was busy (0),
    "starts": how many times the array started (``host.running`` rose), "perf": the
    counters after the end}``."""
    bench, agcus = driver.bench, range(driver.machine.agcus)
    await bench.cycles(1)                   # no set() after a read() in the same cycle
    bench.set("host.watchdog_cycles", hardware_watchdog_cycles(plan.timeout, plan.watchdog_cycles))
    if position is not None:
        try:
            bench.set("position", check_position(position))
        except ValueError as error:
            raise RunError(str(error)) from None
    await driver.set_windows(windows)
    bench.set("orch.addr", plan.address)
    bench.set("orch.length", 4 * len(words))
    bench.set("orch.start", 1)
    await bench.cycles(1)                   # the edge that samples start
    bench.set("orch.start", 0)
    ends, beats, completed, host_commands, starts, running = [], [], 0, 0, 0, 0
    # every signal the loop reads: it skips, in one call, the cycles in which none changes
    watched = ["orch.completed", "orch.busy", "host.running", "host.start",
               "host.config_clear", *(f"cmd.{k}.valid" for k in agcus)]
    timeout, every = plan.timeout, max(1, plan.timeout // 10)
    elapsed = 0
    while True:
        now = await bench.read("orch.completed")
        if now != completed:
            cycles = await bench.read("orch.cycles")
            ends.extend([cycles] * (now - completed))
            beats.extend([driver.memory_beats()] * (now - completed))
            completed = now
        busy = await bench.read("orch.busy")
        now_running = await bench.read("host.running")
        starts += now_running and not running          # the array started (by orch)
        running = now_running
        # what the host drives while the orchestrator runs: nothing (checked, not assumed)
        for k in agcus:
            host_commands += await bench.read(f"cmd.{k}.valid")
        host_commands += await bench.read("host.start") + await bench.read("host.config_clear")
        if not busy:
            break
        if progress and elapsed and elapsed % every == 0:
            print(f"[run_program schedule] {prefix}{elapsed} cycles: command "
                  f"{await bench.read('orch.index')}", flush=True)
        if elapsed < timeout:
            limit = timeout - elapsed
            elapsed += await bench.advance_until_change(
                watched, min(limit, every - elapsed % every) if progress else limit)
            continue
        await bench.cycles(1)
        index = await bench.read("orch.index")
        raise RunError(f"{prefix}schedule: orchestrator still busy after {plan.timeout} "
                       f"cycles (cycle {bench.cycle}); command {index}"
                       + (f" ({commands[index].describe()})" if index < len(commands) else ""))
    if await bench.read("orch.error"):
        status = [await bench.read(f"orch.error_{name}")
                  for name in ("index", "source", "code", "unit")]
        detail = await driver._error_detail()
        raise RunError(prefix + error_message(commands, *status, agcus=driver.machine.agcus,
                                              capacity=plan.capacity or DEFAULT_COMMANDS,
                                              length=4 * len(words)) + detail)
    if not await bench.read("orch.done"):
        raise RunError(f"{prefix}schedule: the orchestrator ended with neither done nor "
                       f"error")
    perf = await driver.read_counters()
    errors = unit_errors(perf)
    if errors:
        raise RunError(f"{prefix}schedule: {errors[0]}")
    return {"cycles": await bench.read("orch.cycles"), "ends": ends, "beats": beats,
            "host_commands": host_commands, "starts": starts, "perf": perf}


def _memory(driver):
    return {"memory": {region.name: dict(region.stats) for region in driver.mem.regions},
            "memory_errors": [str(error) for error in driver.mem.errors]}


async def run_orchestrated(bench, plan_file, *, memory=None, stall="none", perf_counters=None,
                           inline_output_words=INLINE_OUTPUT_WORDS, progress=False,
                           windows=None, position=0):
    """Run an orchestrated schedule (``plan_file``, written by
    :func:`rdu.runtime.run_schedule` with ``execution="orchestrated"``) once: every
    image, bitstream and the schedule's words written into memory (backdoor,
    :func:`load_plan`), then :func:`start_and_watch`; after the end every launch's
    outputs are read from memory. An error status raises :class:`RunError` with
    :func:`rdu.schedule.error_message`.

    Returns :func:`start_and_watch`'s figures with ``"launches": [{"program",
    "outputs", "outputs_file"}], "memory", "memory_errors"``."""
    plan, programs, driver, words, commands = load_plan(
        bench, plan_file, memory=memory, stall=stall, perf_counters=perf_counters,
        progress=progress, position=position)
    run = await start_and_watch(driver, plan, words, commands, windows=windows,
                                progress=progress)
    results = []
    for launch, program in zip(plan.launches, programs, strict=True):
        outputs = {out: driver.read(address, count)
                   for out, (address, count) in launch.outputs.items()}
        outputs_file = Path(launch.dir) / "outputs.npz"
        np.savez(outputs_file, **outputs)
        total = sum(array.size for array in outputs.values())
        results.append({"program": program.name, "outputs_file": str(outputs_file),
                        "outputs": ({out: array.tolist() for out, array in outputs.items()}
                                    if total <= inline_output_words else None)})
    return {**run, "launches": results, **_memory(driver)}


async def run_generation(bench, plan_file, generation_file, *, memory=None, stall="none",
                         perf_counters=None, progress=False, windows=None):
    """Run the orchestrated schedule of ``plan_file`` once per token
    (``generation_file``: a :class:`GenerationPlan`) on one machine and memory: every
    image, bitstream and the schedule written once (:func:`load_plan`); then per run
    ``r``: the input token's row of the table written at the token address, the launch
    position set to ``r`` (``RDUSystem.position``, as ``HostDriver(position=)``),
    :func:`start_and_watch`, the logits words read, the next token chosen
    (:func:`next_token`). Nothing else is written between runs. After the last run the
    ``read_back`` regions are read.

    The logits (``"logits"``, runs x V uint32) and the regions read back (``"read0"``,
    ...) go to ``outputs.npz`` beside ``generation_file``. Returns ``{"runs": [per run:
    position, token (its input), and :func:`start_and_watch`'s figures], "tokens": the
    generated ids, "outputs_file", "memory", "memory_errors"}``."""
    spec = GenerationPlan.load(generation_file)
    plan, _, driver, words, commands = load_plan(
        bench, plan_file, memory=memory, stall=stall, perf_counters=perf_counters,
        progress=progress)
    with np.load(spec.arrays) as arrays:
        tables = [arrays[f"table{index}"] for index in range(len(spec.token_addresses))]
        indices = arrays["words"]
    runs, logits, tokens = [], [], []
    token = spec.prompt[0]
    for position, (address, count) in enumerate(spec.logits):
        for where, table in zip(spec.token_addresses, tables, strict=True):
            driver.write(where, table[token])
        run = await start_and_watch(driver, plan, words, commands, windows=windows,
                                    progress=progress, position=position,
                                    prefix=f"generation run at position {position}: ")
        runs.append({"position": position, "token": int(token), **run})
        logits.append(driver.read(address, count)[indices])
        chosen = next_token(logits[-1])
        if progress:
            print(f"[generation] run {position + 1} of {len(spec.logits)} (position "
                  f"{position}): token {token} -> {chosen}, {run.get('cycles')} cycles",
                  flush=True)
        if position + 1 >= len(spec.prompt):
            tokens.append(chosen)
        token = spec.prompt[position + 1] if position + 1 < len(spec.prompt) else chosen
    outputs_file = Path(generation_file).with_name("outputs.npz")
    np.savez(outputs_file, logits=np.asarray(logits, np.uint32),
             **{f"read{i}": driver.read(address, count)
                for i, (address, count) in enumerate(spec.read_back)})
    return {"runs": runs, "tokens": tokens, "outputs_file": str(outputs_file),
            **_memory(driver)}

"""Schedule fuzzing: damaged orchestrator schedules (``docs/orchestrator.md``) run on the
functional model (:meth:`rdu.models.machine.FunctionalMachine.run_schedule`) and on the
RTL (:class:`hdl.system.RDUSystem`'s orchestrator, many cases in one simulation),
outcomes compared with the rule of :mod:`tb.suites.fuzz`: every case ends in an error
status (the orchestrator's ``ERROR.SOURCE``: loader, AGCU, unit, request, stuck), a
watchdog stop, or the model's outputs.

The undamaged schedule (:func:`base_schedule`): on the 2x2 machine, two GEMMs
(4x4x8, 5x7x9) with a ``COPY`` of the first one's C to DDR between them
(``PROGRAM_LOAD``, ``EXECUTE``, ``COPY``, ``WAIT``, ``PROGRAM_LOAD``, ``EXECUTE``,
``END``). :func:`mutate_schedule` damages its words: a command's field changed (opcode,
argument, address, length), bits flipped, commands dropped, repeated, swapped or an
early ``END``, the words truncated, the length register wrong. The damaged words go at
:data:`SCHEDULE_ADDRESS`, the rest of memory as the undamaged run writes it.
"""

import random
from dataclasses import dataclass

import numpy as np
from rdu.dma_windows import port_value
from rdu.models.machine import FunctionalMachine
from rdu.relocate import relocate_image, relocate_output
from rdu.runtime.orchestrate import orchestrate
from rdu.runtime.steps import Copy, Launch
from rdu.sim.host import HostDriver

from hdl.agcu_engines import DMA_WINDOWS
from hdl.orchestrator import COMMAND_BYTES, DEFAULT_COMMANDS
from hdl.sequencer import ErrorSource

from .fuzz import SMALL_MACHINE, TARGETS

__all__ = ["SCHEDULE_ADDRESS", "DDR", "ScheduleCase", "base_schedule", "mutate_schedule",
           "schedule_cases", "model_schedule_outcome", "run_schedule_cases",
           "run_schedules_rtl", "schedule_verdict", "SOURCE_OUTCOMES", "schedule_windows"]

#: Where the damaged schedule's words go (HBM, apart from the images and bitstreams).
SCHEDULE_ADDRESS = 0x0100_0000
DDR = 0x4000_0000
#: The outcome name of each ``ErrorSource`` (the model's ``WATCHDOG`` is its deadlock).
SOURCE_OUTCOMES = {ErrorSource.LOADER: "loader", ErrorSource.AGCU: "agcu_error",
                   ErrorSource.WATCHDOG: "deadlock", ErrorSource.UNIT: "unit_error",
                   ErrorSource.REQUEST: "request", ErrorSource.STUCK: "stuck"}


@dataclass
class ScheduleCase:
    """One damaged schedule: its ``words``, the ``length`` register (bytes), and what the
    damage was (``kind``)."""
    name: str
    words: np.ndarray
    length: int
    kind: str


def base_schedule(seed):
    """``(plan, regions)``: the undamaged :class:`rdu.runtime.orchestrate.Orchestration`
    and the regions ``[(name, address, words)]`` read after a run (each GEMM's C, the
    COPY's destination)."""
    gemm_target = next(target for target in TARGETS if target.machine == SMALL_MACHINE)
    programs = []
    for index, program in enumerate(gemm_target.bases(seed)):
        base = 0x10000 * (index + 1)
        program = relocate_image(program, "a", base)
        program = relocate_image(program, "b", base + 0x4000)
        programs.append(relocate_output(program, "c", base + 0x8000))
    address, count = programs[0].outputs["c"]
    steps = [Launch(programs[0]), Copy(address, DDR, 4 * count), Launch(programs[1])]
    plan = orchestrate(steps, SMALL_MACHINE)
    regions = [(f"c{index}", *program.outputs["c"]) for index, program in
               enumerate(programs)] + [("copy", DDR, count)]
    return plan, [(name, int(address), int(count)) for name, address, count in regions]


def _field_value(rng, old, words):
    return rng.choice([0, 1, 0xFFFF_FFFF, rng.getrandbits(32), (old + 1) & 0xFFFF_FFFF,
                       max(old - 1, 0), (old + 16) & 0xFFFF_FFFF, int(rng.choice(words)),
                       rng.randrange(8), rng.randrange(1 << 12)])


def mutate_schedule(rng, words, agcus):
    """``(words, length, kind)``: a damaged copy of the schedule ``words``."""
    commands = [list(map(int, words[i:i + 4])) for i in range(0, len(words), 4)]
    kind = rng.random()
    if kind < 0.35:
        name = "field"
        for _ in range(rng.randrange(1, 3)):
            command = rng.choice(commands)
            slot = rng.randrange(4)
            if slot == 0 and rng.random() < 0.6:
                if rng.random() < 0.5:
                    command[0] = (command[0] & ~0xFF) | rng.choice([0, 1, 2, 3, 4, 5, 6,
                                                                    rng.randrange(256)])
                else:      # the argument: an AGCU index or mask, in range or not
                    command[0] = (command[0] & 0xFF) | rng.choice(
                        [0, 1, 2, 3, 4, 1 << agcus, rng.randrange(1 << 24)]) << 8
            else:
                command[slot] = _field_value(rng, command[slot], words)
    elif kind < 0.55:
        name = "bits"
        flat = [word for command in commands for word in command]
        for _ in range(rng.randrange(1, 3)):
            flat[rng.randrange(len(flat))] ^= 1 << rng.randrange(32)
        commands = [flat[i:i + 4] for i in range(0, len(flat), 4)]
    elif kind < 0.8:
        name = "commands"
        index = rng.randrange(len(commands))
        action = rng.randrange(4)
        if action == 0 and len(commands) > 1:
            del commands[index]
        elif action == 1:
            commands.insert(index, list(commands[rng.randrange(len(commands))]))
        elif action == 2:
            other = rng.randrange(len(commands))
            commands[index], commands[other] = commands[other], commands[index]
        else:
            commands.insert(index, [0, 0, 0, 0])           # an early END
    else:
        flat = np.asarray([word for command in commands for word in command], np.uint32)
        choice = rng.randrange(3)
        if choice == 0:
            cut = rng.randrange(1, flat.size)
            return flat[:cut], 4 * cut, "truncated"
        if choice == 1:
            return flat, rng.choice([0, 4 * flat.size - rng.randrange(1, 16),
                                     4 * flat.size + rng.randrange(1, 16)]), "length"
        return flat, COMMAND_BYTES * (DEFAULT_COMMANDS + rng.randrange(1, 4)), "too long"
    flat = np.asarray([word for command in commands for word in command], np.uint32)
    return flat, 4 * flat.size, name


def schedule_cases(count, seed, agcus=SMALL_MACHINE.agcus):
    """``(plan, regions, cases)``: the undamaged schedule and ``count`` damaged ones
    (seeded)."""
    plan, regions = base_schedule(seed)
    rng = random.Random(seed)
    cases = []
    for index in range(count):
        words, length, kind = mutate_schedule(rng, plan.words, agcus)
        cases.append(ScheduleCase(f"schedule{index}", words, length, kind))
    return plan, regions, cases


def schedule_windows(plan, machine=SMALL_MACHINE):
    """The memory windows the host confines the schedule campaign to: the undamaged
    schedule's manifest (:meth:`rdu.runtime.orchestrate.Orchestration.dma_windows`), its
    words at :data:`SCHEDULE_ADDRESS`. A damaged command that leaves them (a length of
    megabytes, an address elsewhere) ends with ``WINDOW`` on the model and the RTL."""
    return plan.dma_windows(DMA_WINDOWS, machine.beat_bytes, address=SCHEDULE_ADDRESS)


def model_schedule_outcome(plan, regions, case, machine=SMALL_MACHINE, max_items=200_000,
                           windows=True):
    """``(outcome, detail)`` of ``case`` on a fresh functional model: ``("outputs",
    {region: words})`` or ``(error outcome, (index, source, code, unit))``; ``windows``:
    confined to :func:`schedule_windows` (as :func:`run_schedule_cases` confines the
    RTL)."""
    model = FunctionalMachine(machine, max_items=max_items)
    if windows:
        model.dma_windows = schedule_windows(plan, machine)
    for address, words in plan.writes:
        model.write(address, words)
    model.write(SCHEDULE_ADDRESS, case.words)
    run = model.run_schedule(SCHEDULE_ADDRESS, case.length)
    if run.error:
        index, source, code, unit = run.error
        return SOURCE_OUTCOMES[source], (int(index), int(source), int(code), int(unit))
    return "outputs", {name: np.asarray(model.read(address, count), np.uint32)
                       for name, address, count in regions}


def schedule_verdict(model, result):
    """How an RTL result of :func:`run_schedule_cases` compares with the model's:
    ``"equal"`` (outputs, equal), ``"same status"`` (both the same error status: index,
    source and code), ``"stop"`` (an error status or a watchdog stop, another one),
    ``"DIFFERENT"``, ``"OUTPUTS, MODEL STOPPED"``, ``"OTHER"``."""
    outcome, detail = model
    if result["outcome"] == "outputs":
        if outcome != "outputs":
            return "OUTPUTS, MODEL STOPPED"
        same = all(np.array_equal(np.asarray(result["outputs"][name], np.uint32), words)
                   for name, words in detail.items())
        return "equal" if same else "DIFFERENT"
    if result["outcome"] == "host_watchdog":
        return "stop"
    if "status" not in result:
        return "OTHER"
    if outcome != "outputs" and list(detail[:3]) == list(result["status"][:3]):
        return "same status"
    return "stop"


async def run_schedule_cases(bench, case_file, *, case_timeout=20_000, watchdog_cycles=1500):
    """Bench body: every damaged schedule of ``case_file`` (an ``.npz`` of
    :func:`save_cases`) on one system, each from a clean machine (memory cleared, the
    undamaged run's images and bitstreams written, the case's words at
    :data:`SCHEDULE_ADDRESS`, the windows of the file (if any) and a run budget of half
    ``case_timeout`` for each ``EXECUTE`` set, one ``orch.start``; the system reset after
    it). The wait is bounded: ``case_timeout`` cycles, then ``host_watchdog``. Returns per
    case ``{"outcome", "status": [index, source, code, unit]}`` or ``{"outcome":
    "outputs", "outputs"}``."""
    with np.load(case_file) as arrays:
        data = {key: arrays[key] for key in arrays.files}
    writes = [(int(address), data[f"w{i}"]) for i, address in enumerate(data["addresses"])]
    regions = [(str(name), int(address), int(count)) for name, address, count in
               zip(data["region_names"], data["region_addresses"], data["region_counts"],
                   strict=True)]
    driver = HostDriver(bench, SMALL_MACHINE)
    results = []
    for index, length in enumerate(data["lengths"]):
        driver.mem.clear()
        for address, words in writes:
            driver.write(address, words)
        driver.write(SCHEDULE_ADDRESS, data[f"case{index}"])
        if "windows" in data:
            bench.set("dma_windows", port_value(data["windows"].tolist()))
        bench.set("host.watchdog_cycles", watchdog_cycles)
        bench.set("host.cycle_budget", case_timeout // 2)
        bench.set("orch.addr", SCHEDULE_ADDRESS)
        bench.set("orch.length", int(length))
        bench.set("orch.start", 1)
        await bench.cycles(1)
        bench.set("orch.start", 0)
        elapsed = 0
        while await bench.read("orch.busy") and elapsed < case_timeout:
            elapsed += max(1, await bench.advance_until_change(["orch.busy"],
                                                               case_timeout - elapsed))
        if await bench.read("orch.busy"):
            results.append({"outcome": "host_watchdog",
                            "message": f"orchestrator busy after {case_timeout} cycles"})
        elif await bench.read("orch.error"):
            status = [int(await bench.read(f"orch.error_{name}"))
                      for name in ("index", "source", "code", "unit")]
            results.append({"outcome": SOURCE_OUTCOMES.get(status[1], "other"),
                            "status": status})
            if results[-1]["outcome"] == "deadlock":
                results[-1]["outcome"] = "hw_watchdog"
        else:
            results.append({"outcome": "outputs",
                            "outputs": {name: driver.read(address, count).tolist()
                                        for name, address, count in regions}})
        await driver.reset()
    return results


def save_cases(path, plan, regions, cases, windows=True):
    """Write the cases of :func:`run_schedule_cases` into ``path`` (``.npz``), with
    :func:`schedule_windows` (``windows``)."""
    arrays = {f"w{i}": np.asarray(words, np.uint32) for i, (_, words) in
              enumerate(plan.writes)}
    if windows:
        arrays["windows"] = np.asarray(schedule_windows(plan), np.uint64)
    arrays["addresses"] = np.asarray([address for address, _ in plan.writes], np.uint64)
    arrays.update({f"case{i}": case.words for i, case in enumerate(cases)})
    arrays["lengths"] = np.asarray([case.length for case in cases], np.uint64)
    arrays["region_names"] = np.asarray([name for name, _, _ in regions])
    arrays["region_addresses"] = np.asarray([a for _, a, _ in regions], np.uint64)
    arrays["region_counts"] = np.asarray([c for _, _, c in regions], np.uint64)
    np.savez(path, **arrays)
    return path


def run_schedules_rtl(built, plan, regions, cases, models, work_dir, *, seed, native=True,
                      timeout=20_000):
    """Run ``cases`` in one simulation of ``built`` (:func:`run_schedule_cases`), each
    compared with its model outcome; a case whose outputs differ runs again alone (PMU
    SRAM survives reset: ``"equal on fresh SRAM"``). Returns ``(results, verdicts,
    stats)``."""
    from pathlib import Path

    from rdu.sim.native import run_native
    from rdu.sim.runner import run_verilator
    run = run_native if native else run_verilator
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    case_file = str(save_cases(work_dir / "cases.npz", plan, regions, cases))
    stats = run(built, run_schedule_cases, work_dir / "run", seed=seed, watchdog=10**9,
                case_file=case_file, case_timeout=timeout, timeout=10**9)
    verdicts = []
    for index, (case, model, result) in enumerate(zip(cases, models, stats.result,
                                                      strict=True)):
        found = schedule_verdict(model, result)
        if found == "DIFFERENT":
            alone = str(save_cases(work_dir / f"alone{index}.npz", plan, regions, [case]))
            again = run(built, run_schedule_cases, work_dir / f"alone{index}", seed=seed,
                        watchdog=10**9, case_file=alone, case_timeout=timeout,
                        timeout=10**9).result[0]
            if schedule_verdict(model, again) == "equal":
                found = "equal on fresh SRAM"
        verdicts.append(found)
    return stats.result, verdicts, stats

"""Recovery without reset: a failed launch, the host driver's abort, then an undamaged
program that must run bit-exact (``docs/system.md``, **Abort**).

A *trial* is a bad case followed by a good one on the same machine, with no reset in
between (memory and PMU SRAM kept). The bad cases (``KINDS``):

* ``stall``: an undamaged program launched without one of its AGCUs (its input never
  comes, or its output is never taken): the array's watchdog stops it and the driver
  aborts the AGCUs still waiting;
* ``damaged``: a bitstream damaged as the fuzzing campaign damages them
  (:func:`tb.suites.fuzz.damaged_programs`): any outcome (a loader refusal, an error
  status, a watchdog stop or outputs);
* ``fault``: an undamaged program whose ``k``-th read burst is answered ``DECERR``
  (cocotb only: the native runner injects no faults): the AGCU ends with an error, the
  others may wait forever;
* ``window``: an undamaged program confined to the memory windows of its manifest
  minus one of its regions (an input, its output or its bitstream), which then lies
  in no window: its first burst there must be refused (``WINDOW``, the address inside
  the region) and an excluded output keep the sentinel written over it. Not on the
  functional model (it has no windows). With ``window`` trials every good program runs
  confined to its own manifest's windows (none may be refused).

The good case is one of the target's undamaged programs; its outputs must equal the
functional model's on a fresh machine. :func:`model_trials` runs the same trials on one
persistent :class:`rdu.models.machine.FunctionalMachine` (its ``abort``);
:func:`run_recovery` is the RTL bench body (``benchmarks/abort.py``).
"""

import random
from dataclasses import dataclass, replace

import numpy as np
from rdu.bitstream import BitstreamError
from rdu.models.machine import FunctionalMachine
from rdu.models.shared import LoaderError, ModelError
from rdu.program import Program
from rdu.sim.host import HostDriver, RunError
from rdu.sim.memory_system import FaultInjector

from hdl.agcu_engines import DMA_WINDOWS

from .fuzz import model_outcome

__all__ = ["KINDS", "Trial", "recovery_trials", "model_trials", "run_recovery"]

KINDS = ("stall", "damaged", "fault", "window")
#: Written over an excluded output region before a ``window`` trial's bad launch.
SENTINEL = 0x5A5A_A5A5


@dataclass(frozen=True)
class Trial:
    """A bad ``kind`` case (``bad``; ``fault``: its fault specification or ``None``)
    then ``good``, whose fresh-model outputs are ``expected``."""
    kind: str
    bad: Program
    good: Program
    expected: dict
    fault: dict = None
    windows: list = None        # the bad launch's windows (``window``), else None
    excluded: tuple = None      # (base, size, written) of the region left out


def recovery_trials(target, count, seed, kinds=("stall", "damaged")):
    """``count`` :class:`Trial` s of ``target`` (a :class:`tb.suites.fuzz.FuzzTarget`),
    kinds in turn, the good program the next base in turn."""
    for kind in kinds:
        if kind not in KINDS:
            raise ValueError(f"trial kind must be one of {', '.join(KINDS)}, not {kind!r}")
    rng = random.Random(seed)
    bases = target.bases(seed)
    expected = []
    for base in bases:
        outcome, outputs = model_outcome(base)
        if outcome != "outputs":
            raise ValueError(f"{base.name}: the undamaged program does not run on the "
                             f"model ({outcome}: {outputs})")
        expected.append(outputs)
    damaged = iter(target.programs(count, seed))
    trials = []
    for index in range(count):
        kind = kinds[index % len(kinds)]
        base = bases[rng.randrange(len(bases))]
        fault = None
        if kind == "stall":
            execute = list(base.execute)
            execute.remove(rng.choice(execute))
            if not execute:
                raise ValueError(f"{base.name} executes one AGCU: nothing to withhold")
            bad = replace(base, name=f"stall{index}", execute=execute)
        elif kind == "damaged":
            bad = next(damaged)
        elif kind == "window":
            bad = replace(base, name=f"window{index}")
        else:
            bad = replace(base, name=f"fault{index}")
            fault = {"read": [rng.randrange(4)], "resp": "DECERR"}
        windows = excluded = None
        if kind == "window":
            regions = bad.dma_windows(64)
            excluded = regions.pop(rng.randrange(len(regions)))
            windows = regions
            excluded = (excluded[0], excluded[1], excluded[3])
        good_index = (index + 1) % len(bases)
        trials.append(Trial(kind, bad, replace(bases[good_index], name=f"good{index}"),
                            expected[good_index], fault, windows, excluded))
    return trials


def model_trials(trials):
    """Each trial on one persistent functional machine: the bad case (its error
    caught), :meth:`FunctionalMachine.abort` after a stop (a deadlock, an error status,
    the item limit: what leaves the hardware unsettled; not after a loader refusal),
    the good case. Returns ``[{"kind", "bad" (the error's class or ``"outputs"``),
    "aborted" (AGCUs), "equal"}]``."""
    machine = FunctionalMachine(trials[0].good.machine, max_items=200_000)
    results = []
    for trial in trials:
        if trial.kind == "window":
            continue                    # the model has no memory windows
        aborted = []
        try:
            machine.run_program(trial.bad)
            bad = "outputs"
        except (LoaderError, BitstreamError) as error:
            bad = type(error).__name__
        except ModelError as error:
            bad = type(error).__name__
            aborted = [result.agcu for result in machine.abort()]
        try:
            outputs, _ = machine.run_program(trial.good)
            equal = all(np.array_equal(np.asarray(outputs[name], np.uint32),
                                       trial.expected[name]) for name in trial.good.outputs)
        except (ModelError, BitstreamError) as error:
            equal, bad = False, f"{bad}; good case: {error}"
        results.append({"kind": trial.kind, "bad": bad, "aborted": aborted, "equal": equal})
    return results


async def run_recovery(bench, program_dirs, *, faults=None, timeout=30_000,
                       watchdog_cycles=1500, perf_counters=None, load_timeout=20_000,
                       windows=None, excluded=None):
    """Bench body: the saved programs in order on one system with no reset and no
    memory clearing (bad, good, bad, good...); each launch's :class:`RunError` caught
    (the driver aborts after a failed launch and says so). A launch that ends cleanly
    but leaves work in the array (:meth:`HostDriver.unsettled`: ``"left"``) is aborted
    too (``"aborted_after"``; the driver would do it before its next launch,
    ``"aborted_before"``). A reset happens only when the machine is still unsettled
    after the abort: it is counted (``"reset"``). ``faults``: one specification (or
    ``None``) per program. Returns one ``{"outcome": "outputs", "outputs", "cycles"}``
    or ``{"outcome": "error", "message"}`` per program, each with ``"reset"``.
    ``windows``: per program ``None`` (off), ``"manifest"`` or ``[(base, size, read,
    write)]``; ``excluded``: per program ``None`` or ``(base, size, written)``: a
    written region is filled with :data:`SENTINEL` before the launch and read back
    after (``"sentinel_kept"``)."""
    programs = [Program.load(directory) for directory in program_dirs]
    driver = HostDriver(bench, programs[0].machine, perf_counters=perf_counters)
    results = []
    for index, program in enumerate(programs):
        spec = faults[index] if faults else None
        driver.mem.faults = FaultInjector(spec) if spec else None
        confine = windows[index] if windows else None
        confine = program.dma_windows(DMA_WINDOWS) if confine == "manifest" else confine
        region = excluded[index] if excluded else None
        if region and region[2]:
            driver.write(region[0], np.full(region[1] // 4, SENTINEL, np.uint32))
        try:
            launch = await driver.run(program, timeout=timeout, load_timeout=load_timeout,
                                      watchdog_cycles=watchdog_cycles, windows=confine)
            result = {"outcome": "outputs", "outputs": launch["outputs"],
                      "cycles": launch["cycles"]}
        except RunError as error:
            result = {"outcome": "error", "message": str(error)}
            if "aborted: " not in str(error):
                # settled, but units a damaged bitstream configured keep those words
                # (config_clear leaves them): the flush clears them
                result["aborted_after"] = await driver.abort()
        result["aborted_before"] = driver.recovered
        if region and region[2]:
            kept = driver.read(region[0], region[1] // 4)
            result["sentinel_kept"] = bool(np.all(kept == SENTINEL))
        driver.mem.faults = None
        left = await driver.unsettled()
        result["reset"] = False
        if left:                # a launch that "ended" with work left in the array
            result["left"] = left
            try:
                result["aborted_after"] = await driver.abort()
            except RunError as error:
                result["aborted_after"] = str(error)
            if await driver.unsettled():
                result["reset"] = True
                await driver.reset()
        results.append(result)
    return results

"""Recovery without reset: failed launches (stalls, damaged bitstreams, injected AXI
errors), the host driver's abort, then an undamaged program that must run bit-exact;
on the functional model and on the RTL, with no reset between the trials.

Run: ``.venv/bin/python -m benchmarks.abort [--target NAME] [--trials N] [--rtl N]
[--kinds stall,damaged[,fault]] [--sim native|verilator] [--seed S]``.

* ``--target``: a fuzzing target of ``tb.suites.fuzz.TARGETS`` (default ``gemm``, the
  2x2 machine; ``softmax``, ``mlp``, ``attention_decode``... on the 4x4 one);
* ``--trials N`` on the model (default 100), ``--rtl N`` the first N on the RTL in one
  simulation (default 100; 0: model only);
* ``--kinds``: the bad cases, in turn (``tb.suites.abort.KINDS``; ``fault`` needs
  ``--sim verilator``: the native runner injects no faults).

Prints per kind: trials, how the bad case ended, how many were aborted, the good
programs equal to the model's outputs, and the resets needed (a machine still unsettled
after the abort). Exit status 1 unless every good program is bit-exact with no reset.
"""

import argparse
import re
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np
from amaranth.hdl import UnusedElaboratable

from benchmarks.fuzz import print_table
from hdl.system import RDUSystem
from tb.suites.abort import KINDS, model_trials, recovery_trials, run_recovery
from tb.suites.fuzz import TARGETS, rtl_outcome

COLUMNS = ("tier", "kind", "trials", "bad: outputs", "bad: error status", "bad: watchdog stop",
           "bad: other", "aborted", "good bit-exact", "resets needed")


def _bad_class(outcome):
    if outcome == "outputs":
        return "bad: outputs"
    if outcome in ("loader", "unit_error", "agcu_error", "LoaderError", "BitstreamError",
                   "UnitError", "CommandError"):
        return "bad: error status"
    if outcome in ("hw_watchdog", "host_watchdog", "ModelDeadlock"):
        return "bad: watchdog stop"
    return "bad: other"


def model_rows(trials):
    results = model_trials(trials)
    rows = []
    for kind in sorted({result["kind"] for result in results}):
        chosen = [result for result in results if result["kind"] == kind]
        counts = Counter(_bad_class(result["bad"]) for result in chosen)
        rows.append(("model", kind, len(chosen), *(counts[column] for column in COLUMNS[3:7]),
                     sum(bool(result["aborted"]) for result in chosen),
                     sum(result["equal"] for result in chosen), 0))
    return rows, all(result["equal"] for result in results)


def rtl_rows(trials, args, work_dir):
    """The trials on the RTL, in one simulation: ``(rows, all good, stats)``."""
    from rdu.sim.native import run_native
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build
    machine = trials[0].good.machine
    params = machine.system_params()
    built = build(RDUSystem, progress=True, **params)
    with warnings.catch_warnings():             # a system built only for its names
        warnings.simplefilter("ignore", UnusedElaboratable)
        names = RDUSystem(**params).perf_counter_names()
    dirs, faults, windows, excluded = [], [], [], []
    confined = any(trial.kind == "window" for trial in trials)
    for index, trial in enumerate(trials):
        dirs.append(str(trial.bad.save(work_dir / f"bad{index}")))
        dirs.append(str(trial.good.save(work_dir / f"good{index}")))
        faults += [trial.fault, None]
        windows += [trial.windows, "manifest" if confined else None]
        excluded += [trial.excluded, None]
    run = run_native if args.sim == "native" else run_verilator
    options = {"windows": windows, "excluded": excluded}
    if args.sim != "native":
        options["faults"] = faults
    stats = run(built, run_recovery, work_dir / "run", seed=args.seed, watchdog=10**9,
                program_dirs=dirs, perf_counters=names, **options)
    results = stats.result
    per_kind = {}
    problems = []
    for index, trial in enumerate(trials):
        bad, good = results[2 * index], results[2 * index + 1]
        outcome = "outputs" if bad["outcome"] == "outputs" else rtl_outcome(bad["message"])
        equal = good["outcome"] == "outputs" and all(
            np.array_equal(np.asarray(good["outputs"][name], np.uint32), trial.expected[name])
            for name in trial.good.outputs)
        refused = True
        if trial.kind == "window":
            refused = _refused_inside(bad, trial.excluded) and bad.get("sentinel_kept", True)
            counts_refused = per_kind.setdefault("window refusals", Counter())
            counts_refused["refused"] += refused
        if not equal or bad["reset"] or good["reset"] or not refused:
            problems.append(f"trial {index} ({trial.kind}): bad {outcome} "
                            f"{bad.get('message', '')[:300]}; good "
                            f"{good.get('message', 'outputs') if not equal else 'equal'}"
                            f"; resets {bad['reset']}/{good['reset']} {bad.get('left', '')} "
                            f"{good.get('left', '')}")
        counts = per_kind.setdefault(trial.kind, Counter())
        counts["trials"] += 1
        counts[_bad_class(outcome)] += 1
        counts["aborted"] += ("aborted: " in bad.get("message", "") or
                              "aborted_after" in bad or bool(good["aborted_before"]))
        counts["good bit-exact"] += equal
        counts["resets needed"] += bad["reset"] + good["reset"]
    refusals = per_kind.pop("window refusals", Counter())
    rows = [("RTL", kind, counts["trials"], *(counts[column] for column in COLUMNS[3:]))
            for kind, counts in sorted(per_kind.items())]
    if "window" in per_kind:
        print(f"[abort] window trials: {refusals['refused']} of {per_kind['window']['trials']} "
              f"refused inside the excluded region, sentinel kept", file=sys.stderr)
        rows.append(("RTL", "window: refused in the excluded region",
                     per_kind["window"]["trials"], "", "", "", "", "", refusals["refused"], ""))
    return rows, problems, stats


def _refused_inside(result, excluded):
    """The bad launch ended with an AGCU's ``WINDOW`` at an address inside the
    excluded region."""
    found = re.search(r"ended \w+ with WINDOW \(code \d+\) at (0x[0-9a-f]+)|"
                      r"ended with WINDOW \(bitstream at 0x[0-9a-f]+\) at (0x[0-9a-f]+)",
                      result.get("message", ""))
    if not found:
        return False
    address = int(found.group(1) or found.group(2), 16)
    return excluded[0] <= address < excluded[0] + excluded[1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="gemm",
                        help=f"one of {', '.join(target.name for target in TARGETS)}")
    parser.add_argument("--trials", type=int, default=100, help="trials on the model")
    parser.add_argument("--rtl", type=int, default=100, help="of them on the RTL")
    parser.add_argument("--kinds", default="stall,damaged",
                        help=f"bad cases in turn, of {', '.join(KINDS)}")
    parser.add_argument("--sim", choices=("native", "verilator"), default="native")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    targets = [target for target in TARGETS if target.name == args.target]
    if not targets:
        parser.error(f"--target {args.target}: no such target")
    kinds = tuple(args.kinds.split(","))
    if any(kind not in KINDS for kind in kinds):
        parser.error(f"--kinds {args.kinds}: each of {', '.join(KINDS)}")
    if "fault" in kinds and args.sim == "native" and args.rtl:
        parser.error("--kinds fault: the native runner injects no faults (--sim verilator)")
    if args.trials < 1:
        parser.error(f"--trials {args.trials}: at least 1")
    trials = recovery_trials(targets[0], args.trials, args.seed, kinds)
    start = time.perf_counter()
    rows, model_ok = model_rows(trials)
    print(f"[abort] model: {len(trials)} trials, {time.perf_counter() - start:.1f} s",
          file=sys.stderr, flush=True)
    problems = [] if model_ok else ["model: a good program differs after an abort"]
    cycles = None
    if args.rtl:
        with tempfile.TemporaryDirectory() as temporary:
            start = time.perf_counter()
            rtl, found, stats = rtl_rows(trials[:args.rtl], args, Path(args.dir or temporary))
            rows += rtl
            problems += found
            cycles = stats.cycles
            print(f"[abort] RTL ({args.sim}): {min(args.rtl, len(trials))} trials, "
                  f"{cycles} cycles, {time.perf_counter() - start:.0f} s", file=sys.stderr,
                  flush=True)
    print_table(f"Recovery without reset: {args.target}, seed {args.seed}"
                + (f", RTL {args.sim} {cycles} cycles" if cycles else ""), COLUMNS, rows)
    print(f"\nproblems: {len(problems)}")
    for text in problems:
        print(f"  {text}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

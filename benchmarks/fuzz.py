"""Fuzzing campaigns: damaged bitstreams of every kernel family, damaged orchestrator
schedules, random AXI4-Lite traffic on the IP's registers; on the functional model and
on the RTL, outcomes tabulated.

Run: ``.venv/bin/python -m benchmarks.fuzz [--family NAME|all] [--cases N] [--rtl N]
[--seed S] [--axi N] [--sim native|verilator]``.

* ``--family``: ``all`` (default), a registered kernel family (``matmul``, ``rows``,
  ``mlp``, ``attention``: its targets in ``tb.suites.fuzz.TARGETS``), one target
  (``gemm``, ``linear_relu``, ``softmax``, ``mlp``, ``attention_decode``,
  ``attention_prefill``), ``schedule`` (damaged orchestrator schedules,
  ``tb.suites.fuzz_schedule``) or ``none``.
* ``--cases N``: damaged cases per target on the model (default 100); ``--rtl N``: the
  first N of them on the RTL, all in one simulation per target (default 10; 0: model
  only); ``--sim``: the native runner (default, faster) or cocotb + Verilator.
* ``--axi N``: N random AXI4-Lite accesses on the IP top (``tb.suites.fuzz_axi``; 0:
  none, the default).
* ``--recover reset|abort``: between RTL kernel cases a system reset (default) or the
  host driver's abort only (``resets``: cases that still needed a reset).

Prints, per target, the model's outcome classes and the RTL's: ``error status`` (the
loader, a unit, an AGCU, or for schedules the orchestrator's request checks),
``watchdog stop`` (the array's watchdog; on the model, its deadlock or item limit),
``outputs`` (on the RTL: equal to the model's), ``hangs`` (the host's bounded wait
expired: the RTL neither ended nor stopped) and ``disagreements`` (RTL outputs
different from the model's, or where the model has none). Progress goes to stderr.
Exit status 1 on any disagreement or AXI4-Lite problem.
"""

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from rdu.compiler.families import FAMILIES

from hdl.system import RDUSystem
from tb.suites.fuzz import ACCEPTED, CORRESPONDING, model_outcome, run_rtl, select_targets
from tb.suites.fuzz_schedule import (
    model_schedule_outcome,
    run_schedules_rtl,
    schedule_cases,
)

ERROR_STATUS = ("loader", "unit_error", "agcu_error", "request", "stuck")
MODEL_COLUMNS = ("target", "family", "cases", "error status", "watchdog stop",
                 "outputs, as undamaged", "outputs, other", "other", "seconds")
RTL_COLUMNS = ("target", "family", "cases", "error status", "watchdog stop",
               "outputs = model", "hangs", "disagreements", "same class as model",
               "resets", "cycles", "seconds")


def print_table(title, header, rows):
    """A markdown table with a title line, on stdout."""
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(value) for value in row) + " |")
    sys.stdout.flush()


def _progress(text):
    print(f"[fuzz] {text}", file=sys.stderr, flush=True)


def _model_runs(name, cases, run):
    """Each case's model outcome, with progress on long runs."""
    start, outcomes = time.perf_counter(), []
    for index, case in enumerate(cases):
        outcomes.append(run(case))
        if (index + 1) % 100 == 0 and index + 1 < len(cases):
            _progress(f"{name}: model {index + 1}/{len(cases)}, "
                      f"{time.perf_counter() - start:.0f} s")
    return outcomes, time.perf_counter() - start


def _model_row(name, family, models, undamaged, seconds):
    counts = Counter()
    for (outcome, detail), reference in zip(models, undamaged, strict=True):
        if outcome == "outputs":
            same = all(np.array_equal(detail[key], reference[key]) for key in detail)
            counts["outputs, as undamaged" if same else "outputs, other"] += 1
        elif outcome in ERROR_STATUS:
            counts["error status"] += 1
        elif outcome in ("deadlock", "no_end"):
            counts["watchdog stop"] += 1
        else:
            counts["other"] += 1
    return (name, family, len(models), *(counts[column] for column in MODEL_COLUMNS[3:8]),
            f"{seconds:.1f}")


def _rtl_row(name, family, models, results, verdicts, stats, seconds, problems):
    counts = Counter()
    for index, (model, result, verdict) in enumerate(zip(models, results, verdicts,
                                                         strict=False)):
        rtl = result["outcome"]
        if verdict not in ACCEPTED + ("same status",):
            counts["disagreements"] += 1
            problems.append(f"{name} case {index}: {verdict}: model {model[0]}, RTL {rtl} "
                            f"{result.get('message', result.get('status', ''))}")
        elif rtl == "outputs":
            counts["outputs = model"] += 1
        elif rtl in ERROR_STATUS:
            counts["error status"] += 1
        elif rtl == "hw_watchdog":
            counts["watchdog stop"] += 1
        else:
            counts["hangs"] += 1
        counts["same class as model"] += rtl in CORRESPONDING.get(model[0], ())
        counts["resets"] += bool(result.get("reset"))
    return (name, family, len(results), *(counts[column] for column in RTL_COLUMNS[3:10]),
            stats.cycles, f"{seconds:.0f}")


def _built(machine, sim):
    from rdu.sim.verilator import build
    params = machine.system_params()
    return build(RDUSystem, progress=True, **params), RDUSystem(**params).perf_counter_names()


def kernel_campaign(target, args, work_dir, rows, problems):
    """One target's damaged bitstreams: model, then the first ``args.rtl`` on the RTL."""
    programs = target.programs(args.cases, args.seed)
    undamaged = [model_outcome(base)[1] for base in target.bases(args.seed)]
    models, seconds = _model_runs(target.name, programs,
                                  lambda program: model_outcome(program, windows=args.windows))
    rows["model"].append(_model_row(target.name, target.family.name, models,
                                    [undamaged[p.meta["base"]] for p in programs], seconds))
    if not args.rtl:
        return
    _progress(f"{target.name}: {min(args.rtl, len(programs))} cases on the RTL "
              f"({args.sim})")
    built, names = _built(target.machine, args.sim)
    start = time.perf_counter()
    results, verdicts, stats = run_rtl(built, programs[:args.rtl], models[:args.rtl],
                                       work_dir / target.name, seed=args.seed,
                                       perf_counters=names, native=args.sim == "native",
                                       timeout=30_000, recover=args.recover,
                                       windows=args.windows)
    rows["rtl"].append(_rtl_row(target.name, target.family.name, models, results,
                                verdicts, stats, time.perf_counter() - start, problems))


def schedule_campaign(args, work_dir, rows, problems):
    """Damaged orchestrator schedules: model, then the first ``args.rtl`` on the RTL."""
    from tb.suites.fuzz import SMALL_MACHINE
    plan, regions, cases = schedule_cases(args.cases, args.seed)
    models, seconds = _model_runs("schedule", cases,
                                  lambda case: model_schedule_outcome(plan, regions, case))
    undamaged = model_schedule_outcome(plan, regions, type(cases[0])(
        "base", plan.words, 4 * plan.words.size, "none"))[1] if cases else {}
    rows["model"].append(_model_row("schedule", "orchestrator", models,
                                    [undamaged] * len(models), seconds))
    if not args.rtl:
        return
    _progress(f"schedule: {min(args.rtl, len(cases))} cases on the RTL ({args.sim})")
    built, _ = _built(SMALL_MACHINE, args.sim)
    start = time.perf_counter()
    results, verdicts, stats = run_schedules_rtl(built, plan, regions, cases[:args.rtl],
                                                 models[:args.rtl], work_dir / "schedule",
                                                 seed=args.seed,
                                                 native=args.sim == "native")
    rows["rtl"].append(_rtl_row("schedule", "orchestrator", models, results, verdicts,
                                stats, time.perf_counter() - start, problems))
    kinds = Counter((case.kind, model[0], result["outcome"]) for case, model, result in
                    zip(cases, models, results, strict=False))
    print_table("Schedules on the RTL by damage (kind, model, RTL)",
                 ("damage", "model", "RTL", "cases"),
                 [(*key, count) for key, count in sorted(kinds.items())])


def axi_campaign(args, work_dir, problems):
    """``args.axi`` random AXI4-Lite accesses on the 2x2 IP top."""
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build

    from hdl.ip import RDUIP
    from tb.suites.fuzz import SMALL_MACHINE, TARGETS
    from tb.suites.fuzz_axi import run_axi_fuzz
    program = next(t for t in TARGETS if t.machine == SMALL_MACHINE).bases(args.seed)[0]
    directory = program.save(work_dir / "axi_program")
    built = build(RDUIP, toplevel="rdu_ip", progress=True, **SMALL_MACHINE.system_params())
    _progress(f"AXI4-Lite: {args.axi} accesses on the IP top")
    start = time.perf_counter()
    stats = run_verilator(built, run_axi_fuzz, work_dir / "axi", seed=args.seed,
                          watchdog=10**9, program_dir=str(directory),
                          transactions=args.axi, fuzz_seed=args.seed)
    result = stats.result
    print_table(f"AXI4-Lite on the IP top ({time.perf_counter() - start:.0f} s, "
                 f"{stats.cycles} cycles)", ("what", "count"),
                 [*result["counts"].items(),
                  *((f"run ended {name}", count) for name, count in
                    sorted(result["outcomes"].items())),
                  ("problems", len(result["problems"]))])
    problems.extend(f"AXI4-Lite: {text}" for text in result["problems"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="all",
                        help="all, a kernel family, a target, schedule or none")
    parser.add_argument("--cases", "--model", type=int, default=100,
                        help="damaged cases per target on the model")
    parser.add_argument("--rtl", type=int, default=10, help="of them on the RTL")
    parser.add_argument("--sim", choices=("native", "verilator"), default="native")
    parser.add_argument("--axi", type=int, default=0, help="AXI4-Lite accesses on the IP")
    parser.add_argument("--recover", choices=("reset", "abort"), default="reset",
                        help="between RTL cases: a system reset, or the host driver's "
                             "abort (a reset only if it left the machine unsettled, "
                             "counted in 'resets')")
    parser.add_argument("--windows", action="store_true",
                        help="confine every kernel case to its manifest's memory windows "
                             "on the model and the RTL (schedules always are)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    targets = select_targets(args.family, FAMILIES)
    schedule = args.family in ("all", "schedule")
    if not targets and not schedule and args.family != "none":
        parser.error(f"--family {args.family}: no such family or target")
    rows, problems = {"model": [], "rtl": []}, []
    with tempfile.TemporaryDirectory() as temporary:
        work_dir = Path(args.dir or temporary)
        if args.cases:
            for target in targets:
                kernel_campaign(target, args, work_dir, rows, problems)
            if schedule:
                schedule_campaign(args, work_dir, rows, problems)
        if rows["model"]:
            print_table(f"Functional model (seed {args.seed})", MODEL_COLUMNS,
                         rows["model"])
        if rows["rtl"]:
            print_table(f"RTL ({args.sim}; outcome classes of the RTL)", RTL_COLUMNS,
                         rows["rtl"])
        if args.axi:
            axi_campaign(args, work_dir, problems)
    print(f"\ndisagreements and problems: {len(problems)}")
    for text in problems:
        print(f"  {text}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

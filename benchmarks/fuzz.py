"""Configuration fuzzing campaign: damaged bitstreams of small compiled GEMMs on the
functional model and on the RTL, outcomes tabulated.

Run: ``.venv/bin/python -m benchmarks.fuzz`` (1000 cases on the model, the first 200 of
them on the RTL under Verilator, in one simulation; ``--model N``, ``--rtl N``,
``--seed S``, ``--rtl 0`` for the model only). The machine is the 2x2 PCU/PMU
checkerboard with 4 lanes (``tb.suites.fuzz.GEOMETRY``), GEMMs 4x4x8 and 5x7x9 in turn,
damaged by ``tb.suites.fuzz.mutate`` (field values changed with the CRC recomputed, bits
flipped with or without the CRC fixed, truncated or extended).

Prints the model's outcomes, then for the RTL cases a table of (model outcome, RTL
outcome) with the verdict of ``tb.suites.fuzz.run_rtl``: ``equal`` where both produced
outputs and they are equal, ``equal on fresh SRAM`` where they were equal only when the
case ran alone (the previous case's PMU SRAM contents were read), ``DIFFERENT`` where
they are not, ``stop`` where the RTL ended in an error status or a watchdog stop. Exit
status 1 if any case disagrees silently (RTL outputs different from the model's, or RTL
outputs where the model has none) or ends otherwise.
"""

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from hdl.system import RDUSystem
from tb.suites.fuzz import (
    ACCEPTED,
    CORRESPONDING,
    OUTCOMES,
    base_programs,
    fuzz_programs,
    model_outcome,
    run_rtl,
)


def _print_table(title, header, rows):
    print(f"\n{title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in rows:
        print("| " + " | ".join(str(value) for value in row) + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=int, default=1000, help="cases on the model")
    parser.add_argument("--rtl", type=int, default=200, help="of them on the RTL")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)
    programs = fuzz_programs(args.model, args.seed)
    start = time.perf_counter()
    model = [model_outcome(program) for program in programs]
    model_seconds = time.perf_counter() - start
    undamaged = [model_outcome(base)[1] for base in base_programs(args.seed)]
    counts = Counter()
    for program, (outcome, detail) in zip(programs, model, strict=True):
        if outcome == "outputs":
            reference = undamaged[program.meta["base"]]
            same = all(np.array_equal(detail[name], reference[name]) for name in detail)
            outcome = "outputs, as undamaged" if same else "outputs, different"
        counts[outcome] += 1
    names = ["outputs, as undamaged", "outputs, different", *OUTCOMES[1:]]
    _print_table(f"Functional model: {args.model} damaged bitstreams (seed {args.seed}, "
                 f"{model_seconds:.1f} s)", ["outcome", "cases"],
                 [(outcome, counts[outcome]) for outcome in names if counts[outcome]])
    if not args.rtl:
        return 0
    from rdu.sim.verilator import build
    rtl_programs = programs[:args.rtl]
    params = rtl_programs[0].machine.system_params()
    built = build(RDUSystem, **params)
    names = RDUSystem(**params).perf_counter_names()
    with tempfile.TemporaryDirectory() as temporary:
        start = time.perf_counter()
        results, verdicts, stats = run_rtl(built, rtl_programs, model[:args.rtl],
                                           Path(args.dir or temporary), seed=args.seed,
                                           perf_counters=names)
        rtl_seconds = time.perf_counter() - start
    table, bad, other = Counter(), [], []
    for program, (outcome, _), result, found in zip(rtl_programs, model, results, verdicts,
                                                    strict=False):
        rtl = result["outcome"]
        if found not in ACCEPTED:
            bad.append((program.name, found, result.get("message", "")))
        elif rtl not in CORRESPONDING.get(outcome, ()):
            other.append((program.name, outcome, result.get("message", "")))
        table[outcome, rtl, found] += 1
    _print_table(f"RTL (Verilator): {args.rtl} of them in one simulation ({rtl_seconds:.0f} "
                 f"s, {stats.cycles} cycles, {stats.cycles_per_second:.0f} cycles/s)",
                 ["model", "RTL", "verdict", "same outcome", "cases"],
                 [(m, r, v, "yes" if r in CORRESPONDING.get(m, ()) else "no", count)
                  for (m, r, v), count in sorted(table.items())])
    agree = sum(count for (m, r, _), count in table.items()
                if r in CORRESPONDING.get(m, ()))
    print(f"\ncorresponding outcomes (model deadlock = RTL watchdog, ...): {agree} of "
          f"{args.rtl}; silent disagreements: {len(bad)}")
    for name, verdict, message in bad:
        print(f"  {name}: {verdict} {message}")
    for name, outcome, message in other:
        print(f"  {name}: model {outcome}; RTL: {message}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

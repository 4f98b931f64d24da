"""Cycles of a compiled program on the whole system: the transpose kernel
HBM -> AGCU 0 -> PMU -> AGCU 1 -> HBM run by the RTL runtime (``run_program``).

Run: ``.venv/bin/python -m benchmarks.system_transpose`` (Amaranth tier, the 2x2
PMU-only 4-lane system; ``--tier verilator`` uses the registered ``system_2x2`` build).
Prints, per matrix size, the program-load cycles, the run cycles (start to the last
AGCU ``done``), each AGCU's execute cycles, the array's ``host.cycles``, and the run
against a simple bound: the PMU must receive every beat before its column read can
finish (a transpose), so ``2 * beats`` plus one HBM read latency and one write
response; and the simulation speed.
"""

import argparse
import tempfile
from pathlib import Path

import numpy as np
from rdu.sim.host import load_outputs, run_program
from rdu.sim.runner import run_amaranth, run_verilator

from hdl.system import RDUSystem
from tb.suites.system import transpose_program

LANES = 4


def measure(tier, shape, seed, directory):
    from rdu.apps.designs import get_design
    params = get_design("system_2x2").params
    program, expected = transpose_program(2, 2, LANES, matrix_rows=shape[0],
                                          matrix_cols=shape[1], seed=seed)
    program_dir = program.save(Path(directory) / f"transpose_{shape[0]}x{shape[1]}")
    kwargs = {"program_dir": str(program_dir), "timeout": 200_000}
    if tier == "amaranth":
        stats = run_amaranth(RDUSystem(**params), run_program, seed=seed, watchdog=10_000,
                             **kwargs)
    else:
        from rdu.sim.verilator import build
        stats = run_verilator(build(RDUSystem, **params), run_program,
                              Path(directory) / f"run_{shape[0]}x{shape[1]}", seed=seed,
                              watchdog=10_000, **kwargs)
    result = stats.result
    if not np.array_equal(load_outputs(result)["a_t"], expected):
        raise AssertionError(f"{shape}: output differs from numpy")
    beats = shape[0] * shape[1] // LANES
    bound = 2 * beats + 120 + 20       # HBM miss latency + write response latency
    return {"shape": f"{shape[0]}x{shape[1]}", "beats": beats,
            "load": result["load_cycles"], "run": result["cycles"],
            "agcu0": result["agcu_cycles"]["0"], "agcu1": result["agcu_cycles"]["1"],
            "array": result["array_cycles"], "bound": bound,
            "cps": stats.cycles_per_second}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=("amaranth", "verilator"), default="amaranth")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sizes", default="16x16,32x32,64x64")
    args = parser.parse_args(argv)
    shapes = [tuple(int(v) for v in size.split("x")) for size in args.sizes.split(",")]
    print(f"tier {args.tier}, 2x2 PMU-only system, {LANES} lanes, default HBM latencies")
    print("| matrix | beats | load | run | AGCU 0 | AGCU 1 | array | bound | run/bound "
          "| sim cycles/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as directory:
        for shape in shapes:
            r = measure(args.tier, shape, args.seed, directory)
            print(f"| {r['shape']} | {r['beats']} | {r['load']} | {r['run']} | {r['agcu0']} "
                  f"| {r['agcu1']} | {r['array']} | {r['bound']} | "
                  f"{r['run'] / r['bound']:.2f} | {r['cps']:.0f} |", flush=True)


if __name__ == "__main__":
    main()

"""Wall time of one `rdu sweep` with one Ray worker and with two (measured, not asserted).

The same grid (default ``benchmarks/grids/model.toml``, optionally only its first
``--points``) is swept into a fresh table twice on a local Ray started for the run:
``--workers 1`` then ``--workers 2``. Each wall time includes starting Ray and its
workers (what a user waits for); the tables must agree point for point on every
measured figure (times and the node aside), which the benchmark checks and prints.

    .venv/bin/python -m benchmarks.sweep [--grid FILE.toml] [--points N] [--workers 1,2]
                                         [--repeat N]

Printed per run: wall time, per point, the mean time a point took inside its task
(compile, run, check), and the machine's 1-minute load average before the run: on a
shared machine other work takes CPUs from the workers.
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

from rdu.apps.sweep import compare_tables, load_grid, read_table, run_sweep


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", default=str(Path(__file__).parent / "grids" / "model.toml"),
                        help="the grid (default: %(default)s)")
    parser.add_argument("--points", type=int, default=96,
                        help="sweep the grid's first N points (default: %(default)s)")
    parser.add_argument("--workers", default="1,2",
                        help="local Ray worker counts to compare (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds, each in the order given (default: %(default)s)")
    args = parser.parse_args()
    points = load_grid(args.grid).points()[:args.points]
    print(f"grid {args.grid}: {len(points)} points")
    print(f"{'workers':>8}{'wall s':>9}{'s/point':>9}{'in task':>9}{'ok':>6}{'failed':>8}"
          f"{'load 1m':>9}")
    tables = {}
    with tempfile.TemporaryDirectory() as directory:
        for round_ in range(args.repeat):
            for workers in [int(w) for w in args.workers.split(",")]:
                table = Path(directory) / f"workers{workers}-{round_}.csv"
                load = os.getloadavg()[0]
                start = time.perf_counter()
                summary = run_sweep(points, table, workers=workers, progress=False)
                wall = time.perf_counter() - start
                failed = summary["points"] - summary["ok"]
                rows = read_table(table)
                in_task = sum(row["wall_seconds"] for row in rows) / len(rows)
                print(f"{workers:>8}{wall:>9.1f}{wall / len(points):>9.2f}{in_task:>9.2f}"
                      f"{summary['ok']:>6}{failed:>8}{load:>9.2f}", flush=True)
                tables[workers, round_] = table
        first, *others = tables.values()
        for other in others:
            result = compare_tables(other, first)
            print(f"{other.name} against {first.name}: {result['common']} common points, "
                  f"{result['same']} the same (times and node aside), "
                  f"{len(result['differences'])} differing values")


if __name__ == "__main__":
    main()

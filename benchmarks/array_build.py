"""Verilog generation, ``verilator --lint-only`` and Verilator build times of TileArray.

    .venv/bin/python -m benchmarks.array_build [--configs 2x2,4x4] [--lanes 8]
        [--compute-unit standard|fpga|none] [--no-build] [--run]

Prints one line per configuration: Verilog size, seconds to generate, lint result and
seconds, Verilator build seconds (0 when the build was already cached). With ``--run``
it also runs, on each build, a whole-array configuration round trip and random
multicast traffic across the mesh (the tests' bodies) and prints cycles and cycles/s.
"""

import argparse
import subprocess
import time
from pathlib import Path

from rdu.sim.verilator import build, ensure_verilator, generate_verilog, project_root
from rdu.units.registry import PCU_VARIANTS

from hdl.array import TileArray


def lint(verilog_path, top):
    start = time.perf_counter()
    result = subprocess.run(["verilator", "--lint-only", "-Wno-fatal", "-Wno-WIDTHEXPAND",
                             "-Wno-WIDTHTRUNC", "--top-module", top, str(verilog_path)],
                            capture_output=True, text=True)
    warnings = result.stderr.count("%Warning")
    errors = result.stderr.count("%Error")
    return result.returncode, warnings, errors, time.perf_counter() - start, result.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="2x2,4x4")
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--compute-unit", choices=[*PCU_VARIANTS, "none"], default="standard",
                        help="compute unit at the (row + col) even sites (a PCU variant of "
                             "rdu.units.registry.PCU_VARIANTS); 'none' for PMUs only")
    parser.add_argument("--no-build", action="store_true")
    parser.add_argument("--run", action="store_true")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    ensure_verilator()
    out_dir = project_root() / "build" / "verilog"
    out_dir.mkdir(parents=True, exist_ok=True)
    for config in args.configs.split(","):
        rows, cols = (int(v) for v in config.split("x"))
        start = time.perf_counter()
        unit = None if args.compute_unit == "none" else PCU_VARIANTS[args.compute_unit]
        text = generate_verilog(TileArray(rows, cols, args.lanes, compute_unit=unit),
                                "tile_array")
        gen_seconds = time.perf_counter() - start
        path = Path(out_dir) / f"tile_array_{rows}x{cols}_l{args.lanes}{'' if unit else '_pmu'}.v"
        path.write_text(text)
        code, warnings, errors, lint_seconds, log = lint(path, "tile_array")
        line = (f"TileArray {rows}x{cols} lanes={args.lanes} compute={unit}: "
                f"verilog {len(text) // 1024} KiB "
                f"in {gen_seconds:.1f} s; lint rc={code} warnings={warnings} errors={errors} "
                f"in {lint_seconds:.1f} s")
        if not args.no_build:
            built = build(TileArray, rows=rows, cols=cols, lanes=args.lanes,
                          compute_unit=unit)
            line += (f"; verilator build {built.seconds:.1f} s"
                     f"{' (cached)' if built.cached else ''}")
        print(line, flush=True)
        if errors:
            print(log)
        if args.run and not args.no_build:
            from rdu.sim.runner import run_verilator

            from tb.suites.array import array_config_roundtrip, array_mesh_routes
            test_dir = project_root() / "build" / "bench" / f"array_{rows}x{cols}"
            params = {"rows": rows, "cols": cols, "lanes": args.lanes}
            stats = run_verilator(built, array_config_roundtrip, test_dir / "roundtrip",
                                  seed=args.seed, agcus=2, agcu_words=16, **params)
            print(f"  config round trip: {stats.result['words']} bitstream words loaded in "
                  f"{stats.result['load_cycles']} cycles, {stats.result['readback_words']} "
                  f"words read back; {stats.cycles} cycles, "
                  f"{stats.cycles_per_second:.0f} cycles/s", flush=True)
            stats = run_verilator(built, array_mesh_routes, test_dir / "mesh", seed=args.seed,
                                  count=2000, **params)
            print(f"  mesh traffic: {stats.result['delivered']} items over routes "
                  f"{stats.result['routes']} ({stats.result['multicasts']} multicast); "
                  f"{stats.cycles} cycles, {stats.cycles_per_second:.0f} cycles/s, "
                  f"stall cycles {stats.result['stall_cycles']}", flush=True)


if __name__ == "__main__":
    main()

"""Verilog generation, ``verilator --lint-only`` and Verilator build times of TileArray.

    .venv/bin/python -m benchmarks.array_build [--configs 2x2,4x4] [--no-build]

Prints one line per configuration: Verilog size, seconds to generate, lint result and
seconds, Verilator build seconds (0 when the build was already cached).
"""

import argparse
import subprocess
import time
from pathlib import Path

from hdl.array import TileArray
from tb.verilator import build, ensure_verilator, generate_verilog, project_root


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
    parser.add_argument("--no-build", action="store_true")
    args = parser.parse_args()
    ensure_verilator()
    out_dir = project_root() / "build" / "verilog"
    out_dir.mkdir(parents=True, exist_ok=True)
    for config in args.configs.split(","):
        rows, cols = (int(v) for v in config.split("x"))
        start = time.perf_counter()
        text = generate_verilog(TileArray(rows, cols, args.lanes), "tile_array")
        gen_seconds = time.perf_counter() - start
        path = Path(out_dir) / f"tile_array_{rows}x{cols}_l{args.lanes}.v"
        path.write_text(text)
        code, warnings, errors, lint_seconds, log = lint(path, "tile_array")
        line = (f"TileArray {rows}x{cols} lanes={args.lanes}: verilog {len(text) // 1024} KiB "
                f"in {gen_seconds:.1f} s; lint rc={code} warnings={warnings} errors={errors} "
                f"in {lint_seconds:.1f} s")
        if not args.no_build:
            built = build(TileArray, rows=rows, cols=cols, lanes=args.lanes)
            line += (f"; verilator build {built.seconds:.1f} s"
                     f"{' (cached)' if built.cached else ''}")
        print(line, flush=True)
        if errors:
            print(log)


if __name__ == "__main__":
    main()

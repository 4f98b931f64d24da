"""Per-module profile of the Verilated system (docs/simulation-speed.md).

    .venv/bin/python -m benchmarks.sim_profile [--config 4x4] [--cycles 3000] [--top 20]

Runs the bare C++ loop of ``benchmarks.sim_speed`` (the cached Verilator build of
``RDUSystem``, linked by ``rdu.sim.cpp_loop``) under ``perf record`` and sums the
samples by the C++ class Verilator generates for each Verilog module (the build's
``-fno-inline`` keeps one class per module; the functions are named
``Vtop_<module>___<region>__TOP__<instance>``). Needs ``perf`` (Debian: linux-perf).
"""

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_SYMBOL = re.compile(r"^\s*([\d.]+)%\s+\[\.\]\s+(\S+)")
_CLASS = re.compile(r"^(Vtop_.*?|Vtop___024root)___(?!0)")
# a hierarchical block's classes (rdu.sim.verilator.HIER_BLOCK): V<block>_<module>,
# where <module> is the block or one of its submodules, and V<block>___024root
_BLOCK_CLASS = re.compile(r"^V(\w+?)_(\1(?:__02e\w*?)?)___(?!0)")
_BLOCK_ROOT = re.compile(r"^V(\w+?)___024root___")


def module_of(symbol):
    """The module (C++ class) of a Verilator function symbol, readable: ``Vtop_``
    dropped, ``__02e`` (".") decoded; a hierarchical block's root as ``<block>.$root``;
    other symbols (Verilator's runtime) as they are."""
    match = _CLASS.match(symbol)
    if match:
        name = match.group(1).removeprefix("Vtop_")
    elif match := _BLOCK_CLASS.match(symbol):
        name = match.group(2)
    elif match := _BLOCK_ROOT.match(symbol):
        name = f"{match.group(1)}.$root"
    else:
        return symbol
    return name.replace("__02e", ".").replace("__024", "$")


def main(argv=None):
    from benchmarks.sim_speed import CONFIGS, _program
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="4x4", choices=sorted(CONFIGS))
    parser.add_argument("--cycles", type=int, default=3000)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--binary", help="profile this loop binary (rdu.sim.cpp_loop) "
                        "instead of building the configuration's")
    args = parser.parse_args(argv)
    if not shutil.which("perf"):
        print("sim_profile: perf is not installed (apt-get install linux-perf)",
              file=sys.stderr)
        return 2
    if args.binary:
        binary = Path(args.binary)
    else:
        from rdu.sim.cpp_loop import build_loop
        from rdu.sim.verilator import build

        from hdl.system import RDUSystem
        params = _program(args.config, 16).machine.system_params()
        binary, _, _ = build_loop(build(RDUSystem, progress=True, **params))
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "perf.data"
        subprocess.run(["perf", "record", "-q", "-o", str(data), str(binary),
                        str(args.cycles)], check=True, capture_output=True)
        report = subprocess.run(["perf", "report", "-i", str(data), "--sort", "symbol",
                                 "--stdio"], check=True, capture_output=True,
                                text=True).stdout
    shares = collections.Counter()
    for line in report.splitlines():
        match = _SYMBOL.match(line)
        if match:
            shares[module_of(match.group(2))] += float(match.group(1))
    print(f"RDUSystem, bare C++ loop, {args.cycles} idle cycles ({binary})")
    for module, share in shares.most_common(args.top):
        print(f"{share:6.2f}%  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

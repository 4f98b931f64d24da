"""The watchdog's estimate against measured cycles, kernel by kernel and shape by shape.

    .venv/bin/python -m benchmarks.watchdog [--quick] [--sim native|verilator] [--seed 1]
        [--json]

Each point compiles a kernel (``rdu.frontend.kernels``), runs it on the RTL and prints:
the measured cycles, the busiest unit's beats (a lower bound of the cycles:
:func:`rdu.units.registry.busiest_unit`), the estimate
(:func:`rdu.runtime.watchdog.estimate_cycles`), the launch's watchdog
(:func:`rdu.runtime.watchdog.launch_timeout`) and the margins: estimate / cycles and
timeout / cycles. A watchdog that fires on a correct run is a bug in the estimate: the
run exits 1 when a point's cycles exceed its estimate. ``--quick``: the points
``tests/test_watchdog.py`` runs in CI.
"""

import argparse
import json

from rdu.frontend.kernels import get_kernel
from rdu.machine import Machine
from rdu.runtime import run_kernel
from rdu.runtime.watchdog import estimate_cycles, launch_timeout
from rdu.units.registry import busiest_unit

#: (kernel, params): every family, heads and GQA groups, K chunks, long rows, padding.
QUICK = (
    ("gemm", {"m": 40, "n": 24, "k": 72}),
    ("gemm", {"m": 16, "n": 16, "k": 4096}),            # K in chunks
    ("softmax", {"m": 33, "n": 100}),
    ("mlp", {"m": 5, "d": 48, "f": 80}),
    ("attention", {"mode": "decode", "seq": 256, "dim": 32, "heads": 4, "kv_heads": 2}),
    ("attention", {"mode": "prefill", "seq": 48, "dim": 16, "heads": 2, "kv_heads": 1}),
    ("attention", {"mode": "prefill", "seq": 64, "dim": 16, "heads": 1, "kv_heads": 1,
                   "causal": True}),
)
#: Machine overrides of the quick points: every point on the four-AGCU 4x4 the attention
#: tests build (the default machine has two AGCUs, the MLP's own five: each one
#: Verilator build more in CI).
QUICK_MACHINES = {name: {"agcus": 4} for name, _ in QUICK}
#: Longer points (minutes on the native runner).
FULL = QUICK + (
    ("gemm", {"m": 256, "n": 256, "k": 256}),
    ("softmax", {"m": 1024, "n": 1024}),
    ("mlp", {"m": 8, "d": 256, "f": 1024}),
    ("attention", {"mode": "decode", "seq": 4096, "dim": 64, "heads": 8, "kv_heads": 1}),
    ("attention", {"mode": "prefill", "seq": 256, "dim": 64, "heads": 8, "kv_heads": 1}),
    ("attention", {"mode": "prefill", "seq": 512, "dim": 64, "heads": 1, "kv_heads": 1,
                   "causal": True}),
)


def measure(name, params, sim="native", seed=1, work_dir=None, machine=None):
    """One point: ``{kernel, cycles, busiest, estimate, timeout, ok}``; ``machine``:
    overrides of the kernel's own machine parameters."""
    kernel = get_kernel(name)
    program = kernel.compile(Machine(**{**kernel.machine, **(machine or {})}), **params)
    inputs = kernel.random_inputs(program, seed)
    options = {"work_dir": work_dir} if work_dir is not None else {}
    figures, _, _ = run_kernel(kernel, program, inputs, sim, seed=seed, **options)
    beats, kind, row, col = busiest_unit(program.bitstream, program.machine.stages)
    estimate, cycles = estimate_cycles(program), figures["cycles"]
    return {"kernel": kernel.describe(program), "ok": figures["ok"], "cycles": cycles,
            "busiest": beats, "busiest_unit": f"{kind.name.lower()}({row},{col})",
            "estimate": estimate, "timeout": launch_timeout(program),
            "estimate_margin": round(estimate / cycles, 2),
            "timeout_margin": round(launch_timeout(program) / cycles, 2)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI points only")
    parser.add_argument("--sim", choices=["native", "verilator"], default="native")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for name, params in QUICK if args.quick else FULL:
        row = measure(name, params, args.sim, args.seed,
                      machine=QUICK_MACHINES.get(name) if args.quick else None)
        rows.append(row)
        if not args.json:
            print(f"{row['kernel']:<70} {row['cycles']:>9} cycles  busiest "
                  f"{row['busiest']:>8} ({row['busiest_unit']})  estimate "
                  f"{row['estimate']:>9} (x{row['estimate_margin']})  timeout x"
                  f"{row['timeout_margin']}  {'ok' if row['ok'] else 'WRONG'}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=1))
    bad = [row for row in rows if not row["ok"] or row["cycles"] > row["estimate"]]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

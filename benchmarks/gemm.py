"""GEMM utilisation on the RTL: square GEMMs on the default array under Verilator.

    .venv/bin/python -m benchmarks.gemm [--sizes 16,32,64,128,256] [--rows 4 --cols 4
        --lanes 8] [--seed 1] [--sim native|verilator] [--json]

For each size it compiles ``C = A B`` (``rdu.frontend.gemm``), runs it on ``RDUSystem`` under
Verilator with the HBM model behind the AGCUs (``rdu.runtime``; ``--sim native``, the
default, runs the memory side in C++, ``verilator`` under cocotb: the same cycles),
checks C against the bit-exact model, and prints in one table:

* cycles from ``start`` to the last AGCU ``done`` and the configuration (program load)
  cycles before it;
* MACs per cycle and utilisation = M*N*K / (cycles * peak), peak = PCUs * lanes^2
  (512 on the default array), and the same including the configuration;
* where the cycles go: *compute* = the beats each PCU streams (passes * column tiles *
  padded K, all PCUs in lockstep), *padding* = the part of those beats spent on zero
  padding, *other* = the rest (first-data latency, systolic fill and drain, the last
  store, and every stall: HBM bandwidth and latency, panels not yet loaded);
* HBM traffic: bytes moved and the share of the HBM peak (32 B/cycle,
  ``Machine.hbm_bytes_per_cycle``) it used;
* the roofline (``rdu.roofline``, the run's ``RunResult.roofline``): the bound, the larger
  of M*N*K / the MAC peak and the bytes of A and B read once and C written once / the
  HBM peak, and the share of it the run achieved (bound / cycles).
"""

import argparse
import json
import time

import numpy as np
from rdu.frontend import gemm
from rdu.mapper import ArrayGeometry
from rdu.runtime import run_program


def measure(size, geometry, seed, sim="native"):
    program = gemm.compile_gemm(size, size, size, geometry)
    a, b = gemm.random_inputs(size, size, size, seed)
    gemm.pack_inputs(program, a, b)
    result = run_program(program, sim, seed=seed)
    meta = program.meta
    c = gemm.unpack_output(program, result.outputs["c"])
    exact = np.array_equal(c.view(np.uint32), gemm.exact_reference(a, b, meta["k_pad"]))
    cycles = result.cycles
    load = result.load_cycles or 0
    peak = meta["peak_macs_per_cycle"]
    compute = meta["passes"] * meta["col_tiles"] * meta["k_pad"]
    useful = meta["macs"] / (meta["pcus"] * meta["lanes"] ** 2)
    hbm = result.counters.get("memory", {}).get("hbm", {})
    hbm_bytes = 4 * meta["lanes"] * (hbm.get("read_beats", 0) + hbm.get("write_beats", 0))
    return {
        "size": size, "ok": exact, "pcus": meta["pcus"], "cycles": cycles,
        "config_cycles": load, "macs": meta["macs"],
        "macs_per_cycle": round(meta["macs"] / cycles, 2),
        "utilization": round(meta["macs"] / (cycles * peak), 4),
        "utilization_with_config": round(meta["macs"] / ((cycles + load) * peak), 4),
        "compute_cycles": compute,
        "padding_cycles": round(compute - useful),
        "other_cycles": cycles - compute,
        "hbm_bytes": hbm_bytes,
        "hbm_share": round(hbm_bytes / (cycles * program.machine.hbm_bytes_per_cycle), 3),
        "bound_cycles": result.roofline.bound_cycles, "binding": result.roofline.binding,
        "share": result.roofline.share,
        "sim_seconds": round(result.seconds, 1),
        "build_seconds": round(result.build_seconds, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,32,64,128,256")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--cols", type=int, default=4)
    parser.add_argument("--lanes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sim", choices=["native", "verilator"], default="native",
                        help="native: no Python per cycle; verilator: under cocotb")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    geometry = ArrayGeometry(args.rows, args.cols, args.lanes)
    rows = []
    start = time.perf_counter()
    for size in (int(s) for s in args.sizes.split(",")):
        row = measure(size, geometry, args.seed, args.sim)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
            continue
        if len(rows) == 1:
            print(f"GEMM on {args.rows}x{args.cols} lanes {args.lanes} (peak "
                  f"{geometry.capacity()['pcu'] * args.lanes ** 2} MACs/cycle), Verilator, "
                  f"seed {args.seed}")
            print(f"{'size':>5} {'ok':>3} {'PCUs':>4} {'cycles':>8} {'config':>7} "
                  f"{'MAC/cyc':>8} {'util':>6} {'util+cfg':>8} {'compute':>8} {'padding':>8} "
                  f"{'other':>7} {'HBM use':>7} {'bound':>7} {'share':>6} {'sim s':>6}")
        print(f"{row['size']:>5} {'yes' if row['ok'] else 'NO':>3} {row['pcus']:>4} "
              f"{row['cycles']:>8} {row['config_cycles']:>7} {row['macs_per_cycle']:>8} "
              f"{row['utilization']:>6.1%} {row['utilization_with_config']:>8.1%} "
              f"{row['compute_cycles']:>8} {row['padding_cycles']:>8} {row['other_cycles']:>7} "
              f"{row['hbm_share']:>7.1%} {row['bound_cycles']:>7} {row['share']:>6.1%} "
              f"{row['sim_seconds']:>6}", flush=True)
    if not args.json:
        print(f"total {time.perf_counter() - start:.0f} s")
    if not all(row["ok"] for row in rows):
        raise SystemExit("some GEMM results differ from the bit-exact model")


if __name__ == "__main__":
    main()

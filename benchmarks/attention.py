"""Fused attention on the RTL: decode against the HBM bandwidth, prefill against the MACs.

    .venv/bin/python -m benchmarks.attention [--decode 128,256,512,1024,2048,4096]
        [--prefill 64,128,256,512] [--dim 64] [--heads 8] [--kv-heads 1] [--causal]
        [--kv-layout blocks|rows] [--valid N] [--seed 1]
        [--sim native|verilator|model] [--json]

Each point compiles ``rdu run attention`` (one configuration, ``docs/attention.md``) on
the default 4x4 array with 4 AGCUs, runs it under Verilator (``rdu.runtime.run_kernel``),
checks O bit-exact against the chain's arithmetic and within budget of float64, and
prints in one table: cycles (start to the last AGCU ``done``), configuration cycles, HBM
bytes moved (AGCU read and write beats), the share of the HBM peak (32 B/cycle) those
bytes used, and the share of the array's MAC peak (8 PCUs' worth, 512 MACs a cycle) the
two products used, and the roofline (``rdu.roofline``: the bound, the larger of the
attention's MACs / the MAC peak and Q, K, V read once and O written once / the HBM peak,
what binds, and the share of it achieved: bound / cycles). Decode's goal is bandwidth
(K and V stream once per pass), prefill's the MACs. ``--sim model`` checks the points
on the functional model (no cycles: the bound, no share). ``--kv-layout rows`` reads K and
V as a position-major KV cache (decode only; ``--valid N``: the first N keys of each
head filled, the rest empty slots; default all).
"""

import argparse
import json
import time

from rdu.frontend.kernels import get_kernel
from rdu.machine import Machine
from rdu.runtime import run_kernel


def measure(mode, seq, args):
    kernel = get_kernel("attention")
    program = kernel.compile(Machine(**kernel.machine), seq=seq, dim=args.dim,
                             heads=args.heads, kv_heads=args.kv_heads, mode=mode,
                             causal=mode == "prefill" and args.causal,
                             kv_layout=args.kv_layout,
                             valid=min(args.valid, seq) if args.valid else None)
    inputs = kernel.random_inputs(program, args.seed)
    figures, _, result = run_kernel(kernel, program, inputs, args.sim, seed=args.seed)
    return {
        "mode": mode, "kv_layout": args.kv_layout, "valid": program.params["valid"],
        "seq": seq, "dim": args.dim, "heads": args.heads,
        "kv_heads": args.kv_heads, "ok": figures["ok"], "cycles": figures["cycles"],
        "config_cycles": figures.get("config_cycles"), "hbm_bytes": figures["hbm_bytes"],
        "hbm_peak_share": figures["hbm_peak_share"], "mac_share": figures["utilization"],
        "bound_cycles": figures["roofline"]["bound_cycles"],
        "binding": figures["roofline"]["binding"], "share": figures["roofline"]["share"],
        "max_abs_err": figures["max_abs_err"], "chunk": program.meta["chunk"],
        "passes": program.meta["passes"], "sim_seconds": round(result.seconds, 1),
    }


def _sizes(text):
    return [int(s) for s in text.split(",") if s]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decode", default="128,256,512,1024,2048,4096",
                        help="decode sequence lengths (empty: none)")
    parser.add_argument("--prefill", default="64,128,256,512",
                        help="prefill sequence lengths (empty: none)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=1,
                        help="key/value heads (decode: one pass of HEADS queries each)")
    parser.add_argument("--causal", action="store_true", help="causal prefill")
    parser.add_argument("--kv-layout", choices=["blocks", "rows"], default="blocks",
                        help="K and V in the chain's block order, or a KV cache (rows: "
                             "decode only)")
    parser.add_argument("--valid", type=int, default=None,
                        help="rows: keys in the cache (at most L; default L)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sim", choices=["native", "verilator", "model"], default="native",
                        help="native: the RTL, no Python per cycle; verilator: the RTL "
                             "under cocotb; model: the functional model (no cycles)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []
    points = [("decode", s) for s in _sizes(args.decode)] + \
        [("prefill", s) for s in _sizes(args.prefill)]
    for mode, seq in points:
        row = measure(mode, seq, args)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{mode:8s} {args.kv_layout} L={seq:5d} ok={row['ok']} "
                  f"cycles={row['cycles']} "
                  f"hbm={row['hbm_bytes']} B share={row['hbm_peak_share']} "
                  f"macs={row['mac_share']} bound={row['bound_cycles']} ({row['binding']}) "
                  f"share={row['share']} ({row['sim_seconds']} s)", flush=True)
    if not args.json:
        print("\n| mode | L | D | heads (K/V) | ok | cycles | config | HBM bytes | HBM peak "
              "share | MAC peak share | bound (binds) | share |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['mode']} | {r['seq']} | {r['dim']} | {r['heads']} ({r['kv_heads']}) "
                  f"| {r['ok']} | {r['cycles']} | {r['config_cycles']} | {r['hbm_bytes']} "
                  f"| {r['hbm_peak_share']} | {r['mac_share']} "
                  f"| {r['bound_cycles']} ({r['binding']}) | {r['share']} |")
        print(f"\n{time.perf_counter() - start:.0f} s in all")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

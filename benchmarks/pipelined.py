"""The pipelined machine side by side with the single-cycle one, in cycles (issue #31).

    .venv/bin/python -m benchmarks.pipelined [--gemm 256,512] [--skinny 1024:8:1024]
        [--mlp 8:256:1024,256:256:1024] [--attention 1024] [--cache 1024] [--seed 1]
        [--sim native|verilator|model] [--json]

Each point is a registered kernel (``rdu run gemm|mlp|attention``) on its kernel's
machine (the default 4x4; 5 AGCUs for the MLP, 4 for attention and the skinny GEMMs),
compiled and run twice:
``--fp-latency off`` (every FP operator in one cycle) and ``--fp-latency default`` (the
SIMD stages, the reductions and the systolic PEs on the pipelined operators of
``hdl.fp_latency``, ``docs/pcu.md``). For each: whether the run is right (bit-exact
against the hardware's arithmetic and within the float64 budget), whether both runs
gave the same words (they must: the pipelining keeps every addition's order; except
where the compiler chooses another chain: attention on a KV cache with D a multiple of
the lanes sums the softmax in ``P V`` off and in ``lsum`` on, each run bit-exact against
its own chain), the cycles (execution; the program load apart), the roofline's bound and
the share of it, and the ratio of the cycles. A point the compiler refuses for one
setting is reported with the compiler's message. The first run of each machine builds
its RTL (minutes).
"""

import argparse
import json
import time

import numpy as np
from rdu.compiler.core import CompileError
from rdu.frontend.kernels import get_kernel
from rdu.machine import Machine
from rdu.models.reference import attention_shape
from rdu.runtime import run_kernel

SETTINGS = ("off", "default")


def _points(args):
    points = [("gemm", {"m": n, "n": n, "k": n}) for n in _ints(args.gemm)]
    points += [("gemm", dict(zip("mnk", map(int, shape.split(":")), strict=True)),
                {"agcus": 4}) for shape in args.skinny.split(",") if shape]
    points += [("mlp", dict(zip(("m", "d", "f"), map(int, shape.split(":")), strict=True)))
               for shape in args.mlp.split(",") if shape]
    points += [("attention", {"seq": s, "dim": 64, "heads": 8, "kv_heads": 1,
                              "mode": "decode", "causal": False})
               for s in _ints(args.attention)]
    points += [("attention", {"seq": s, "dim": 64, "heads": 8, "kv_heads": 1,
                              "mode": "decode", "causal": False, "kv_layout": "rows",
                              "valid": s})
               for s in _ints(args.cache)]
    return points


def _ints(text):
    return [int(s) for s in text.split(",") if s]


def measure(name, params, args, machine=None):
    """One point, both settings (``machine``: options over the kernel's machine): a row
    of the table."""
    kernel = get_kernel(name)
    point = f"{name} " + " ".join(f"{k.upper()}={v}" for k, v in params.items()
                                  if k in ("m", "n", "k", "d", "f", "seq", "kv_layout"))
    row = {"kernel": name, "point": point, "ok": True}
    words, chains = {}, {}
    for setting in SETTINGS:
        on = Machine(**{**kernel.machine, **(machine or {}), "fp_latency": setting})
        try:
            program = kernel.compile(on, **params)
        except CompileError as error:
            row[setting] = {"refused": str(error)}
            continue
        if name == "attention":
            chains[setting] = attention_shape(program).sum_in_pv
        inputs = kernel.random_inputs(program, args.seed)
        figures, results, run = run_kernel(kernel, program, inputs, args.sim,
                                           seed=args.seed)
        row["ok"] = row["ok"] and figures["ok"]
        words[setting] = {out: np.asarray(value).view(np.uint32)
                          for out, value in results.items()}
        row[setting] = {"ok": figures["ok"], "cycles": figures.get("cycles"),
                        "load_cycles": run.load_cycles, "bound": figures["roofline"][
                            "bound_cycles"], "binding": figures["roofline"]["binding"],
                        "share": figures["roofline"]["share"],
                        "max_abs_err": figures["max_abs_err"]}
    if len(words) == 2:
        row["same_words"] = all(np.array_equal(words["off"][out], words["default"][out])
                                for out in words["off"])
        if len(set(chains.values())) > 1:
            row["same_words"] = "another chain"     # l from P V off, from lsum on
        row["ok"] = row["ok"] and row["same_words"] is not False
        off, on = row["off"]["cycles"], row["default"]["cycles"]
        row["ratio"] = round(on / off, 3) if off and on else None
    return row


def _cell(entry):
    if "refused" in entry:
        return "refused", "-", "-"
    if entry["cycles"] is None:
        return "ok" if entry["ok"] else "WRONG", "-", "-"
    return (f"{entry['cycles']:,}", f"{entry['bound']:,} ({entry['binding']})",
            f"{100 * entry['share']:.1f}%")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gemm", default="256,512", help="square GEMM sizes (empty: none)")
    parser.add_argument("--skinny", default="1024:8:1024",
                        help="GEMMs M:N:K of one column tile (a decode step's products), "
                             "on 4 AGCUs, comma separated (empty: none)")
    parser.add_argument("--mlp", default="8:256:1024,256:256:1024",
                        help="MLP blocks M:D:F (Y = SiLU(X W1) W2), comma separated")
    parser.add_argument("--attention", default="1024",
                        help="attention decode lengths, D 64, 8 heads, 1 KV head "
                             "(empty: none)")
    parser.add_argument("--cache", default="1024",
                        help="attention decode from a full KV cache (kv_layout rows) of "
                             "these capacities, D 64, 8 heads, 1 KV head (empty: none)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sim", choices=["native", "verilator", "model"], default="native",
                        help="native: the RTL, no Python per cycle; verilator: the RTL "
                             "under cocotb; model: the functional model (words, no cycles)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    rows = []
    for name, params, *machine in _points(args):
        row = measure(name, params, args, *machine)
        rows.append(row)
        print(json.dumps(row) if args.json else f"{row['point']}: ok={row['ok']} "
              f"ratio={row.get('ratio')}", flush=True)
    if not args.json:
        print("\n| point | off: cycles | bound | share | default: cycles | share | "
              "default / off | same words |\n|---|---|---|---|---|---|---|---|")
        for r in rows:
            off, on = _cell(r["off"]), _cell(r["default"])
            print(f"| {r['point']} | {off[0]} | {off[1]} | {off[2]} | {on[0]} | {on[2]} | "
                  f"{r.get('ratio', '-')} | {r.get('same_words', '-')} |")
        for r in rows:
            for setting in SETTINGS:
                if "refused" in r[setting]:
                    print(f"{r['point']}, fp_latency {setting}: {r[setting]['refused']}")
        print(f"{time.perf_counter() - start:.0f} s in all")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

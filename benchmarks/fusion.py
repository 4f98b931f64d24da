"""Fused against kernel-by-kernel, in cycles: the paper's first claim on our array.

    .venv/bin/python -m benchmarks.fusion [--decode 256,1024,4096] [--prefill 64,128]
        [--mlp 8:64:256,8:128:512] [--dim 64] [--heads 8] [--kv-heads 1] [--seed 1]
        [--sim native|verilator|model]
        [--plot build/fusion/fusion.png] [--json]

Each point runs attention (decode, prefill) or an MLP block (``Y = SiLU(X W1) W2``)
three ways on the 4x4 array with the kernel's AGCUs (4 for attention, 5 for the MLP;
``rdu run attention|mlp --execution ...``, ``docs/fusion.md``):

* ``fused``: one configuration (``docs/attention.md``; the MLP's hidden rows wait in a
  PMU);
* ``unfused``: one configuration per operator (``rdu.apps.unfused``: scores, softmax, P V per
  key/value head; matmul, activation, matmul), the intermediates through HBM, the
  launches run by the on-chip orchestrator with the host idle;
* ``unfused-host``: the same programs launched one by one by the host, each paying the
  host's launch latency.

Cycles include every program load (configuration) and execution, and the host's launch
latency (``sim_models.memory.HOST_LAUNCH_LATENCY``, ``docs/memory.md``) once per host
launch: once for the fused kernel, once for the start of the orchestrator, once per
program when the host launches them. The ratios in brackets leave the first host
launch out of all three (cycles from the device's first command). For each run the
table splits the cycles:
configuration (program loads), execution, and launch overhead (the rest: the host's
latencies, the orchestrator's schedule fetch and commands); the HBM
bytes of the intermediates' round trip (S and P each written once and read once) and
the cycles they cost at the HBM peak; and the execution cycles beyond fused ones that
the round trip does not explain (lost overlap: each kernel fills and drains its
pipeline alone, and no kernel streams while another runs); and the roofline
(``rdu.roofline``, the runs' ``roofline`` figures): the bound of the fused program's work
and of the unfused programs' work summed (their intermediates through HBM), and the
share of it each run achieved (bound / the run's cycles: the fused program's execution,
the unfused schedule's loads, executions and launches). Every run is checked (fused:
bit-exact against the chain and within budget; unfused: bit-exact against its stages'
arithmetic chained and within the same float64 budget). A stacked bar plot is written
when matplotlib is installed (the ``plots`` extra).
"""

import argparse
import json
import time
from pathlib import Path

from rdu.apps.unfused import compile_unfused
from rdu.frontend.kernels import get_kernel
from rdu.layout import Image
from rdu.machine import Machine
from rdu.runtime import hbm_peak_bytes_per_cycle, run_kernel, run_sequence

from sim_models.memory import HOST_LAUNCH_LATENCY

EXECUTIONS = (("unfused", "orchestrated"), ("unfused-host", "host"))


def _round_trip_bytes(sequence):
    """Bytes of the intermediates' images, each written once and read once."""
    total = 0
    for stage in sequence.stages:
        for name in stage.produced:
            total += 2 * Image.from_json(stage.program.meta["images"][name]).nbytes
    return total


def measure(name, params, args):
    """One point: ``name`` (a registered kernel) with ``params``, three ways."""
    kernel = get_kernel(name)
    machine = Machine(**kernel.machine)
    program = kernel.compile(machine, **params)
    inputs = kernel.random_inputs(program, args.seed)
    fused, _, result = run_kernel(kernel, program, inputs, args.sim, seed=args.seed)
    timed = args.sim != "model"
    row = {"kernel": name, "point": _describe(name, params), "ok": fused["ok"],
           "fused": (HOST_LAUNCH_LATENCY + result.load_cycles + fused["cycles"]) if timed
           else None,
           "fused_load": result.load_cycles, "fused_execute": fused["cycles"],
           "fused_launch": HOST_LAUNCH_LATENCY,
           "fused_bound": fused["roofline"]["bound_cycles"],
           "fused_binding": fused["roofline"]["binding"],
           "fused_share": fused["roofline"]["share"]}
    peak = hbm_peak_bytes_per_cycle(machine)
    for label, execution in EXECUTIONS:
        sequence = compile_unfused(name, machine, **params)
        figures, _, _ = run_sequence(kernel, sequence, inputs, args.sim, seed=args.seed,
                                     execution=execution)
        row["ok"] = row["ok"] and figures["ok"]
        row["launches"] = figures["launches"]
        round_trip = _round_trip_bytes(sequence)
        row["round_trip_bytes"] = round_trip
        row["unfused_bound"] = figures["roofline"]["bound_cycles"]
        row[f"{label}_share"] = figures["roofline"]["share"]
        if not timed:
            continue
        # the orchestrator is started by one host launch
        cycles = figures["cycles"] + (HOST_LAUNCH_LATENCY if execution == "orchestrated"
                                      else 0)
        overhead = cycles - figures["load_cycles"] - figures["execute_cycles"]
        extra = figures["execute_cycles"] - fused["cycles"]
        row[label] = cycles
        row[f"{label}_ratio"] = round(cycles / row["fused"], 2)
        # from the device's first command: the host's first launch left out of all three
        row[f"{label}_device_ratio"] = round((cycles - HOST_LAUNCH_LATENCY) /
                                             (row["fused"] - HOST_LAUNCH_LATENCY), 2)
        row[f"{label}_load"] = figures["load_cycles"]
        row[f"{label}_execute"] = figures["execute_cycles"]
        row[f"{label}_launch"] = overhead
        row["round_trip_cycles"] = round(round_trip / peak)
        row[f"{label}_lost_overlap"] = extra - round(round_trip / peak)
    return row


def _sizes(text):
    return [int(s) for s in text.split(",") if s]


def _describe(name, params):
    if name == "attention":
        return (f"{params['mode']} L={params['seq']} H={params['heads']}/"
                f"{params['kv_heads']}")
    return "MLP " + "x".join(str(params[k]) for k in ("m", "d", "f"))


def plot(rows, path):
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = [r["point"].replace(" ", "\n", 1) for r in rows]
    fig, ax = plt.subplots(figsize=(1.6 + 1.9 * len(rows), 4.2))
    width = 0.27
    for i, r in enumerate(rows):
        ax.bar(i - width, r["fused_load"], width, color="#9ecae1")
        ax.bar(i - width, r["fused_execute"], width, bottom=r["fused_load"], color="#3182bd")
        ax.bar(i - width, r["fused_launch"], width,
               bottom=r["fused_load"] + r["fused_execute"], color="#756bb1")
        for offset, label in ((0, "unfused"), (width, "unfused-host")):
            bottom = 0
            for part, color in (("load", "#fdae6b"), ("execute", "#e6550d"),
                                ("launch", "#756bb1")):
                value = r[f"{label}_{part}"]
                ax.bar(i + offset, value, width, bottom=bottom, color=color)
                bottom += value
            ax.text(i + offset, bottom, f"{r[f'{label}_ratio']}x", ha="center",
                    va="bottom", fontsize=8)
    ax.set_xticks(range(len(rows)), labels)
    ax.set_ylabel("cycles (program loads included)")
    ax.set_title("4x4 array: fused | unfused (orchestrated) | unfused (host)",
                 fontsize=9)
    from matplotlib.patches import Patch
    ax.legend(handles=[Patch(color=c, label=t) for c, t in (
        ("#9ecae1", "fused: configuration"), ("#3182bd", "fused: execution"),
        ("#fdae6b", "unfused: configurations"), ("#e6550d", "unfused: executions"),
        ("#756bb1", "launch overhead (host latency, orchestrator)"))], fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decode", default="256,1024,4096",
                        help="decode sequence lengths (empty: none)")
    parser.add_argument("--prefill", default="64,128",
                        help="prefill sequence lengths (empty: none)")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=1)
    parser.add_argument("--prefill-heads", type=int, default=1,
                        help="query and key/value heads of the prefill points")
    parser.add_argument("--mlp", default="8:64:256,8:128:512",
                        help="MLP blocks M:D:F (Y = SiLU(X W1) W2), comma separated")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sim", choices=["native", "verilator", "model"], default="native",
                        help="native: the RTL, no Python per cycle; verilator: the RTL "
                             "under cocotb; model: the functional model (no cycles)")
    parser.add_argument("--plot", default="build/fusion/fusion.png", metavar="FILE.png")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()
    rows = []
    points = [("attention", {"seq": s, "dim": args.dim, "heads": args.heads,
                             "kv_heads": args.kv_heads, "mode": "decode", "causal": False})
              for s in _sizes(args.decode)]
    points += [("attention", {"seq": s, "dim": args.dim, "heads": args.prefill_heads,
                              "kv_heads": args.prefill_heads, "mode": "prefill",
                              "causal": False}) for s in _sizes(args.prefill)]
    points += [("mlp", dict(zip(("m", "d", "f"), map(int, shape.split(":")), strict=True)))
               for shape in args.mlp.split(",") if shape]
    for name, params in points:
        row = measure(name, params, args)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{row['point']:28s} ok={row['ok']} fused={row['fused']} "
                  f"unfused={row.get('unfused')} host={row.get('unfused-host')} "
                  f"bound={row['fused_bound']} ({row['fused_binding']}) / "
                  f"{row['unfused_bound']}", flush=True)
    if not args.json and args.sim != "model":
        print("\n| point | ok | fused | unfused (orchestrated) | ratio "
              "(device) | unfused (host) | ratio (device) | configurations | executions "
              "(fused) | launch "
              "overhead (fused / orch. / host) | intermediates round trip | lost overlap "
              "| bound (fused / unfused) | share (fused / orch. / host) |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['point']} | {r['ok']} "
                  f"| {r['fused']} | {r['unfused']} | {r['unfused_ratio']}x "
                  f"({r['unfused_device_ratio']}x) "
                  f"| {r['unfused-host']} | {r['unfused-host_ratio']}x "
                  f"({r['unfused-host_device_ratio']}x) "
                  f"| {r['unfused_load']} ({r['fused_load']}) "
                  f"| {r['unfused_execute']} ({r['fused_execute']}) "
                  f"| {r['fused_launch']} / {r['unfused_launch']} / {r['unfused-host_launch']} "
                  f"| {r['round_trip_bytes']} B, {r['round_trip_cycles']} cyc "
                  f"| {r['unfused_lost_overlap']} "
                  f"| {r['fused_bound']} ({r['fused_binding']}) / {r['unfused_bound']} "
                  f"| {r['fused_share']} / {r['unfused_share']} / {r['unfused-host_share']} |")
        path = plot(rows, args.plot)
        print(f"\nplot: {path}" if path else "\nno plot: matplotlib is not installed "
              "(pip install -e '.[plots]')")
        print(f"{time.perf_counter() - start:.0f} s in all")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

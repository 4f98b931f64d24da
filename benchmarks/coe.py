"""Composition of Experts benchmark (``docs/coe.md``): model switching DDR -> HBM on chip
against host -> HBM over the host link, in cycles, on the RTL; total trace time against
the HBM cache size; the footprint table.

Run: ``PYTHONPATH=software:. .venv/bin/python -m benchmarks.coe [--quick] [--sim
native|verilator]`` (the RTL for the measurements: by default on the native runner, the
same cycles as cocotb without Python per cycle; the long traces on the functional model
with the measured primitive costs). Writes ``build/coe/coe.md`` (tables),
``build/coe/coe.json`` and, when matplotlib is installed (the ``plots`` extra),
``build/coe/coe.png``.

1. Switching time against expert size: one RTL run per host link (PCIe Gen4 x16 of a
   DGX A100, Gen5 x16 of a DGX H100, scaled to the model's HBM bandwidth); in each,
   copies of expert images of several sizes from DDR and from the host window into HBM
   (one AGCU; and two AGCUs for DDR), each measured from the edge that accepted the
   ``COPY`` commands to the last ``done``.
2. Short trace end to end on the RTL (2 experts, 3 requests, 1 slot, both sources):
   measured total against the total composed from the measured primitive costs.
3. Total cycles against cache size: long traces on the functional model (every output
   checked against numpy), cycles composed from the primitive costs measured on the RTL.
4. Footprint: experts held per tier on the scaled machine and at the paper's scale.
"""

import argparse
import json
import time

import numpy as np
from rdu.apps.coe import LINKS, CoEConfig, build, measure_costs, run_coe
from rdu.runtime import Copy, Launch, Write, run_schedule
from rdu.sim.verilator import project_root

OUT = project_root() / "build" / "coe"

# Public figures (sources in docs/coe.md)
GB, TB = 1e9, 1e12
SN40L = {"hbm": 64 * GB, "ddr": 1.5 * TB, "hbm_bw": 1.8 * TB, "ddr_bw": 200 * GB,
         "sockets": 8}
DGX = {"A100": {"hbm": 8 * 80 * GB, "link": 32 * GB, "pcie": "Gen4 x16"},
       "H100": {"hbm": 8 * 80 * GB, "link": 64 * GB, "pcie": "Gen5 x16"}}
SAMBA_COE = {"experts": 150, "params": 7e9, "bytes_per_param": 2}


def switching(sizes, link, agcus_ddr=(1, 2), progress=False, sim="native"):
    """``[(bytes, source, agcus, cycles)]`` measured on the RTL in one run."""
    scenario = build(CoEConfig(experts=1, requests=1, cache=1, link=link))
    machine = scenario.machine
    rng = np.random.default_rng(7)
    steps, plan = [], []
    dst = scenario.slot_address(0)
    for nbytes in sizes:
        words = rng.integers(0, 1 << 32, nbytes // 4, dtype=np.uint32)
        for source, agcus_list in (("ddr", agcus_ddr), ("host", (1,))):
            src = machine.region(source).base + 0x10_0000
            steps.append(Write(src, words))
            for agcus in agcus_list:
                steps.append(Copy(src, dst, nbytes, agcus))
                plan.append((nbytes, source, agcus))
    steps.append(Launch(scenario.launch_program(0, 0, scenario.requests[0]["x_image"])))
    results = run_schedule(steps, sim, work_dir=OUT / f"switching-{link}",
                           memory={"host": {"bytes_per_cycle": LINKS[link]}},
                           progress=progress)
    cycles = [r.cycles for r in results if r.kind == "copy"]
    return [(*p, c) for p, c in zip(plan, cycles, strict=True)]


def footprint_paper():
    """Experts held per tier at the paper's scale, from public figures."""
    expert = SAMBA_COE["params"] * SAMBA_COE["bytes_per_param"]
    total = SAMBA_COE["experts"] * expert
    node_hbm = SN40L["sockets"] * SN40L["hbm"]
    node_ddr = SN40L["sockets"] * SN40L["ddr"]
    rows = [("SN40L node (8 sockets)", node_hbm / expert, node_ddr / expert, 1)]
    for name, dgx in DGX.items():
        rows.append((f"DGX {name} (8 x 80 GB)", dgx["hbm"] / expert, 0,
                     int(np.ceil(total / dgx["hbm"]))))
    return expert, total, rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and requests")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--sim", choices=["native", "verilator"], default="native",
                        help="native: the RTL, no Python per cycle; verilator: under cocotb")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    sizes = [4608, 16384, 65536] if not args.quick else [4608, 16384]
    report = {"switching": {}, "short_trace": {}, "cache": [], "costs": {}}
    lines = ["# CoE benchmark", ""]

    # 1. switching time against expert size
    lines += ["## Switching: copy of one expert into HBM (RTL, cycles)", "",
              "| link | expert bytes | DDR->HBM 1 AGCU | DDR->HBM 2 AGCUs | host->HBM | "
              "host / DDR |", "|---|---|---|---|---|---|"]
    for link in ("gen4", "gen5"):
        rows = switching(sizes, link, progress=args.progress, sim=args.sim)
        report["switching"][link] = rows
        by = {(b, s, a): c for b, s, a, c in rows}
        for nbytes in sizes:
            ddr, host = by[(nbytes, "ddr", 1)], by[(nbytes, "host", 1)]
            lines.append(f"| {link} | {nbytes} | {ddr} | {by[(nbytes, 'ddr', 2)]} | {host} | "
                         f"{host / ddr:.2f} |")
    print("\n".join(lines), flush=True)

    # 2. short trace on the RTL against its composed estimate
    costs = {link: measure_costs(build(CoEConfig(link=link)), progress=args.progress)
             for link in ("gen4",)}["gen4"]
    report["costs"] = vars(costs)
    lines += ["", "## Short trace end to end on the RTL against the composed estimate", "",
              f"Primitive costs measured on the RTL (expert of {build(CoEConfig()).image_bytes}"
              f" bytes): copy DDR->HBM {costs.copy_ddr}, host->HBM {costs.copy_host}, "
              f"launch (program load + execute) {costs.kernel} cycles.", "",
              "| source | requests | misses | measured cycles | composed | difference |",
              "|---|---|---|---|---|---|"]
    for source in ("ddr", "host"):
        config = CoEConfig(experts=2, requests=3, cache=1, source=source, seed=1)
        measured = run_coe(config, args.sim, work_dir=OUT / f"short-{source}",
                           progress=args.progress)
        composed = run_coe(config, "model", costs=costs)
        assert measured["ok"] and composed["ok"]
        report["short_trace"][source] = {"measured": measured["cycles"],
                                         "composed": composed["cycles"],
                                         "switch_measured": measured["switch_cycles"],
                                         "switch_composed": composed["switch_cycles"]}
        diff = (composed["cycles"] - measured["cycles"]) / measured["cycles"]
        lines.append(f"| {source} | 3 | {measured['misses']} | {measured['cycles']} | "
                     f"{composed['cycles']} | {diff:+.1%} |")
    print("\n".join(lines[-6:]), flush=True)

    # 3. total time against cache size (functional model, composed cycles)
    requests = 40 if args.quick else 100
    lines += ["", f"## Total cycles against cache size ({requests} requests, 8 experts, "
                  f"Zipf 1.2, LRU; functional model, composed from the RTL costs)", "",
              "| cache slots | hit rate | DDR source: switch | total | host source: switch "
              "| total | total host / DDR |", "|---|---|---|---|---|---|---|"]
    for cache in (1, 2, 4, 8):
        ddr = run_coe(CoEConfig(experts=8, requests=requests, cache=cache, source="ddr"),
                      "model", costs=costs)
        assert ddr["ok"]
        host_switch = ddr["misses"] * costs.copy_host
        host_total = host_switch + ddr["kernel_cycles"]
        report["cache"].append({"cache": cache, "hit_rate": ddr["hit_rate"],
                                "ddr": [ddr["switch_cycles"], ddr["cycles"]],
                                "host": [host_switch, host_total]})
        lines.append(f"| {cache} | {ddr['hit_rate']:.2f} | {ddr['switch_cycles']} | "
                     f"{ddr['cycles']} | {host_switch:.0f} | {host_total:.0f} | "
                     f"{host_total / ddr['cycles']:.2f} |")

    # 4. footprint
    scaled = build(CoEConfig()).footprint()
    expert, total, rows = footprint_paper()
    report["footprint"] = {"scaled": scaled, "paper": rows}
    lines += ["", "## Footprint: experts held per tier", "",
              f"Scaled machine (expert image {scaled['expert_bytes']} bytes, slot "
              f"{scaled['slot_bytes']}): HBM {scaled['hbm_experts']} (beside the program), "
              f"DDR {scaled['ddr_experts']}, host window {scaled['host_experts']}.", "",
              f"Paper scale: Samba-CoE {SAMBA_COE['experts']} experts x 7B params x BF16 = "
              f"{expert / GB:.0f} GB each, {total / TB:.2f} TB in all.", "",
              "| system | experts in HBM | experts in DDR | nodes to hold all 150 |",
              "|---|---|---|---|"]
    for name, hbm, ddr, nodes in rows:
        lines.append(f"| {name} | {hbm:.1f} | {ddr:.0f} | {nodes} |")
    text = "\n".join(lines) + "\n"
    (OUT / "coe.md").write_text(text)
    (OUT / "coe.json").write_text(json.dumps(report, indent=1, default=str))
    print("\n".join(lines[-(len(rows) + 12):]))
    _plot(report, sizes)
    print(f"\nwrote {OUT / 'coe.md'} ({time.perf_counter() - start:.0f} s)")


def _plot(report, sizes):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed (pip install '.[plots]'): no plot")
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for link, rows in report["switching"].items():
        by = {(b, s, a): c for b, s, a, c in rows}
        if link == "gen4":
            left.plot(sizes, [by[(b, "ddr", 1)] for b in sizes], "o-",
                      label="DDR -> HBM (on chip)")
        left.plot(sizes, [by[(b, "host", 1)] for b in sizes], "s--",
                  label=f"host -> HBM, PCIe {link}")
    left.set_xlabel("expert image (bytes)")
    left.set_ylabel("switch cycles (RTL)")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_title("Switching time against expert size")
    left.legend()
    caches = [row["cache"] for row in report["cache"]]
    right.plot(caches, [row["ddr"][1] for row in report["cache"]], "o-", label="DDR source")
    right.plot(caches, [row["host"][1] for row in report["cache"]], "s--",
               label="host source (gen4)")
    right.set_xlabel("HBM cache slots")
    right.set_ylabel("total cycles")
    right.set_title("Trace total against cache size")
    right.legend()
    fig.tight_layout()
    fig.savefig(OUT / "coe.png", dpi=100)
    print(f"wrote {OUT / 'coe.png'}")


if __name__ == "__main__":
    main()

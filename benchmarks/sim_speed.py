"""Simulation speed of the whole system, side by side (docs/simulation-speed.md).

    .venv/bin/python -m benchmarks.sim_speed [--configs 2x2,4x4] [--loop-cycles 5000]
        [--gemm 64] [--amaranth-cycles 200] [--no-cocotb] [--no-native] [--json]

For each configuration (``2x2``: the minimal machine, 4 lanes, 16 KiB PMUs; ``4x4``:
the default, 8 lanes) it measures, in one run:

* **bare C++ loop** (``rdu.sim.cpp_loop``): the Verilated ``RDUSystem`` under a
  generated ``main()``, no Python, AXI ready tied high, idle array: cycles per wall
  second and per CPU second (the CPU figure is the one to compare on a shared machine);
* **cocotb**: a ``--gemm`` cubed GEMM through ``rdu.runtime`` (Python host driver and
  memory models, VPI), cycles per second of the simulation as the runner counts them;
* **native**: the same GEMM on the native runner (``rdu.sim.native``: the same Verilated
  system, memory models and AXI ports in C++, the host's wait loops in C++ too); the
  run's cycles and outputs are checked equal to the cocotb run's;
* **Amaranth simulator** (``--amaranth-cycles``, 0 to skip): the same idle system in
  ``amaranth.sim`` (elaboration not counted).

The Verilator builds are the cached ones of ``rdu.sim.verilator.build`` (the first run
builds them: minutes each; the loop is a second, smaller Verilator build beside it).
"""

import argparse
import json
import time

CONFIGS = {
    "2x2": dict(rows=2, cols=2, lanes=4, pmu_words=4096),
    "4x4": dict(rows=4, cols=4, lanes=8, pmu_words=16384),
}


def _program(config, size):
    from rdu.frontend import gemm
    from rdu.mapper import ArrayGeometry
    geometry = ArrayGeometry(**CONFIGS[config])
    program = gemm.compile_gemm(size, size, size, geometry)
    a, b = gemm.random_inputs(size, size, size, 1)
    gemm.pack_inputs(program, a, b)
    return program


def measure_loop(config, cycles, program):
    from rdu.sim.cpp_loop import build_loop, run_loop
    from rdu.sim.verilator import build

    from hdl.system import RDUSystem
    built = build(RDUSystem, progress=True, **program.machine.system_params())
    binary, seconds, cached = build_loop(built)
    result = run_loop(binary, cycles)
    result.update(build_seconds=round(seconds, 1), build_cached=cached,
                  cocotb_build_seconds=round(built.seconds, 1))
    return result


def measure_gemm(program, sim):
    """The GEMM through ``rdu.runtime`` on ``sim`` (``verilator``: cocotb, or ``native``)."""
    from rdu.runtime import run_program
    result = run_program(program, sim, seed=1)
    return {"gemm_cycles": result.cycles, "load_cycles": result.load_cycles,
            "seconds": round(result.seconds, 2),
            "cycles_per_second": result.counters["sim_cycles_per_second"],
            "outputs": result.outputs}


def _same(first, second):
    """Whether two GEMM runs agree in cycles and output words."""
    import numpy as np
    return (first["gemm_cycles"] == second["gemm_cycles"]
            and first["load_cycles"] == second["load_cycles"]
            and first["outputs"].keys() == second["outputs"].keys()
            and all(np.array_equal(first["outputs"][k], second["outputs"][k])
                    for k in first["outputs"]))


def measure_amaranth(program, cycles):
    from amaranth.sim import Simulator

    from hdl.system import RDUSystem
    system = RDUSystem(**program.machine.system_params())
    sim = Simulator(system)
    sim.add_clock(1e-8)
    seconds = {}

    async def bench(ctx):
        await ctx.tick().repeat(4)
        start = time.perf_counter()
        await ctx.tick().repeat(cycles)
        seconds["run"] = time.perf_counter() - start
    sim.add_testbench(bench)
    sim.run()
    return {"cycles": cycles, "seconds": round(seconds["run"], 2),
            "cycles_per_second": cycles / seconds["run"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="2x2,4x4")
    parser.add_argument("--loop-cycles", type=int, default=5000)
    parser.add_argument("--gemm", type=int, default=64, help="GEMM size of the cocotb run")
    parser.add_argument("--amaranth-cycles", type=int, default=200)
    parser.add_argument("--no-cocotb", action="store_true", help="skip the cocotb run")
    parser.add_argument("--no-native", action="store_true", help="skip the native run")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for config in args.configs.split(","):
        if config not in CONFIGS:
            raise SystemExit(f"unknown configuration {config!r}; known: {', '.join(CONFIGS)}")
        program = _program(config, args.gemm)
        row = {"config": config, "loop": measure_loop(config, args.loop_cycles, program)}
        if not args.no_cocotb:
            row["cocotb"] = measure_gemm(program, "verilator")
        if not args.no_native:
            row["native"] = measure_gemm(program, "native")
        if "cocotb" in row and "native" in row:
            row["native"]["same_as_cocotb"] = _same(row["cocotb"], row["native"])
        for tier in ("cocotb", "native"):
            row.get(tier, {}).pop("outputs", None)
        if args.amaranth_cycles:
            row["amaranth"] = measure_amaranth(program, args.amaranth_cycles)
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    if args.json:
        return
    print(f"{'config':<7}{'C++ loop c/s':>14}{'(per CPU s)':>13}{'cocotb GEMM c/s':>17}"
          f"{'native GEMM c/s':>17}{'same':>6}{'Amaranth c/s':>14}{'loop build s':>14}")
    for row in rows:
        loop = row["loop"]

        def rate(tier, row=row):
            return f"{row[tier]['cycles_per_second']:.0f}" if tier in row else "-"
        same = row.get("native", {}).get("same_as_cocotb")
        same = "-" if same is None else ("yes" if same else "NO")
        print(f"{row['config']:<7}{loop['cycles_per_second']:>14.0f}"
              f"{loop['cycles_per_cpu_second']:>13.0f}{rate('cocotb'):>17}{rate('native'):>17}"
              f"{same:>6}{rate('amaranth'):>14}{loop['build_seconds']:>14}")


if __name__ == "__main__":
    main()

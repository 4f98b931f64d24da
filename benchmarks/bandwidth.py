"""Bandwidth, latency and copy benchmark of one AGCU on the HBM and DDR models.

Run: ``.venv/bin/python -m benchmarks.bandwidth`` (Verilator tier; ``--tier amaranth``
for the Python simulator, ``--quick`` for shorter streams). Prints, per model, the
achieved bytes per cycle of long read and write streams (and of a packed BF16 load,
``read bf16``, whose bound is vector_out: 16 bytes of memory per cycle) as a fraction of
the model's configured peak, the vector beats per cycle into the array, the measured
read latency against the configured one, the cycles of a 1 MiB DDR -> HBM copy against
its bandwidth bound (and a host -> HBM copy over the host link, for the model-switching
comparison), and the simulation speed of every run (cycles per second of wall time).
"""

import argparse
import time

import numpy as np
from rdu.memory_map import DDR, HBM, HOST
from rdu.sim.memory_system import default_memory_system

from hdl.agcu import AGCU, AGCUError, AGCUOp
from hdl.interfaces import ControlToken
from tb.suites.agcu import BEAT, Host, bf16_expanded_beats, roundtrip, write_config

__all__ = ["stream", "latency", "copy_1mib"]


def _linear(base, beats):
    return {"base": base, "count": [beats, 1, 1], "stride": [BEAT, 0, 0]}


async def stream(bench, *, direction, region, length):
    """One long contiguous load (``read``), packed BF16 load expanded into the array
    (``read_bf16``: ``length`` bytes from memory, twice as many vector beats) or store
    (``write``) stream by kernel execute."""
    memory = default_memory_system()
    port = memory.attach(bench, "axi")
    host = Host(bench)
    base = {"hbm": HBM.base, "ddr": DDR.base}[region] + 0x10_0000
    beats = length // BEAT
    rng = np.random.default_rng(bench.seed)
    payload = rng.integers(0, 1 << 32, length // 4, dtype=np.uint32)
    values = [int.from_bytes(payload[i * 8:(i + 1) * 8].tobytes(), "little")
              for i in range(beats)]
    vector_cycles = []
    bench.sink("control_out").expect(ControlToken.STEP)     # the launch token
    if direction == "read":
        memory.load(base, payload)
        bench.sink("vector_out").expect_all(values)
        await write_config(bench, {"load_enable": 1, "load": _linear(base, beats)})
    elif direction == "read_bf16":
        memory.load(base, payload)
        out = bench.sink("vector_out")
        out.on_transfer = lambda value, cycle: vector_cycles.append(cycle)
        out.expect_all(
            bf16_expanded_beats(payload.tobytes(), [BEAT * i for i in range(beats)]))
        await write_config(bench, {"load_enable": 1, "load_bf16": 1,
                                   "load": _linear(base, beats)})
    else:
        bench.source("vector_in").send_all(values)
        await write_config(bench, {"store_enable": 1, "store": _linear(base, beats)})
    start_cycle = bench.cycle
    error, cycles = await host.run(AGCUOp.EXECUTE, timeout=100 * beats + 10_000)
    assert error == AGCUError.NONE, f"error {AGCUError(error).name}"
    if direction == "write":
        assert np.array_equal(memory.dump(base, length, dtype=np.uint32), payload)
    traffic = port.traffic
    # reads: first to last data beat (BF16: on vector_out, the bound); writes: first
    # data beat to the last response
    if direction == "read_bf16":
        steady = vector_cycles[-1] - vector_cycles[0] + 1
    elif direction == "read":
        steady = traffic["r_last"] - traffic["r_first"] + 1
    else:
        steady = cycles - (traffic["w_first"] - start_cycle)
    # a BF16 load is bound by vector_out (one beat per cycle = half a read beat)
    vector_beats = 2 * beats if direction == "read_bf16" else beats
    link = BEAT // 2 if direction == "read_bf16" else BEAT
    peak = min(memory[region].timing.peak_bytes_per_cycle, link)
    return {"direction": direction, "region": region, "bytes": length,
            "cycles": cycles, "bytes_per_cycle": length / cycles,
            "fraction": length / cycles / peak,
            "steady_fraction": length / steady / peak, "peak": peak,
            "vector_beats_per_cycle": vector_beats / cycles}


async def latency(bench, *, region):
    """Single-beat loads, one at a time: memory latency (ar -> r at the port) per read and
    AGCU latency (command accepted -> beat on vector_out)."""
    memory = default_memory_system()
    port = memory.attach(bench, "axi")
    host = Host(bench)
    out = bench.sink("vector_out")
    base = {"hbm": HBM.base, "ddr": DDR.base}[region] + 0x20_0000
    agcu = []
    control = bench.sink("control_out")
    for _ in range(2):
        control.expect(ControlToken.STEP)
        await write_config(bench, {"load_enable": 1, "load": _linear(base, 1)})
        out.expect(0)
        error, cycles = await host.run(AGCUOp.EXECUTE, timeout=5000)
        assert error == AGCUError.NONE
        agcu.append(cycles)
    timing = memory[region].timing
    return {"region": region, "memory": port.read_latencies, "agcu_command_to_done": agcu,
            "configured_miss_hit": [timing.miss_latency, timing.hit_latency]}


async def copy_1mib(bench, *, length=1 << 20, source="ddr"):
    """DDR (or host) -> HBM copy by one AGCU command; cycles against the bandwidth bound
    of the source."""
    memory = default_memory_system()
    memory.attach(bench, "axi")
    host = Host(bench)
    src = {"ddr": DDR.base + 0x100_0000, "host": HOST.base + 0x10_0000}[source]
    dst = HBM.base + 0x80_0000
    payload = np.random.default_rng(bench.seed).integers(0, 256, length, dtype=np.uint8)
    start = time.perf_counter()
    memory.load(src, payload)
    load_seconds = time.perf_counter() - start
    error, cycles = await host.run(AGCUOp.COPY, src=src, dst=dst, length=length,
                                   timeout=4 * length)
    assert error == AGCUError.NONE
    start = time.perf_counter()
    assert np.array_equal(memory.dump(dst, length), payload)
    dump_seconds = time.perf_counter() - start
    bound = length / memory[source].timing.peak_bytes_per_cycle
    return {"bytes": length, "cycles": cycles, "bound": bound, "fraction": bound / cycles,
            "backdoor_load_s": load_seconds, "backdoor_dump_s": dump_seconds}


def compare_gateware(tier_run):
    """Python models vs gateware memory, same traffic: simulation cycles per second."""
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build, project_root

    from sim_models.gateware_memory import AGCUWithGatewareMemory
    size = 131072
    configs = {"hbm": {"latency": 100, "bandwidth": [32, 1], "write_latency": 20},
               "ddr": {"latency": 200, "bandwidth": [7, 2], "write_latency": 40}}
    print(f"{'roundtrip 128 KiB':<22}{'store B/c':>10}{'load B/c':>10}{'sim cyc/s':>11}"
          f"{'build s':>9}")
    for region, timing in configs.items():
        stats = tier_run(roundtrip, f"roundtrip-python-{region}", length=size,
                         model="python", region=region)
        r = stats.result
        print(f"{'python model ' + region:<22}{r['store_bytes_per_cycle']:>10.2f}"
              f"{r['load_bytes_per_cycle']:>10.2f}{stats.cycles_per_second:>11.0f}"
              f"{'-':>9}")
        built = build(AGCUWithGatewareMemory, toplevel="agcu_gateware",
                      memory={"size": size, **timing})
        stats = run_verilator(built, roundtrip, project_root() / "build" / "benchmarks" /
                              f"roundtrip-gateware-{region}", seed=1, watchdog=5000,
                              length=size, model="gateware")
        r = stats.result
        print(f"{'gateware model ' + region:<22}{r['store_bytes_per_cycle']:>10.2f}"
              f"{r['load_bytes_per_cycle']:>10.2f}{stats.cycles_per_second:>11.0f}"
              f"{built.seconds:>9.0f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tier", choices=["verilator", "amaranth"], default="verilator")
    parser.add_argument("--quick", action="store_true", help="shorter streams")
    parser.add_argument("--no-copy", action="store_true", help="skip the 1 MiB copy")
    parser.add_argument("--compare-gateware", action="store_true",
                        help="only compare simulation speed: Python models vs gateware "
                             "memory in Verilator (two extra builds)")
    args = parser.parse_args(argv)
    import importlib

    from rdu.sim.runner import run_amaranth, run_verilator
    from rdu.sim.verilator import build, project_root
    module = importlib.import_module("benchmarks.bandwidth")   # not __main__: the
    # Verilator process imports the body by module name

    def run(body, name, **params):
        if body.__module__ in ("__main__", module.__name__):
            body = getattr(module, body.__name__)
        if args.tier == "amaranth":
            return run_amaranth(AGCU(), body, seed=1, watchdog=5000, **params)
        test_dir = project_root() / "build" / "benchmarks" / name
        return run_verilator(build(AGCU), body, test_dir, seed=1, watchdog=5000, **params)

    if args.compare_gateware:
        compare_gateware(run)
        return
    scale = 8 if args.quick else 1
    print(f"tier: {args.tier}")
    print(f"{'stream':<16}{'bytes':>9}{'cycles':>9}{'B/cycle':>9}{'peak':>7}"
          f"{'of peak':>9}{'steady':>8}{'vec/cyc':>9}{'sim cyc/s':>11}")
    for region, length in (("hbm", 512 * 1024), ("ddr", 128 * 1024)):
        for direction in ("read", "read_bf16", "write"):
            if direction == "read_bf16" and region != "hbm":
                continue
            stats = run(stream, f"{direction}-{region}", direction=direction, region=region,
                        length=length // scale)
            r = stats.result
            print(f"{direction.replace('_', ' ') + ' ' + region:<16}{r['bytes']:>9}"
                  f"{r['cycles']:>9}{r['bytes_per_cycle']:>9.2f}{r['peak']:>7.1f}"
                  f"{r['fraction']:>9.1%}{r['steady_fraction']:>8.1%}"
                  f"{r['vector_beats_per_cycle']:>9.3f}{stats.cycles_per_second:>11.0f}")
    for region in ("hbm", "ddr"):
        stats = run(latency, f"latency-{region}", region=region)
        r = stats.result
        print(f"latency {region}: measured ar->r {r['memory']} (configured miss, hit "
              f"{r['configured_miss_hit']}); AGCU command->done {r['agcu_command_to_done']}")
    if not args.no_copy:
        stats = run(copy_1mib, "copy-1mib", length=(1 << 20) // scale)
        r = stats.result
        print(f"copy DDR->HBM {r['bytes']} bytes: {r['cycles']} cycles, bound "
              f"{r['bound']:.0f} ({r['fraction']:.1%} of the DDR bound); backdoor load "
              f"{r['backdoor_load_s']:.3f} s, dump {r['backdoor_dump_s']:.3f} s; "
              f"{stats.cycles_per_second:.0f} sim cycles/s")
        ddr_cycles_per_byte = r["cycles"] / r["bytes"]
        stats = run(copy_1mib, "copy-host", length=(1 << 17) // scale, source="host")
        r = stats.result
        print(f"copy host->HBM {r['bytes']} bytes over the host link: {r['cycles']} cycles, "
              f"bound {r['bound']:.0f} ({r['fraction']:.1%}); per byte "
              f"{r['cycles'] / r['bytes'] / ddr_cycles_per_byte:.1f}x the DDR->HBM copy; "
              f"{stats.cycles_per_second:.0f} sim cycles/s")


if __name__ == "__main__":
    main()

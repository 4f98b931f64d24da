"""The ``rdu`` command line.

``rdu sim``      run the main simulation under Verilator and print its report
``rdu speed``    simulation speed of one design in both tiers, side by side
``rdu verilog``  write Verilog of every registered design (and lint it)
``rdu compile``  compile a kernel (``gemm``) into a configuration bitstream
``rdu inspect``  print a bitstream's header and every unit's fields
``rdu run``      compile (or take) a bitstream, run it on the model or the RTL, check it

Every error is one line on stderr and a non-zero exit status.
"""

import argparse
import json
import sys
import time
from pathlib import Path

__all__ = ["main"]


class CommandError(Exception):
    """An error reported to the user as one line, exit status 2."""


def _project_root():
    from tb.verilator import project_root
    return project_root()


def _fifo_run(tier, items, seed, stall, waves_dir=None):
    from hdl.stream_fifo import StreamFIFO
    from tb.runner import run_amaranth, run_verilator
    from tb.suites.fifo import fifo_stream
    from tb.verilator import build
    params = dict(width=32, count=items, in_stall=stall, out_stall=stall)
    if tier == "amaranth":
        return run_amaranth(StreamFIFO(32, 4), fifo_stream, seed=seed, **params)
    built = build(StreamFIFO, shape=32, depth=4, waves=waves_dir is not None)
    test_dir = Path(waves_dir) if waves_dir else _project_root() / "build" / "sim" / "fifo"
    stats = run_verilator(built, fifo_stream, test_dir, seed=seed, **params)
    stats.extra["build_seconds"] = built.seconds
    stats.extra["build_cached"] = built.cached
    return stats


def cmd_sim(args):
    start = time.perf_counter()
    stats = _fifo_run("verilator", args.items, args.seed, args.stall, args.waves)
    report = {
        "design": "stream_fifo (until the tile array lands, the main job is the FIFO demo)",
        "tier": "cocotb + Verilator",
        "ok": True,
        "seed": stats.seed,
        "items": args.items,
        "stall": args.stall,
        "cycles": stats.cycles,
        "items_per_cycle": round(args.items / stats.cycles, 4),
        "sim_cycles_per_second": round(stats.cycles_per_second),
        "verilator_build_seconds": round(stats.extra["build_seconds"], 1),
        "verilator_build_cached": stats.extra["build_cached"],
        "wall_seconds": round(time.perf_counter() - start, 2),
    }
    if args.waves:
        dumps = sorted(Path(args.waves).glob("dump.*"))
        report["waves"] = str(dumps[0]) if dumps else "(no waveform written)"
    _report(report, args.json)
    return 0


def cmd_speed(args):
    rows = []
    for tier in ("amaranth", "verilator"):
        stats = _fifo_run(tier, args.items, args.seed, args.stall)
        rows.append((tier, stats.cycles, stats.seconds, stats.cycles_per_second))
    if args.json:
        print(json.dumps([dict(tier=t, cycles=c, seconds=round(s, 3), cycles_per_second=round(r))
                          for t, c, s, r in rows]))
        return 0
    print(f"stream_fifo, {args.items} items, stall={args.stall}, seed={args.seed}")
    print(f"{'tier':<12}{'cycles':>10}{'seconds':>10}{'cycles/s':>12}")
    for tier, cycles, seconds, rate in rows:
        print(f"{tier:<12}{cycles:>10}{seconds:>10.3f}{rate:>12.0f}")
    print(f"verilator / amaranth speed ratio: {rows[1][3] / rows[0][3]:.1f}x")
    return 0


def cmd_verilog(args):
    from rdu.designs import DESIGNS, get_design
    from tb.verilator import generate_verilog, lint_verilog
    names = args.designs or sorted(DESIGNS)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    failures = 0
    for name in names:
        design = get_design(name)
        start = time.perf_counter()
        path = out_dir / f"{name}.v"
        path.write_text(generate_verilog(design.instantiate(), name))
        line = f"{path}  ({time.perf_counter() - start:.1f} s)"
        if args.lint:
            ok, report = lint_verilog(path, name)
            if ok:
                line += "  lint ok"
            else:
                failures += 1
                line += "  lint FAILED:\n" + "\n".join(report.splitlines()[:40])
        print(line)
    if failures:
        raise CommandError(f"{failures} of {len(names)} designs failed verilator --lint-only")
    return 0


def _geometry(args):
    from rdu.mapper import ArrayGeometry
    return ArrayGeometry(args.rows, args.cols, args.lanes,
                         pmu_words=args.pmu_kib * 1024 // 4)


def _compile_gemm(args):
    from rdu.gemm import compile_gemm
    return compile_gemm(args.m, args.n, args.k, _geometry(args))


def cmd_compile(args):
    from rdu.bitstream import to_bytes
    start = time.perf_counter()
    program = _compile_gemm(args)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(to_bytes(program.bitstream))
    if args.program:
        program.save(args.program)
    meta = program.meta
    report = {
        "kernel": f"gemm M={meta['m']} N={meta['n']} K={meta['k']}",
        "array": f"{args.rows}x{args.cols} lanes={args.lanes}",
        "mapping": meta["mapping"],
        "tiling": (f"{meta['pcus']} PCUs x {meta['lanes']}-row blocks, {meta['passes']} "
                   f"passes, {meta['col_tiles']} column tiles, K padded to {meta['k_pad']}, "
                   f"{meta['buffers']} PMU buffers"),
        "bitstream": f"{output} ({len(program.bitstream)} words)",
        "compile_seconds": round(time.perf_counter() - start, 2),
    }
    if args.program:
        report["program"] = str(args.program)
    _report(report, args.json)
    return 0


def _unit_layouts(lanes, stages):
    from hdl.agcu import agcu_config_layout
    from hdl.pcu import pcu_config_layout
    from hdl.pmu import pmu_config_layout
    from hdl.switch import switch_config_layout
    from rdu.bitstream import UnitKind
    return {UnitKind.PCU: pcu_config_layout(lanes, stages),
            UnitKind.PMU: pmu_config_layout(),
            UnitKind.SWITCH: switch_config_layout(),
            UnitKind.AGCU: agcu_config_layout()}


def _flatten(fields, prefix=""):
    """``{"a": {"b": [1, 2]}}`` -> ``[("a.b[0]", 1), ("a.b[1]", 2)]``."""
    if isinstance(fields, dict):
        items = []
        for name, value in fields.items():
            items += _flatten(value, f"{prefix}.{name}" if prefix else name)
        return items
    if isinstance(fields, list):
        if all(isinstance(v, int) for v in fields):
            return [(prefix, fields)]
        items = []
        for index, value in enumerate(fields):
            items += _flatten(value, f"{prefix}[{index}]")
        return items
    return [(prefix, fields)]


def cmd_inspect(args):
    from rdu.bitstream import from_bytes, read_bitstream
    from rdu.unitconfig import unpack_config
    raw = Path(args.file).read_bytes()
    header, records = read_bitstream(from_bytes(raw))
    geometry = header.geometry
    layouts = _unit_layouts(geometry.lanes, args.stages)
    units = []
    for record in records:
        fields = unpack_config(layouts[record.kind], record.words)
        units.append({"kind": record.kind.name, "row": record.row, "col": record.col,
                      "words": len(record.words), "fields": fields})
    if args.json:
        print(json.dumps({"header": {"rows": geometry.rows, "cols": geometry.cols,
                                     "lanes": geometry.lanes, "version": header.version,
                                     "payload_words": header.length, "crc": header.crc},
                          "units": units}))
        return 0
    print(f"{args.file}: bitstream v{header.version}, array {geometry.rows}x{geometry.cols} "
          f"lanes={geometry.lanes}, {header.length} payload words, CRC {header.crc:#010x} ok, "
          f"{len(records)} records")
    for unit in units:
        where = (f"AGCU {unit['col']}" if unit["kind"] == "AGCU"
                 else f"{unit['kind']}({unit['row']},{unit['col']})")
        values = [(name, value) for name, value in _flatten(unit["fields"])
                  if args.all or (value != 0 and value != [0] * len(value)
                                  if isinstance(value, list) else value != 0)]
        print(f"{where}: {unit['words']} words" + ("" if values else ", all zero (idle)"))
        for name, value in values:
            print(f"    {name} = {value}")
    return 0


def cmd_run(args):
    import shutil

    import numpy as np

    from rdu import gemm
    from rdu.bitstream import Geometry, from_bytes, read_bitstream
    from rdu.runtime import run_program
    start = time.perf_counter()
    program = _compile_gemm(args)
    if args.bitstream:
        raw = Path(args.bitstream).read_bytes()
        words = from_bytes(raw)
        read_bitstream(words, Geometry(args.rows, args.cols, args.lanes))
        program.bitstream = list(words)
    a, b = gemm.random_inputs(args.m, args.n, args.k, args.seed)
    gemm.pack_inputs(program, a, b)
    waves = bool(args.waves)
    if waves and args.sim != "verilator":
        raise CommandError("--waves needs --sim verilator")
    result = run_program(program, args.sim, seed=args.seed, waves=waves,
                         progress=not args.json)
    c = gemm.unpack_output(program, result.outputs["c"])
    ok, max_abs_err = gemm.check_result(c, a, b)
    meta = program.meta
    peak = meta["peak_macs_per_cycle"]
    report = {
        "ok": ok,
        "kernel": f"gemm M={args.m} N={args.n} K={args.k}",
        "sim": args.sim,
        "seed": args.seed,
        "array": f"{args.rows}x{args.cols} lanes={args.lanes}",
        "pcus_used": meta["pcus"],
        "cycles": result.cycles,
        "macs": meta["macs"],
        "peak_macs_per_cycle": peak,
        "utilization": (round(meta["macs"] / (result.cycles * peak), 4)
                        if result.cycles else None),
        "max_abs_err": max_abs_err,
        "wall_seconds": round(time.perf_counter() - start, 2),
    }
    if args.sim == "verilator":
        report["config_cycles"] = result.counters.get("load_cycles")
        perf = result.counters.get("perf", {})
        for network in ("vector", "scalar", "control"):
            report[f"switch_{network}_stall_cycles"] = sum(
                value for name, value in perf.items()
                if name.endswith(f".{network}_stall_cycles"))
        report["pmu_read_stall_cycles"] = sum(
            value for name, value in perf.items() if name.endswith(".read_stall_cycles"))
        report["verilator_build_seconds"] = round(result.build_seconds, 1)
    if args.waves:
        if not result.waves:
            raise CommandError("the simulation wrote no waveform")
        target = Path(args.waves)
        produced = Path(result.waves).suffix       # .fst with lz4/zlib headers, else .vcd
        if target.suffix != produced:
            target = target.with_suffix(produced)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(result.waves, target)
        report["waves"] = str(target)
    if args.save:
        save = Path(args.save)
        save.mkdir(parents=True, exist_ok=True)
        np.save(save / "a.npy", np.asarray(a, np.uint32).view(np.float32))
        np.save(save / "b.npy", np.asarray(b, np.uint32).view(np.float32))
        np.save(save / "c.npy", c)
        (save / "report.json").write_text(json.dumps(report, indent=1))
        report["saved"] = str(save)
    _report(report, args.json)
    if not ok:
        raise AssertionError(f"C differs from numpy float32 A @ B beyond the FP32 "
                             f"accumulation budget (max |err| {max_abs_err:.3g})")
    return 0


def _report(report, as_json):
    if as_json:
        print(json.dumps(report))
        return
    width = max(len(key) for key in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")


def _parser():
    parser = argparse.ArgumentParser(prog="rdu", description="Reconfigurable Dataflow Unit "
                                     "model: simulate, compile, inspect.")
    commands = parser.add_subparsers(dest="command", required=True)

    sim = commands.add_parser("sim", help="run the main simulation under Verilator")
    sim.add_argument("--items", type=int, default=20000)
    sim.add_argument("--seed", type=int, default=1)
    sim.add_argument("--stall", default="random", help="none, cyclic, random, random:P")
    sim.add_argument("--waves", metavar="DIR",
                     help="write a waveform to DIR/dump.fst (or dump.vcd)")
    sim.add_argument("--json", action="store_true")
    sim.set_defaults(func=cmd_sim)

    speed = commands.add_parser("speed", help="simulation speed, Amaranth vs Verilator")
    speed.add_argument("--items", type=int, default=20000)
    speed.add_argument("--seed", type=int, default=1)
    speed.add_argument("--stall", default="random")
    speed.add_argument("--json", action="store_true")
    speed.set_defaults(func=cmd_speed)

    def array_options(command):
        command.add_argument("--rows", type=int, default=4)
        command.add_argument("--cols", type=int, default=4)
        command.add_argument("--lanes", type=int, default=8)
        command.add_argument("--pmu-kib", type=int, default=64, help="PMU capacity (KiB)")

    def gemm_options(command):
        command.add_argument("kernel", choices=["gemm"])
        command.add_argument("--m", type=int, required=True)
        command.add_argument("--n", type=int, required=True)
        command.add_argument("--k", type=int, required=True)
        array_options(command)

    compile_ = commands.add_parser("compile", help="compile a kernel into a bitstream")
    gemm_options(compile_)
    compile_.add_argument("-o", "--output", required=True, help="bitstream file to write")
    compile_.add_argument("--program", metavar="DIR",
                          help="also write the whole program (bitstream, layouts) to DIR")
    compile_.add_argument("--json", action="store_true")
    compile_.set_defaults(func=cmd_compile)

    inspect = commands.add_parser("inspect", help="print a bitstream's units and fields")
    inspect.add_argument("file")
    inspect.add_argument("--stages", type=int, default=4, help="PCU SIMD stages")
    inspect.add_argument("--all", action="store_true", help="also print zero fields")
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=cmd_inspect)

    run = commands.add_parser("run", help="compile, run and check a kernel")
    gemm_options(run)
    run.add_argument("--seed", type=int, default=1, help="seed of the random inputs")
    run.add_argument("--sim", choices=["model", "verilator"], default="model")
    run.add_argument("--bitstream", metavar="FILE",
                     help="run this bitstream instead of compiling one")
    run.add_argument("--save", metavar="DIR", help="write a.npy, b.npy, c.npy and the report")
    run.add_argument("--waves", metavar="FILE", help="write the waveform (verilator)")
    run.add_argument("--json", action="store_true")
    run.set_defaults(func=cmd_run)

    verilog = commands.add_parser("verilog", help="write Verilog of the registered designs")
    verilog.add_argument("designs", nargs="*", help="design names (default: all)")
    verilog.add_argument("-o", "--output", default="build/verilog")
    verilog.add_argument("--lint", action="store_true", help="run verilator --lint-only")
    verilog.set_defaults(func=cmd_verilog)
    return parser


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (CommandError, ValueError, OSError) as error:
        # MappingError, BitstreamError, IRError and ProgramError are ValueErrors
        print(f"rdu {args.command}: error: {error}", file=sys.stderr)
        return 2
    except AssertionError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "check failed"
        print(f"rdu {args.command}: FAILED: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

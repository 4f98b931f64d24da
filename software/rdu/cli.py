"""The ``rdu`` command line.

``rdu run``      compile a kernel (or read a program file), run it on the functional
                 model or the RTL, check it against numpy
``rdu sim``      the main job: a GEMM on the default machine under Verilator
``rdu compile``  compile a kernel into a program file (manifest + bitstream)
``rdu inspect``  print a program's manifest and every unit's fields
``rdu sweep``    a grid of kernels x shapes x machines x tiers x seeds on Ray, to a table
``rdu speed``    simulation speed of a stream FIFO in both tiers, side by side
``rdu verilog``  write Verilog of every registered design (and lint it)

Exit status: 0 ok; 1 a result differs from its reference; 2 bad input or a run that
did not end cleanly, with one line on stderr that says what and where.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from rdu.runtime import BACKENDS, SIMULATORS, RunFailure, run_kernel, run_sequence

__all__ = ["main"]


#: ``--execution`` -> how :func:`rdu.runtime.run_sequence` launches the programs.
EXECUTIONS = {"fused": None, "unfused": "orchestrated", "unfused-host": "host"}


class CommandError(Exception):
    """An error reported to the user as one line, exit status 2."""


def _project_root():
    from rdu.sim.verilator import project_root
    return project_root()


def _fifo_run(tier, items, seed, stall, waves_dir=None):
    from hdl.stream_fifo import StreamFIFO
    from rdu.sim.runner import run_amaranth, run_verilator
    from rdu.sim.speed import fifo_stream
    from rdu.sim.verilator import build
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
    """The main job: a GEMM on the default machine under Verilator (``make sim``)."""
    args.target, args.sim = "gemm", "verilator"
    return cmd_run(args)


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
    from rdu.apps.designs import DESIGNS, get_design
    from rdu.sim.verilator import generate_verilog, lint_verilog
    ip_designs = sorted(name for name, design in DESIGNS.items() if design.module == "hdl.ip")
    if args.ip:
        names = args.designs or ip_designs
        wrong = [name for name in names if name not in ip_designs]
        if wrong:
            raise CommandError(f"--ip writes IP tops ({', '.join(ip_designs)}), not "
                               f"{', '.join(map(repr, wrong))}")
    else:
        names = args.designs or sorted(DESIGNS)
    out_dir = Path(args.output)
    out_dir.mkdir(parents=True, exist_ok=True)
    if args.ip:
        from rdu.apps.ip import DOC_NAME, HEADER_NAME, write_header, write_register_doc
        print(write_header(out_dir / HEADER_NAME))
        print(write_register_doc(out_dir / DOC_NAME))
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


# -- machines and programs ------------------------------------------------------------------

def _machine_overrides(args):
    """The machine parameters given on the command line, as Machine fields."""
    from rdu.machine import MACHINE_OPTIONS
    overrides = {field: getattr(args, option) * scale
                 for option, (field, scale, _) in MACHINE_OPTIONS.items()
                 if getattr(args, option, None) is not None}
    if getattr(args, "pcu", None) is not None:
        overrides["pcu"] = args.pcu
    return overrides


def _machine(args, defaults=None):
    """The machine of the command line; ``defaults``: Machine fields a kernel needs
    unless the options say otherwise."""
    from rdu.machine import Machine
    return Machine(**{**(defaults or {}), **_machine_overrides(args)})


def _check_output(path, directory=False):
    """Fail now, before any work, if ``path`` cannot be written."""
    path = Path(path)
    target = path if directory else path.parent
    blocking = next((parent for parent in [target, *target.parents]
                     if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise CommandError(f"cannot write {'directory' if directory else 'file'} {path}: "
                           f"{blocking} is a file, not a directory")
    try:
        target.mkdir(parents=True, exist_ok=True)
        probe = target / f".rdu-write-test-{id(path)}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise CommandError(f"cannot write {'directory' if directory else 'file'} {path}: "
                           f"{error.strerror or error}") from None
    if directory and path.exists() and not path.is_dir():
        raise CommandError(f"cannot write directory {path}: it is a file")
    if not directory and path.is_dir():
        raise CommandError(f"cannot write file {path}: it is a directory")


def _load_array(path, option):
    import numpy as np
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise CommandError(f"{option} {path}: no such file") from None
    except (ValueError, OSError):
        raise CommandError(f"{option} {path}: not a .npy array of numbers") from None


def _size_option(args, name):
    """A kernel size option's value (an option that is also a tensor of another kernel,
    ``--k``, arrives as text)."""
    value = getattr(args, name, None)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise CommandError(f"--{name} {value}: a size here, not a number") from None
    return value


def _kernel_params(args, kernel, arrays):
    """The kernel's shape parameters and choices from its options and the user's arrays."""
    implied = kernel.params_from_inputs(arrays)
    params = {}
    for name, (_, default, _) in kernel.choices.items():
        given = getattr(args, name, None)
        params[name] = default if given is None else given
    for name in kernel.params:
        option = "--" + name.replace("_", "-")
        given, found = _size_option(args, name), implied.get(name)
        if given is not None and found is not None and given != found:
            raise CommandError(f"{option} {given} contradicts the input arrays "
                               f"({name.upper()} = {found})")
        value = given if given is not None else found
        if value is None and name in kernel.defaults:
            value = kernel.defaults[name][0](params)
        if value is None:
            raise CommandError(f"{kernel.name} needs {option} (or input arrays that "
                               f"fix it)")
        if value < 1:
            raise CommandError(f"{option} must be at least 1, not {value}")
        params[name] = value
    return params


def _program_for(args):
    """The program of ``rdu run``/``compile``: compiled from the kernel's options or
    read from a program file; the user's arrays (``--a``...) with it."""
    from rdu.kernels import KERNELS, get_kernel
    from rdu.program import Program
    arrays, sources = {}, {}
    target = args.target
    if target in KERNELS:
        kernel = get_kernel(target)
        for tensor in kernel.inputs:
            path = getattr(args, tensor, None)
            if path:
                arrays[tensor] = _load_array(path, f"--{tensor}")
                sources[tensor] = f"--{tensor} {path}"
        params = _kernel_params(args, kernel, arrays)
        if getattr(args, "execution", "fused") != "fused":
            from rdu.apps.unfused import compile_unfused
            kernel.graph(params)            # the kernel's own checks of its shape
            return kernel, compile_unfused(kernel.name, _machine(args, kernel.machine),
                                           **params), arrays, sources
        state = []
        program = kernel.compile(_machine(args, kernel.machine), state=state,
                                 passes=getattr(args, "passes_selected", None),
                                 skip=getattr(args, "passes_skipped", ()), **params)
        compilation = args.compilation = state[0]
        dump = getattr(args, "dump_after", None)
        if dump:
            for name, text in compilation.dumps.items():
                if dump in (name, "all"):
                    print(f"== after {name} ({compilation.seconds[name] * 1000:.1f} ms)\n"
                          f"{text}", file=sys.stderr)
        return kernel, program, arrays, sources
    if getattr(args, "execution", "fused") != "fused":
        raise CommandError(f"{target}: a program file is one configuration; --execution "
                           f"{args.execution} compiles a kernel by name")
    if args.target.endswith(".bin"):
        raise CommandError(f"{target}: a bare bitstream carries no shapes or tensors; "
                           f"compile a program file with 'rdu compile ... -o FILE.rdu'")
    program = Program.read(target)
    kernel = get_kernel(program.kernel)
    for name in (*kernel.params, *kernel.choices):
        given = _size_option(args, name) if name in kernel.params else getattr(args, name,
                                                                                 None)
        if given is not None and given != program.params.get(name):
            raise CommandError(f"{target} was compiled for {name.upper()}="
                               f"{program.params.get(name)}, not {given} "
                               f"(--{name.replace('_', '-')})")
    overrides = _machine_overrides(args)
    if overrides:
        wanted = program.machine.replace(**overrides)
        difference = program.machine.mismatch(wanted)
        if difference:
            raise CommandError(f"{target} was compiled for another machine: {difference}")
    for tensor in kernel.inputs:
        path = getattr(args, tensor, None)
        if path:
            arrays[tensor] = _load_array(path, f"--{tensor}")
            sources[tensor] = f"--{tensor} {path}"
    return kernel, program, arrays, sources


def _pass_selection(args):
    """The passes ``rdu compile`` runs (``--passes``, ``--skip``), checked: one line
    naming a pass that does not exist or whose input a skipped pass writes."""
    from rdu.compiler import PIPELINE, PassSelectionError
    from rdu.compiler.core import select_passes
    from rdu.kernels import KERNELS
    passes = [name.strip() for name in args.passes.split(",")] if args.passes else None
    skip = tuple(args.skip or ())
    if (passes or skip) and args.target not in KERNELS:
        raise CommandError(f"{args.target}: --passes and --skip compile a kernel by name")
    try:
        names = select_passes(PIPELINE, passes, skip)
    except PassSelectionError as error:
        raise CommandError(f"{'--skip' if skip else '--passes'}: {error}") from None
    return passes, skip, names[-1] == PIPELINE[-1]


def cmd_compile(args):
    start = time.perf_counter()
    args.passes_selected, args.passes_skipped, emits = _pass_selection(args)
    if emits and not args.output:
        args.usage_error("the following arguments are required: -o/--output")
    if args.output:
        _check_output(args.output)
    kernel, program, _, _ = _program_for(args)
    if program is None:
        ran = ", ".join(args.compilation.seconds)
        _report({"passes": ran, "program": "none (emit did not run: no file written)",
                 "compile_seconds": round(time.perf_counter() - start, 2)}, args.json)
        return 0
    program.write(args.output)
    if args.bitstream:
        from rdu.bitstream import to_bytes
        _check_output(args.bitstream)
        Path(args.bitstream).write_bytes(to_bytes(program.bitstream))
    meta = program.meta
    report = {
        "kernel": kernel.describe(program),
        "machine": program.machine.describe(),
        "mapping": meta["mapping"],
        "tiling": meta["tiling"],
        "program": f"{args.output} ({len(program.bitstream)} bitstream words)",
        "compile_seconds": round(time.perf_counter() - start, 2),
    }
    if args.bitstream:
        report["bitstream"] = args.bitstream
    _report(report, args.json)
    return 0


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


def _is_zero(value):
    if isinstance(value, list):
        return all(_is_zero(v) for v in value)
    if isinstance(value, dict):
        return all(_is_zero(v) for v in value.values())
    return value in (0, "NONE", "PASS", "PREV", "SIMD")


def cmd_inspect(args):
    from rdu.bitstream import from_bytes, read_bitstream
    from rdu.program import MAGIC, Program
    from rdu.units.registry import UNITS
    path = Path(args.file)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CommandError(f"{path}: no such file") from None
    program = None
    if raw[:len(MAGIC)] == MAGIC:
        program = Program.from_bytes(raw, str(path))
        words = program.bitstream
        stages = program.machine.stages
    else:
        words = from_bytes(raw)
        stages = args.stages
    header, records = read_bitstream(words)
    geometry = header.geometry
    units = []
    for record in records:
        pieces = UNITS[record.kind]
        fields = pieces.decode(record.words, geometry.lanes, stages)
        units.append({"kind": record.kind.name, "row": record.row, "col": record.col,
                      "words": len(record.words),
                      "fields": fields if args.raw else pieces.named_fields(fields)})
    if args.json:
        print(json.dumps({"manifest": program.manifest() if program else None,
                          "header": {"rows": geometry.rows, "cols": geometry.cols,
                                     "lanes": geometry.lanes, "version": header.version,
                                     "payload_words": header.length, "crc": header.crc},
                          "units": units}))
        return 0
    if program:
        manifest = program.manifest()
        print(f"{path}: program {program.name!r}, kernel "
              f"{program.kernel} " + " ".join(f"{k.upper()}={v}"
                                             for k, v in program.params.items()))
        print(f"  machine: {program.machine.describe()}, AGCUs at "
              f"{', '.join(f'{side} of row {row}' for side, row in program.machine.positions())}"
              f", HBM {program.machine.hbm_bytes >> 20} MiB, DDR "
              f"{program.machine.ddr_bytes >> 20} MiB")
        print(f"  bitstream at {program.bitstream_address:#x} ({len(words)} words), "
              f"EXECUTE on AGCU {', '.join(map(str, program.execute))}")
        for name, tensor in manifest["tensors"].items():
            print(f"  {tensor['role']:<6} {name}: {tensor['dtype']} "
                  f"{'x'.join(map(str, tensor['shape']))} at {tensor['address']:#x} "
                  f"({tensor['words']} words), {tensor['layout']}")
    print(f"{path}: bitstream v{header.version}, array {geometry.rows}x{geometry.cols} "
          f"lanes={geometry.lanes}, {header.length} payload words, CRC {header.crc:#010x} ok, "
          f"{len(records)} records" + ("" if program else f" (PCU fields decoded with "
                                                          f"{stages} stages: --stages)"))
    for unit in units:
        where = (f"AGCU {unit['col']}" if unit["kind"] == "AGCU"
                 else f"{unit['kind']}({unit['row']},{unit['col']})")
        values = [(name, value) for name, value in _flatten(unit["fields"])
                  if args.all or not _is_zero(value)]
        print(f"{where}: {unit['words']} words" + ("" if values else ", all zero (idle)"))
        for name, value in values:
            print(f"    {name} = {value}")
    return 0


def _sim_names(test):
    """``"a, b or c"``: the back ends (``--sim`` names) that pass ``test``."""
    names = [name for name, backend in BACKENDS.items() if test(backend)]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


class WrongResult(Exception):
    """The hardware's (or model's) result differs from the reference: exit 1."""


def cmd_run(args):
    import shutil

    import numpy as np

    start = time.perf_counter()
    backend = BACKENDS[args.sim]
    if args.save:
        _check_output(args.save, directory=True)
    if args.waves:
        if not backend.timed:
            raise CommandError(f"--waves needs the RTL: --sim "
                               f"{_sim_names(lambda b: b.timed)} (the functional model "
                               f"has no signals)")
        _check_output(args.waves)
    execution = getattr(args, "execution", "fused")    # rdu sim: always fused
    unfused = execution != "fused"
    if unfused and not backend.schedules:
        raise CommandError(f"--execution {execution} runs on --sim "
                           f"{_sim_names(lambda b: b.schedules)} (the IP block runs one "
                           f"program per start)")
    if unfused and args.waves:
        raise CommandError("--waves is for --execution fused (one program)")
    kernel, program, arrays, sources = _program_for(args)
    if arrays and set(arrays) != set(kernel.inputs):
        missing = sorted(set(kernel.inputs) - set(arrays))
        raise CommandError(f"give every input or none: missing "
                           f"{', '.join('--' + m for m in missing)}")
    inputs = (kernel.user_inputs(program, arrays, sources) if arrays
              else kernel.random_inputs(program, args.seed))
    if unfused:
        figures, results, _ = run_sequence(
            kernel, program, inputs, args.sim, seed=args.seed, progress=not args.json,
            timeout=args.timeout, execution=EXECUTIONS[execution])
        result = None
    else:
        figures, results, result = run_kernel(kernel, program, inputs, args.sim,
                                              seed=args.seed, waves=bool(args.waves),
                                              progress=not args.json, timeout=args.timeout)
    ok, max_abs_err = figures["ok"], figures["max_abs_err"]
    report = {
        "ok": ok,
        "kernel": kernel.describe(program),
        "sim": args.sim,
        "execution": execution,
        "seed": args.seed,
        "inputs": ", ".join(sources.values()) if sources else f"random (seed {args.seed})",
        "machine": program.machine.describe(),
        **{name: value for name, value in figures.items() if name != "ok"},
        "wall_seconds": round(time.perf_counter() - start, 2),
    }
    if args.waves:
        if not result.waves:
            raise CommandError("the simulation wrote no waveform")
        target = Path(args.waves)
        produced = Path(result.waves).suffix       # .fst with lz4/zlib headers, else .vcd
        if target.suffix != produced:
            target = target.with_suffix(produced)
        shutil.copyfile(result.waves, target)
        report["waves"] = str(target)
    if args.save:
        save = Path(args.save)
        for tensor, words in inputs.items():
            np.save(save / f"{tensor}.npy", np.asarray(words, np.uint32).view(np.float32))
        for tensor, values in results.items():
            np.save(save / f"{tensor}.npy", values)
        (save / "report.json").write_text(json.dumps(report, indent=1))
        report["saved"] = str(save)
    _report(report, args.json)
    if not ok:
        raise WrongResult(f"{', '.join(results)} differs from numpy (float64 of the same "
                          f"BF16 inputs) beyond the FP32 accumulation budget (max |err| "
                          f"{max_abs_err:.3g})")
    return 0


def _list_of(kind, name):
    """An argparse type: ``"16,32"`` -> ``[16, 32]`` (``kind`` each)."""
    def parse(text):
        values = []
        for item in text.split(","):
            item = item.strip()
            try:
                values.append(kind(item))
            except ValueError:
                raise argparse.ArgumentTypeError(f"{name}: {item!r} is not "
                                                 f"{'an integer' if kind is int else 'valid'}"
                                                 ) from None
            if kind is int and values[-1] < (0 if name == "seed" else 1):
                raise argparse.ArgumentTypeError(f"{name}: {item} is out of range")
        return values
    return parse


def _resource(text):
    name, _, amount = text.partition("=")
    try:
        value = float(amount) if amount else 1.0
    except ValueError:
        value = -1
    if not name or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME or NAME=AMOUNT (AMOUNT > 0)")
    return name, value


def cmd_sweep(args):
    from rdu.apps.sweep import load_grid, run_sweep
    from rdu.machine import MACHINE_OPTIONS
    overrides = {}
    if args.kernel:
        overrides["kernels"] = args.kernel
    shape = {name: getattr(args, name) for name in _shape_names()
             if getattr(args, name) is not None}
    if shape:
        overrides["shape"] = shape
    machine = {option: getattr(args, option) for option in MACHINE_OPTIONS
               if getattr(args, option) is not None}
    if machine:
        overrides["machine"] = machine
    if args.tier:
        overrides["tiers"] = args.tier
    if args.seed:
        overrides["seeds"] = args.seed
    table = Path(args.out)
    if args.grid is None and not overrides:
        if not (args.plot or args.compare):
            raise CommandError("give a grid file (GRID.toml) or the grid's options "
                               "(--kernel ...), or --plot/--compare for an existing table")
        if not table.exists():
            raise CommandError(f"{table}: no such table (run a sweep first)")
        if args.plot:
            _sweep_plots(args, table)
        return _sweep_compare(args, table) if args.compare else 0
    if args.grid is not None and args.grid.endswith((".csv", ".rdu")):
        raise CommandError(f"{args.grid}: a grid is a TOML file (the table goes to --out)")
    if args.grid is None and "shape" in overrides and not args.kernel:
        raise CommandError("--m/--n/--k without --kernel: say which kernels to sweep")
    grid = load_grid(args.grid, overrides)
    points = grid.points()
    if args.list:
        from rdu.apps.sweep import Table
        done = Table(table).done() if table.exists() else {}
        for point in points:
            print(f"{point.key}  {done.get(point.key, 'todo'):<13}  {point.label()}")
        return 0
    _check_output(table)
    summary = run_sweep(points, table, address=args.address, workers=args.workers,
                        cpus=args.cpus, resources=dict(args.resource or []),
                        timeout=args.timeout, retry_failed=args.retry_failed,
                        progress=not args.json)
    _report(summary, args.json)
    if args.plot:
        _sweep_plots(args, table, quiet=args.json)
    if args.compare:
        _sweep_compare(args, table)
    bad = summary["wrong"] + summary["run_error"] + summary["missing"]
    if bad:
        raise WrongResult(f"{bad} of {summary['points']} points differ from numpy or did not "
                          f"run ({summary['wrong']} wrong, {summary['run_error']} run errors"
                          f", {summary['missing']} missing); their errors are in {table}")
    return 0


def _sweep_compare(args, table):
    """``--compare REF``: the points both tables have must agree on every measured
    column (times and node aside); exit 1 naming the first difference otherwise."""
    from rdu.apps.sweep import compare_tables
    if not Path(args.compare).exists():
        raise CommandError(f"{args.compare}: no such table")
    result = compare_tables(table, args.compare)
    differences = result.pop("differences")
    result["differing"] = result["common"] - result["same"]
    if args.json:
        print(json.dumps({"compare": args.compare, **result}))
    else:
        print(f"compared with {args.compare}: {result['common']} common points, "
              f"{result['same']} the same, {result['differing']} differ "
              f"({result['only_here']} only here, {result['only_reference']} only there)")
    if differences:
        point, name, here, there = differences[0]
        raise WrongResult(f"{result['differing']} points differ from {args.compare}; "
                          f"first: point {point} {name} {here!r} vs {there!r}")
    return 0


def _sweep_plots(args, table, quiet=False):
    from rdu.apps.sweep_plots import plot_table
    directory = Path(args.plot_dir) if args.plot_dir else table.parent / f"{table.stem}-plots"
    _check_output(directory, directory=True)
    for path in plot_table(table, directory):
        if not quiet:
            print(f"plot  {path}")
    return 0


def _shape_names():
    from rdu.kernels import KERNELS
    return sorted({p for kernel in KERNELS.values() for p in kernel.params})


def _report(report, as_json):
    if as_json:
        print(json.dumps(report))
        return
    width = max(len(key) for key in report)
    for key, value in report.items():
        print(f"{key:<{width}}  {value}")


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``rdu run: error: ...``), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help that shows every option's default (where it has one)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.default not in (None, False, argparse.SUPPRESS) and \
                "%(default)" not in text and action.option_strings:
            text += " (default: %(default)s)"
        return text


def _parser():
    parser = _Parser(
        prog="rdu", formatter_class=_Formatter,
        description="Reconfigurable Dataflow Unit model: compile kernels into programs, "
                    "inspect them, run them on the functional model or the RTL.",
        epilog="Exit status: 0 ok, 1 a result differs from its reference, 2 bad input or "
               "a run that did not end cleanly (one line on stderr says what and where).")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)

    def command(name, help_text, description=None):
        return commands.add_parser(name, help=help_text, description=description or help_text,
                                   formatter_class=_Formatter)

    def machine_options(cmd, defaults):
        group = cmd.add_argument_group(
            "machine", "the system to compile for or run on (a program file records its "
                       "own; given with one, they must match it)")
        from rdu.machine import MACHINE_OPTIONS, Machine
        reference = Machine()
        for option, (field, scale, text) in MACHINE_OPTIONS.items():
            default = getattr(reference, field) // scale if defaults else None
            shown = getattr(reference, field) // scale
            group.add_argument(f"--{option.replace('_', '-')}", dest=option, type=int,
                               default=default, metavar="N",
                               help=f"{text} (default machine: {shown})")
        from hdl.pcu import PCU_KINDS
        group.add_argument("--pcu", choices=list(PCU_KINDS),
                           default=reference.pcu if defaults else None,
                           help="the PCUs the RTL is built with: standard, or fpga (the "
                                "FPGA configuration's, docs/fpga.md: the same results, "
                                "exp and reciprocal 13 and 8 cycles per vector; needs "
                                f"--lanes <= --stages) (default machine: {reference.pcu})")

    def kernel_options(cmd, run):
        from rdu.kernels import KERNELS
        cmd.add_argument("target", metavar="KERNEL" if not run else "KERNEL|PROGRAM",
                         help=f"kernel to compile ({', '.join(sorted(KERNELS))})"
                         + (", or a program file written by 'rdu compile'" if run else ""))
        kinds = "; ".join(f"{k.name}: {k.help}" for k in KERNELS.values())
        shapes = cmd.add_argument_group(f"kernel shape ({kinds})")
        params = sorted({p for k in KERNELS.values() for p in k.params})
        tensors = []
        for kernel in KERNELS.values():
            tensors += [t for t in kernel.inputs if t not in tensors]
        for name in params:
            defaults = [f"{k.name}: {k.defaults[name][1]}" for k in KERNELS.values()
                        if name in k.defaults]
            both = name in tensors and run     # a size of one kernel, a tensor of another
            users = [k.name for k in KERNELS.values() if name in k.inputs]
            shapes.add_argument(f"--{name.replace('_', '-')}", dest=name,
                                type=str if both else int,
                                metavar=f"{name.upper()}" + (f"|{name.upper()}.npy" if both
                                                             else ""),
                                help=f"{name.upper()}; with a program file it must match, "
                                     f"with input arrays it can be left out"
                                     + (f" (default {', '.join(defaults)})" if defaults
                                        else "")
                                     + (f"; for {', '.join(users)}: the tensor "
                                        f"{name.upper()} as a float .npy array" if both
                                        else ""))
        for kernel in KERNELS.values():
            for name, (values, default, text) in kernel.choices.items():
                if values == (False, True):         # a flag
                    shapes.add_argument(f"--{name}", action="store_const", const=True,
                                        default=None, help=text)
                else:
                    shapes.add_argument(f"--{name}", choices=values, default=None,
                                        help=f"{text} (default {default})")
        if run:
            data = cmd.add_argument_group(
                "data", "the kernel's inputs as float .npy arrays (rounded to BF16); "
                        "default: random with --seed")
            for tensor in tensors:
                if tensor in params:
                    continue                    # the size option takes it (above)
                users = [k.name for k in KERNELS.values() if tensor in k.inputs]
                data.add_argument(f"--{tensor}", metavar=f"{tensor.upper()}.npy",
                                  help=f"{tensor.upper()} ({', '.join(users)})")
        machine_options(cmd, defaults=False)

    def run_options(cmd, sim_choice=True):
        cmd.add_argument("--seed", type=int, default=1,
                         help="seed of the random inputs and of the simulation")
        if sim_choice:
            cmd.add_argument("--execution", choices=list(EXECUTIONS), default="fused",
                             help="fused: the kernel as one configuration; unfused: one "
                                  "configuration per operator, intermediates through HBM, "
                                  "the launches run by the on-chip orchestrator; "
                                  "unfused-host: the same launched one by one by the host "
                                  "(docs/fusion.md)")
            cmd.add_argument("--sim", choices=list(SIMULATORS),
                             default="model",
                             help="model: the functional model (seconds, no cycles); "
                                  "verilator: the RTL (cycle-accurate) under cocotb; "
                                  "native: the same RTL and cycles with the memory models "
                                  "in C++, several times faster "
                                  "(docs/simulation-speed.md); ip: the RTL as an "
                                  "IP block, driven over AXI4-Lite on cocotbext-axi models "
                                  "(docs/ip.md)")
        cmd.add_argument("--timeout", type=int, metavar="CYCLES",
                         help="watchdog: cycles a launch may take (default: 4x an "
                              "estimate from the program)")
        cmd.add_argument("--save", metavar="DIR",
                         help="write the inputs, outputs (.npy) and the report to DIR")
        cmd.add_argument("--waves", metavar="FILE",
                         help="write the waveform (verilator, native or ip; .fst, or "
                              ".vcd without the FST libraries)")
        cmd.add_argument("--json", action="store_true", help="print the report as JSON")

    run = command("run", "run a kernel or a program file and check its result",
                  "Compile (KERNEL) or read (PROGRAM file) a program, run it on the "
                  "functional model or the RTL, check the result against numpy.")
    kernel_options(run, run=True)
    run_options(run)
    run.set_defaults(func=cmd_run)

    sim = command("sim", "the main job: a GEMM on the default machine under Verilator",
                  "Run C = A B (BF16 in, FP32 out) on the RTL of the default machine "
                  "(the first run builds it), check it against numpy and report cycles and "
                  "utilisation: what 'make sim' runs.")
    for name, default in (("m", 64), ("n", 64), ("k", 64)):
        sim.add_argument(f"--{name}", type=int, default=default, metavar=name.upper(),
                         help=f"GEMM {name.upper()}")
    sim.add_argument("--a", metavar="A.npy", help="A as a float .npy array")
    sim.add_argument("--b", metavar="B.npy", help="B as a float .npy array")
    machine_options(sim, defaults=True)
    run_options(sim, sim_choice=False)
    sim.set_defaults(func=cmd_sim)

    compile_ = command("compile", "compile a kernel into a program file (manifest + "
                                  "bitstream)")
    kernel_options(compile_, run=False)
    compile_.add_argument("-o", "--output", metavar="FILE.rdu",
                          help="program file to write (required when emit runs)")
    compile_.add_argument("--bitstream", metavar="FILE.bin",
                          help="also write the bare bitstream (what AGCU 0 loads)")
    compile_.add_argument("--json", action="store_true", help="print the report as JSON")
    from rdu.compiler import PIPELINE
    compile_.add_argument("--dump-after", metavar="PASS", choices=[*PIPELINE, "all"],
                          help=f"print what a pass produced, with its time, on stderr "
                               f"({', '.join(PIPELINE)} or all)")
    compile_.add_argument("--passes", metavar="P1,P2,...",
                          help=f"run only these passes, in pipeline order "
                               f"({','.join(PIPELINE)}); each must find what it reads "
                               f"written by a pass before it, e.g. fuse,tile,lower (no "
                               f"program is written without emit)")
    compile_.add_argument("--skip", metavar="PASS", action="append",
                          help="leave pass PASS out (repeatable; --skip check: no "
                               "deadlock check); refused when a pass after it reads "
                               "what it writes")
    compile_.set_defaults(func=cmd_compile, usage_error=compile_.error)

    inspect = command("inspect", "print a program's manifest and every unit's fields")
    inspect.add_argument("file", help="a program file (.rdu) or a bare bitstream")
    inspect.add_argument("--stages", type=int, default=4,
                         help="PCU SIMD stages, for a bare bitstream (a program file "
                              "records them)")
    inspect.add_argument("--all", action="store_true", help="also print zero fields")
    inspect.add_argument("--raw", action="store_true",
                         help="codes as numbers (default: routes, modes and ops by name)")
    inspect.add_argument("--json", action="store_true", help="print everything as JSON")
    inspect.set_defaults(func=cmd_inspect)

    speed = command("speed", "simulation speed of a stream FIFO, Amaranth vs Verilator")
    speed.add_argument("--items", type=int, default=20000, help="items streamed")
    speed.add_argument("--seed", type=int, default=1, help="seed of the stall patterns")
    speed.add_argument("--stall", default="random",
                       help="stall pattern: none, cyclic, random, random:P")
    speed.add_argument("--json", action="store_true", help="print the table as JSON")
    speed.set_defaults(func=cmd_speed)

    sweep = command(
        "sweep", "run a grid of kernels, shapes, machines, tiers and seeds on Ray",
        "Compile, run and check every point of a grid (kernels x shapes x machines x "
        "tiers x seeds) as Ray tasks, and append each point's figures to a CSV table; "
        "points already in the table are skipped (docs/sweep.md). Lists are comma "
        "separated; an option replaces the grid file's entry.")
    sweep.add_argument("grid", nargs="?", metavar="GRID.toml",
                       help="the grid (kernels, [shape], [machine], tiers, seeds)")
    from rdu.kernels import KERNELS
    sweep.add_argument("--kernel", type=_list_of(str, "kernel"), metavar="K[,K...]",
                       help=f"kernels ({', '.join(sorted(KERNELS))})")
    for name in _shape_names():
        sweep.add_argument(f"--{name}", type=_list_of(int, name), metavar=f"{name.upper()}[,...]",
                           help=f"values of {name.upper()} (each kernel takes the "
                                f"parameters it has)")
    grid_machine = sweep.add_argument_group(
        "machine", "values of each machine parameter (their product is swept; one left "
                   "out keeps the default machine's value)")
    from rdu.machine import MACHINE_OPTIONS as _OPTIONS
    for option, (_, _, text) in _OPTIONS.items():
        grid_machine.add_argument(f"--{option.replace('_', '-')}", dest=option,
                                  type=_list_of(int, option), metavar="N[,...]", help=text)
    sweep.add_argument("--tier", type=_list_of(str, "tier"), metavar="T[,T]",
                       help="model (functional model: results and traffic, no cycles), "
                            "verilator (the RTL: cycles), ip (the RTL as an IP block); "
                            "grid default: model")
    sweep.add_argument("--seed", type=_list_of(int, "seed"), metavar="S[,...]",
                       help="seeds of the random inputs (grid default: 1)")
    sweep.add_argument("-o", "--out", default="build/sweep/results.csv", metavar="FILE.csv",
                       help="the results table, appended to; its points are skipped")
    engine = sweep.add_argument_group("Ray", "where the points run")
    engine.add_argument("--address", metavar="HOST:PORT",
                        help="join this Ray cluster (default: start Ray on this machine "
                             "for the sweep)")
    engine.add_argument("--workers", type=int, metavar="N",
                        help="CPUs of the local Ray (default: all of this machine's)")
    engine.add_argument("--cpus", type=float, default=1.0, metavar="N",
                        help="CPUs each point asks for")
    engine.add_argument("--resource", type=_resource, action="append", metavar="NAME[=N]",
                        help="a custom Ray resource each point asks for (only nodes "
                             "started with it run points); repeatable")
    sweep.add_argument("--timeout", type=int, metavar="CYCLES",
                       help="RTL watchdog per point (default: 4x an estimate from the "
                            "program)")
    sweep.add_argument("--retry-failed", action="store_true",
                       help="run again the points recorded with an error or a wrong result")
    sweep.add_argument("--list", action="store_true",
                       help="print the grid's points (and whether the table has them)")
    sweep.add_argument("--plot", action="store_true",
                       help="draw plots from the table (after the sweep, if a grid is "
                            "given; needs matplotlib: the plots extra)")
    sweep.add_argument("--plot-dir", metavar="DIR",
                       help="where the plots go (default: FILE-plots/ beside the table)")
    sweep.add_argument("--compare", metavar="REF.csv",
                       help="a regression: the points this table shares with REF must "
                            "agree on every measured column (times and node aside)")
    sweep.add_argument("--json", action="store_true",
                       help="print the summary as JSON (no progress bar)")
    sweep.set_defaults(func=cmd_sweep)

    verilog = command("verilog", "write Verilog of the registered designs")
    verilog.add_argument("designs", nargs="*", help="design names (default: all)")
    verilog.add_argument("-o", "--output", default="build/verilog", help="output directory")
    verilog.add_argument("--lint", action="store_true", help="run verilator --lint-only")
    verilog.add_argument("--ip", action="store_true",
                         help="the IP tops (AXI4 ports, AXI4-Lite registers; docs/ip.md) "
                              "and their C header rdu_regs.h and register doc rdu_regs.md")
    verilog.set_defaults(func=cmd_verilog)
    return parser


def _coe_parser():
    parser = _Parser(
        prog="rdu run coe", formatter_class=_Formatter,
        description="Composition of Experts (docs/coe.md): N one-layer experts at rest in "
                    "DDR or host memory, an LRU cache of them in HBM, a seeded skewed "
                    "request trace; a miss copies the expert into HBM with AGCU COPY "
                    "commands. Every output is checked against numpy.")
    parser.add_argument("--experts", type=int, default=8, metavar="N", help="experts")
    parser.add_argument("--requests", type=int, default=30, metavar="R", help="requests")
    parser.add_argument("--cache", type=int, default=2, metavar="C",
                        help="HBM cache slots (experts held in HBM)")
    parser.add_argument("--source", choices=["ddr", "host"], default="ddr",
                        help="where the experts rest: ddr (copied on chip) or host (over "
                             "the host link, the GPU-system baseline)")
    parser.add_argument("--seed", type=int, default=1, help="seed of weights and trace")
    parser.add_argument("--zipf", type=float, default=1.2,
                        help="skew of the trace: P(rank i) ~ 1/i**ZIPF")
    parser.add_argument("--link", choices=["gen4", "gen5"], default="gen4",
                        help="host link: PCIe Gen4 x16 (DGX A100) or Gen5 x16 (DGX H100)")
    parser.add_argument("--agcus", type=int, default=1, help="AGCUs per copy")
    for name, default, text in (("m", 4, "tokens per request"),
                                ("n", 32, "expert output features"),
                                ("k", 64, "expert input features")):
        parser.add_argument(f"--{name}", type=int, default=default, metavar=name.upper(),
                            help=text)
    parser.add_argument("--sim", choices=[name for name, backend in BACKENDS.items()
                                          if backend.schedules], default="model",
                        help="model: functional model, cycles composed from primitive "
                             "costs; verilator: the RTL under cocotb, every cycle "
                             "measured; native: the same RTL and cycles, no Python per "
                             "cycle")
    parser.add_argument("--costs", choices=["analytic", "rtl"], default="analytic",
                        help="model: primitive costs from the memory parameters, or "
                             "measured once on the RTL (cached in build/coe)")
    parser.add_argument("--trace", action="store_true", help="print every request")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser


def cmd_run_coe(args):
    from rdu.apps.coe import CoEConfig, build, measure_costs, run_coe
    start = time.perf_counter()
    config = CoEConfig(experts=args.experts, requests=args.requests, cache=args.cache,
                       source=args.source, seed=args.seed, m=args.m, n=args.n, k=args.k,
                       zipf=args.zipf, agcus=args.agcus, link=args.link)
    costs = None
    if not BACKENDS[args.sim].timed and args.costs == "rtl":
        costs = measure_costs(build(config), progress=not args.json)
    report = run_coe(config, args.sim, costs=costs, progress=not args.json)
    trace = report.pop("trace")
    if args.trace:
        report["trace"] = trace
    report["wall_seconds"] = round(time.perf_counter() - start, 2)
    _report(report, args.json)
    if not report["ok"]:
        bad = [r["request"] for r in trace if not r["ok"]]
        raise WrongResult(f"requests {bad[:8]} differ from numpy (float64 of the same BF16 "
                          f"inputs) or from the hardware's arithmetic")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:2] == ["run", "coe"]:
        args = _coe_parser().parse_args(argv[2:])
        args.command, args.func = "run coe", cmd_run_coe
    else:
        args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except (CommandError, RunFailure, ValueError, OSError, _sweep_error()) as error:
        # MappingError, BitstreamError, ProgramError, MachineError and KernelInputError
        # are ValueErrors
        if isinstance(error, BrokenPipeError):
            return _closed_pipe()
        text = str(error).strip().splitlines()[0] if str(error).strip() else type(
            error).__name__
        print(f"rdu {args.command}: error: {text}", file=sys.stderr)
        return 2
    except WrongResult as error:
        print(f"rdu {args.command}: FAILED: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"rdu {args.command}: interrupted", file=sys.stderr)
        return 130


def _sweep_error():
    from rdu.apps.sweep import SweepError
    return SweepError


def _closed_pipe():
    """The reader went away (``rdu inspect FILE | head``): stop quietly."""
    import os
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``rdu sweep``: a grid of kernels x shapes x machines x tiers x seeds on Ray, to a table
(docs/sweep.md); ``--plot`` and ``--compare`` on an existing table."""

import argparse
import json
from pathlib import Path

from rdu.apps.sweep import Table, compare_tables, load_grid, run_sweep
from rdu.apps.sweep_plots import plot_table
from rdu.cli.common import CommandError, WrongResult, add_command, check_output, print_report
from rdu.frontend.kernels import KERNELS
from rdu.machine import MACHINE_OPTIONS


def list_of(kind, name):
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


def ray_resource(text):
    """An argparse type: ``"gpu=2"`` -> ``("gpu", 2.0)``, ``"fpga"`` -> ``("fpga", 1.0)``."""
    name, _, amount = text.partition("=")
    try:
        value = float(amount) if amount else 1.0
    except ValueError:
        value = -1
    if not name or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME or NAME=AMOUNT (AMOUNT > 0)")
    return name, value


def cmd_sweep(args):
    """``rdu sweep``: run the grid (or plot, compare, list it); exit 1 if a point is
    wrong or did not run."""
    overrides = {}
    if args.kernel:
        overrides["kernels"] = args.kernel
    shape = {name: getattr(args, name) for name in shape_names()
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
            sweep_plots(args, table)
        return sweep_compare(args, table) if args.compare else 0
    if args.grid is not None and args.grid.endswith((".csv", ".rdu")):
        raise CommandError(f"{args.grid}: a grid is a TOML file (the table goes to --out)")
    if args.grid is None and "shape" in overrides and not args.kernel:
        raise CommandError("--m/--n/--k without --kernel: say which kernels to sweep")
    grid = load_grid(args.grid, overrides)
    points = grid.points()
    if args.list:
        done = Table(table).done() if table.exists() else {}
        for point in points:
            print(f"{point.key}  {done.get(point.key, 'todo'):<13}  {point.label()}")
        return 0
    check_output(table)
    summary = run_sweep(points, table, address=args.address, workers=args.workers,
                        cpus=args.cpus, resources=dict(args.resource or []),
                        timeout=args.timeout, retry_failed=args.retry_failed,
                        progress=not args.json)
    print_report(summary, args.json)
    if args.plot:
        sweep_plots(args, table, quiet=args.json)
    if args.compare:
        sweep_compare(args, table)
    bad = summary["wrong"] + summary["run_error"] + summary["missing"]
    if bad:
        raise WrongResult(f"{bad} of {summary['points']} points differ from numpy or did not "
                          f"run ({summary['wrong']} wrong, {summary['run_error']} run errors"
                          f", {summary['missing']} missing); their errors are in {table}")
    return 0


def sweep_compare(args, table):
    """``--compare REF``: the points both tables have must agree on every measured
    column (times and node aside); exit 1 naming the first difference otherwise."""
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


def sweep_plots(args, table, quiet=False):
    """``--plot``: draw the table's plots into ``--plot-dir``."""
    directory = Path(args.plot_dir) if args.plot_dir else table.parent / f"{table.stem}-plots"
    check_output(directory, directory=True)
    for path in plot_table(table, directory):
        if not quiet:
            print(f"plot  {path}")
    return 0


def shape_names():
    """The shape parameters of every kernel (``m``, ``n``, ``k``, ...), sorted."""
    return sorted({p for kernel in KERNELS.values() for p in kernel.params})


def add_parsers(commands):
    """``rdu sweep`` on the subparsers object ``commands``."""
    sweep = add_command(
        commands, "sweep", "run a grid of kernels, shapes, machines, tiers and seeds on Ray",
        "Compile, run and check every point of a grid (kernels x shapes x machines x "
        "tiers x seeds) as Ray tasks, and append each point's figures to a CSV table; "
        "points already in the table are skipped (docs/sweep.md). Lists are comma "
        "separated; an option replaces the grid file's entry.")
    sweep.add_argument("grid", nargs="?", metavar="GRID.toml",
                       help="the grid (kernels, [shape], [machine], tiers, seeds)")
    sweep.add_argument("--kernel", type=list_of(str, "kernel"), metavar="K[,K...]",
                       help=f"kernels ({', '.join(sorted(KERNELS))})")
    for name in shape_names():
        sweep.add_argument(f"--{name}", type=list_of(int, name),
                           metavar=f"{name.upper()}[,...]",
                           help=f"values of {name.upper()} (each kernel takes the "
                                f"parameters it has)")
    grid_machine = sweep.add_argument_group(
        "machine", "values of each machine parameter (their product is swept; one left "
                   "out keeps the default machine's value)")
    for option, (_, _, text) in MACHINE_OPTIONS.items():
        grid_machine.add_argument(f"--{option.replace('_', '-')}", dest=option,
                                  type=list_of(int, option), metavar="N[,...]", help=text)
    sweep.add_argument("--tier", type=list_of(str, "tier"), metavar="T[,T]",
                       help="model (functional model: results and traffic, no cycles), "
                            "verilator (the RTL: cycles), ip (the RTL as an IP block); "
                            "grid default: model")
    sweep.add_argument("--seed", type=list_of(int, "seed"), metavar="S[,...]",
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
    engine.add_argument("--resource", type=ray_resource, action="append", metavar="NAME[=N]",
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

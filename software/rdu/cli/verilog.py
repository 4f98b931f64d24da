"""``rdu verilog``: write Verilog of every registered design (and lint it); ``--ip``: the
IP tops with their C header and register doc."""

import time
from pathlib import Path

from hdl.ip import RDUIP
from rdu.apps.designs import DESIGNS, get_design
from rdu.apps.ip import DOC_NAME, HEADER_NAME, write_header, write_register_doc
from rdu.cli.common import CommandError, add_command
from rdu.sim.verilator import generate_verilog, lint_verilog


def cmd_verilog(args):
    """``rdu verilog``: one .v per design (``--lint``: each linted), exit 2 if any lint
    fails."""
    ip_designs = sorted(name for name, design in DESIGNS.items() if issubclass(design.cls, RDUIP))
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


def add_parsers(commands):
    """``rdu verilog`` on the subparsers object ``commands``."""
    verilog = add_command(commands, "verilog", "write Verilog of the registered designs")
    verilog.add_argument("designs", nargs="*", help="design names (default: all)")
    verilog.add_argument("-o", "--output", default="build/verilog", help="output directory")
    verilog.add_argument("--lint", action="store_true", help="run verilator --lint-only")
    verilog.add_argument("--ip", action="store_true",
                         help="the IP tops (AXI4 ports, AXI4-Lite registers; docs/ip.md) "
                              "and their C header rdu_regs.h and register doc rdu_regs.md")
    verilog.set_defaults(func=cmd_verilog)

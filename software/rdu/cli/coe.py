"""``rdu run coe``: Composition of Experts (docs/coe.md), a command of its own parser
(``rdu run coe --help``) reached by the words ``run coe``."""

import time

from rdu.apps.coe import CoEConfig, build, measure_costs, run_coe
from rdu.cli.common import HelpFormatter, Parser, WrongResult, print_report
from rdu.runtime import BACKENDS

#: The words that start the command: ``rdu run coe ...``.
PREFIX = ["run", "coe"]


def coe_parser():
    """The parser of ``rdu run coe``."""
    parser = Parser(
        prog="rdu run coe", formatter_class=HelpFormatter,
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
    """``rdu run coe``: run the trace, report, exit 1 if a request is wrong."""
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
    print_report(report, args.json)
    if not report["ok"]:
        bad = [r["request"] for r in trace if not r["ok"]]
        raise WrongResult(f"requests {bad[:8]} differ from numpy (float64 of the same BF16 "
                          f"inputs) or from the hardware's arithmetic")
    return 0


def parse_args(argv):
    """The parsed options of ``rdu run coe`` (``argv`` after :data:`PREFIX`), with the
    command's name and handler."""
    args = coe_parser().parse_args(argv)
    args.command, args.func = " ".join(PREFIX), cmd_run_coe
    return args

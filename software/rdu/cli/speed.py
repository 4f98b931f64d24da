"""``rdu speed``: simulation speed of a stream FIFO in both tiers, side by side."""

import json
from pathlib import Path

from hdl.stream_fifo import StreamFIFO
from rdu.cli.common import add_command
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.speed import fifo_stream
from rdu.sim.verilator import build, project_root


def fifo_run(tier, items, seed, stall, waves_dir=None):
    """A stream FIFO's run statistics in ``tier`` (amaranth or verilator)."""
    params = dict(width=32, count=items, in_stall=stall, out_stall=stall)
    if tier == "amaranth":
        return run_amaranth(StreamFIFO(32, 4), fifo_stream, seed=seed, **params)
    built = build(StreamFIFO, shape=32, depth=4, waves=waves_dir is not None)
    test_dir = Path(waves_dir) if waves_dir else project_root() / "build" / "sim" / "fifo"
    stats = run_verilator(built, fifo_stream, test_dir, seed=seed, **params)
    stats.extra["build_seconds"] = built.seconds
    stats.extra["build_cached"] = built.cached
    return stats


def cmd_speed(args):
    """``rdu speed``: the FIFO in both tiers, a table of cycles and cycles per second."""
    rows = []
    for tier in ("amaranth", "verilator"):
        stats = fifo_run(tier, args.items, args.seed, args.stall)
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


def add_parsers(commands):
    """``rdu speed`` on the subparsers object ``commands``."""
    speed = add_command(commands, "speed",
                        "simulation speed of a stream FIFO, Amaranth vs Verilator")
    speed.add_argument("--items", type=int, default=20000, help="items streamed")
    speed.add_argument("--seed", type=int, default=1, help="seed of the stall patterns")
    speed.add_argument("--stall", default="random",
                       help="stall pattern: none, cyclic, random, random:P")
    speed.add_argument("--json", action="store_true", help="print the table as JSON")
    speed.set_defaults(func=cmd_speed)

"""Systolic-mode throughput of the PCU: MACs per cycle on a streamed N x N x N product.

Runs ``tb.suites.pcu.systolic_throughput`` (inputs streamed with no stalls, every result
checked bit for bit against ``rdu.models.pcu_reference``) and prints MACs/cycle as a fraction of
the lanes^2 peak, counting from the start token to the DONE token (fill and drain
included).

    .venv/bin/python -m benchmarks.systolic [--lanes 4 8] [--size 64] [--tier verilator]
"""

import argparse
import tempfile

from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.pcu import PCU
from tb.suites.pcu import systolic_throughput


def measure(lanes, size, tier, seed=1):
    """Return the body's result dict for one configuration."""
    if tier == "amaranth":
        stats = run_amaranth(PCU(lanes=lanes, stages=4), systolic_throughput, seed=seed,
                             lanes=lanes, stages=4, size=size)
    else:
        built = build(PCU, lanes=lanes, stages=4, fifo_depth=4)
        with tempfile.TemporaryDirectory() as test_dir:
            stats = run_verilator(built, systolic_throughput, test_dir, seed=seed,
                                  lanes=lanes, stages=4, size=size)
    return stats.result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--tier", choices=["verilator", "amaranth"], default="verilator")
    args = parser.parse_args(argv)
    print(f"systolic {args.size}x{args.size}x{args.size} product, tier {args.tier}")
    print(f"{'lanes':>5} {'cycles':>8} {'MACs':>9} {'MACs/cycle':>11} {'of peak':>8}")
    for lanes in args.lanes:
        result = measure(lanes, args.size, args.tier)
        print(f"{lanes:>5} {result['cycles']:>8} {result['macs']:>9} "
              f"{result['macs_per_cycle']:>11.2f} {result['utilisation']:>8.1%}")


if __name__ == "__main__":
    main()

"""Throughput of a switch merge output.

Run: ``.venv/bin/python -m benchmarks.switch_merge`` (Amaranth simulator; ``--rounds``
sets the merge rounds per pattern). For each merge count pattern (counts of north, east,
south, west, local) it feeds ``rounds x count`` random items into every listed input with
no stalls and prints the items forwarded by the merge output and the cycles from its
first to its last item (equal: one item per cycle, no gap when the merge changes input).
"""

import argparse

from rdu.sim.runner import run_amaranth

from hdl.switch import Switch
from tb.suites.switch import switch_merge_rate

PATTERNS = ([1, 1, 1, 1, 1], [3, 0, 1, 5, 2], [0, 2, 0, 0, 0], [1, 0, 0, 0, 1],
            [5, 5, 5, 5, 5])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--lanes", type=int, default=8)
    args = parser.parse_args()
    print(f"{'counts (N E S W L)':>20} {'items':>6} {'cycles':>7} {'items/cycle':>12}")
    for counts in PATTERNS:
        stats = run_amaranth(Switch(lanes=args.lanes), switch_merge_rate, seed=1,
                             lanes=args.lanes, counts=counts, rounds=args.rounds)
        items, span = stats.result["items"], stats.result["span"]
        print(f"{' '.join(map(str, counts)):>20} {items:>6} {span:>7} {items / span:>12.3f}")


if __name__ == "__main__":
    main()

"""``python -m formal [--quick] [name ...]``: run the proofs, print one line each.

Exit status 0 when every proof ended as expected (``PASS``; for the deliberately
broken designs ``FAIL``, or ``UNKNOWN`` from a failed induction step, with a
counterexample trace and the assertion named by ``fails_with`` among the failed ones).
"""

import argparse
import sys
import time

from formal.driver import run, tools_available
from formal.proofs import PROOFS


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m formal", description=__doc__)
    parser.add_argument("names", nargs="*", help="proofs to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="only the quick proofs")
    parser.add_argument("--list", action="store_true", help="list the proofs")
    args = parser.parse_args(argv)
    proofs = [p for p in PROOFS if (not args.names or p.name in args.names)
              and (not args.quick or p.quick)]
    if args.list:
        for proof in proofs:
            print(f"{proof.name:22} {proof.mode} depth {proof.depth:3} "
                  f"{'quick ' if proof.quick else ''}{proof.summary}")
        return 0
    missing = tools_available()
    if missing:
        print(f"missing formal tools: {', '.join(missing)} "
              f"(pip install -e '.[formal]')", file=sys.stderr)
        return 2
    begin = time.monotonic()
    bad = 0
    for proof in proofs:
        result = run(proof)
        ok = result.as_expected and (proof.expect == "pass" or
                                     (result.traces and result.fails_as_expected))
        bad += not ok
        print(f"{'ok  ' if ok else 'BAD '} {result.describe()}", flush=True)
    print(f"{len(proofs) - bad}/{len(proofs)} as expected in "
          f"{time.monotonic() - begin:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

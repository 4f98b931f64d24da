"""Accuracy of the PCU's reciprocal square root against float64, exhaustively.

``rdu.models.fp.rsqrt`` (bit-exact with the RTL: ``tests/test_pcu_components.py``)
depends on a positive normal input only through its 23 mantissa bits and its exponent's
parity (the rest is a power of two, applied exactly, and the result never flushes or
overflows), so the 2 x 2**23 inputs of [0.5, 2) are every case. Prints the maximum error
in units in the last place of the FP32 result, where it occurs, and the share of results
that are not correctly rounded (error over 0.5 ulp). About 40 s.

    .venv/bin/python -m benchmarks.special_accuracy [--chunk 2097152]
"""

import argparse

import numpy as np
from rdu.models import fp


def sweep(chunk):
    """``(max ulp error, the input there, inputs over 0.5 ulp, inputs)`` over [0.5, 2)."""
    worst, where, over, total = 0.0, 0.0, 0, 0
    for start in range(0x3F000000, 0x40000000, chunk):
        x = np.arange(start, min(start + chunk, 0x40000000), dtype=np.uint32)
        reference = 1.0 / np.sqrt(x.view(np.float32).astype(np.float64))
        ulp = np.spacing(np.abs(reference.astype(np.float32))).astype(np.float64)
        error = np.abs(fp.rsqrt(x).view(np.float32).astype(np.float64) - reference) / ulp
        if error.max() > worst:
            worst, where = float(error.max()), float(x.view(np.float32)[error.argmax()])
        over += int((error > 0.5).sum())
        total += x.size
    return worst, where, over, total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunk", type=int, default=1 << 21)
    args = parser.parse_args(argv)
    worst, where, over, total = sweep(args.chunk)
    print(f"rsqrt over every FP32 in [0.5, 2) ({total} inputs): max error {worst:.4f} ulp "
          f"at x = {where!r}; {over / total:.1%} not correctly rounded")


if __name__ == "__main__":
    main()

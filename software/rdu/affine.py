"""The one Python reference of the three-level affine loop of the address generators.

The AGCU's load and store patterns (``hdl.agcu.pattern_layout``: ``base``, ``count``,
``stride``) and the PMU's read and write address generators
(``hdl.pmu.address_generator_layout``: ``start``, ``bound``, ``stride``) walk the same
loop nest: level 0 innermost, level ``n`` runs ``counts[n]`` iterations, and iteration
``(i0, i1, i2)`` is at ::

    start + i0 * strides[0] + i1 * strides[1] + i2 * strides[2]

Beat ``j`` of the loop is iteration ``(j % c0, (j // c0) % c1, j // (c0 * c1))``. The
PMU's addresses wrap modulo ``2**ADDRESS_BITS`` (pass ``mask``); the AGCU's do not (an
address outside the address space is its ``ADDRESS_WRAP`` error). The hardware is in
``hdl/agcu_engines.py`` (``AffineBurstGenerator``) and ``hdl/pmu.py``
(``AffineAddressGenerator``); the functional model (:mod:`rdu.models.array`), the IR
(:class:`rdu.ir.AccessPattern`) and the test suites use the functions here.

>>> list(iter_addresses(100, (2, 2, 1), (1, 10, 0)))
[100, 101, 110, 111]
>>> addresses(0, (4, 2, 1), (1, 8, 0), first=3, count=2).tolist()
[3, 8]
"""

import numpy as np

__all__ = ["beats", "indices", "addresses", "iter_addresses", "fit"]


def beats(counts):
    """Iterations of the whole loop nest (``counts[0] * counts[1] * counts[2]``)."""
    c0, c1, c2 = counts
    return c0 * c1 * c2


def indices(counts, first=0, count=None):
    """``(i0, i1, i2)``: int64 arrays of the loop indices of beats ``first ..
    first + count - 1`` (default: to the end of the loop)."""
    c0, c1, _ = counts
    if count is None:
        count = beats(counts) - first
    j = np.arange(first, first + count, dtype=np.int64)
    return j % c0, (j // c0) % c1, j // (c0 * c1)


def addresses(start, counts, strides, first=0, count=None, *, mask=None):
    """The addresses of beats ``first .. first + count - 1`` as an int64 array, reduced
    ``& mask`` when ``mask`` is given (the PMU's wrapping addresses)."""
    i0, i1, i2 = indices(counts, first, count)
    address = start + i0 * strides[0] + i1 * strides[1] + i2 * strides[2]
    return address & mask if mask is not None else address


def iter_addresses(start, counts, strides, *, mask=None, block=4096):
    """Every address of the loop, in order, as Python ints (``& mask`` when given);
    computed :func:`addresses` ``block`` beats at a time."""
    total = beats(counts)
    for first in range(0, total, block):
        yield from addresses(start, counts, strides, first, min(block, total - first),
                             mask=mask).tolist()


def fit(sequence, most=None):
    """``(start, counts, strides)`` of a three-level loop that walks ``sequence`` (the
    addresses a stream's beats must go to, in stream order), or ``None`` when no such
    loop does. Levels are found innermost first: each is the longest run of equal steps
    that repeats through the sequence (at most ``most`` iterations: the counters'
    width).

    >>> fit([0, 1, 2, 10, 11, 12])
    (0, (3, 2, 1), (1, 10, 0))
    >>> fit([0, 5, 1]) is None
    True
    """
    sequence = np.asarray(sequence, np.int64).reshape(-1)
    if sequence.size == 0:
        return None
    counts, strides, rest = [], [], sequence
    while len(counts) < 3:
        if rest.size == 1:
            counts.append(1)
            strides.append(0)
            continue
        step = int(rest[1] - rest[0])
        run = 1
        while run < rest.size and rest[run] - rest[run - 1] == step and \
                (most is None or run < most):
            run += 1
        # the longest run of ``step`` that divides the sequence and holds all through it
        ramp = step * np.arange(rest.size, dtype=np.int64)
        while run > 1 and (rest.size % run or not np.array_equal(
                rest.reshape(-1, run) - rest.reshape(-1, run)[:, :1],
                ramp[:run] + np.zeros((rest.size // run, 1), np.int64))):
            run -= 1
        counts.append(run)
        strides.append(step if run > 1 else 0)
        rest = rest[::run]
    start = int(sequence[0])
    if int(np.prod(counts)) != sequence.size or not np.array_equal(
            addresses(start, tuple(counts), tuple(strides)), sequence):
        return None
    return start, tuple(counts), tuple(strides)

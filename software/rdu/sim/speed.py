"""The stream the ``rdu speed`` command times: random items through a FIFO under stalls.

A :class:`rdu.sim.bench.Bench` body, so the same stream runs in both simulators; the
FIFO test suite (``tb/suites/fifo.py``) uses it too.
"""

__all__ = ["fifo_stream"]


async def fifo_stream(bench, *, width, count, in_stall="random", out_stall="random",
                      corrupt_expectation=None, record=False):
    """Push ``count`` random items through the FIFO under stalls; check order and content.

    ``corrupt_expectation`` (an item index) deliberately expects a wrong value there:
    the run must then fail (the harness's own self-test). ``record`` returns the cycle
    of every output transfer (to compare the two tiers cycle by cycle).
    """
    source = bench.source("i", in_stall)
    sink = bench.sink("o", out_stall)
    items = [bench.rng.getrandbits(width) for _ in range(count)]
    expected = list(items)
    if corrupt_expectation is not None:
        expected[corrupt_expectation] ^= 1
    transfer_cycles = []
    if record:
        sink.on_transfer = lambda item, cycle: transfer_cycles.append(cycle)
    source.send_all(items)
    sink.expect_all(expected)
    await bench.streams_done(timeout=40 * count + 1000)
    return {"items": count, "cycles": bench.cycle, "transfer_cycles": transfer_cycles}

"""Test bodies for :class:`hdl.stream_fifo.StreamFIFO`, shared by both tiers."""


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


async def fifo_fill_drain(bench, *, width, depth):
    """Fill to ``depth`` with the sink stalled, check ``level`` and ``i.ready``, drain."""
    source = bench.source("i")
    sink = bench.sink("o", "cyclic:1/1000000")   # accept one item, then stall
    items = [bench.rng.getrandbits(width) for _ in range(depth + 1)]
    source.send_all(items)
    sink.expect_all(items[:1])
    await bench.cycles(depth + 8)
    level = await bench.read("level")
    ready = await bench.read("i.ready")
    assert level == depth, f"level is {level} with the sink stalled, expected {depth}"
    assert ready == 0, "i.ready is high although the FIFO is full"
    await bench.cycles(1)
    sink.stall = bench._stall("none", "o", "sink")
    sink.expect_all(items[1:])
    await bench.streams_done(timeout=10 * depth + 100)
    return {"level": level}

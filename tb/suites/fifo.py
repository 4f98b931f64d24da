"""Test bodies for :class:`hdl.stream_fifo.StreamFIFO`, shared by both tiers."""

from rdu.sim.speed import fifo_stream  # noqa: F401  (the suite's stream body)


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

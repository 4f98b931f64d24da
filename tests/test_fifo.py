"""StreamFIFO in both tiers, under every stall pattern."""

import pytest
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.stream_fifo import StreamFIFO
from tb.suites.fifo import fifo_fill_drain, fifo_stream

STALLS = ["none", "cyclic", "random", "random:0.1"]


@pytest.mark.parametrize("depth", [1, 2, 5, 8])
@pytest.mark.parametrize("in_stall,out_stall", [("none", "none"), ("random", "random"),
                                                 ("random:0.9", "random:0.2"),
                                                 ("cyclic", "random:0.9")])
def test_fifo_stream_amaranth(depth, in_stall, out_stall, seed):
    stats = run_amaranth(StreamFIFO(12, depth), fifo_stream, seed=seed, width=12, count=300,
                         in_stall=in_stall, out_stall=out_stall)
    assert stats.result["items"] == 300


def test_fifo_full_throughput_amaranth(seed):
    stats = run_amaranth(StreamFIFO(16, 4), fifo_stream, seed=seed, width=16, count=200,
                         in_stall="none", out_stall="none")
    # one item per cycle once the pipeline is primed: at most a few cycles of overhead
    assert stats.result["cycles"] <= 200 + 8


@pytest.mark.parametrize("depth", [1, 3, 4])
def test_fifo_fill_drain_amaranth(depth, seed):
    run_amaranth(StreamFIFO(8, depth), fifo_fill_drain, seed=seed, width=8, depth=depth)


def test_fifo_rejects_bad_depth():
    with pytest.raises(ValueError, match="FIFO depth must be at least 1, not 0"):
        StreamFIFO(8, 0)
    with pytest.raises(TypeError, match="FIFO depth must be an integer"):
        StreamFIFO(8, 2.0)


@pytest.mark.verilator
@pytest.mark.parametrize("in_stall,out_stall", [("none", "none"), ("random", "random"),
                                                 ("cyclic", "random:0.3")])
def test_fifo_stream_verilator(in_stall, out_stall, sim_dir, seed):
    built = build(StreamFIFO, shape=32, depth=4)
    stats = run_verilator(built, fifo_stream, sim_dir, seed=seed, width=32, count=5000,
                          in_stall=in_stall, out_stall=out_stall)
    assert stats.result["items"] == 5000


@pytest.mark.verilator
def test_fifo_fill_drain_verilator(sim_dir, seed):
    built = build(StreamFIFO, shape=32, depth=4)
    run_verilator(built, fifo_fill_drain, sim_dir, seed=seed, width=32, depth=4)


def test_flush_empties_the_fifo():
    """``flush=True``: a flush drops what is held and what is offered in that cycle; the
    FIFO then passes new items in order (the switches flush on a configuration write)."""
    from amaranth.sim import Simulator
    fifo = StreamFIFO(8, 3, flush=True)
    seen = []

    async def bench(ctx):
        for value in (1, 2, 3):
            ctx.set(fifo.i.valid, 1)
            ctx.set(fifo.i.payload, value)
            await ctx.tick()
        assert ctx.get(fifo.level) == 3
        ctx.set(fifo.i.payload, 4)
        ctx.set(fifo.flush, 1)
        await ctx.tick()
        ctx.set(fifo.flush, 0)
        assert ctx.get(fifo.level) == 0 and not ctx.get(fifo.o.valid)
        for value in (5, 6):
            ctx.set(fifo.i.payload, value)
            await ctx.tick()
        ctx.set(fifo.i.valid, 0)
        ctx.set(fifo.o.ready, 1)
        for _ in range(4):
            if ctx.get(fifo.o.valid):
                seen.append(ctx.get(fifo.o.payload))
            await ctx.tick()

    sim = Simulator(fifo)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [5, 6]

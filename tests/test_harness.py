"""The harness must be able to fail: broken expectations, hung designs, bad setups."""

import pytest
from rdu.sim.agents import Scoreboard, ScoreboardError, WatchdogTimeout
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.stalls import CyclicStall, RandomStall, stall_pattern
from rdu.sim.verilator import MIN_VERILATOR, build, ensure_verilator

from hdl.stream_fifo import StreamFIFO
from tb.faulty import StallingStage
from tb.suites.fifo import fifo_stream


def test_scoreboard_classifies_faults():
    board = Scoreboard("s")
    board.expect_all([1, 2, 3, 4])
    board.got(1, 0)
    with pytest.raises(ScoreboardError, match="lost or reordered"):
        board.got(3, 1)
    board = Scoreboard("s")
    board.expect_all([1, 2])
    board.got(1, 0)
    with pytest.raises(ScoreboardError, match="duplicated"):
        board.got(1, 1)
    board = Scoreboard("s")
    board.expect_all([1, 2])
    with pytest.raises(ScoreboardError, match="corrupted"):
        board.got(7, 0)
    board = Scoreboard("s")
    board.expect_all([1, 2])
    board.got(1, 0)
    with pytest.raises(ScoreboardError, match="1 expected items never arrived"):
        board.check_done()
    board = Scoreboard("s")
    with pytest.raises(ScoreboardError, match="was not expected"):
        board.got(5, 0)


def test_stall_patterns_are_reproducible():
    first, second = RandomStall(0.3, 42), RandomStall(0.3, 42)
    a = [first.next() for _ in range(200)]
    b = [second.next() for _ in range(200)]
    assert a == b and 20 < sum(a) < 100
    cyc = CyclicStall(2, 1)
    assert [cyc.next() for _ in range(6)] == [True, True, False] * 2
    with pytest.raises(ValueError, match="Unknown stall pattern 'sometimes'"):
        stall_pattern("sometimes")


def test_broken_expectation_fails_amaranth(seed):
    with pytest.raises(ScoreboardError, match=r"item #17 at cycle \d+ is 0x[0-9a-f]+, expected"):
        run_amaranth(StreamFIFO(16, 4), fifo_stream, seed=seed, width=16, count=50,
                     corrupt_expectation=17)


def test_watchdog_names_stalled_interface_amaranth(seed):
    with pytest.raises(WatchdogTimeout, match=r"(?s)no stream transfer for 100 cycles.*"
                                              r"source 'i': 15 items not sent"):
        run_amaranth(StallingStage(8, 5), fifo_stream, seed=seed, watchdog=100, width=8,
                     count=20, in_stall="none", out_stall="none")


def test_verilator_version_check():
    assert ensure_verilator() >= MIN_VERILATOR


@pytest.mark.verilator
def test_broken_expectation_fails_verilator(sim_dir, seed):
    built = build(StreamFIFO, shape=16, depth=4)
    with pytest.raises(AssertionError, match=r"item #17 at cycle \d+ is 0x[0-9a-f]+, expected"):
        run_verilator(built, fifo_stream, sim_dir, seed=seed, width=16, count=50,
                      corrupt_expectation=17)


@pytest.mark.verilator
def test_watchdog_stops_hung_design_verilator(sim_dir, seed):
    built = build(StallingStage, width=8, stall_after=5)
    with pytest.raises(AssertionError, match=r"(?s)watchdog.*source 'i': 15 items not sent"):
        run_verilator(built, fifo_stream, sim_dir, seed=seed, watchdog=100, width=8,
                      count=20, in_stall="none", out_stall="none")


@pytest.mark.verilator
def test_tiers_agree_cycle_for_cycle(sim_dir, seed):
    params = dict(width=16, count=400, in_stall="random", out_stall="random:0.7", record=True)
    fast = run_amaranth(StreamFIFO(16, 3), fifo_stream, seed=seed, **params)
    built = build(StreamFIFO, shape=16, depth=3)
    slow = run_verilator(built, fifo_stream, sim_dir, seed=seed, **params)
    assert fast.result["transfer_cycles"] == slow.result["transfer_cycles"]
    assert fast.cycles == slow.cycles


async def _set_after_read(bench):
    await bench.read("level")
    bench.set("o.ready", 1)


def test_set_after_read_is_refused_in_both_tiers(seed):
    with pytest.raises(RuntimeError, match=r"set\('o.ready'\) after read\(\) in the same"):
        run_amaranth(StreamFIFO(8, 2), _set_after_read, seed=seed)


@pytest.mark.verilator
def test_build_says_what_it_builds(capfd):
    """A Verilator build with ``progress`` names the design and reports its time; a
    cached build says nothing."""
    built = build(StreamFIFO, shape=11, depth=2, progress=True)
    err = capfd.readouterr().err
    if not built.cached:
        assert "[rdu.sim] building StreamFIFO(shape=11, depth=2) for Verilator" in err
        assert "[rdu.sim] built StreamFIFO(shape=11, depth=2) in " in err
    again = build(StreamFIFO, shape=11, depth=2, progress=True)
    assert again.cached and "[rdu.sim]" not in capfd.readouterr().err

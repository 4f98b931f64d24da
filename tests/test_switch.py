"""Switch: random static route tables with multicast and merges under random stalls."""

import pytest
from rdu.sim.agents import ScoreboardError
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.switch import Switch
from tb.suites.common import load_config, read_config
from tb.suites.switch import (
    merge_consumption,
    merge_order,
    random_routes,
    switch_disabled_holds,
    switch_merge_rate,
    switch_merge_restart,
    switch_random_merges,
    switch_random_routes,
    switch_words,
)

LANES = 4


@pytest.mark.parametrize("in_stall,out_stall", [("none", "none"), ("random", "random"),
                                                 ("random:0.9", "random:0.3")])
def test_switch_random_routes_amaranth(in_stall, out_stall, seed):
    stats = run_amaranth(Switch(lanes=LANES), switch_random_routes, seed=seed, lanes=LANES,
                         count=60, in_stall=in_stall, out_stall=out_stall, rounds=3)
    assert stats.result["delivered"] > 0


def test_switch_full_rate_amaranth(seed):
    """One item per cycle per route with no stalls (input FIFOs of depth 2)."""
    stats = run_amaranth(Switch(lanes=LANES), switch_random_routes, seed=seed, lanes=LANES,
                         count=200, in_stall="none", out_stall="none")
    assert stats.cycles <= 200 + 30


def test_switch_stall_counters_amaranth(seed):
    stats = run_amaranth(Switch(lanes=LANES), switch_random_routes, seed=seed, lanes=LANES,
                         count=100, in_stall="none", out_stall="random:0.3")
    assert min(stats.result["stall_cycles"]) > 0


def test_switch_disabled_holds_amaranth(seed):
    run_amaranth(Switch(lanes=LANES), switch_disabled_holds, seed=seed, lanes=LANES)


async def _readback(bench, words):
    await load_config(bench, words)
    got = await read_config(bench, len(words))
    assert got == words, f"read back {got}, wrote {words}"
    return {}


def test_switch_config_readback_amaranth(seed):
    import random
    rng = random.Random(seed)
    words = switch_words({"vector": random_routes(rng, 6), "scalar": random_routes(rng, 5),
                          "control": random_routes(rng, 5)})
    run_amaranth(Switch(lanes=LANES), _readback_body, seed=seed, words=words)


async def _readback_body(bench, *, words):
    return await _readback(bench, words)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_switch_rejects_bad_depth():
    with pytest.raises(ValueError, match="FIFO depth must be at least 1, not 0"):
        Switch(lanes=4, fifo_depth=0)


@pytest.mark.verilator
def test_switch_verilator(sim_dir, seed):
    built = build(Switch, lanes=8)
    stats = run_verilator(built, switch_random_routes, sim_dir, seed=seed, lanes=8,
                          count=2000, rounds=5)
    assert stats.result["multicasts"] > 0


# -- merge outputs ---------------------------------------------------------------------

def test_merge_reference():
    """The reference merge order on hand-worked cases."""
    items = [["n0", "n1", "n2", "n3"], [], ["s0", "s1"], [], ["l0", "l1", "l2"]]
    assert merge_order(items, [2, 0, 1, 0, 3]) == ["n0", "n1", "s0", "l0", "l1", "l2",
                                                   "n2", "n3", "s1"]
    # waits at the first input with nothing left, even if later inputs have items
    assert merge_order(items, [1, 0, 0, 0, 1]) == ["n0", "l0", "n1", "l1", "n2", "l2", "n3"]
    assert merge_order([["a"], ["b"], [], [], []], [0, 1, 0, 0, 0]) == ["b"]
    assert merge_order(items, [0] * 5) == []
    assert merge_consumption([2, 0, 1, 0, 3], 2, 4) == [6, 0, 3, 0, 7]


@pytest.mark.parametrize("in_stall,out_stall", [("random", "random"),
                                                 ("random:0.9", "random:0.3"),
                                                 ("random:0.3", "random:0.9")])
def test_switch_random_merges_amaranth(in_stall, out_stall, seed):
    stats = run_amaranth(Switch(lanes=LANES), switch_random_merges, seed=seed, lanes=LANES,
                         in_stall=in_stall, out_stall=out_stall, rounds=3,
                         merge_rounds=6, count=60)
    assert stats.result["merged"] > 0


def test_switch_merge_wrong_reference_fails_amaranth(seed):
    """A merge reference that starts at the wrong input must be caught."""
    with pytest.raises(ScoreboardError, match="sink 'vector_out|sink 'local_vector_out"):
        run_amaranth(Switch(lanes=LANES), switch_random_merges, seed=seed, lanes=LANES,
                     rounds=1, wrong_reference=True)


@pytest.mark.parametrize("how", ["config", "enable"])
def test_switch_merge_restarts_amaranth(how, seed):
    run_amaranth(Switch(lanes=LANES), switch_merge_restart, seed=seed, lanes=LANES, how=how)


@pytest.mark.parametrize("counts", [[1, 1, 1, 1, 1], [3, 0, 1, 5, 2], [0, 2, 0, 0, 0]])
def test_switch_merge_full_rate_amaranth(counts, seed):
    """A merge output forwards one item per cycle, switching inputs without a gap."""
    stats = run_amaranth(Switch(lanes=LANES), switch_merge_rate, seed=seed, lanes=LANES,
                         counts=counts, rounds=8)
    assert stats.result["items"] == 8 * sum(counts)
    assert stats.result["span"] == stats.result["items"]


@pytest.mark.verilator
def test_switch_merges_verilator(sim_dir, seed):
    built = build(Switch, lanes=8)         # the same build as test_switch_verilator
    stats = run_verilator(built, switch_random_merges, sim_dir, seed=seed, lanes=8,
                          rounds=6, merge_rounds=60, count=600)
    assert stats.result["merged"] > 0

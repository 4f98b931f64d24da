"""Switch: random static route tables with multicast under random stalls."""

import pytest

from hdl.switch import Switch
from tb.runner import run_amaranth, run_verilator
from tb.suites.common import load_config, read_config
from tb.suites.switch import (
    random_routes,
    switch_disabled_holds,
    switch_random_routes,
    switch_words,
)
from tb.verilator import build

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

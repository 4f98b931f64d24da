"""Composition of Experts (``docs/coe.md``): the scenario, the LRU cache, run_schedule's
copy steps, relocation, the command line; one short trace on the RTL.

Performance is measured by ``benchmarks/coe.py``, never asserted here.
"""

import json

import numpy as np
import pytest
from rdu import cli
from rdu.apps.coe import CoEConfig, CoEError, LRUCache, build, lru_trace, run_coe, schedule
from rdu.frontend.kernels import get_kernel
from rdu.relocate import RelocationError, relocate_image
from rdu.runtime import Copy, Launch, RunFailure, Write, run_schedule


def test_lru_hand_checked():
    # 2 slots: 0 miss->s0, 1 miss->s1, 0 hit, 2 miss evicts 1 (LRU) into s1,
    # 1 miss evicts 0 into s0, 2 hit, 0 miss evicts 1 into s0... (hand-worked)
    trace = lru_trace([0, 1, 0, 2, 1, 2, 0], 2)
    assert trace == [(False, 0, None), (False, 1, None), (True, 0, None),
                     (False, 1, 1), (False, 0, 0), (True, 1, None), (False, 0, 1)]
    cache = LRUCache(1)
    assert [cache.access(e)[0] for e in (3, 3, 4, 3)] == [False, True, False, False]


def test_trace_outputs_and_hit_rate_on_the_model():
    config = CoEConfig(experts=6, requests=30, cache=2, source="ddr", seed=3)
    report = run_coe(config, "model")
    assert report["ok"], [r for r in report["trace"] if not r["ok"]]
    assert all(r["ok"] for r in report["trace"])
    # the hit rate is the trace's: recomputed from the router's choices
    scenario = build(CoEConfig(experts=6, requests=30, cache=2, source="ddr", seed=3))
    choices = [r["expert"] for r in scenario.requests]
    hits = sum(hit for hit, _, _ in lru_trace(choices, 2))
    assert report["hits"] == hits and report["hit_rate"] == round(hits / 30, 4)
    assert [r["expert"] for r in report["trace"]] == choices
    # a skewed trace: the most used expert is used more than a uniform share
    assert max(np.bincount(choices)) > 30 / 6
    # the schedule copies once per miss, and only on a miss
    steps, records = schedule(scenario)
    assert sum(isinstance(s, Copy) for s in steps) == 30 - hits
    assert sum(isinstance(s, Launch) for s in steps) == 30


def test_host_source_same_outputs_more_switch_cycles():
    ddr = run_coe(CoEConfig(experts=4, requests=8, cache=1, source="ddr"), "model")
    host = run_coe(CoEConfig(experts=4, requests=8, cache=1, source="host"), "model")
    assert ddr["ok"] and host["ok"]
    assert ddr["hits"] == host["hits"] and ddr["misses"] == host["misses"] > 0
    assert host["switch_cycles"] > ddr["switch_cycles"]


def test_wrong_weights_are_caught():
    """An expert whose weights were not copied (a stale slot) must fail the check."""
    scenario = build(CoEConfig(experts=3, requests=4, cache=1, seed=1))
    steps, records = schedule(scenario)
    steps = [s for s in steps if not isinstance(s, Copy)]       # nothing copied to HBM
    results = run_schedule(steps, "model")
    from rdu.apps.coe import check_request
    launches = [r for r in results if r.kind == "launch"]
    assert not any(check_request(scenario, request, launch.launch.outputs)[0]
                   for request, launch in zip(scenario.requests, launches, strict=True))


def test_copy_on_two_agcus_and_errors():
    kernel = get_kernel("linear_relu")
    scenario = build(CoEConfig(experts=1, requests=1, cache=1, agcus=2))
    machine = scenario.machine
    jobs = Copy(0x4000_0000, 0x1_0000, 10 * machine.beat_bytes, 2).jobs(machine)
    assert [(a, length) for a, _, _, length in jobs] == [(0, 80), (1, 80)]
    assert jobs[1][1] == 0x4000_0000 + 80 and jobs[1][2] == 0x1_0000 + 80
    report = run_coe(CoEConfig(experts=2, requests=4, cache=1, agcus=2), "model")
    assert report["ok"]
    with pytest.raises(RunFailure, match="beat"):
        Copy(0x4000_0004, 0, 64).jobs(machine)
    with pytest.raises(RunFailure, match="AGCUs"):
        Copy(0x4000_0000, 0, 64, agcus=3).jobs(machine)
    program = scenario.program
    with pytest.raises(RelocationError, match="overlaps"):
        relocate_image(program, "b", program.inputs["a"][0])
    with pytest.raises(RelocationError, match="no input image"):
        relocate_image(program, "zz", 0x10_0000)
    # a copy from an unmapped address fails on the model with the AGCU's error
    with pytest.raises(RunFailure, match="READ_DECERR"):
        run_schedule([Write(0x4000_0000, np.zeros(4, np.uint32)),
                      Copy(0x3000_0000, 0x10_0000, 64),
                      Launch(scenario.launch_program(0, 0, scenario.requests[0]["x_image"]))],
                     "model")
    assert kernel.name == "linear_relu"


def test_cli_json_and_bad_options(capsys):
    assert cli.main(["run", "coe", "--experts", "3", "--requests", "5", "--cache", "1",
                     "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("ok", "cycles", "switch_cycles", "hit_rate", "footprint"):
        assert key in report
    assert report["ok"] is True
    for argv in (["--experts", "0"], ["--cache", "100000"], ["--source", "tape"],
                 ["--agcus", "3"], ["--experts", "100000000"]):
        with pytest.raises(SystemExit) if argv[0] == "--source" else _no_raise():
            assert cli.main(["run", "coe", *argv]) == 2
    err = capsys.readouterr().err
    assert "rdu run coe: error:" in err and "Traceback" not in err


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_bad_config():
    with pytest.raises(CoEError, match="--source"):
        build(CoEConfig(source="tape"))


@pytest.mark.verilator
def test_short_trace_on_the_rtl(sim_dir):
    """2 experts, 3 requests, 1 slot (seed 1: expert 1 miss, 0 miss, 0 hit), from DDR
    and over the host link: outputs checked against numpy, cycles measured; the same
    schedule on the native runner takes the same cycles."""
    reports = {}
    for source in ("ddr", "host"):
        config = CoEConfig(experts=2, requests=3, cache=1, source=source, seed=1)
        reports[source] = run_coe(config, "verilator", work_dir=sim_dir / source)
        report = reports[source]
        assert report["ok"], report["trace"]
        assert [r["hit"] for r in report["trace"]] == [False, False, True]
        assert report["cycle_method"] == "rtl" and report["switch_cycles"] > 0
        native = run_coe(config, "native", work_dir=sim_dir / f"{source}-native")
        assert native["ok"], native["trace"]
        assert native["cycle_method"] == "rtl"
        assert (native["cycles"], native["switch_cycles"]) == (report["cycles"],
                                                               report["switch_cycles"])
    print({source: {k: r[k] for k in ("cycles", "switch_cycles", "kernel_cycles")}
           for source, r in reports.items()})

"""TileArray: configuration round trip, corrupted bitstreams, mesh routes, a PMU kernel."""

import pytest
from rdu.sim.runner import run_amaranth

from hdl.array import TileArray
from tb.suites.array import (
    BAD_CASES,
    array_agcu_config,
    array_bad_bitstream,
    array_config_roundtrip,
    array_mesh_routes,
    array_pmu_transpose,
    array_two_input_unit,
)
from tb.test_units import LaneAdderTestUnit

SMALL = {"rows": 2, "cols": 2, "lanes": 4}


def small_array(**kwargs):
    return TileArray(2, 2, 4, capacity_bytes=1024, agcus=1, agcu_config_words=3,
                     idle_timeout=64, **kwargs)


def test_array_config_roundtrip_amaranth(seed):
    stats = run_amaranth(small_array(), array_config_roundtrip, seed=seed, agcus=1,
                         agcu_words=3, **SMALL)
    assert stats.result["readback_words"] > 0


def test_array_agcu_config_amaranth(seed):
    array = TileArray(2, 2, 4, capacity_bytes=1024, agcus=2, agcu_config_words=5)
    stats = run_amaranth(array, array_agcu_config, seed=seed, agcus=2, agcu_words=5, **SMALL)
    assert stats.result["writes"] == 10


@pytest.mark.parametrize("case", BAD_CASES)
def test_array_bad_bitstream_amaranth(case, seed):
    run_amaranth(small_array(), array_bad_bitstream, seed=seed, agcus=1, agcu_words=3,
                 case=case, **SMALL)


def test_array_mesh_routes_amaranth(seed):
    stats = run_amaranth(small_array(), array_mesh_routes, seed=seed, count=30, **SMALL)
    assert stats.result["delivered"] > 0


def test_array_pmu_transpose_amaranth(seed):
    run_amaranth(small_array(), array_pmu_transpose, seed=seed, matrix_rows=8,
                 matrix_cols=8, **SMALL)


def test_array_compute_positions_amaranth(seed):
    """A compute-unit factory fills the checkerboard's even positions (here the test-only
    lane adder from tb/, not a PCU); both of its vector inputs are routed."""
    array = small_array(compute_unit=LaneAdderTestUnit)
    assert [array.unit_kind(r, c) for r in range(2) for c in range(2)] == [1, 2, 2, 1]
    run_amaranth(array, array_two_input_unit, seed=seed, count=40, offset=12345, **SMALL)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_array_perf_counter_names():
    names = small_array().perf_counter_names()
    assert names[0] == "switch(0,0).vector_stall_cycles"
    assert names[3 * 4 + 2] == "pmu(0,0).beats_written"


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_array_rejects_bad_geometry():
    with pytest.raises(ValueError, match="Array rows must be between 1 and 255, not 0"):
        TileArray(0, 2, 4)


@pytest.mark.verilator
def test_array_2x2_verilator(sim_dir, seed):
    """Default-width 2x2 array (8 lanes, 64 KiB PMUs) under Verilator: whole-array
    configuration round trip, a corrupted bitstream, long random multicast traffic, and a
    PMU transpose kernel."""
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build
    built = build(TileArray, rows=2, cols=2, lanes=8)
    log = (built.build_dir / "build.log").read_text()
    # Verilator reports a combinational loop as UNOPTFLAT: the mesh must have none
    assert "UNOPTFLAT" not in log and "ALWCOMBORDER" not in log
    params = {"rows": 2, "cols": 2, "lanes": 8}
    run_verilator(built, array_config_roundtrip, sim_dir / "roundtrip", seed=seed, agcus=2,
                  agcu_words=16, **params)
    run_verilator(built, array_bad_bitstream, sim_dir / "bad_crc", seed=seed, agcus=2,
                  agcu_words=16, case="bad_crc", **params)
    stats = run_verilator(built, array_mesh_routes, sim_dir / "mesh", seed=seed, count=3000,
                          **params)
    assert stats.result["delivered"] >= 3000
    run_verilator(built, array_pmu_transpose, sim_dir / "transpose", seed=seed,
                  matrix_rows=64, matrix_cols=64, **params)

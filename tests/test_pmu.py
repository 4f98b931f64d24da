"""PMU: address patterns, bank mapping, predicate, N-buffering, lookups, errors."""

import pytest
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.pmu import PMU
from tb.suites.pmu import (
    ERROR_CASES,
    pmu_double_buffer,
    pmu_error,
    pmu_error_stops,
    pmu_pattern,
    pmu_predicate,
    pmu_read_gate,
    pmu_scalar_lookup,
)

LANES = 4
CAPACITY = 4096          # 1024 words, 256 per bank


@pytest.mark.parametrize("write_pattern,read_pattern", [
    ("row_major", "row_major"), ("row_major", "column_major"), ("row_major", "strided"),
    ("row_major", "tiled"), ("column_major", "row_major"), ("tiled", "column_major"),
])
def test_pmu_patterns_amaranth(write_pattern, read_pattern, seed):
    stats = run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_pattern, seed=seed,
                         lanes=LANES, rows=8, cols=16, write_pattern=write_pattern,
                         read_pattern=read_pattern, skew=True)
    assert stats.result["beats"] > 0


@pytest.mark.parametrize("read_pattern", ["row_major", "column_major", "tiled"])
def test_pmu_full_rate_amaranth(read_pattern, seed):
    """Rows and columns (with the diagonal layout) both stream one beat per cycle."""
    stats = run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_pattern, seed=seed,
                         lanes=LANES, rows=8, cols=16, write_pattern="row_major",
                         read_pattern=read_pattern, skew=True, in_stall="none",
                         out_stall="none")
    assert stats.result["read_span"] == stats.result["beats"] - 1


@pytest.mark.parametrize("buffers,read_repeat,read_pattern", [
    (1, 1, "row_major"), (2, 1, "column_major"), (3, 2, "tiled"),
])
def test_pmu_double_buffer_amaranth(buffers, read_repeat, read_pattern, seed):
    stats = run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_double_buffer,
                         seed=seed, lanes=LANES, buffers=buffers, passes=8,
                         read_repeat=read_repeat, buffer_rows=4, cols=8,
                         read_pattern=read_pattern, out_stall="random:0.2")
    assert stats.result["write_stall_cycles"] > 0      # the writer did wait for the reader


def test_pmu_concurrent_read_write_amaranth(seed):
    """Double buffering with no stalls: the writer fills buffer k+1 while the reader
    drains buffer k, so N passes take about (N + 1) passes' worth of cycles, not 2N."""
    passes = 6
    stats = run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_double_buffer,
                         seed=seed, lanes=LANES, buffers=2, passes=passes, read_repeat=1,
                         buffer_rows=8, cols=16, read_pattern="column_major",
                         in_stall="none", out_stall="none")
    per_pass = stats.result["beats_per_pass"]
    assert stats.result["cycles"] <= (passes + 1) * per_pass + 10, stats.result


def test_pmu_predicate_amaranth(seed):
    run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_predicate, seed=seed,
                 lanes=LANES, rows=16, cols=8, low_row=4, high_row=10)


def test_pmu_scalar_lookup_amaranth(seed):
    run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_scalar_lookup, seed=seed,
                 lanes=LANES, rows=8, cols=8, count=60)


def test_pmu_read_gate_amaranth(seed):
    run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_read_gate, seed=seed,
                 lanes=LANES, rows=4, cols=8, passes=4)


@pytest.mark.parametrize("case", sorted(ERROR_CASES))
def test_pmu_errors_amaranth(case, seed):
    run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_error, seed=seed,
                 lanes=LANES, case=case, capacity_words=CAPACITY // 4)


def test_pmu_error_stops_every_side_amaranth(seed):
    """A side stops on another side's error from the cycle after it is detected: at
    most one more beat, taken in that cycle (docs/pmu.md, "Error codes")."""
    stats = run_amaranth(PMU(lanes=LANES, capacity_bytes=CAPACITY), pmu_error_stops,
                         seed=seed, lanes=LANES, rows=4, cols=8)
    assert stats.result["taken_at_detection"] == 1


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_pmu_rejects_bad_parameters():
    with pytest.raises(ValueError, match="Lane count must be a power of two of at least 2, "
                                         "not 6"):
        PMU(lanes=6)
    with pytest.raises(ValueError, match="PMU capacity must be 4 \\* lanes \\* a power of two"):
        PMU(lanes=8, capacity_bytes=1000)
    with pytest.raises(TypeError, match="PMU capacity must be an integer"):
        PMU(lanes=8, capacity_bytes="64k")


@pytest.mark.verilator
def test_pmu_verilator(sim_dir, seed):
    """Default PMU (8 lanes, 64 KiB): long randomised runs of every pattern and N-buffering."""
    built = build(PMU, lanes=8, capacity_bytes=65536)
    for write_pattern, read_pattern in [("row_major", "column_major"), ("tiled", "strided"),
                                        ("column_major", "tiled")]:
        run_verilator(built, pmu_pattern, sim_dir / f"{write_pattern}-{read_pattern}",
                      seed=seed, lanes=8, rows=64, cols=64, write_pattern=write_pattern,
                      read_pattern=read_pattern, skew=True)
    stats = run_verilator(built, pmu_double_buffer, sim_dir / "double", seed=seed, lanes=8,
                          buffers=2, passes=40, read_repeat=1, buffer_rows=16, cols=32,
                          read_pattern="column_major")
    assert stats.result["beats_out"] == 40 * 64

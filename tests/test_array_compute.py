"""The tile array with real PCUs: memory units feed a compute unit, results leave."""

from rdu.sim.runner import run_amaranth

from hdl.array import TileArray
from hdl.pcu import PCU
from tb.suites.array_compute import array_pmu_pcu_matmul


def test_array_pmu_pcu_matmul_amaranth(seed):
    array = TileArray(2, 2, 4, compute_unit=PCU, capacity_bytes=1024, idle_timeout=64)
    stats = run_amaranth(array, array_pmu_pcu_matmul, seed=seed, rows=2, cols=2, lanes=4,
                         k_len=16)
    # the body's sinks check C against numpy; here the run's own cycle count: the PCU
    # takes one K beat per cycle at best, and the run must not crawl
    cycles = stats.result["cycles"]
    assert 16 <= cycles <= 8 * 16 + 200, cycles

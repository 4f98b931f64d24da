"""Memory models (HBM, DDR, host link) behind AXI4: protocol, data, errors, timing."""

import numpy as np
import pytest
from rdu.memory_map import DDR, HBM, HOST, region_of
from rdu.sim.memory_system import MemorySystem, default_memory_system
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.axi_buffer import AXIBuffer
from hdl.interfaces import AXIResp
from sim_models.memory import MemoryTiming, SparseMemory, ddr_model, hbm_model
from tb.suites.memory import random_traffic, read_latency


def test_address_map_is_disjoint_and_decodes():
    assert region_of(HBM.base) is HBM and region_of(DDR.end - 1) is DDR
    assert region_of(HOST.base + 5) is HOST and region_of(HBM.end) is None
    assert DDR.size > 4 * HBM.size


def test_default_ratios_follow_sn40l():
    hbm, ddr = hbm_model(), ddr_model()
    ratio = hbm.timing.peak_bytes_per_cycle / ddr.timing.peak_bytes_per_cycle
    assert 8.5 <= ratio <= 9.5
    assert ddr.size >= 8 * hbm.size
    assert hbm.timing.peak_bytes_per_cycle <= 32      # one 256-bit beat per cycle


def test_sparse_memory_backdoor_is_fast_and_exact():
    memory = default_memory_system()
    rng = np.random.default_rng(1)
    tensor = rng.standard_normal(1 << 20).astype(np.float32)        # 4 MiB
    memory.load(DDR.base + 0x10_0010, tensor)
    back = memory.dump(DDR.base + 0x10_0010, tensor.nbytes, dtype=np.float32)
    assert np.array_equal(back, tensor)
    assert memory.dump(HBM.base, 64).sum() == 0                     # unwritten is zero
    with pytest.raises(ValueError, match="is not inside one memory region"):
        memory.load(HBM.end - 4, b"12345678")
    with pytest.raises(ValueError, match="outside the"):
        SparseMemory(64).read(60, 8)


def test_model_parameters_are_checked():
    with pytest.raises(ValueError, match="channels must be a positive power of two, not 3"):
        MemoryTiming(3, 8, 1024, 10, 20, 4.0, 256, 5)
    with pytest.raises(ValueError, match="hit_latency <= miss_latency"):
        MemoryTiming(1, 8, 1024, 30, 20, 4.0, 256, 5)
    with pytest.raises(ValueError, match="Regions hbm and hbm overlap"):
        MemorySystem([hbm_model(), hbm_model()])


def test_bandwidth_schedule_matches_peak():
    """A long back-to-back read stream occupies the channels at their configured rate."""
    for model in (hbm_model(), ddr_model()):
        ready = []
        for burst in range(256):
            ready += model.schedule_read(model.base + burst * 512, 16, 0)
        beats = len(ready)
        rate = beats * 32 / (max(ready) - min(ready) + model.beat_cycles)
        assert rate == pytest.approx(model.timing.peak_bytes_per_cycle, rel=0.02)


@pytest.mark.parametrize("manager_stall,memory_stall,write_order", [
    ("random", "random", "aw_first"), ("none", "random:0.3", "aw_first"),
    ("random:0.3", "none", "w_first"), ("random", "random", "w_first")])
def test_random_traffic_amaranth(manager_stall, memory_stall, write_order, seed):
    stats = run_amaranth(AXIBuffer(), random_traffic, seed=seed, transactions=60,
                         manager_stall=manager_stall, memory_stall=memory_stall,
                         write_order=write_order)
    result = stats.result
    assert result["read"] + result["write"] == 60
    assert result["beats"] > 60


@pytest.mark.parametrize("region,address", [("hbm", HBM.base + 0x4000),
                                            ("ddr", DDR.base + 0x8000),
                                            ("host", HOST.base)])
def test_read_latency_matches_configuration_amaranth(region, address, seed):
    stats = run_amaranth(AXIBuffer(), read_latency, seed=seed, region=region,
                         address=address)
    result = stats.result
    # first read opens the row, second hits it
    assert result["latencies"] == [result["miss"], result["hit"]]


@pytest.mark.verilator
def test_random_traffic_verilator(sim_dir, seed):
    built = build(AXIBuffer, addr_width=32, data_width=256, id_width=4, depth=2)
    stats = run_verilator(built, random_traffic, sim_dir, seed=seed, transactions=1500,
                          error_rate=0.05, outstanding=8)
    result = stats.result
    assert result["read"] + result["write"] == 1500
    assert result["error"] > 0 and "address is not mapped" in result["error_reasons"]
    assert any(reason.startswith("burst runs past the end")
               for reason in result["error_reasons"])
    print(f"random AXI traffic: {result}, {stats.cycles_per_second:.0f} cycles/s")


@pytest.mark.verilator
def test_read_latency_matches_configuration_verilator(sim_dir, seed):
    built = build(AXIBuffer, addr_width=32, data_width=256, id_width=4, depth=2)
    stats = run_verilator(built, read_latency, sim_dir, seed=seed, region="ddr",
                          address=DDR.base + 0x40000)
    assert stats.result["latencies"] == [stats.result["miss"], stats.result["hit"]]


def test_error_record_reads_as_one_line():
    from rdu.sim.memory_system import AXIErrorRecord
    record = AXIErrorRecord(7, "axi", "read", 0x2000_0000, 4, AXIResp.DECERR,
                            "address is not mapped")
    assert str(record) == ("DECERR on read of 4 beats at 0x20000000 (port axi, cycle 7): "
                           "address is not mapped")


def test_gateware_memory_roundtrip_and_error_amaranth(seed):
    """The gateware comparison model stores, loads and reports out-of-range reads."""
    from sim_models.gateware_memory import AGCUWithGatewareMemory
    from tb.suites.agcu import gateware_memory_errors, roundtrip
    stats = run_amaranth(AGCUWithGatewareMemory(memory={"size": 8192, "latency": 12,
                                                        "bandwidth": (7, 2)}),
                         roundtrip, seed=seed, length=4096, model="gateware")
    # the token bucket holds up to two beats of credit, so a short stream may start ahead
    assert 3.0 < stats.result["load_bytes_per_cycle"] <= 3.5 + 64 / 4096 * 3.5
    component = AGCUWithGatewareMemory(memory={"size": 8192, "latency": 12})
    run_amaranth(component, gateware_memory_errors, seed=seed)

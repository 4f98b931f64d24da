"""AGCU: affine load/store streams, coalescing, copy, launch commands, error codes."""

import pytest
from rdu.memory_map import DDR, HBM
from rdu.sim.runner import run_amaranth, run_verilator
from rdu.sim.verilator import build

from hdl.agcu import AGCU, AGCUError, agcu_config_layout
from hdl.agcu_engines import AffineBurstGenerator
from hdl.interfaces import config_words
from tb.suites.agcu import (
    AGCUGroup,
    bf16_expanded_beats,
    bf16_full_rate,
    bf16_load,
    bf16_packed_beat,
    bf16_store,
    copy,
    errors,
    launch,
    load_store,
    reference_bursts,
    shared_memory,
)
from tb.suites.agcu_abort import abort
from tb.suites.agcu_windows import windows


def test_reference_coalescing_rules():
    # a contiguous 2-D block whose rows touch: rows merge up to max_burst, never over 4 KiB
    pattern = {"base": 0x0F00, "count": [4, 8, 1], "stride": [32, 128, 0]}
    bursts = reference_bursts(pattern)
    assert sum(beats for _, beats in bursts) == 32
    assert all(addr >> 12 == (addr + 32 * beats - 1) >> 12 for addr, beats in bursts)
    assert bursts[:2] == [(0x0F00, 8), (0x1000, 16)]
    # strided beats are single-beat bursts
    assert reference_bursts({"base": 0, "count": [3, 1, 1], "stride": [64, 0, 0]}) == \
        [(0, 1), (64, 1), (128, 1)]


def test_bf16_reference_expansion():
    # value i of a beat sits in bytes 2i..2i+1; lane l of the first vector beat is value l
    # (bits 16l..) << 16, of the second value lanes + l
    raw = bytes(range(64))
    first, second = bf16_expanded_beats(raw, [0])
    assert [(first >> (32 * lane)) & 0xFFFF_FFFF for lane in range(8)] == \
        [(2 * v + 1) << 24 | (2 * v) << 16 for v in range(8)]
    assert [(second >> (32 * lane)) & 0xFFFF_FFFF for lane in range(8)] == \
        [(2 * v + 1) << 24 | (2 * v) << 16 for v in range(8, 16)]
    assert bf16_expanded_beats(raw, [32])[0] & 0xFFFF_FFFF == 0x2120_0000


def test_config_layout_keeps_its_fields_and_appends_new_ones():
    layout = agcu_config_layout()
    assert [name for name, _ in layout] == ["load_enable", "store_enable", "wait_done",
                                            "load", "store", "load_bf16", "store_bf16",
                                            "load_position_stride", "store_position_stride"]
    assert layout["store"].offset == 179 and layout["load_bf16"].offset == 355
    assert layout["store_bf16"].offset == 356
    assert layout["load_position_stride"].offset == 357
    assert layout["store_position_stride"].offset == 373
    assert layout.size == 389 and config_words(layout) == 13


def test_bf16_reference_packing():
    first = sum((0x1000 + lane) << (32 * lane + 16) | 0xFFFF << (32 * lane)
                for lane in range(8))
    second = sum((0x2000 + lane) << (32 * lane + 16) for lane in range(8))
    raw = bf16_packed_beat(first, second)
    assert len(raw) == 32
    assert [int.from_bytes(raw[2 * i:2 * i + 2], "little") for i in range(16)] == \
        [0x1000 + lane for lane in range(8)] + [0x2000 + lane for lane in range(8)]


@pytest.mark.parametrize("memory_stall,stream_stall,write_order", [
    ("random", "random", "aw_first"), ("none", "none", "w_first"),
    ("random:0.3", "random:0.8", "w_first")])
def test_bf16_store_amaranth(memory_stall, stream_stall, write_order, seed):
    """Packed BF16 stores under random stalls, bit for bit in memory."""
    stats = run_amaranth(AGCU(), bf16_store, seed=seed, kernels=4, memory_stall=memory_stall,
                         stream_stall=stream_stall, write_order=write_order)
    result = stats.result
    assert result["bf16_kernels"] >= 1 and result["write_beats"] > 0


@pytest.mark.parametrize("memory_stall,stream_stall,write_order,store", [
    ("random", "random", "aw_first", False), ("none", "random:0.3", "aw_first", False),
    ("random:0.3", "random:0.8", "w_first", True), ("random", "random", "aw_first", True)])
def test_bf16_load_amaranth(memory_stall, stream_stall, write_order, store, seed):
    stats = run_amaranth(AGCU(), bf16_load, seed=seed, kernels=3, memory_stall=memory_stall,
                         stream_stall=stream_stall, write_order=write_order, store=store)
    result = stats.result
    assert result["bf16_kernels"] >= 1 and result["read_beats"] > 0
    assert (result["stored"] > 0) == store


def test_bf16_load_full_rate_amaranth(seed):
    beats = 256
    stats = run_amaranth(AGCU(), bf16_full_rate, seed=seed, beats=beats)
    runs = stats.result
    # the second vector beat of a read beat costs exactly one cycle
    assert runs["bf16_1"]["cycles"] == runs["plain_1"]["cycles"] + 1
    # held, then released: 2 * beats vector beats on consecutive cycles (checked in the
    # body), done as long after the last one as for a single beat
    assert runs["bf16_n"]["vector_beats"] == 2 * beats
    assert runs["bf16_n"]["tail"] == runs["bf16_1"]["tail"]
    # the read buffer (32 beats) was full at the release; the rest came one per 2 cycles
    assert runs["r_beats_in_steady_state"] == beats - AGCU().buffer_depth


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_parameters_are_checked():
    with pytest.raises(ValueError, match="Maximum burst must be between 1 and 256 beats, "
                                         "not 300"):
        AffineBurstGenerator(max_burst=300)
    with pytest.raises(ValueError, match="Maximum outstanding bursts must be a positive "
                                         "integer, not 0"):
        AGCU(max_outstanding=0)


@pytest.mark.parametrize("memory_stall,stream_stall,write_order", [
    ("random", "random", "aw_first"), ("none", "none", "aw_first"),
    ("random:0.3", "random:0.8", "w_first"), ("random", "random", "w_first")])
def test_load_store_amaranth(memory_stall, stream_stall, write_order, seed):
    stats = run_amaranth(AGCU(), load_store, seed=seed, kernels=2,
                         memory_stall=memory_stall, stream_stall=stream_stall,
                         write_order=write_order)
    assert stats.result["loaded"] > 0 and stats.result["stored"] > 0
    assert stats.result["positioned"] == 1      # kernel 0's patterns moved by the position


def test_copy_amaranth(seed):
    stats = run_amaranth(AGCU(), copy, seed=seed, length=8192, memory_stall="random",
                         fast=True)
    assert stats.result["cycles"] >= stats.result["bound"]


def test_launch_commands_amaranth(seed):
    stats = run_amaranth(AGCU(), launch, seed=seed)
    assert stats.result["bitstream_words"] >= 50


def test_error_codes_amaranth(seed):
    stats = run_amaranth(AGCU(), errors, seed=seed)
    assert stats.result["errors"]["unmapped_read"] == AGCUError.READ_DECERR
    assert stats.result["memory_errors"] == 7     # 6 commands + the wrapped beat
    assert stats.result["errors"]["wrap"] == AGCUError.ADDRESS_WRAP
    # a base moved out of the address space by the position: refused, no memory access
    assert stats.result["errors"]["moved_below_zero"] == AGCUError.ADDRESS_WRAP
    assert stats.result["errors"]["moved_past_top"] == AGCUError.ADDRESS_WRAP


def test_two_agcus_share_the_memory_system_amaranth(seed):
    stats = run_amaranth(AGCUGroup(2), shared_memory, seed=seed, length=16384)
    result = stats.result
    # everything that touched HBM went through its 32 B/cycle channels
    assert result["total_cycles"] >= result["hbm_bytes"] / 32
    assert result["stream_cycles"] >= 16384 / 32


@pytest.mark.verilator
def test_load_store_verilator(sim_dir, seed):
    stats = run_verilator(build(AGCU), load_store, sim_dir, seed=seed, kernels=25,
                          fast=False)
    assert stats.result["loaded"] > 25 and stats.result["positioned"] == 9


@pytest.mark.verilator
def test_copy_verilator(sim_dir, seed):
    """64 KiB DDR -> HBM under random memory stalls, with the default timing."""
    stats = run_verilator(build(AGCU), copy, sim_dir, seed=seed, length=65536,
                          src=DDR.base + 0x30_0000, dst=HBM.base + 0x40_0000,
                          memory_stall="random:0.7")
    assert stats.result["cycles"] >= stats.result["bound"]


@pytest.mark.verilator
def test_launch_and_errors_verilator(sim_dir, seed):
    run_verilator(build(AGCU), launch, sim_dir / "launch", seed=seed)
    stats = run_verilator(build(AGCU), errors, sim_dir / "errors", seed=seed)
    assert stats.result["memory_errors"] == 7


@pytest.mark.verilator
def test_bf16_store_verilator(sim_dir, seed):
    """12 BF16-packing store kernels, the default memory latencies."""
    stats = run_verilator(build(AGCU), bf16_store, sim_dir, seed=seed, kernels=12,
                          fast=False)
    assert stats.result["bf16_kernels"] >= 1


@pytest.mark.verilator
def test_bf16_load_verilator(sim_dir, seed):
    """20 BF16 kernels with concurrent stores, the default memory latencies."""
    stats = run_verilator(build(AGCU), bf16_load, sim_dir, seed=seed, kernels=20,
                          store=True, fast=False)
    assert stats.result["bf16_kernels"] >= 1 and stats.result["unmapped_errors"] == 2


@pytest.mark.parametrize("stall", ["random", "none"])
def test_abort_amaranth(stall, seed):
    result = run_amaranth(AGCU(), abort, seed=seed, stall=stall).result
    assert result["execute"] == result["program_load"] == AGCUError.ABORTED


def test_windows_amaranth(seed):
    result = run_amaranth(AGCU(), windows, seed=seed).result
    assert result["off"] == AGCUError.NONE

"""Test bodies for the off-chip memory models (:mod:`sim_models`), both tiers.

The design under test is :class:`hdl.axi_buffer.AXIBuffer`: random AXI4 traffic from
:class:`rdu.sim.axi.AXIRandomManager` enters its ``sub`` port and the memory system serves
its ``mgr`` port, so the models run exactly as they do behind an AGCU.
"""

import numpy as np
from rdu.memory_map import DDR, HBM, HOST
from rdu.sim.axi import AXICodec, AXIRandomManager
from rdu.sim.memory_system import default_memory_system

from hdl.interfaces import AXIResp

# small windows near the start and the end of each region: dense traffic, real decode
WINDOWS = [(HBM.base, 16384), (HBM.end - 16384, 16384),
           (DDR.base + 0x123000, 16384), (DDR.end - 8192, 8192),
           (HOST.base, 4096)]
ERROR_WINDOWS = [(0x2000_0000, 4096, AXIResp.DECERR),       # gap after HBM
                 (0xF000_0000, 4096, AXIResp.DECERR),       # above everything
                 (HBM.end - 32, 32, AXIResp.SLVERR),        # runs past the end of HBM
                 (DDR.end - 32, 32, AXIResp.SLVERR)]


async def random_traffic(bench, *, transactions, manager_stall="random",
                         memory_stall="random", error_rate=0.1, outstanding=4, fast=True,
                         write_order="aw_first"):
    """Random bursts against the memory system with a reference memory; count errors.

    ``fast`` shrinks the latencies so that short runs still overlap many bursts.
    """
    overrides = {}
    if fast:
        overrides = {"hbm": {"hit_latency": 6, "miss_latency": 9},
                     "ddr": {"hit_latency": 11, "miss_latency": 15},
                     "host": {"latency": 20, "bytes_per_cycle": 4.0}}
    memory = default_memory_system(**overrides)
    codec = AXICodec()
    manager = AXIRandomManager(bench, "sub", codec, WINDOWS, error_windows=ERROR_WINDOWS,
                               error_rate=error_rate, stall=manager_stall,
                               outstanding=outstanding)
    # backdoor-preload part of each window with random bytes, in both memories
    for base, size in WINDOWS:
        payload = bytes(bench.rng.getrandbits(8) for _ in range(size // 2))
        memory.load(base, payload)
        manager.reference.write(base, payload, (1 << len(payload)) - 1)
    memory.attach(bench, "mgr", stall=memory_stall, write_order=write_order)
    result = await manager.run(transactions)
    # the model's error status lists exactly the bursts aimed at error windows
    if len(memory.errors) != result["error"]:
        raise AssertionError(f"memory error status has {len(memory.errors)} records, the "
                             f"manager saw {result['error']} error responses")
    # and a backdoor dump agrees with the reference byte for byte
    for base, size in WINDOWS:
        dumped = memory.dump(base, size)
        expected = np.frombuffer(manager.reference.read(base, size), dtype=np.uint8)
        mismatch = np.flatnonzero(dumped != expected)
        if mismatch.size:
            raise AssertionError(f"backdoor dump differs from the reference at "
                                 f"{base + int(mismatch[0]):#x}")
    result["error_reasons"] = sorted({record.reason.split(" at ")[0]
                                      for record in memory.errors})
    result["cycles"] = bench.cycle
    return result


async def read_latency(bench, *, region, address, repeats=2):
    """Single-beat reads, one at a time, no stalls: cycles from the memory's ``ar``
    handshake to its first ``r`` handshake, per read (the first opens the row)."""
    memory = default_memory_system()
    manager = AXIRandomManager(bench, "sub", AXICodec(), [(address, 4096)], stall="none",
                               outstanding=1)
    port = memory.attach(bench, "mgr")
    for _ in range(repeats):
        manager.read_at(address, 1, ident=0)
        while manager.reads[0]:
            await bench.cycles(1)
        await bench.cycles(5)
    timing = memory[region].timing
    return {"latencies": list(port.read_latencies), "hit": timing.hit_latency,
            "miss": timing.miss_latency}

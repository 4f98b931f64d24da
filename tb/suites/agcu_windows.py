"""Test body of the AGCU's memory windows (``docs/agcu.md``, **Memory windows**), both
tiers: bursts checked against the windows at the memory port, memory outside them
unchanged."""

from rdu.dma_windows import port_value
from rdu.memory_map import HBM

from hdl.agcu import AGCUError, AGCUOp
from hdl.interfaces import ControlToken

from .agcu import (
    BEAT,
    LANES,
    _check_stored,
    execute_windows,
    pattern_addresses,
    random_pattern,
    write_config,
)
from .agcu_abort import _port_in_flight


async def windows(bench, *, stall="random", fast=True):
    """Memory windows: a store running past its write window, a program load from no
    read window, a copy into a read-only window each end with ``WINDOW`` and the
    refused burst's address in ``error_addr``; no burst outside the windows reaches
    the memory port (checked burst by burst), memory outside them is unchanged, the
    port holds nothing; with the windows disabled the same copy runs."""
    memory, port, host, out, inp, control, load_window, store_window, image, stored = \
        execute_windows(bench, stall, stall, "aw_first", fast)
    rng = bench.rng
    half = store_window[1] // 2
    allowed = [(load_window[0], load_window[1], 1, 0), (store_window[0], half, 0, 1)]
    bench.set("windows", port_value(allowed))

    def outside(bursts, access):
        return [(addr, beats) for addr, beats in bursts
                if not any(base <= addr and addr + beats * BEAT <= base + size and perm
                           for base, size, read, write in allowed
                           for perm in [read if access == "read" else write])]

    results = {}
    store = {"base": store_window[0], "count": [32, 32, 1], "stride": [BEAT, 32 * BEAT, 0]}
    load = random_pattern(rng, *load_window)
    await write_config(bench, {"load_enable": 1, "store_enable": 1, "load": load,
                               "store": store})
    out.checked = False
    stores = pattern_addresses(store)
    values = [rng.getrandbits(LANES * 32) for _ in stores[:half // BEAT]]
    inp.send_all(values)
    control.expect(ControlToken.STEP)
    error, _ = await host.run(AGCUOp.EXECUTE, timeout=20_000)
    results["store"] = (error, await bench.read("error_addr"))
    if results["store"] != (AGCUError.WINDOW, store_window[0] + half):
        raise AssertionError(f"store past its window: {results['store']}")
    # the beats taken before the refusal are written, the rest of the window not
    for addr, value in zip(stores[:inp.sent], values, strict=False):
        offset = addr - store_window[0]
        stored[offset:offset + BEAT] = value.to_bytes(BEAT, "little")
    _check_stored(memory, store_window, stored)
    # a program load from outside every read window: not one burst issued
    reads = len(port.read_bursts)
    error, _ = await host.run(AGCUOp.PROGRAM_LOAD, src=HBM.base + 0x4000, length=256)
    results["program_load"] = (error, await bench.read("error_addr"))
    if results["program_load"] != (AGCUError.WINDOW, HBM.base + 0x4000) or \
            len(port.read_bursts) != reads:
        raise AssertionError(f"program load outside the windows: {results['program_load']}")
    # a copy into the read-only window
    error, _ = await host.run(AGCUOp.COPY, src=load_window[0], dst=load_window[0] + 4096,
                              length=1024)
    results["copy"] = (error, await bench.read("error_addr"))
    if results["copy"] != (AGCUError.WINDOW, load_window[0] + 4096):
        raise AssertionError(f"copy into a read-only window: {results['copy']}")
    if memory.dump(*load_window).tobytes() != image:
        raise AssertionError("the read-only window was written")
    for access, bursts in (("read", port.read_bursts), ("write", port.write_bursts)):
        if outside(bursts, access):
            raise AssertionError(f"{access} bursts outside the windows reached memory: "
                                 f"{outside(bursts, access)[:3]}")
    if _port_in_flight(port):
        raise AssertionError("bursts left at the memory port")
    # windows off (the reset value): the same copy runs
    await bench.cycles(1)
    bench.set("windows", port_value(allowed, enable=False))
    error, _ = await host.run(AGCUOp.COPY, src=load_window[0], dst=load_window[0] + 4096,
                              length=1024)
    if error != AGCUError.NONE or \
            memory.dump(load_window[0] + 4096, 1024).tobytes() != image[:1024]:
        raise AssertionError(f"copy with the windows off: {error}")
    results["off"] = error
    return results

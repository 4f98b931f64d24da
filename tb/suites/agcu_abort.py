"""Test body of the AGCU's abort (``docs/agcu.md``, **Abort**), both tiers: the drain
checked against the memory image, the coalescing reference and the memory port."""

import numpy as np
from rdu.memory_map import HBM

from hdl.agcu import AGCUError, AGCUOp
from hdl.interfaces import ControlToken

from .agcu import (
    _COMMAND,
    BEAT,
    _check_bursts,
    _check_stored,
    _send_stores,
    beat_value,
    execute_windows,
    pattern_addresses,
    random_pattern,
    reference_bursts,
    write_config,
)


def _port_in_flight(port):
    """Bursts and beats a memory port still holds (0: every burst answered)."""
    return (len(port.reads) + len(port.writes) + len(port.b_pending) +
            len(port.w_buffer) + len(port.r.queue) + len(port.b.queue))


async def _abort_until_done(bench, timeout=5000):
    """Hold ``abort_cmd`` until ``done``; return the error code and the cycles it took."""
    await bench.cycles(1)
    bench.set("abort_cmd", 1)
    start = bench.cycle
    await bench.wait_for("done", 1, timeout=timeout, what="done of the aborted command")
    cycles, error = bench.cycle - start, await bench.read("error")
    await bench.cycles(1)
    bench.set("abort_cmd", 0)
    return error, cycles


async def abort(bench, *, stall="random", fast=True):
    """Aborts, each checked against the memory image and the coalescing reference:

    * a kernel execute with ``wait_done`` whose store receives half of its beats (and
      no ``DONE`` token): ``ABORTED``; every burst issued answered (the
      port holds nothing), the write bursts a prefix of the reference's, memory = the
      beats sent and nothing else, the loaded beats a prefix of the load's;
    * a program load whose words are never taken: ``ABORTED``, the port empty;
    * a 32 KiB copy aborted mid-way: ``ABORTED``, the port empty, each destination
      beat the source's or untouched;
    * ``abort_cmd`` while idle changes nothing;
    * then a ``COPY`` and a kernel execute run correctly (no reset), and a store that
      wraps (``ADDRESS_WRAP``) is not charged to the argument load after it.
    """
    memory, port, host, out, inp, control, load_window, store_window, image, stored = \
        execute_windows(bench, stall, stall, "aw_first", fast)
    rng = bench.rng
    load = random_pattern(rng, *load_window)
    # the whole window, 64 bursts: more than the engine issues ahead of its data
    store = {"base": store_window[0], "count": [32, 32, 1], "stride": [BEAT, 32 * BEAT, 0]}
    await write_config(bench, {"load_enable": 1, "store_enable": 1, "wait_done": 1,
                               "load": load, "store": store})
    out.checked = False
    stores = pattern_addresses(store)
    _send_stores(rng, inp, stores[:len(stores) // 2], store_window, stored)
    control.expect(ControlToken.STEP)
    host.source.send(_COMMAND.const({"op": AGCUOp.EXECUTE}).as_value().value)
    for _ in range(20_000):
        await bench.cycles(1)
        if inp.idle and host.source.idle:
            break
    await bench.cycles(200)
    if await bench.read("done") or not await bench.read("busy"):
        raise AssertionError("the kernel execute ended without its store beats")
    error, execute_cycles = await _abort_until_done(bench)
    results = {"execute": error, "execute_abort_cycles": execute_cycles}
    if error != AGCUError.ABORTED or _port_in_flight(port):
        raise AssertionError(f"aborted execute: error {error}, {_port_in_flight(port)} "
                             f"bursts or beats left at the memory port")
    written = reference_bursts(store)
    if len(port.write_bursts) >= len(written):
        raise AssertionError("aborted store: every burst of the pattern was issued")
    _check_bursts(port.write_bursts, written[:len(port.write_bursts)], "aborted store")
    _check_bursts(port.read_bursts, reference_bursts(load)[:len(port.read_bursts)],
                  "aborted load")
    _check_stored(memory, store_window, stored)
    expected = [beat_value(image[a - load_window[0]:a - load_window[0] + BEAT])
                for a in pattern_addresses(load)]
    if out.items != expected[:len(out.items)]:
        raise AssertionError("aborted load: the beats delivered are not the pattern's")
    # a program load nobody takes the words of
    first = len(port.read_bursts)
    host.source.send(_COMMAND.const({"op": AGCUOp.PROGRAM_LOAD, "src": load_window[0],
                                     "length": load_window[1]}).as_value().value)
    await bench.cycles(300)
    error, load_cycles = await _abort_until_done(bench)
    if len(port.read_bursts) - first >= load_window[1] // (16 * BEAT):
        raise AssertionError("aborted program load: every burst was issued")
    if error != AGCUError.ABORTED or _port_in_flight(port):
        raise AssertionError(f"aborted program load: error {error}, "
                             f"{_port_in_flight(port)} left at the memory port")
    results.update(program_load=error, program_load_abort_cycles=load_cycles)
    # a copy aborted mid-way (w may wait with a beat from the read buffer: it stays
    # offered until taken): every destination beat is the source's or untouched
    destination = bytes(memory.dump(store_window[0], store_window[1]).tobytes())
    host.source.send(_COMMAND.const({"op": AGCUOp.COPY, "src": load_window[0],
                                     "dst": store_window[0],
                                     "length": store_window[1]}).as_value().value)
    await bench.cycles(150)
    error, copy_cycles = await _abort_until_done(bench)
    copied = memory.dump(*store_window).tobytes()
    for offset in range(0, store_window[1], BEAT):
        beat = copied[offset:offset + BEAT]
        if beat not in (image[offset:offset + BEAT], destination[offset:offset + BEAT]):
            raise AssertionError(f"aborted copy: beat at +{offset:#x} is neither")
    if error != AGCUError.ABORTED or _port_in_flight(port) or copied == image:
        raise AssertionError(f"aborted copy: error {error}, {_port_in_flight(port)} left "
                             f"at the memory port, or it was not cut short")
    results.update(copy=error, copy_abort_cycles=copy_cycles)
    # abort while idle: nothing happens
    bench.set("abort_cmd", 1)
    await bench.cycles(3)
    bench.set("abort_cmd", 0)
    if await bench.read("busy") or not await bench.read("done"):
        raise AssertionError("abort of an idle AGCU changed its state")
    # the unit works: a copy, then a kernel execute with every beat checked
    error, _ = await host.run(AGCUOp.COPY, src=load_window[0], dst=store_window[0],
                              length=4096)
    if error != AGCUError.NONE or memory.dump(store_window[0], 4096).tobytes() != image[:4096]:
        raise AssertionError(f"copy after the aborts: error {error} or wrong data")
    await write_config(bench, {"load_enable": 1, "load": load})
    out.items.clear()
    control.expect(ControlToken.STEP)
    error, _ = await host.run(AGCUOp.EXECUTE, timeout=20_000)
    await bench.streams_done(timeout=1000)
    if error != AGCUError.NONE or out.items != expected:
        raise AssertionError(f"execute after the aborts: error {error} or wrong beats")
    # a store that wraps below address 0, then an argument load (reader only): the
    # writer's wrap flag of the store is not this command's (no ADDRESS_WRAP)
    await write_config(bench, {"store_enable": 1,
                               "store": {"base": HBM.base + 64, "count": [4, 1, 1],
                                         "stride": [-32, 0, 0]}})
    inp.send_all([0] * 4)
    control.expect(ControlToken.STEP)
    error, _ = await host.run(AGCUOp.EXECUTE, timeout=5000)
    scalars = bench.sink("scalar_out")
    scalars.expect_all(np.frombuffer(image[:64], dtype=np.uint32).tolist())
    second, _ = await host.run(AGCUOp.ARGUMENT_LOAD, src=load_window[0], length=64)
    await bench.streams_done(timeout=1000)
    if (error, second) != (AGCUError.ADDRESS_WRAP, AGCUError.NONE):
        raise AssertionError(f"wrapped store then argument load: {error}, {second}")
    return results

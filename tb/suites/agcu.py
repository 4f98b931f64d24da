"""Test bodies for :class:`hdl.agcu.AGCU` with the memory models attached, both tiers."""

import numpy as np
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out
from rdu import affine
from rdu.memory_map import DDR, HBM
from rdu.sim.memory_system import default_memory_system
from rdu.sim.stalls import StallPattern

from hdl.agcu import (
    AGCU,
    AGCUError,
    AGCUOp,
    agcu_command_layout,
    agcu_config_layout,
)
from hdl.agcu_engines import BURST_BOUNDARY
from hdl.interfaces import ControlToken

from .common import configure

BEAT = 32
LANES = 8
MASK32 = (1 << 32) - 1

_COMMAND = agcu_command_layout()
_CONFIG = agcu_config_layout()


# -- references --------------------------------------------------------------------------

def pattern_addresses(pattern):
    """Beat addresses of a three-level affine pattern, innermost level first
    (:func:`rdu.affine.iter_addresses`, modulo 2**32)."""
    return list(affine.iter_addresses(pattern["base"], pattern["count"], pattern["stride"],
                                      mask=MASK32))


def reference_bursts(pattern, max_burst=16, beat=BEAT):
    """The bursts the AGCU must issue for ``pattern`` (runs, then coalescing)."""
    runs = []
    base, counts, strides = pattern["base"], pattern["count"], pattern["stride"]
    # the first beat of each innermost row (rdu.affine: the loop without level 0)
    for row in affine.iter_addresses(base, (1, counts[1], counts[2]),
                                     (0, strides[1], strides[2]), mask=MASK32):
        if strides[0] != beat:
            runs += [((row + i0 * strides[0]) & MASK32, 1) for i0 in range(counts[0])]
            continue
        i0 = 0
        while i0 < counts[0]:
            addr = (row + i0 * beat) & MASK32
            run = min(counts[0] - i0, (BURST_BOUNDARY - addr % BURST_BOUNDARY) // beat, max_burst)
            runs.append((addr, run))
            i0 += run
    bursts = []
    for addr, run in runs:
        if bursts:
            open_addr, open_beats = bursts[-1]
            if (addr == open_addr + open_beats * beat and addr >> 12 == open_addr >> 12
                    and open_beats + run <= max_burst):
                bursts[-1] = (open_addr, open_beats + run)
                continue
        bursts.append((addr, run))
    return bursts


def beat_value(raw):
    return int.from_bytes(raw, "little")


def bf16_expanded_beats(image, offsets, lanes=LANES):
    """The vector beats a ``load_bf16`` kernel sends for the read beats at ``offsets``
    (byte offsets into ``image``): the beat's bytes as little-endian uint16 values,
    each shifted into the high half of a uint32 lane, ``lanes`` lanes per vector beat
    (two vector beats per read beat, lower addresses first)."""
    values = np.frombuffer(bytes(image), dtype="<u2")
    index = np.asarray(offsets, dtype=np.int64)[:, None] // 2 + np.arange(2 * lanes)
    lanes32 = (values[index].astype(np.uint32) << 16).reshape(-1, lanes)
    return [int.from_bytes(row.astype("<u4").tobytes(), "little") for row in lanes32]


def random_bf16_image(rng, size):
    """``size`` bytes of BF16 values: scaled normals plus zeros, infinities, NaNs and
    subnormals (every bit pattern may reach the array)."""
    import ml_dtypes
    count = size // 2
    values = (rng.standard_normal(count) * 10.0 ** rng.integers(-30, 30, count)).astype(
        ml_dtypes.bfloat16).view(np.uint16)
    special = rng.random(count) < 0.1
    values[special] = rng.integers(0, 1 << 16, int(special.sum()), dtype=np.uint16)
    return values.astype("<u2").tobytes()


# -- driving helpers ---------------------------------------------------------------------

async def write_config(bench, config, prefix=""):
    """Write ``config`` (a dict for :func:`agcu_config_layout`) through ``cfg`` and check
    the readback."""
    await configure(bench, _CONFIG, config, prefix=f"{prefix}cfg")


class Host:
    """Issues AGCU commands through ``cmd`` and waits for ``done``.

    ``prefix`` is the path of the AGCU in the design (``""`` when it is the top).
    """

    def __init__(self, bench, stall="none", prefix=""):
        self.bench = bench
        self.prefix = prefix
        self.source = bench.source(f"{prefix}cmd", stall)

    async def run(self, op, *, src=0, dst=0, length=0, timeout=200_000):
        """Run one command; return ``(error code, cycles from issue to done)``."""
        bench = self.bench
        start = bench.cycle
        self.source.send(_COMMAND.const({"op": op, "src": src, "dst": dst,
                                         "length": length}).as_value().value)
        while not self.source.idle:
            await bench.cycles(1)
        await bench.wait_for(f"{self.prefix}done", 1, timeout=timeout,
                             what=f"done of command {op!r}")
        error, cycles = await bench.read(f"{self.prefix}error"), bench.cycle - start
        await bench.cycles(1)       # no set() after a read in the same cycle
        return error, cycles


def random_pattern(rng, window_base, window_size, max_beats=160):
    """A random three-level pattern whose beats all fall in the window."""
    while True:
        counts = [rng.randint(1, 24), rng.randint(1, 4), rng.randint(1, 3)]
        if counts[0] * counts[1] * counts[2] > max_beats:
            continue
        s0 = rng.choice([BEAT, BEAT, BEAT, 0, 2 * BEAT, -BEAT])
        s1 = rng.choice([counts[0] * s0, counts[0] * BEAT, rng.randint(-40, 40) * BEAT])
        s2 = rng.randint(-64, 64) * BEAT
        offsets = [i0 * s0 + i1 * s1 + i2 * s2 for i2 in (0, counts[2] - 1)
                   for i1 in (0, counts[1] - 1) for i0 in (0, counts[0] - 1)]
        span = max(offsets) - min(offsets) + BEAT
        if span > window_size:
            continue
        slack = (window_size - span) // BEAT
        base = window_base - min(offsets) + rng.randint(0, slack) * BEAT
        return {"base": base, "count": counts, "stride": [s0, s1, s2]}


def _check_bursts(port_bursts, expected, what):
    if port_bursts != expected:
        raise AssertionError(f"{what} bursts {port_bursts[:6]}... differ from the "
                             f"coalescing reference {expected[:6]}... "
                             f"({len(port_bursts)} vs {len(expected)} bursts)")
    for addr, beats in port_bursts:
        if addr >> 12 != (addr + beats * BEAT - 1) >> 12:
            raise AssertionError(f"{what} burst at {addr:#x} of {beats} beats crosses 4 KiB")


# -- bodies ------------------------------------------------------------------------------


def _execute_bench(bench, memory_stall, stream_stall, write_order, fast):
    """Memory models on ``axi`` (short latencies when ``fast``), the host, and the
    stream agents of a kernel-execute test."""
    overrides = {"hbm": {"hit_latency": 8, "miss_latency": 12},
                 "ddr": {"hit_latency": 14, "miss_latency": 20}} if fast else {}
    memory = default_memory_system(**overrides)
    port = memory.attach(bench, "axi", stall=memory_stall, write_order=write_order)
    return (memory, port, Host(bench), bench.sink("vector_out", stream_stall),
            bench.source("vector_in", stream_stall), bench.sink("control_out", stream_stall))


def execute_windows(bench, memory_stall, stream_stall, write_order, fast):
    """The agents of a kernel-execute test (:func:`_execute_bench`), a random image in a
    32 KiB load window of DDR and the reference image of a 32 KiB store window of HBM:
    ``(memory, port, host, out, inp, control, load_window, store_window, image,
    stored)``."""
    memory, port, host, out, inp, control = _execute_bench(
        bench, memory_stall, stream_stall, write_order, fast)
    load_window = (DDR.base + 0x40_0000, 32768)
    store_window = (HBM.base + 0x10_0000, 32768)
    image = bytes(bench.rng.getrandbits(8) for _ in range(load_window[1]))
    memory.load(load_window[0], image)
    stored = bytearray(memory.dump(*store_window).tobytes())
    return memory, port, host, out, inp, control, load_window, store_window, image, stored


def _send_stores(rng, inp, stores, store_window, stored):
    """Random beats for the store addresses, sent on ``vector_in`` and written into the
    reference image ``stored`` of ``store_window``."""
    values = [rng.getrandbits(LANES * 32) for _ in stores]
    inp.send_all(values)
    for addr, value in zip(stores, values, strict=True):
        offset = addr - store_window[0]
        stored[offset:offset + BEAT] = value.to_bytes(BEAT, "little")


def _check_stored(memory, store_window, stored):
    dumped = memory.dump(*store_window).tobytes()
    if dumped != bytes(stored):
        index = next(i for i in range(len(stored)) if dumped[i] != stored[i])
        raise AssertionError(f"stored memory differs at {store_window[0] + index:#x}")

async def load_store(bench, *, kernels=3, memory_stall="random", stream_stall="random",
                     fast=True, write_order="aw_first"):
    """Kernel executes with random 3-level load and store patterns, run concurrently.

    Loaded beats are checked in order on ``vector_out``; stored beats against a
    reference memory after ``done``; the issued bursts against the coalescing
    reference.
    """
    memory, port, host, out, inp, control, load_window, store_window, image, stored = \
        execute_windows(bench, memory_stall, stream_stall, write_order, fast)
    rng = bench.rng
    total = {"loaded": 0, "stored": 0, "read_bursts": 0, "write_bursts": 0, "positioned": 0}
    for kernel in range(kernels):
        # positioned patterns (docs/agcu.md): the position moves each base by
        # position * stride beats (kernels 0, 3, ...; then unmoved: position 0, strides
        # 0); drawn inside a margin of the windows
        moved = kernel % 3 == 0
        position = rng.randint(1, 5) if moved else rng.choice([0, rng.randint(0, 0xFFFF)])
        strides = [rng.choice([-1, 1]) * rng.randint(1, 8) if moved or not position else 0
                   for _ in range(2)]
        margin = 5 * 8 * BEAT
        load = random_pattern(rng, load_window[0] + margin, load_window[1] - 2 * margin)
        store = random_pattern(rng, store_window[0] + margin, store_window[1] - 2 * margin)
        bench.set("position", position)
        await write_config(bench, {"load_enable": 1, "store_enable": 1, "load": load,
                                   "store": store, "load_position_stride": strides[0],
                                   "store_position_stride": strides[1]})
        total["positioned"] += any(strides) and position > 0
        load = dict(load, base=load["base"] + position * strides[0] * BEAT)
        store = dict(store, base=store["base"] + position * strides[1] * BEAT)
        loads = pattern_addresses(load)
        out.expect_all([beat_value(image[a - load_window[0]:a - load_window[0] + BEAT])
                        for a in loads])
        stores = pattern_addresses(store)
        _send_stores(rng, inp, stores, store_window, stored)
        control.expect(ControlToken.STEP)
        first_read, first_write = len(port.read_bursts), len(port.write_bursts)
        error, _ = await host.run(AGCUOp.EXECUTE, timeout=20_000)
        if error != AGCUError.NONE:
            raise AssertionError(f"kernel execute ended with error {AGCUError(error).name}")
        await bench.streams_done(timeout=1000)
        _check_bursts(port.read_bursts[first_read:], reference_bursts(load), "load")
        _check_bursts(port.write_bursts[first_write:], reference_bursts(store), "store")
        _check_stored(memory, store_window, stored)
        total["loaded"] += len(loads)
        total["stored"] += len(stores)
        total["read_bursts"] += len(port.read_bursts) - first_read
        total["write_bursts"] += len(port.write_bursts) - first_write
    if memory.errors:
        raise AssertionError(f"memory errors: {memory.errors[0]}")
    return total


async def bf16_load(bench, *, kernels=3, memory_stall="random", stream_stall="random",
                    write_order="aw_first", store=False, fast=True):
    """Kernel executes that load random BF16 tensors along random patterns with
    ``load_bf16`` (every kernel but those drawn plain; the first is always BF16), each
    read beat checked as two expanded vector beats against a numpy expansion of the
    memory image; with ``store`` a random store pattern runs concurrently and the
    stored memory is checked too."""
    memory, port, host, out, inp, control = _execute_bench(
        bench, memory_stall, stream_stall, write_order, fast)
    rng = bench.rng
    np_rng = np.random.default_rng(rng.getrandbits(32))
    load_window = (HBM.base + 0x20_0000, 16384)
    store_window = (DDR.base + 0x8_0000, 16384)
    image = random_bf16_image(np_rng, load_window[1])
    memory.load(load_window[0], np.frombuffer(image, dtype=np.uint8))
    stored = bytearray(memory.dump(*store_window).tobytes())
    total = {"bf16_kernels": 0, "read_beats": 0, "vector_beats": 0, "stored": 0}
    for kernel in range(kernels):
        bf16 = kernel == 0 or rng.random() < 0.75
        load = random_pattern(rng, *load_window, max_beats=96)
        config = {"load_enable": 1, "load": load, "load_bf16": int(bf16)}
        stores = []
        if store:
            config.update(store_enable=1, store=random_pattern(rng, *store_window))
            stores = pattern_addresses(config["store"])
        await write_config(bench, config)
        offsets = [a - load_window[0] for a in pattern_addresses(load)]
        if bf16:
            expected = bf16_expanded_beats(image, offsets)
        else:
            expected = [beat_value(image[o:o + BEAT]) for o in offsets]
        out.expect_all(expected)
        _send_stores(rng, inp, stores, store_window, stored)
        control.expect(ControlToken.STEP)
        first_read, first_write = len(port.read_bursts), len(port.write_bursts)
        first_item = len(out.items)
        error, _ = await host.run(AGCUOp.EXECUTE, timeout=20_000)
        if error != AGCUError.NONE:
            raise AssertionError(f"kernel execute ended with error {AGCUError(error).name}")
        # done implies every expanded beat was delivered: nothing may still be pending
        if not out.idle:
            raise AssertionError(f"done with {len(out.scoreboard.pending)} vector beats "
                                 f"not yet delivered")
        await bench.streams_done(timeout=1000)
        # the memory side sees the pattern's beats once (packed), the array twice as many
        _check_bursts(port.read_bursts[first_read:], reference_bursts(load), "load")
        read_beats = sum(beats for _, beats in port.read_bursts[first_read:])
        vector_beats = len(out.items) - first_item
        if read_beats != len(offsets) or vector_beats != (2 if bf16 else 1) * len(offsets):
            raise AssertionError(f"{read_beats} read beats and {vector_beats} vector beats "
                                 f"for a {len(offsets)}-beat pattern (bf16={bf16})")
        if store:
            _check_bursts(port.write_bursts[first_write:],
                          reference_bursts(config["store"]), "store")
            _check_stored(memory, store_window, stored)
        total["bf16_kernels"] += bf16
        total["read_beats"] += read_beats
        total["vector_beats"] += vector_beats
        total["stored"] += len(stores)
    if memory.errors:
        raise AssertionError(f"memory errors: {memory.errors[0]}")
    # a BF16 load from an unmapped address: READ_DECERR, and still both vector beats of
    # every (zero) read beat reach the array before done
    await write_config(bench, {"load_enable": 1, "load_bf16": 1, "load": {
        "base": 0x2000_0000, "count": [3, 2, 1], "stride": [BEAT, 4096, 0]}})
    out.expect_all([0] * 12)
    control.expect(ControlToken.STEP)
    error, _ = await host.run(AGCUOp.EXECUTE, timeout=20_000)
    if error != AGCUError.READ_DECERR or not out.idle:
        raise AssertionError(f"unmapped BF16 load: error {error}, "
                             f"{len(out.scoreboard.pending)} vector beats missing")
    await bench.streams_done(timeout=1000)
    total["unmapped_errors"] = len(memory.errors)
    return total


def bf16_packed_beat(first, second, lanes=LANES):
    """The AXI beat a ``store_bf16`` kernel writes for two vector beats: the high half of
    each lane of ``first`` (lane ``l`` in bytes ``2l, 2l+1``), then those of ``second``."""
    halves = [(beat >> (32 * lane + 16)) & 0xFFFF for beat in (first, second)
              for lane in range(lanes)]
    return b"".join(h.to_bytes(2, "little") for h in halves)


async def bf16_store(bench, *, kernels=3, memory_stall="random", stream_stall="random",
                     write_order="aw_first", fast=True):
    """Kernel executes that store with ``store_bf16`` (some drawn plain): random vector
    beats, two per AXI beat of a random pattern; the memory is checked against
    :func:`bf16_packed_beat` of each pair (lower halves of the pattern's beat first), the
    write bursts against the coalescing reference."""
    memory, port, host, out, inp, control = _execute_bench(
        bench, memory_stall, stream_stall, write_order, fast)
    rng = bench.rng
    store_window = (HBM.base + 0x18_0000, 16384)
    stored = bytearray(memory.dump(*store_window).tobytes())
    total = {"bf16_kernels": 0, "vector_beats": 0, "write_beats": 0}
    for kernel in range(kernels):
        bf16 = kernel == 0 or rng.random() < 0.75
        pattern = random_pattern(rng, *store_window, max_beats=96)
        await write_config(bench, {"store_enable": 1, "store": pattern,
                                   "store_bf16": int(bf16)})
        addresses = pattern_addresses(pattern)
        if bf16:
            values = [rng.getrandbits(LANES * 32) for _ in range(2 * len(addresses))]
            for index, addr in enumerate(addresses):
                offset = addr - store_window[0]
                stored[offset:offset + BEAT] = bf16_packed_beat(values[2 * index],
                                                                values[2 * index + 1])
            inp.send_all(values)
        else:
            _send_stores(rng, inp, addresses, store_window, stored)
        control.expect(ControlToken.STEP)
        first_write = len(port.write_bursts)
        error, _ = await host.run(AGCUOp.EXECUTE, timeout=20_000)
        if error != AGCUError.NONE:
            raise AssertionError(f"kernel execute ended with error {AGCUError(error).name}")
        await bench.streams_done(timeout=1000)
        _check_bursts(port.write_bursts[first_write:], reference_bursts(pattern), "store")
        _check_stored(memory, store_window, stored)
        total["bf16_kernels"] += bf16
        total["vector_beats"] += (2 if bf16 else 1) * len(addresses)
        total["write_beats"] += sum(beats for _, beats in port.write_bursts[first_write:])
    if memory.errors:
        raise AssertionError(f"memory errors: {memory.errors[0]}")
    return total


class _Gate(StallPattern):
    """A sink's ``ready``: held low until ``open`` is set."""

    def __init__(self):
        self.open = True

    def next(self):
        return self.open


async def bf16_full_rate(bench, *, beats=256, fill_cycles=400):
    """Full-rate BF16 expansion, no stalls.

    Single-beat loads: a ``load_bf16`` one takes exactly one cycle more than a plain
    one (its second vector beat). A ``beats``-beat ``load_bf16`` stream is held at
    ``vector_out`` for ``fill_cycles`` (the read buffer fills and the memory gets
    ahead), then released: its ``2 * beats`` vector beats leave on consecutive cycles
    from the release on, ``axi.r`` takes a beat every second cycle meanwhile, and
    ``done`` follows the last beat as it does for a single-beat load.
    """
    memory = default_memory_system(hbm={"hit_latency": 8, "miss_latency": 12})
    port = memory.attach(bench, "axi")
    host = Host(bench)
    out = bench.sink("vector_out")
    gate = out.stall = _Gate()
    control = bench.sink("control_out")
    image = random_bf16_image(np.random.default_rng(bench.rng.getrandbits(32)), beats * BEAT)
    handshakes, r_handshakes = [], []
    out.on_transfer = lambda payload, cycle: handshakes.append(cycle)
    count_r = port.r.on_transfer

    def on_r(payload, cycle):
        r_handshakes.append(cycle)
        count_r(payload, cycle)
    port.r.on_transfer = on_r
    result = {}
    runs = (("plain_1", 1, 0), ("bf16_1", 1, 1), ("bf16_n", beats, 1))
    for run, (name, count, bf16) in enumerate(runs):
        # each run starts 1 MiB apart, on rows never opened: the same first latency
        start = HBM.base + 0x10_0000 * (run + 1)
        memory.load(start, np.frombuffer(image, dtype=np.uint8))
        await write_config(bench, {"load_enable": 1, "load_bf16": bf16, "load": {
            "base": start, "count": [count, 1, 1], "stride": [BEAT, 0, 0]}})
        offsets = [BEAT * i for i in range(count)]
        out.expect_all(bf16_expanded_beats(image, offsets) if bf16 else
                       [beat_value(image[o:o + BEAT]) for o in offsets])
        control.expect(ControlToken.STEP)
        handshakes.clear()
        r_handshakes.clear()
        issued = bench.cycle
        if count > 1:
            gate.open = False
            host.source.send(_COMMAND.const({"op": AGCUOp.EXECUTE}).as_value().value)
            await bench.cycles(fill_cycles)
            if handshakes or await bench.read("axi.r.ready"):
                raise AssertionError(f"{name}: the read buffer did not fill while held")
            released = bench.cycle + 1     # agents drive ready from the next cycle on
            gate.open = True
            await bench.wait_for("done", 1, timeout=20_000)
            error, cycles = await bench.read("error"), bench.cycle - issued
            await bench.cycles(1)
            steady = [c for c in r_handshakes if c >= released]
            if any(b - a != 2 for a, b in zip(steady, steady[1:], strict=False)):
                raise AssertionError(f"{name}: axi.r not taken every second cycle")
            result["r_beats_in_steady_state"] = len(steady)
            if handshakes[0] != released:
                raise AssertionError(f"{name}: first vector beat at {handshakes[0]}, "
                                     f"released at {released}")
        else:
            error, cycles = await host.run(AGCUOp.EXECUTE, timeout=20_000)
        if error != AGCUError.NONE:
            raise AssertionError(f"{name}: error {AGCUError(error).name}")
        await bench.streams_done(timeout=100)
        if handshakes != list(range(handshakes[0], handshakes[0] + len(handshakes))):
            gaps = [b - a for a, b in zip(handshakes, handshakes[1:], strict=False) if b - a > 1]
            raise AssertionError(f"{name}: vector_out not on consecutive cycles "
                                 f"({len(gaps)} gaps, e.g. {gaps[:4]})")
        result[name] = {"cycles": cycles, "vector_beats": len(handshakes),
                        "tail": issued + cycles - handshakes[-1]}
    return result


async def copy(bench, *, length, src=DDR.base + 0x20_0000, dst=HBM.base + 0x8_0000,
               memory_stall="none", fast=False):
    """Copy ``length`` bytes memory to memory; check the destination byte for byte."""
    overrides = {"hbm": {"hit_latency": 8, "miss_latency": 12},
                 "ddr": {"hit_latency": 14, "miss_latency": 20}} if fast else {}
    memory = default_memory_system(**overrides)
    memory.attach(bench, "axi", stall=memory_stall)
    host = Host(bench)
    payload = np.random.default_rng(bench.rng.getrandbits(32)).integers(
        0, 256, length, dtype=np.uint8)
    memory.load(src, payload)
    error, cycles = await host.run(AGCUOp.COPY, src=src, dst=dst, length=length,
                                   timeout=50 * length // BEAT + 100_000)
    if error != AGCUError.NONE:
        raise AssertionError(f"copy ended with error {AGCUError(error).name}")
    if not np.array_equal(memory.dump(dst, length), payload):
        raise AssertionError("copied data differs from the source")
    peak = min(region.timing.peak_bytes_per_cycle
               for region in (memory.region_at(src), memory.region_at(dst)))
    return {"cycles": cycles, "bound": length / min(peak, BEAT),
            "bytes_per_cycle": length / cycles}


async def launch(bench, *, stall="random", fast=True):
    """Program load, argument load, and kernel execute waiting for a DONE token."""
    overrides = {"hbm": {"hit_latency": 8, "miss_latency": 12}} if fast else {}
    memory = default_memory_system(**overrides)
    memory.attach(bench, "axi", stall=stall)
    host = Host(bench)
    rng = bench.rng
    bitstream = [rng.getrandbits(32) for _ in range(rng.randint(50, 90))]
    arguments = [rng.getrandbits(32) for _ in range(rng.randint(1, 11))]
    memory.load(HBM.base + 0x1000, np.array(bitstream, dtype=np.uint32))
    memory.load(HBM.base + 0x3000, np.array(arguments, dtype=np.uint32))
    bits = bench.sink("bitstream_out", stall)
    scalars = bench.sink("scalar_out", stall)
    control = bench.sink("control_out", stall)
    bits.expect_all(bitstream)
    error, _ = await host.run(AGCUOp.PROGRAM_LOAD, src=HBM.base + 0x1000,
                              length=4 * len(bitstream))
    assert error == AGCUError.NONE, f"program load error {error}"
    scalars.expect_all(arguments)
    error, _ = await host.run(AGCUOp.ARGUMENT_LOAD, src=HBM.base + 0x3000,
                              length=4 * len(arguments))
    assert error == AGCUError.NONE, f"argument load error {error}"
    await bench.streams_done(timeout=1000)
    # kernel execute with only wait_done: ends when the array says DONE
    await write_config(bench, {"wait_done": 1})
    control.expect(ControlToken.STEP)
    tokens = bench.source("control_in")
    host.source.send(_COMMAND.const({"op": AGCUOp.EXECUTE}).as_value().value)
    await bench.cycles(30)
    if await bench.read("done") or not await bench.read("busy"):
        raise AssertionError("kernel execute finished before the DONE token")
    tokens.send_all([ControlToken.STEP, ControlToken.DONE])
    await bench.wait_for("done", 1, timeout=100)
    await bench.cycles(1)
    bench.set("scalar_in.valid", 1)
    bench.set("scalar_in.payload", 0x1234_5678)
    await bench.cycles(1)
    bench.set("scalar_in.valid", 0)
    await bench.cycles(1)
    assert await bench.read("scalar_result") == 0x1234_5678
    assert await bench.read("scalar_count") == 1
    await bench.streams_done(timeout=100)
    return {"bitstream_words": len(bitstream), "arguments": len(arguments)}


async def errors(bench):
    """Every bad command ends with ``done`` and its error code, never a hang."""
    # an HBM whose end is not 4 KiB aligned, so that a burst can run past it (SLVERR);
    # past a 4 KiB aligned end the AGCU's next burst starts unmapped (DECERR)
    hbm_end = HBM.end - 2048
    memory = default_memory_system(hbm={"hit_latency": 8, "miss_latency": 12,
                                        "size": HBM.size - 2048},
                                   ddr={"hit_latency": 14, "miss_latency": 20})
    memory.attach(bench, "axi", stall="random")
    host = Host(bench)
    vector_out = bench.sink("vector_out", "random")
    results = {}
    cases = {
        "unmapped_read": (AGCUOp.COPY, 0x2000_0000, HBM.base, 256, AGCUError.READ_DECERR),
        "read_past_end": (AGCUOp.COPY, hbm_end - 64, DDR.base, 256, AGCUError.READ_SLVERR),
        "read_beyond_ddr": (AGCUOp.COPY, DDR.end - 64, HBM.base, 256, AGCUError.READ_DECERR),
        "unmapped_write": (AGCUOp.COPY, HBM.base, 0xF000_0000, 256, AGCUError.WRITE_DECERR),
        "write_past_end": (AGCUOp.COPY, HBM.base, hbm_end - 32, 128, AGCUError.WRITE_SLVERR),
        "write_beyond_ddr": (AGCUOp.COPY, HBM.base, DDR.end - 32, 128,
                             AGCUError.WRITE_DECERR),
        "misaligned": (AGCUOp.COPY, HBM.base + 4, DDR.base, 64, AGCUError.MISALIGNED),
        "bad_length": (AGCUOp.COPY, HBM.base, DDR.base, 48, AGCUError.BAD_LENGTH),
        "zero_length": (AGCUOp.PROGRAM_LOAD, HBM.base, 0, 0, AGCUError.BAD_LENGTH),
        "bad_opcode": (7, 0, 0, 32, AGCUError.BAD_OPCODE),
    }
    for name, (op, src, dst, length, expected) in cases.items():
        error, _ = await host.run(op, src=src, dst=dst, length=length, timeout=5000)
        results[name] = error
        if error != expected:
            raise AssertionError(f"{name}: error {error}, expected {expected.name}")
    await write_config(bench, {"load_enable": 1,
                               "load": {"base": HBM.base, "count": [4, 0, 1],
                                        "stride": [32, 0, 0]}})
    error, _ = await host.run(AGCUOp.EXECUTE, timeout=1000)
    if error != AGCUError.BAD_CONFIG:
        raise AssertionError(f"zero count: error {error}, expected BAD_CONFIG")
    results["zero_count"] = error
    await write_config(bench, {"store_enable": 1,
                               "store": {"base": HBM.base, "count": [4, 1, 1],
                                         "stride": [32, 48, 0]}})
    error, _ = await host.run(AGCUOp.EXECUTE, timeout=1000)
    if error != AGCUError.MISALIGNED:
        raise AssertionError(f"misaligned stride: error {error}, expected MISALIGNED")
    results["misaligned_stride"] = error
    # a pattern walking below address 0 wraps: reported before any response arrives
    await write_config(bench, {"load_enable": 1,
                               "load": {"base": HBM.base + 64, "count": [4, 1, 1],
                                        "stride": [-32, 0, 0]}})
    vector_out.checked = False
    bench.sink("control_out").expect(ControlToken.STEP)
    error, _ = await host.run(AGCUOp.EXECUTE, timeout=2000)
    if error != AGCUError.ADDRESS_WRAP or len(vector_out.items) != 4:
        raise AssertionError(f"wrap: error {error}, {len(vector_out.items)} beats; expected "
                             f"ADDRESS_WRAP and 4 beats")
    results["wrap"] = error
    # a positioned pattern moved out of the address space: refused when accepted
    for name, base, stride in (("moved_below_zero", 32, -2),
                               ("moved_past_top", 0xFFFF_FFE0, 1)):
        bench.set("position", 1)
        await write_config(bench, {"load_enable": 1, "load_position_stride": stride,
                                   "load": {"base": base, "count": [1, 1, 1],
                                            "stride": [32, 0, 0]}})
        error, _ = await host.run(AGCUOp.EXECUTE, timeout=1000)
        if error != AGCUError.ADDRESS_WRAP:
            raise AssertionError(f"{name}: error {error}, expected ADDRESS_WRAP")
        results[name] = error
    bench.set("position", 0)
    # after errors the unit still works
    memory.load(HBM.base + 0x2000, bytes(range(256)))
    error, _ = await host.run(AGCUOp.COPY, src=HBM.base + 0x2000, dst=DDR.base, length=256)
    assert error == AGCUError.NONE and memory.dump(DDR.base, 256).tolist() == list(range(256))
    return {"errors": results, "memory_errors": len(memory.errors)}


async def roundtrip(bench, *, length, model, region="hbm"):
    """Store ``length`` bytes then load them back and check them, by kernel executes.

    ``model="python"``: the AGCU with the Python memory models attached;
    ``model="gateware"``: :class:`sim_models.gateware_memory.AGCUWithGatewareMemory`
    (same ports minus ``axi``), for the simulation-speed comparison.
    """
    base = 0
    if model == "python":
        memory = default_memory_system()
        memory.attach(bench, "axi")
        base = {"hbm": HBM.base, "ddr": DDR.base}[region]
    host = Host(bench)
    beats = length // BEAT
    values = [bench.rng.getrandbits(256) for _ in range(beats)]
    control = bench.sink("control_out")
    bench.source("vector_in").send_all(values)
    control.expect(ControlToken.STEP)
    linear = {"base": base, "count": [beats, 1, 1], "stride": [BEAT, 0, 0]}
    await write_config(bench, {"store_enable": 1, "store": linear})
    error, store_cycles = await host.run(AGCUOp.EXECUTE, timeout=100 * beats + 10_000)
    assert error == AGCUError.NONE, f"store error {error}"
    bench.sink("vector_out").expect_all(values)
    control.expect(ControlToken.STEP)
    await write_config(bench, {"load_enable": 1, "load": linear})
    error, load_cycles = await host.run(AGCUOp.EXECUTE, timeout=100 * beats + 10_000)
    assert error == AGCUError.NONE, f"load error {error}"
    await bench.streams_done(timeout=1000)
    return {"store_bytes_per_cycle": length / store_cycles,
            "load_bytes_per_cycle": length / load_cycles}


async def gateware_memory_errors(bench):
    """AGCU on the gateware memory: a read past its end is DECERR, counted in the
    memory's error status, and the AGCU reports READ_DECERR."""
    host = Host(bench)
    error, _ = await host.run(AGCUOp.COPY, src=8192 - 64, dst=0, length=256, timeout=2000)
    if error != AGCUError.READ_DECERR:
        raise AssertionError(f"error {error}, expected READ_DECERR")
    return {"error": error}


class AGCUGroup(wiring.Component):
    """``count`` AGCUs side by side, ports ``agcu0`` ... (test top for shared memory)."""

    def __init__(self, count=2):
        self._agcus = [AGCU() for _ in range(count)]
        super().__init__({f"agcu{index}": Out(agcu.signature)
                          for index, agcu in enumerate(self._agcus)})

    def elaborate(self, platform):
        m = Module()
        for index, agcu in enumerate(self._agcus):
            m.submodules[f"agcu{index}"] = agcu
            wiring.connect(m, wiring.flipped(getattr(self, f"agcu{index}")), agcu)
        return m


async def shared_memory(bench, *, length=32768, stall="random:0.8"):
    """Two AGCUs on one memory system at once: AGCU 0 streams HBM into the array while
    AGCU 1 copies DDR -> HBM. Both see the same address map; the HBM channels are
    shared, so the HBM stream cannot beat the HBM peak."""
    memory = default_memory_system()
    for index in range(2):
        memory.attach(bench, f"agcu{index}.axi", stall=stall)
    rng = np.random.default_rng(bench.rng.getrandbits(32))
    stream_data = rng.integers(0, 256, length, dtype=np.uint8)
    copy_data = rng.integers(0, 256, length, dtype=np.uint8)
    memory.load(HBM.base + 0x20_0000, stream_data)
    memory.load(DDR.base + 0x20_0000, copy_data)
    beats = length // BEAT
    out = bench.sink("agcu0.vector_out", stall)
    out.expect_all([beat_value(stream_data[i * BEAT:(i + 1) * BEAT].tobytes())
                    for i in range(beats)])
    bench.sink("agcu0.control_out").expect(ControlToken.STEP)
    await write_config(bench, {"load_enable": 1, "load": {
        "base": HBM.base + 0x20_0000, "count": [beats, 1, 1], "stride": [BEAT, 0, 0]}},
        prefix="agcu0.")
    stream_host = Host(bench, prefix="agcu0.")
    copy_host = Host(bench, prefix="agcu1.")
    # issue both commands, then wait for both (the bench has one thread of control)
    copy_host.source.send(_COMMAND.const({"op": AGCUOp.COPY, "src": DDR.base + 0x20_0000,
                                          "dst": HBM.base + 0x60_0000, "length": length}
                                         ).as_value().value)
    start = bench.cycle
    stream_error, stream_cycles = await stream_host.run(AGCUOp.EXECUTE,
                                                        timeout=100 * beats + 20_000)
    await bench.wait_for("agcu1.done", 1, timeout=100 * beats + 20_000)
    copy_error = await bench.read("agcu1.error")
    await bench.cycles(1)
    total = bench.cycle - start
    await bench.streams_done(timeout=1000)
    if stream_error != AGCUError.NONE or copy_error != AGCUError.NONE:
        raise AssertionError(f"errors {stream_error}, {copy_error}")
    if not np.array_equal(memory.dump(HBM.base + 0x60_0000, length), copy_data):
        raise AssertionError("copy by the second AGCU corrupted data")
    return {"stream_cycles": stream_cycles, "total_cycles": total,
            "hbm_bytes": memory["hbm"].stats["read_beats"] * BEAT +
            memory["hbm"].stats["write_beats"] * BEAT}

"""Test bodies and the Python reference model of :class:`hdl.pmu.PMU` (both tiers)."""

from rdu import affine

from hdl.interfaces import ControlToken
from hdl.pmu import ADDRESS_BITS, PMUError, pmu_config_layout

from .common import load_config, pack_config, pack_vector

ADDRESS_MASK = (1 << ADDRESS_BITS) - 1


# --------------------------------------------------------------------------------------
# Reference model
# --------------------------------------------------------------------------------------

def affine_addresses(ag):
    """The addresses of a PMU address generator's loop nest, level 0 innermost
    (:func:`rdu.affine.iter_addresses`, wrapping in ``ADDRESS_BITS``)."""
    return affine.iter_addresses(ag["start"], ag["bound"], ag["stride"], mask=ADDRESS_MASK)


def bank_of(physical, lanes, skew_shift):
    """The documented bank mapping: ``(p + (p >> skew_shift)) mod lanes`` (no skew at 0)."""
    return (physical + (physical >> skew_shift if skew_shift else 0)) % lanes


def pattern(name, lanes, rows, cols, start=0):
    """Address-generator settings that walk a ``rows x cols`` row-major matrix.

    ``row_major``: beats of ``lanes`` consecutive elements of a row, rows in order;
    ``column_major``: beats of ``lanes`` consecutive rows of one column (a transpose);
    ``strided``: every other row, row-major; ``tiled``: ``lanes x lanes`` tiles, each
    tile row by row, tiles row-major.
    """
    if name == "row_major":
        lane_stride, stride, bound = 1, [lanes, cols, 0], [cols // lanes, rows, 1]
    elif name == "column_major":
        lane_stride, stride, bound = cols, [1, lanes * cols, 0], [cols, rows // lanes, 1]
    elif name == "strided":
        lane_stride, stride, bound = 1, [lanes, 2 * cols, 0], [cols // lanes, rows // 2, 1]
    elif name == "tiled":
        lane_stride = 1
        stride = [cols, lanes, lanes * cols]
        bound = [lanes, cols // lanes, rows // lanes]
    else:
        raise ValueError(f"Unknown pattern {name!r}")
    return {"start": start, "stride": [s & ADDRESS_MASK for s in stride], "bound": bound,
            "lane_stride": lane_stride & ADDRESS_MASK}


class PMUModel:
    """Functional model: buffers of ``buffer_words`` words, predicate, lane addressing."""

    def __init__(self, config, lanes):
        self.config = config
        self.lanes = lanes
        self.buffers = [dict() for _ in range(config["buffers"])]

    def offsets(self, ag, address):
        config = self.config
        if config.get("predicate_enable"):
            if not config["predicate_low"] <= address < config["predicate_high"]:
                return None
            address -= config["predicate_low"]
        return [(address + lane * ag["lane_stride"]) & ADDRESS_MASK
                for lane in range(self.lanes)]

    def write_pass(self, buffer, beats):
        """Store one pass of write beats (lists of lane values) into ``buffer``."""
        addresses = list(affine_addresses(self.config["write"]))
        assert len(beats) == len(addresses)
        for address, beat in zip(addresses, beats, strict=True):
            offsets = self.offsets(self.config["write"], address)
            if offsets is not None:
                for offset, value in zip(offsets, beat, strict=True):
                    self.buffers[buffer][offset] = value

    def read_pass(self, buffer):
        """The beats one read pass of ``buffer`` delivers."""
        out = []
        for address in affine_addresses(self.config["read"]):
            offsets = self.offsets(self.config["read"], address)
            if offsets is not None:
                out.append([self.buffers[buffer][offset] for offset in offsets])
        return out


def pmu_config(lanes, *, write, read, buffers=1, buffer_words, skew_shift=0, read_repeat=1,
               read_passes=0, read_gate=0, predicate=None, write_enable=1, read_enable=1):
    config = {
        "write_enable": write_enable, "read_enable": read_enable, "read_gate": read_gate,
        "predicate_enable": 0 if predicate is None else 1,
        "skew_shift": skew_shift, "buffers": buffers, "read_repeat": read_repeat,
        "read_passes": read_passes, "buffer_words": buffer_words,
        "predicate_low": 0 if predicate is None else predicate[0],
        "predicate_high": 0 if predicate is None else predicate[1],
        "write": write, "read": read,
    }
    return config


def config_words_of(config):
    return pack_config(pmu_config_layout(), config)


def _random_beats(bench, count, lanes):
    return [[bench.rng.getrandbits(32) for _ in range(lanes)] for _ in range(count)]


# --------------------------------------------------------------------------------------
# Bodies
# --------------------------------------------------------------------------------------

async def pmu_pattern(bench, *, lanes, rows, cols, write_pattern, read_pattern, skew,
                      in_stall="random", out_stall="random"):
    """Write a matrix with one pattern, read it back with another; check against the model.

    Returns the cycles between the first and the last read beat (full rate: beats - 1).
    """
    skew_shift = (cols.bit_length() - 1) if skew else 0
    config = pmu_config(lanes, write=pattern(write_pattern, lanes, rows, cols),
                        read=pattern(read_pattern, lanes, rows, cols),
                        buffer_words=rows * cols, skew_shift=skew_shift, read_passes=1)
    await load_config(bench, config_words_of(config))
    model = PMUModel(config, lanes)
    beats = _random_beats(bench, len(list(affine_addresses(config["write"]))), lanes)
    model.write_pass(0, beats)
    expected = model.read_pass(0)
    source = bench.source("vector_in", in_stall)
    sink = bench.sink("vector_out", out_stall)
    tokens = bench.sink("control_out")
    times = []
    sink.on_transfer = lambda item, cycle: times.append(cycle)
    source.send_all(pack_vector(beat) for beat in beats)
    sink.expect_all(pack_vector(beat) for beat in expected)
    tokens.expect(ControlToken.DONE)
    await bench.streams_done(timeout=20 * (len(beats) + len(expected)) + 500)
    assert await bench.read("error") == PMUError.OK
    assert await bench.read("done") == 1
    assert await bench.read("beats_written") == len(beats)
    assert await bench.read("beats_read") == len(expected)
    return {"beats": len(expected), "read_span": times[-1] - times[0]}


async def pmu_double_buffer(bench, *, lanes, buffers, passes, read_repeat, buffer_rows,
                            cols, read_pattern, in_stall="random", out_stall="random:0.3"):
    """N-buffered producer/consumer: ``passes`` buffers written and read under stalls.

    The reader is slower than the writer (``out_stall``), so the writer keeps running
    into a full set of buffers; an early overwrite would corrupt a read beat.
    """
    words = buffer_rows * cols
    skew_shift = cols.bit_length() - 1
    config = pmu_config(lanes, write=pattern("row_major", lanes, buffer_rows, cols),
                        read=pattern(read_pattern, lanes, buffer_rows, cols), buffers=buffers,
                        buffer_words=words, skew_shift=skew_shift, read_repeat=read_repeat,
                        read_passes=passes)
    await load_config(bench, config_words_of(config))
    model = PMUModel(config, lanes)
    per_pass = len(list(affine_addresses(config["write"])))
    all_beats, expected = [], []
    for index in range(passes):
        beats = _random_beats(bench, per_pass, lanes)
        all_beats += beats
        model.write_pass(index % buffers, beats)
        for _ in range(max(1, read_repeat)):
            expected += model.read_pass(index % buffers)
    source = bench.source("vector_in", in_stall)
    sink = bench.sink("vector_out", out_stall)
    tokens = bench.sink("control_out", "random")
    start = bench.cycle
    source.send_all(pack_vector(beat) for beat in all_beats)
    sink.expect_all(pack_vector(beat) for beat in expected)
    tokens.expect_all([ControlToken.STEP] * (passes - 1) + [ControlToken.DONE])
    last = []
    sink.on_transfer = lambda item, cycle: last.append(cycle)
    await bench.streams_done(timeout=20 * (len(all_beats) + len(expected)) + 1000)
    assert await bench.read("error") == PMUError.OK
    write_stalls = await bench.read("write_stall_cycles")
    return {"beats_in": len(all_beats), "beats_out": len(expected),
            "write_stall_cycles": write_stalls, "beats_per_pass": per_pass,
            "cycles": last[-1] - start + 1}


async def pmu_predicate(bench, *, lanes, rows, cols, low_row, high_row):
    """A tensor spread over PMUs: this PMU keeps rows ``[low_row, high_row)`` only."""
    low, high = low_row * cols, high_row * cols
    local_words = high - low
    config = pmu_config(lanes, write=pattern("row_major", lanes, rows, cols),
                        read=pattern("row_major", lanes, rows, cols),
                        buffer_words=local_words, predicate=(low, high), read_passes=1)
    await load_config(bench, config_words_of(config))
    model = PMUModel(config, lanes)
    beats = _random_beats(bench, len(list(affine_addresses(config["write"]))), lanes)
    model.write_pass(0, beats)
    expected = model.read_pass(0)
    assert len(expected) == (high_row - low_row) * cols // lanes
    source = bench.source("vector_in", "random")
    sink = bench.sink("vector_out", "random")
    source.send_all(pack_vector(beat) for beat in beats)
    sink.expect_all(pack_vector(beat) for beat in expected)
    await bench.streams_done(timeout=50 * len(beats) + 500)
    assert await bench.read("error") == PMUError.OK
    return {"kept": len(expected), "sent": len(beats)}


async def pmu_scalar_lookup(bench, *, lanes, rows, cols, count):
    """Scalar lookups of random addresses of a matrix written in the diagonal layout."""
    skew_shift = cols.bit_length() - 1
    config = pmu_config(lanes, write=pattern("row_major", lanes, rows, cols),
                        read=pattern("row_major", lanes, rows, cols), buffer_words=rows * cols,
                        skew_shift=skew_shift, read_enable=0)
    await load_config(bench, config_words_of(config))
    model = PMUModel(config, lanes)
    beats = _random_beats(bench, rows * cols // lanes, lanes)
    model.write_pass(0, beats)
    source = bench.source("vector_in", "random")
    source.send_all(pack_vector(beat) for beat in beats)
    await bench.streams_done(timeout=50 * len(beats) + 500)
    addresses = [bench.rng.randrange(rows * cols) for _ in range(count)]
    lookups = bench.source("scalar_in", "random")
    answers = bench.sink("scalar_out", "random")
    lookups.send_all(addresses)
    answers.expect_all(model.buffers[0][address] for address in addresses)
    await bench.streams_done(timeout=50 * count + 500)
    return {"lookups": count}


async def pmu_read_gate(bench, *, lanes, rows, cols, passes):
    """With ``read_gate``, each read pass waits for a control token."""
    config = pmu_config(lanes, write=pattern("row_major", lanes, rows, cols),
                        read=pattern("row_major", lanes, rows, cols), buffer_words=rows * cols,
                        buffers=2, read_gate=1, read_passes=passes)
    await load_config(bench, config_words_of(config))
    model = PMUModel(config, lanes)
    per_pass = rows * cols // lanes
    beats = _random_beats(bench, per_pass * passes, lanes)
    expected = []
    for index in range(passes):
        model.write_pass(index % 2, beats[index * per_pass:(index + 1) * per_pass])
        expected.append(model.read_pass(index % 2))
    source = bench.source("vector_in", "random")
    sink = bench.sink("vector_out", "random")
    source.send_all(pack_vector(beat) for beat in beats[:2 * per_pass])
    await bench.streams_done(timeout=50 * per_pass + 500)
    await bench.cycles(30)
    assert await bench.read("vector_out.valid") == 0, "read pass started without a token"
    gate = bench.source("control_in")
    for index in range(passes):
        gate.send(ControlToken.STEP)
        sink.expect_all(pack_vector(beat) for beat in expected[index])
        if index + 2 < passes:
            source.send_all(pack_vector(beat)
                            for beat in beats[(index + 2) * per_pass:(index + 3) * per_pass])
        await bench.streams_done(timeout=50 * per_pass + 500)
        await bench.cycles(20)
        assert await bench.read("vector_out.valid") == 0, "read pass ran ahead of its token"
    assert await bench.read("done") == 1
    return {"passes": passes}


ERROR_CASES = {
    # name: (config changes, expected error, send a scalar lookup instead of vectors)
    "zero_bound": "BAD_CONFIG",
    "too_many_buffers": "BAD_CONFIG",
    "over_capacity": "BAD_CONFIG",
    "read_conflict": "READ_CONFLICT",
    "write_conflict": "WRITE_CONFLICT",
    "write_range": "WRITE_RANGE",
    "read_range": "READ_RANGE",
    "scalar_range": "SCALAR_RANGE",
}


async def pmu_error(bench, *, lanes, case, capacity_words=None):
    """A bad configuration or access raises the documented sticky error, and nothing
    comes out of the PMU. ``over_capacity`` (three buffers, each within the PMU's
    ``capacity_words`` but not together) needs ``capacity_words``."""
    rows, cols = 2 * lanes, 4 * lanes
    write = pattern("row_major", lanes, rows, cols)
    read = pattern("row_major", lanes, rows, cols)
    kwargs = {"buffer_words": rows * cols}
    if case == "zero_bound":
        write["bound"][1] = 0
    elif case == "too_many_buffers":
        kwargs["buffers"] = 5
    elif case == "over_capacity":
        kwargs["buffers"] = 3
        kwargs["buffer_words"] = max(rows * cols, capacity_words // 3 + lanes)
    elif case == "read_conflict":
        read = pattern("column_major", lanes, rows, cols)     # transpose without the skew
    elif case == "write_conflict":
        write = pattern("column_major", lanes, rows, cols)
    elif case == "write_range":
        kwargs["buffer_words"] = rows * cols - 1
        kwargs["buffers"] = 1
    elif case == "read_range":
        read["start"] = 1
    config = pmu_config(lanes, write=write, read=read, **kwargs)
    await load_config(bench, config_words_of(config))
    expected = getattr(PMUError, ERROR_CASES[case])
    if case == "scalar_range":
        bench.source("scalar_in").send(lanes * 4096 * 16)
    else:
        beats = _random_beats(bench, rows * cols // lanes, lanes)
        bench.source("vector_in", "random").send_all(pack_vector(beat) for beat in beats)
    if case == "read_range":
        bench.sink("vector_out").checked = False      # beats before the bad one may leave
    seen_output = False
    for _ in range(rows * cols + 200):
        if await bench.read("vector_out.valid") or await bench.read("scalar_out.valid"):
            seen_output = True
        if await bench.read("error") == expected:
            break
        await bench.cycles(1)
    error = await bench.read("error")
    assert error == expected, f"error is {error}, expected {expected} ({case})"
    if case in ("zero_bound", "too_many_buffers", "over_capacity", "write_conflict",
                "write_range"):
        assert not seen_output, "the PMU produced data despite a write-side error"
    await bench.cycles(50)
    assert await bench.read("error") == expected, "error is not sticky"
    assert await bench.read("vector_out.valid") == 0 or case in ("read_conflict", "read_range")
    return {"error": error}


async def pmu_error_stops(bench, *, lanes, rows, cols):
    """An error one side raises stops the others by the next cycle (``docs/pmu.md``,
    "Error codes"): the writer streams full-rate beats (the reader draining the buffers)
    when a scalar lookup out of range comes; ``SCALAR_RANGE`` is raised and, from the
    cycle it shows, no write beat is taken. Returns the write beats taken in the cycle
    it was detected (0 or 1)."""
    config = pmu_config(lanes, write=pattern("row_major", lanes, rows, cols),
                        read=pattern("row_major", lanes, rows, cols), buffer_words=rows * cols,
                        buffers=2)
    await load_config(bench, config_words_of(config))
    per_pass = rows * cols // lanes
    bench.source("vector_in").send_all(
        pack_vector(beat) for beat in _random_beats(bench, 6 * per_pass, lanes))
    bench.sink("vector_out").checked = False
    await bench.cycles(2 * per_pass + 3)
    bench.source("scalar_in").send(lanes * 4096 * 16)
    written = [await bench.read("beats_written")]
    for _ in range(100):
        await bench.cycles(1)
        written.append(await bench.read("beats_written"))
        if await bench.read("error") != PMUError.OK:
            break
    assert await bench.read("error") == PMUError.SCALAR_RANGE
    assert written[-2] - written[-3] == 1, "the writer was not streaming when the error came"
    await bench.cycles(20)
    assert await bench.read("beats_written") == written[-1], \
        "a write beat was taken after the error showed"
    assert await bench.read("error") == PMUError.SCALAR_RANGE
    return {"taken_at_detection": written[-1] - written[-2]}

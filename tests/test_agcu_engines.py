"""The AGCU's engines (``hdl/agcu_engines.py``) and command decoder, each simulated alone.

Every test drives one Component through its signature with random stalls and checks what
it did against an independent reference: the affine walk and the coalescing rules of
``tb/suites/agcu.py`` (``rdu.affine``), the BF16 packing references, a Python model of
the command checks. ``test_mutants_are_caught`` runs the same checks on broken engines
(``formal/mutants.py`` and local ones) and requires each to fail.
"""

import random

import pytest
from amaranth import Mux
from amaranth.sim import Simulator

from formal.mutants import EarlyLastWriteEngine
from hdl.agcu import AGCUError, AGCUOp, CommandDecoder
from hdl.agcu_engines import (
    BF16Expander,
    BF16Packer,
    ReadEngine,
    WordSerializer,
    WriteEngine,
)
from hdl.interfaces import AXIResp
from tb.suites.agcu import (
    bf16_expanded_beats,
    bf16_packed_beat,
    pattern_addresses,
    reference_bursts,
)

BEAT = 32
LANES = 8
DATA_MASK = (1 << (8 * BEAT)) - 1


def simulate(dut, bench):
    """Run ``bench(ctx)`` as the testbench of ``dut`` (``Component``) on a 1 MHz clock."""
    sim = Simulator(dut)
    sim.add_clock(1e-6, if_exists=True)       # (none for a combinational one)
    sim.add_testbench(bench)
    sim.run()


def beat_value(address):
    """The memory model's beat at ``address``: a function of the address alone."""
    return (address * 0x9E37_79B9_7F4A_7C15 + 0x1234_5678) & DATA_MASK


def random_pattern(rng):
    """An aligned pattern with non-zero counts, far from the ends of the address space;
    contiguous (stride[0] = the beat) half the time, so that runs cross 4 KiB pages."""
    counts = [rng.randint(1, 40), rng.randint(1, 4), rng.randint(1, 3)]
    stride0 = BEAT if rng.random() < 0.5 else BEAT * rng.choice([-3, -1, 2, 5])
    strides = [stride0, BEAT * rng.randint(-200, 200), BEAT * rng.randint(-3000, 3000)]
    return {"base": BEAT * rng.randint(0x10_0000, 0x20_0000), "count": counts,
            "stride": strides}


async def start_pattern(ctx, dut, pattern):
    ctx.set(dut.pattern.base, pattern["base"])
    for k in range(3):
        ctx.set(dut.pattern.count[k], pattern["count"][k])
        ctx.set(dut.pattern.stride[k], pattern["stride"][k])
    ctx.set(dut.start, 1)
    await ctx.tick()
    ctx.set(dut.start, 0)


# -- ReadEngine ------------------------------------------------------------------------

def check_read_engine(engine_class, seed, max_outstanding=2):
    """Bursts on ``ar`` = the reference coalescing of a random pattern, never more than
    ``max_outstanding`` in flight; ``data`` = the memory model's beats at the pattern's
    addresses, in order; ``slverr`` on the beat answered SLVERR; idle at the end."""
    rng = random.Random(seed)
    pattern = random_pattern(rng)
    addresses = pattern_addresses(pattern)
    dut = engine_class(beat_bytes=BEAT, max_burst=16, max_outstanding=max_outstanding,
                       buffer_depth=4)
    bad_beat = rng.randrange(len(addresses))
    seen = {"bursts": [], "data": [], "most_in_flight": 0, "slverr": []}

    async def bench(ctx):
        await start_pattern(ctx, dut, pattern)
        outstanding = []        # [address, beats left] per burst taken on ar
        answered = 0
        for _ in range(20_000):
            if len(seen["data"]) == len(addresses):
                break
            ctx.set(dut.ar.ready, rng.random() < 0.7)
            ctx.set(dut.data.ready, rng.random() < 0.6)
            r_valid = bool(outstanding) and rng.random() < 0.7
            ctx.set(dut.r.valid, r_valid)
            if r_valid:
                address, left = outstanding[0]
                ctx.set(dut.r.payload.data, beat_value(address))
                ctx.set(dut.r.payload.last, left == 1)
                ctx.set(dut.r.payload.resp,
                        AXIResp.SLVERR if answered == bad_beat else AXIResp.OKAY)
            if ctx.get(dut.ar.valid) and ctx.get(dut.ar.ready):
                burst = (ctx.get(dut.ar.payload.addr), ctx.get(dut.ar.payload.len) + 1)
                seen["bursts"].append(burst)
                outstanding.append(list(burst))
            if ctx.get(dut.slverr):
                seen["slverr"].append(answered)
            if r_valid and ctx.get(dut.r.ready):
                outstanding[0][0] += BEAT
                outstanding[0][1] -= 1
                answered += 1
                if outstanding[0][1] == 0:
                    outstanding.pop(0)
            if ctx.get(dut.data.valid) and ctx.get(dut.data.ready):
                seen["data"].append(ctx.get(dut.data.payload))
            in_flight = len(outstanding)
            seen["most_in_flight"] = max(seen["most_in_flight"], in_flight)
            await ctx.tick()
        ctx.set(dut.r.valid, 0)
        await ctx.tick()
        seen["idle"] = ctx.get(dut.idle)

    simulate(dut, bench)
    assert seen["bursts"] == reference_bursts(pattern, max_burst=16)
    assert seen["data"] == [beat_value(address) for address in addresses]
    assert seen["most_in_flight"] <= max_outstanding
    assert seen["slverr"] == [bad_beat]
    assert seen["idle"] == 1


def test_read_engine(seed):
    for case in range(3):
        check_read_engine(ReadEngine, seed + case)


# -- WriteEngine -----------------------------------------------------------------------

def check_write_engine(engine_class, seed, max_outstanding=3):
    """Memory written = the data beats at the pattern's addresses, in order; ``w.last``
    on each ``aw`` burst's final beat (``w`` may lead ``aw``); ``aw`` = the reference
    coalescing; at most ``max_outstanding`` bursts issued and unanswered."""
    rng = random.Random(seed)
    pattern = random_pattern(rng)
    if seed % 2 == 0:           # every other case: bursts of several beats
        pattern["stride"][0] = BEAT
        pattern["count"][0] = max(pattern["count"][0], 2)
    addresses = pattern_addresses(pattern)
    values = [rng.getrandbits(8 * BEAT) for _ in addresses]
    dut = engine_class(beat_bytes=BEAT, max_burst=16, max_outstanding=max_outstanding)
    seen = {"aw": [], "writes": [], "lasts": [], "idle": 0}

    async def bench(ctx):
        await start_pattern(ctx, dut, pattern)
        sent = 0
        w_beats = []            # (data, last) in order
        b_given = 0
        for _ in range(20_000):
            if (len(w_beats) == len(addresses) and b_given == len(seen["aw"]) and
                    ctx.get(dut.idle)):
                break
            ctx.set(dut.data.valid, sent < len(values) and rng.random() < 0.7)
            ctx.set(dut.data.payload, values[sent] if sent < len(values) else 0)
            ctx.set(dut.aw.ready, rng.random() < 0.5)
            ctx.set(dut.w.ready, rng.random() < 0.7)
            # b for a burst whose aw and last w beat were both taken
            complete = min(len(seen["aw"]), sum(last for _, last in w_beats))
            b_valid = b_given < complete and rng.random() < 0.5
            ctx.set(dut.b.valid, b_valid)
            ctx.set(dut.b.payload.resp, AXIResp.OKAY)
            if ctx.get(dut.aw.valid) and ctx.get(dut.aw.ready):
                seen["aw"].append((ctx.get(dut.aw.payload.addr), ctx.get(dut.aw.payload.len) + 1))
            if ctx.get(dut.w.valid) and ctx.get(dut.w.ready):
                w_beats.append((ctx.get(dut.w.payload.data), ctx.get(dut.w.payload.last)))
                assert ctx.get(dut.data.ready)
                sent += 1
            if b_valid:
                b_given += 1
            await ctx.tick()
        seen["w"] = w_beats
        seen["idle"] = ctx.get(dut.idle)

    simulate(dut, bench)
    assert seen["idle"] == 1
    assert seen["aw"] == reference_bursts(pattern, max_burst=16)
    # the w beats cut by their last flags into bursts of the aw lengths
    ends = [index for index, (_, last) in enumerate(seen["w"]) if last]
    lengths = [end - start for start, end in zip([-1] + ends, ends, strict=False)]
    assert lengths == [beats for _, beats in seen["aw"]]
    memory = {}
    w_iter = iter(seen["w"])
    for address, beats in seen["aw"]:
        for beat in range(beats):
            memory[address + BEAT * beat] = next(w_iter)[0]
    expected = {}
    for address, value in zip(addresses, values, strict=True):
        expected[address] = value
    assert memory == expected


def test_write_engine(seed):
    for case in range(3):
        check_write_engine(WriteEngine, seed + case)


# -- data path -------------------------------------------------------------------------

def check_bf16_expander(expander_class, seed):
    """Two vector beats per packed beat, as ``bf16_expanded_beats``."""
    rng = random.Random(seed)
    raw = bytes(rng.getrandbits(8) for _ in range(BEAT * 12))
    beats = [int.from_bytes(raw[i:i + BEAT], "little") for i in range(0, len(raw), BEAT)]
    dut = expander_class(LANES)
    out = []

    async def bench(ctx):
        taken = 0
        while len(out) < 2 * len(beats):
            ctx.set(dut.i.valid, taken < len(beats) and rng.random() < 0.7)
            ctx.set(dut.i.payload, beats[taken] if taken < len(beats) else 0)
            ctx.set(dut.o.ready, rng.random() < 0.7)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                out.append(ctx.get(dut.o.payload))
            if ctx.get(dut.i.valid) and ctx.get(dut.i.ready):
                taken += 1
            await ctx.tick()

    simulate(dut, bench)
    assert out == bf16_expanded_beats(raw, list(range(0, len(raw), BEAT)))


def test_bf16_expander(seed):
    check_bf16_expander(BF16Expander, seed)


def check_bf16_packer(packer_class, seed):
    rng = random.Random(seed)
    vectors = [rng.getrandbits(32 * LANES) for _ in range(16)]
    dut = packer_class(LANES)
    out = []

    async def bench(ctx):
        taken = 0
        while len(out) < len(vectors) // 2:
            ctx.set(dut.burst_waiting, rng.random() < 0.8)
            ctx.set(dut.i.valid, taken < len(vectors) and rng.random() < 0.7)
            ctx.set(dut.i.payload, vectors[taken] if taken < len(vectors) else 0)
            ctx.set(dut.o.ready, ctx.get(dut.o.valid) and rng.random() < 0.7)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                out.append(ctx.get(dut.o.payload))
            if ctx.get(dut.i.valid) and ctx.get(dut.i.ready):
                taken += 1
            await ctx.tick()

    simulate(dut, bench)
    expected = [int.from_bytes(bf16_packed_beat(vectors[k], vectors[k + 1]), "little")
                for k in range(0, len(vectors), 2)]
    assert out == expected


def test_bf16_packer(seed):
    check_bf16_packer(BF16Packer, seed)


def check_word_serializer(serializer_class, seed):
    """``count`` words: the beats' words in order, a beat taken with its last word or the
    last of ``count``."""
    rng = random.Random(seed)
    count = rng.randint(1, 5 * LANES)
    beats = [rng.getrandbits(32 * LANES) for _ in range(-(-count // LANES))]
    dut = serializer_class(LANES)
    seen = {"words": [], "taken": 0}

    async def bench(ctx):
        ctx.set(dut.count, count)
        ctx.set(dut.load, 1)
        await ctx.tick()
        ctx.set(dut.load, 0)
        for _ in range(40 * LANES):
            taken = seen["taken"]
            ctx.set(dut.i.valid, taken < len(beats) and rng.random() < 0.8)
            ctx.set(dut.i.payload, beats[taken] if taken < len(beats) else 0)
            ctx.set(dut.o.ready, rng.random() < 0.7)
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                seen["words"].append(ctx.get(dut.o.payload))
            if ctx.get(dut.i.valid) and ctx.get(dut.i.ready):
                seen["taken"] += 1
            await ctx.tick()

    simulate(dut, bench)
    words = [(beat >> (32 * k)) & 0xFFFF_FFFF for beat in beats for k in range(LANES)]
    assert seen["words"] == words[:count]
    assert seen["taken"] == len(beats)


def test_word_serializer(seed):
    for case in range(3):
        check_word_serializer(WordSerializer, seed + case)


# -- CommandDecoder --------------------------------------------------------------------

def reference_check(command, config, beat=BEAT):
    """The documented command checks (``docs/agcu.md``, errors), in their order."""
    op, length = command["op"], command["length"]
    if op == AGCUOp.COPY:
        if length == 0 or length % beat:
            return AGCUError.BAD_LENGTH
        if command["src"] % beat or command["dst"] % beat:
            return AGCUError.MISALIGNED
        return AGCUError.NONE
    if op in (AGCUOp.PROGRAM_LOAD, AGCUOp.ARGUMENT_LOAD):
        if length == 0 or length % 4:
            return AGCUError.BAD_LENGTH
        return AGCUError.MISALIGNED if command["src"] % beat else AGCUError.NONE
    if op == AGCUOp.EXECUTE:
        enabled = [config[name] for name in ("load", "store")
                   if config[f"{name}_enable"]]
        if any(p["base"] % beat or any(s % beat for s in p["stride"]) for p in enabled):
            return AGCUError.MISALIGNED
        if any(0 in p["count"] for p in enabled):
            return AGCUError.BAD_CONFIG
        return AGCUError.NONE
    return AGCUError.BAD_OPCODE


def random_command(rng):
    def aligned(bits):
        value = rng.getrandbits(bits)
        return value - value % BEAT if rng.random() < 0.8 else value

    def pattern():
        return {"base": aligned(32), "count": [rng.choice([0, 1, rng.getrandbits(16)])
                                               for _ in range(3)],
                "stride": [rng.choice([BEAT, -BEAT, BEAT * rng.randint(-99, 99),
                                       rng.randint(-999, 999)]) for _ in range(3)]}

    command = {"op": rng.randrange(8), "src": aligned(32), "dst": aligned(32),
               "length": rng.choice([0, 4 * rng.randint(1, 99), BEAT * rng.randint(1, 99),
                                     rng.getrandbits(32)])}
    config = {"load_enable": rng.getrandbits(1), "store_enable": rng.getrandbits(1),
              "load": pattern(), "store": pattern()}
    return command, config


def test_command_decoder(seed):
    """Error codes against :func:`reference_check`; the linear patterns (whole beats,
    a load's last beat rounded up) and the configured ones passed through."""
    rng = random.Random(seed)
    dut = CommandDecoder(beat_bytes=BEAT)
    cases = [random_command(rng) for _ in range(300)]
    results = []

    async def bench(ctx):
        for command, config in cases:
            for name in ("op", "src", "dst", "length"):
                ctx.set(getattr(dut.command, name), command[name])
            for name in ("load_enable", "store_enable"):
                ctx.set(getattr(dut.config, name), config[name])
            for name in ("load", "store"):
                pattern = getattr(dut.config, name)
                ctx.set(pattern.base, config[name]["base"])
                for k in range(3):
                    ctx.set(pattern.count[k], config[name]["count"][k])
                    ctx.set(pattern.stride[k], config[name]["stride"][k])
            results.append((ctx.get(dut.error), ctx.get(dut.words),
                            ctx.get(dut.source.count[0]), ctx.get(dut.dest.base),
                            ctx.get(dut.load.count[2]), ctx.get(dut.store.stride[1])))
            await ctx.delay(1e-6)

    simulate(dut, bench)
    for (command, config), result in zip(cases, results, strict=True):
        length = command["length"]
        beats = length // BEAT if command["op"] == AGCUOp.COPY else -(-length // BEAT)
        assert result == (reference_check(command, config), length >> 2,
                          beats & 0xFFFF_FFFF, command["dst"], config["load"]["count"][2],
                          config["store"]["stride"][1]), (command, config)


# -- the checks fail on broken engines -----------------------------------------------------

class OverIssuingReadEngine(ReadEngine):
    """One more burst in flight than allowed (``<=`` for ``<`` on the in-flight count)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        gen = m._named_submodules["read_gen"][0]
        room = driven["reads_in_flight"] <= self.max_outstanding
        m.d.comb += [self.ar.valid.eq(gen.bursts.valid & room),
                     gen.bursts.ready.eq(self.ar.ready & room)]
        return m


class SecondHalfFirstExpander(BF16Expander):
    """Sends the values ``lanes..2*lanes-1`` first (the halves swapped)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        half = driven["second_half"]
        half_bits = 16 * self.lanes
        for lane in range(self.lanes):
            m.d.comb += self.o.payload.word_select(lane, 32).eq(Mux(
                half, self.i.payload[16 * lane:16 * (lane + 1)],
                self.i.payload[half_bits + 16 * lane:half_bits + 16 * (lane + 1)]) << 16)
        return m


class LowHalfOnlyPacker(BF16Packer):
    """Packs the first beat's high halves twice (the second beat's are lost)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        low = driven["low_half"]
        m.d.comb += self.o.payload.eq(low | low << (16 * self.lanes))
        return m


class WholeBeatSerializer(WordSerializer):
    """Takes a beat only with its last word, also when ``count`` ends inside it (the
    partial last beat stays in the buffer)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        m.d.comb += self.i.ready.eq(self.o.valid & self.o.ready &
                                    (driven["word_index"] == self.lanes - 1))
        return m


@pytest.mark.parametrize("check,mutant", [
    (check_read_engine, OverIssuingReadEngine),
    (check_write_engine, EarlyLastWriteEngine),
    (check_bf16_expander, SecondHalfFirstExpander),
    (check_bf16_packer, LowHalfOnlyPacker),
    (check_word_serializer, WholeBeatSerializer),
], ids=["over_issuing_read", "early_last_write", "swapped_expander", "low_half_packer",
        "whole_beat_words"])
def test_mutants_are_caught(check, mutant, seed):
    failed = 0
    for case in range(4):
        try:
            check(mutant, seed + case)
        except AssertionError:
            failed += 1
    assert failed, f"{mutant.__name__} passed the checks"

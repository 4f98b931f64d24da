"""The PMU's pieces (``hdl/pmu_beats.py``: ``BankMapper``; ``hdl/pmu.py``: ``PMUWriteSide``,
``PMUReadSide``),
each simulated alone against the Python reference model of ``tb/suites/pmu.py``
(``PMUModel``, ``bank_of``, the address generators' walk from ``rdu.affine``).
``test_mutants_are_caught`` runs the same checks on broken pieces and requires each to
fail."""

import random

import pytest
from amaranth import Const
from amaranth.sim import Simulator

from hdl.interfaces import ControlToken
from hdl.pmu import ADDRESS_BITS, BankMapper, PMUError, PMUReadSide, PMUWriteSide
from hdl.pmu_beats import MAPPER_LATENCY, MappedBeats
from tb.suites.pmu import PMUModel, affine_addresses, bank_of, pattern, pmu_config

LANES = 8
LANE_BITS = 3
BANK_WORDS = 256
MASK = (1 << ADDRESS_BITS) - 1


def simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6, if_exists=True)       # (none for a combinational one)
    sim.add_testbench(bench)
    sim.run()


def set_config(ctx, port, config):
    """Drive ``port`` (a ``pmu_config_layout`` view) from a :func:`pmu_config` dict."""
    for name, value in config.items():
        if isinstance(value, dict):
            view = getattr(port, name)
            for field, setting in value.items():
                if isinstance(setting, list):
                    for k, item in enumerate(setting):
                        ctx.set(getattr(view, field)[k], item)
                else:
                    ctx.set(getattr(view, field), setting)
        else:
            ctx.set(getattr(port, name), value)


# -- BankMapper ------------------------------------------------------------------------

def check_bank_mapper(mapper_class, seed):
    """Per lane: bank (:func:`bank_of`), row, range; conflict; predicate; 400 random
    addresses, bases, lane strides and configurations, each held for the mapper's
    latency and the cycle of its lane constants."""
    rng = random.Random(seed)
    dut = mapper_class(LANES, BANK_WORDS)
    cases = []
    for _ in range(400):
        low = rng.getrandbits(ADDRESS_BITS)
        cases.append({
            "predicate_enable": rng.getrandbits(1), "predicate_low": low,
            "predicate_high": rng.randint(low, MASK), "skew_shift": rng.choice([0, 3, 4, 7]),
            "buffer_words": rng.randint(1, LANES * BANK_WORDS),
            "lane_stride": rng.choice([1, 2, 3, 8, rng.getrandbits(ADDRESS_BITS)]),
            "address": rng.choice([low, rng.getrandbits(ADDRESS_BITS)]),
            "buffer_base": rng.getrandbits(ADDRESS_BITS),
        })
    results = []

    async def bench(ctx):
        for case in cases:
            for name in ("predicate_enable", "predicate_low", "predicate_high",
                         "skew_shift", "buffer_words"):
                ctx.set(getattr(dut.config, name), case[name])
            for name in ("lane_stride", "address", "buffer_base"):
                ctx.set(getattr(dut, name), case[name])
            ctx.set(dut.valid, 1)
            await ctx.tick().repeat(MAPPER_LATENCY + 1)
            assert ctx.get(dut.beat_valid)
            beat = dut.beat
            results.append((ctx.get(beat.in_predicate),
                            [ctx.get(beat.bank[lane]) for lane in range(LANES)],
                            [ctx.get(beat.row[lane]) for lane in range(LANES)],
                            ctx.get(beat.conflict), ctx.get(beat.out_of_range)))

    simulate(dut, bench)
    for case, result in zip(cases, results, strict=True):
        enabled, low = case["predicate_enable"], case["predicate_low"]
        in_predicate = not enabled or low <= case["address"] < case["predicate_high"]
        offsets = [(case["address"] - (low if enabled else 0) + lane * case["lane_stride"])
                   & MASK for lane in range(LANES)]
        physical = [(case["buffer_base"] + offset) & MASK for offset in offsets]
        banks = [bank_of(p, LANES, case["skew_shift"]) for p in physical]
        rows = [(p >> LANE_BITS) % BANK_WORDS for p in physical]
        assert result == (in_predicate, banks, rows, len(set(banks)) < LANES,
                          any(offset >= case["buffer_words"] for offset in offsets)), case


def test_bank_mapper(seed):
    check_bank_mapper(BankMapper, seed)


# -- PMUWriteSide ----------------------------------------------------------------------

def random_pmu_config(rng, *, buffers, read_passes=0):
    rows, cols = rng.choice([(8, 16), (16, 8), (8, 8)])
    write = pattern(rng.choice(["row_major", "tiled", "strided"]), LANES, rows, cols)
    read = pattern(rng.choice(["row_major", "tiled"]), LANES, rows, cols)
    predicate = None
    if rng.random() < 0.4:
        low = rng.randrange(rows * cols // 2)
        predicate = (low, rng.randint(low + 1, rows * cols))
    return pmu_config(LANES, write=write, read=read, buffers=buffers,
                      buffer_words=rows * cols, read_passes=read_passes, predicate=predicate)


def physical_word(config, buffer, offset):
    """(bank, row) of word ``offset`` of ``buffer``."""
    physical = buffer * config["buffer_words"] + offset
    return bank_of(physical, LANES, config["skew_shift"]), physical >> LANE_BITS


def check_write_side(side_class, seed):
    """Three write passes into two buffers (the third wraps to buffer 0): the bank
    writes = :meth:`PMUModel.write_pass`'s words at their banks and rows; one
    ``pass_done`` per pass; no error; ``room`` low holds the beats back."""
    rng = random.Random(seed)
    config = random_pmu_config(rng, buffers=2)
    per_pass = len(list(affine_addresses(config["write"])))
    passes = [[[rng.getrandbits(32) for _ in range(LANES)] for _ in range(per_pass)]
              for _ in range(3)]
    beats = [beat for one_pass in passes for beat in one_pass]
    dut = side_class(LANES, BANK_WORDS)
    seen = {"banks": {}, "pass_done": 0, "errors": set(), "taken_without_room": 0}

    async def bench(ctx):
        set_config(ctx, dut.config, config)
        ctx.set(dut.config_ok, 1)
        ctx.set(dut.healthy, 1)
        ctx.set(dut.clear, 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        sent = 0
        for _ in range(20 * len(beats)):
            if sent == len(beats):
                break
            room = rng.random() < 0.8
            ctx.set(dut.room, room)
            ctx.set(dut.beats.valid, rng.random() < 0.7)
            for lane in range(LANES):
                ctx.set(dut.beats.payload[lane], beats[sent][lane])
            seen["errors"].add(ctx.get(dut.error))
            if ctx.get(dut.bank_enable):
                for bank in range(LANES):
                    seen["banks"][bank, ctx.get(dut.bank_addr[bank])] = \
                        ctx.get(dut.bank_data[bank])
            if ctx.get(dut.fire):
                sent += 1
                seen["taken_without_room"] += not room
            seen["pass_done"] += ctx.get(dut.pass_done)
            await ctx.tick()
        seen["mid_pass"] = ctx.get(dut.mid_pass)

    simulate(dut, bench)
    assert seen["errors"] == {PMUError.OK}
    assert seen["taken_without_room"] == 0
    assert seen["pass_done"] == 3 and seen["mid_pass"] == 0
    model = PMUModel(config, LANES)
    for number, one_pass in enumerate(passes):
        model.write_pass(number % 2, one_pass)
    expected = {physical_word(config, buffer, offset): value
                for buffer, words in enumerate(model.buffers)
                for offset, value in words.items()}
    assert {key: seen["banks"].get(key) for key in expected} == expected


def test_write_side(seed):
    for case in range(3):
        check_write_side(PMUWriteSide, seed + case)


# -- PMUReadSide -----------------------------------------------------------------------

def check_read_side(side_class, seed):
    """Two read passes (``read_passes`` 2) over two filled buffers: the beats =
    :meth:`PMUModel.read_pass` of buffer 0 then 1, through a 4-deep output FIFO that
    never overflows; tokens STEP then DONE; ``done`` at the end."""
    rng = random.Random(seed)
    config = random_pmu_config(rng, buffers=2, read_passes=2)
    model = PMUModel(config, LANES)
    banks = {}
    for buffer in range(2):
        for offset in range(config["buffer_words"]):
            value = rng.getrandbits(32)
            model.buffers[buffer][offset] = value
            banks[physical_word(config, buffer, offset)] = value
    expected = model.read_pass(0) + model.read_pass(1)
    dut = side_class(LANES, BANK_WORDS)
    seen = {"beats": [], "tokens": [], "most_queued": 0, "errors": set()}

    async def bench(ctx):
        set_config(ctx, dut.config, config)
        for name in ("config_ok", "healthy", "clear"):
            ctx.set(getattr(dut, name), 1)
        await ctx.tick()
        ctx.set(dut.clear, 0)
        ctx.set(dut.full, 1)
        fifo = []
        reading = None           # the rows addressed last cycle (read ports: registered)
        for _ in range(40 * (len(expected) + 4)):
            if reading is not None:
                for bank in range(LANES):
                    ctx.set(dut.bank_data[bank], banks.get((bank, reading[bank]), 0))
            ctx.set(dut.out_level, len(fifo))
            ctx.set(dut.control_out.ready, rng.random() < 0.5)
            seen["errors"].add(ctx.get(dut.error))
            reading = ([ctx.get(dut.bank_addr[bank]) for bank in range(LANES)]
                       if ctx.get(dut.issue) else None)
            if ctx.get(dut.beats.valid):
                fifo.append([ctx.get(dut.beats.payload[lane]) for lane in range(LANES)])
            if ctx.get(dut.control_out.valid) and ctx.get(dut.control_out.ready):
                seen["tokens"].append(ctx.get(dut.control_out.payload))
            seen["most_queued"] = max(seen["most_queued"], len(fifo))
            if fifo and rng.random() < 0.6:
                seen["beats"].append(fifo.pop(0))
            await ctx.tick()
        seen["beats"] += fifo
        seen["done"] = ctx.get(dut.done)

    simulate(dut, bench)
    assert seen["errors"] == {PMUError.OK}
    assert seen["beats"] == expected
    assert seen["most_queued"] <= 4
    assert seen["tokens"] == [ControlToken.STEP, ControlToken.DONE]
    assert seen["done"] == 1


def test_read_side(seed):
    for case in range(3):
        check_read_side(PMUReadSide, seed + case)


# -- the checks fail on broken pieces ----------------------------------------------------

class NeighbourConflictMapper(BankMapper):
    """Checks only neighbouring lanes for a shared bank."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        shared = Const(0)
        for lane in range(self.lanes - 1):
            shared |= self.beat.bank[lane] == self.beat.bank[lane + 1]
        m.d.comb += self.beat.conflict.eq(shared)
        return m


class OneBufferBeats(MappedBeats):
    """Never moves to the next buffer (every pass maps into buffer 0)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        driven = {signal.name: signal for signal in m._driving.keys()}
        m.d.sync += [driven["buffer_base"].eq(0), driven["buffer_index"].eq(0)]
        return m


class OneBufferWriteSide(PMUWriteSide):
    """Never moves to the next buffer (every pass lands in buffer 0)."""
    beats_class = OneBufferBeats


class NoDoneReadSide(PMUReadSide):
    """Sends STEP for the last pass too (``last_pass`` never seen by the tokens)."""

    def _tokens(self, m, read_step, arm_now, gate_credits, last_pass):
        super()._tokens(m, read_step, arm_now, gate_credits, Const(0))


@pytest.mark.parametrize("check,mutant", [
    (check_bank_mapper, NeighbourConflictMapper),
    (check_write_side, OneBufferWriteSide),
    (check_read_side, NoDoneReadSide),
], ids=["neighbour_conflict", "one_buffer_write", "no_done_read"])
def test_mutants_are_caught(check, mutant, seed):
    failed = 0
    for case in range(3):
        try:
            check(mutant, seed + case)
        except AssertionError:
            failed += 1
    assert failed, f"{mutant.__name__} passed the checks"

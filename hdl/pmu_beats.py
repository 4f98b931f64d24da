"""The PMU's address path: the affine address generators and the lane mapping, run
ahead of the sides into a small queue of mapped beats.

A side takes the beat at the head of its :class:`MappedBeats` queue: its banks, rows and
checks are registers, so the handshakes do not wait for the address arithmetic. See
``docs/pmu.md`` ("Address path").
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .pmu_config import (
    ADDRESS_BITS,
    BOUND_BITS,
    MAX_BUFFERS,
    address_generator_layout,
    pmu_config_layout,
)

__all__ = ["MAPPER_LATENCY", "BEATS_AHEAD", "log2", "AffineAddressGenerator", "bank_of",
           "beat_layout", "BankMapper", "MappedBeats", "last_repeat_flag"]

#: Cycles from a beat's address at :class:`BankMapper` to its mapping at the output.
MAPPER_LATENCY = 2
#: Beats a :class:`MappedBeats` holds at most (in its mapper and its queue): enough for
#: one beat a cycle with the mapper's latency.
BEATS_AHEAD = MAPPER_LATENCY + 2


def _times_constant(value, factor):
    """``value * factor`` for a constant ``factor``, as shifted copies added (synthesis
    maps a ``*`` to a DSP multiplier even when one operand is a small constant)."""
    terms = [value << bit for bit in range(factor.bit_length()) if factor >> bit & 1]
    total = terms[0] if terms else 0
    for term in terms[1:]:
        total = total + term
    return total


class AffineAddressGenerator(wiring.Component):
    """Three-level affine loop: ``start + i0*stride[0] + i1*stride[1] + i2*stride[2]``.

    Level 0 is innermost; level ``k`` runs ``bound[k]`` iterations. The running
    address is kept with adders only (no multipliers).

    Attributes
    ----------
    config : In(address_generator_layout())
    advance : In(1)
        Step to the next iteration (from the last one, back to the first).
    clear : In(1)
        Return to the first iteration.
    address : Out(ADDRESS_BITS)
        Address of the current iteration.
    last : Out(1)
        The current iteration is the last of the loop nest.
    index : Out(data.ArrayLayout(BOUND_BITS, 3))
        The current iteration's indices, level 0 first.
    """
    def __init__(self):
        super().__init__({
            "config": In(address_generator_layout()),
            "advance": In(1),
            "clear": In(1),
            "address": Out(ADDRESS_BITS),
            "last": Out(1),
            "index": Out(data.ArrayLayout(BOUND_BITS, 3)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        index = [Signal(BOUND_BITS, name=f"i{level}") for level in range(3)]
        offset = Signal(ADDRESS_BITS)          # address - start
        base1 = Signal(ADDRESS_BITS)           # offset of (i0=0) at the current i1, i2
        base2 = Signal(ADDRESS_BITS)           # offset of (i0=i1=0) at the current i2
        at_end = [index[level] == cfg.bound[level] - 1 for level in range(3)]
        m.d.comb += [
            self.address.eq(cfg.start + offset),
            self.last.eq(at_end[0] & at_end[1] & at_end[2]),
            *(port.eq(i) for port, i in zip(self.index, index, strict=True)),
        ]
        with m.If(self.clear):
            m.d.sync += [offset.eq(0), base1.eq(0), base2.eq(0),
                         *(i.eq(0) for i in index)]
        with m.Elif(self.advance):
            with m.If(~at_end[0]):
                m.d.sync += [index[0].eq(index[0] + 1), offset.eq(offset + cfg.stride[0])]
            with m.Elif(~at_end[1]):
                m.d.sync += [index[0].eq(0), index[1].eq(index[1] + 1),
                             base1.eq(base1 + cfg.stride[1]),
                             offset.eq(base1 + cfg.stride[1])]
            with m.Elif(~at_end[2]):
                m.d.sync += [index[0].eq(0), index[1].eq(0), index[2].eq(index[2] + 1),
                             base2.eq(base2 + cfg.stride[2]),
                             base1.eq(base2 + cfg.stride[2]),
                             offset.eq(base2 + cfg.stride[2])]
            with m.Else():
                m.d.sync += [offset.eq(0), base1.eq(0), base2.eq(0),
                             *(i.eq(0) for i in index)]
        return m


def log2(value):
    """``log2`` of a power of two."""
    return value.bit_length() - 1


def bank_of(address, skew_shift):
    """The bank of a physical word address: ``address + (address >> skew_shift)`` (no
    skew when ``skew_shift`` is 0), modulo the bank count (the caller's width)."""
    return address + Mux(skew_shift == 0, 0, address >> skew_shift)


def beat_layout(lanes, bank_words):
    """One mapped beat: per lane its bank and row; the predicate, the checks and whether
    it is the last beat of its generator's loop nest."""
    return data.StructLayout({
        "in_predicate": 1,
        "conflict": 1,
        "out_of_range": 1,
        "last": 1,
        "bank": data.ArrayLayout(log2(lanes), lanes),
        "row": data.ArrayLayout(range(bank_words), lanes),
    })


class BankMapper(wiring.Component):
    """Where each lane of the beat at ``address`` lives: its bank, its row, whether its
    word is inside the buffer and whether two lanes share a bank, ``MAPPER_LATENCY``
    cycles later (a pipeline that never stalls).

    Lane ``l``'s word is at ``offset_l = address - low + l * lane_stride`` in the buffer
    (``low`` is ``predicate_low`` with the predicate on, else 0), physical word
    ``buffer_base + offset_l``, in bank :func:`bank_of` and row ``physical >> log2(lanes)``.
    Stage 1 adds the lane constants ``l * lane_stride - low`` (registers, from the
    configuration of the cycle before), stage 2 the predicate, the range check and the
    buffer base, the output the banks and the conflict check.

    Parameters
    ----------
    lanes : int
    bank_words : int
        Words per bank.

    Attributes
    ----------
    config : In(pmu_config_layout())
        ``predicate_*``, ``skew_shift`` and ``buffer_words`` are used.
    lane_stride, address, buffer_base : In(ADDRESS_BITS)
    last, valid : In(1)
        Carried with the beat.
    clear : In(1)
        Drop the beats in the pipeline.
    beat : Out(beat_layout(lanes, bank_words))
        The mapping of the beat given ``MAPPER_LATENCY`` cycles before.
    beat_valid : Out(1)
        ``valid`` of that beat.
    """

    def __init__(self, lanes=8, bank_words=2048):
        self.lanes = lanes
        self.bank_words = bank_words
        super().__init__({
            "config": In(pmu_config_layout()),
            "lane_stride": In(ADDRESS_BITS),
            "address": In(ADDRESS_BITS),
            "buffer_base": In(ADDRESS_BITS),
            "last": In(1),
            "valid": In(1),
            "clear": In(1),
            "beat": Out(beat_layout(lanes, bank_words)),
            "beat_valid": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg, lanes, lane_bits = self.config, self.lanes, log2(self.lanes)
        low = Mux(cfg.predicate_enable, cfg.predicate_low, 0)
        # stage 1: each lane's offset in the buffer (one adder from a register)
        address = Signal(ADDRESS_BITS, name="s1_address")
        base = Signal(ADDRESS_BITS, name="s1_base")
        last, valid = Signal(name="s1_last"), Signal(name="s1_valid")
        offsets = []
        for lane in range(lanes):
            constant = Signal(ADDRESS_BITS, name=f"lane_constant{lane}")
            offset = Signal(ADDRESS_BITS, name=f"s1_offset{lane}")
            m.d.sync += [constant.eq(_times_constant(self.lane_stride, lane) - low),
                         offset.eq(self.address + constant)]
            offsets.append(offset)
        m.d.sync += [address.eq(self.address), base.eq(self.buffer_base),
                     last.eq(self.last), valid.eq(self.valid)]
        # stage 2: predicate, range, physical words
        in_predicate = Signal(name="s2_in_predicate")
        out_of_range = Signal(name="s2_out_of_range")
        physical = [Signal(ADDRESS_BITS, name=f"s2_physical{lane}") for lane in range(lanes)]
        m.d.sync += [
            in_predicate.eq(~cfg.predicate_enable | (
                (address >= cfg.predicate_low) & (address < cfg.predicate_high))),
            out_of_range.eq(Cat(*(offset >= cfg.buffer_words for offset in offsets)).any()),
            *(word.eq(base + offset) for word, offset in zip(physical, offsets, strict=True)),
            self.beat.last.eq(last),
            self.beat_valid.eq(valid),
        ]
        with m.If(self.clear):
            m.d.sync += [valid.eq(0), self.beat_valid.eq(0)]
        # output: banks, rows, conflict
        m.d.comb += [self.beat.in_predicate.eq(in_predicate),
                     self.beat.out_of_range.eq(out_of_range)]
        for lane in range(lanes):
            m.d.comb += [self.beat.bank[lane].eq(bank_of(physical[lane], cfg.skew_shift)),
                         self.beat.row[lane].eq(physical[lane] >> lane_bits)]
        for a in range(lanes):
            for b in range(a + 1, lanes):
                with m.If(self.beat.bank[a] == self.beat.bank[b]):
                    m.d.comb += self.beat.conflict.eq(1)
        return m


def last_repeat_flag(m, cfg, pass_end, clear, name):
    """Counts the read passes over a buffer (``pass_end``: one ends this cycle); returns
    a register, high while the pass under way is the last of ``max(1, read_repeat)``
    over its buffer. It is computed for the count after each cycle's ``pass_end`` (both
    outcomes from registers), so the logic that waits for it does not wait for the
    count's arithmetic. Valid from the second cycle after ``clear``."""
    count = Signal(8, name=f"{name}_count")
    last = Signal(name=f"{name}_last")
    repeats = Mux(cfg.read_repeat == 0, 1, cfg.read_repeat)
    with m.If(pass_end):
        m.d.sync += count.eq(Mux(last, 0, count + 1))
    m.d.sync += last.eq(Mux(pass_end, Mux(last, repeats <= 1, count + 2 >= repeats),
                            count + 1 >= repeats))
    with m.If(clear):
        m.d.sync += count.eq(0)
    return last


def _next_buffer(cfg, index, base):
    """Step ``index``/``base`` to the next of ``cfg.buffers`` buffers (sync statements)."""
    wrap = index == cfg.buffers - 1
    return [index.eq(Mux(wrap, 0, index + 1)),
            base.eq(Mux(wrap, 0, base + cfg.buffer_words))]


class MappedBeats(wiring.Component):
    """One side's address path: its generator runs ahead of the beats taken, through a
    :class:`BankMapper`, into a queue of mapped beats (at most ``BEATS_AHEAD`` beats in
    all), following the passes and the buffers on its own.

    A beat is given to the mapper when fewer than ``BEATS_AHEAD`` are held, so the queue
    does not wait on ``take`` and sustains one beat per cycle. After ``clear`` the first
    beat reaches the head ``MAPPER_LATENCY + 2`` cycles later (one cycle for the lane
    constants of the new configuration).

    Parameters
    ----------
    lanes, bank_words : int
        As for :class:`BankMapper`.
    side : str
        ``"write"`` (a new buffer every pass) or ``"read"`` (a new buffer every
        ``max(1, read_repeat)`` passes).

    Attributes
    ----------
    config : In(pmu_config_layout())
    clear : In(1)
        Back to buffer 0, first iteration, no beat held.
    take : In(1)
        The head beat is used (only while ``valid``).
    valid : Out(1)
        The queue holds a beat.
    beat : Out(beat_layout(lanes, bank_words))
        The head beat (a register).
    """

    def __init__(self, lanes=8, bank_words=2048, side="write"):
        if side not in ("write", "read"):
            raise ValueError(f"Side must be 'write' or 'read', not {side!r}")
        self.lanes = lanes
        self.bank_words = bank_words
        self.side = side
        super().__init__({
            "config": In(pmu_config_layout()),
            "clear": In(1),
            "take": In(1),
            "valid": Out(1),
            "beat": Out(beat_layout(lanes, bank_words)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        ag = cfg.read if self.side == "read" else cfg.write
        m.submodules.generator = generator = AffineAddressGenerator()
        m.submodules.mapper = mapper = BankMapper(self.lanes, self.bank_words)
        started = Signal()              # the lane constants hold the configuration
        held = Signal(range(BEATS_AHEAD + 1))       # beats given and not taken
        give = Signal()
        # the generator's last iteration, its indices against ``bound - 1`` held in
        # registers (as the lane constants: steady once ``started``), not through the
        # subtractions of the generator's own ``last``
        ends = [Signal(BOUND_BITS, name=f"index_end{level}") for level in range(3)]
        m.d.sync += [end.eq(bound - 1) for end, bound in zip(ends, ag.bound, strict=True)]
        last = Cat(*(index == end for index, end in zip(generator.index, ends,
                                                        strict=True))).all()
        m.d.comb += [
            give.eq(started & (held < BEATS_AHEAD)),
            generator.config.eq(ag), generator.advance.eq(give),
            generator.clear.eq(self.clear),
            mapper.config.eq(cfg), mapper.lane_stride.eq(ag.lane_stride),
            mapper.address.eq(generator.address), mapper.last.eq(last),
            mapper.valid.eq(give), mapper.clear.eq(self.clear),
        ]
        m.d.sync += [started.eq(1), held.eq(held + give - self.take)]
        self._buffers(m, give & last, mapper)
        self._queue(m, mapper)
        with m.If(self.clear):
            m.d.sync += [started.eq(0), held.eq(0)]
        return m

    def _buffers(self, m, pass_end, mapper):
        """The generator's buffer: the next after each pass (write) or after
        ``read_repeat`` passes (read)."""
        cfg = self.config
        base = Signal(ADDRESS_BITS, name="buffer_base")
        index = Signal(range(MAX_BUFFERS), name="buffer_index")
        m.d.comb += mapper.buffer_base.eq(base)
        new_buffer = pass_end
        if self.side == "read":
            new_buffer = pass_end & last_repeat_flag(m, cfg, pass_end, self.clear, "repeats")
        with m.If(new_buffer):
            m.d.sync += _next_buffer(cfg, index, base)
        with m.If(self.clear):
            m.d.sync += [index.eq(0), base.eq(0)]

    def _queue(self, m, mapper):
        """The mapped beats, head first (a shift register)."""
        entries = [Signal(beat_layout(self.lanes, self.bank_words), name=f"entry{i}")
                   for i in range(BEATS_AHEAD)]
        count = Signal(range(BEATS_AHEAD + 1))
        take = self.take
        for i, entry in enumerate(entries):
            with m.If(mapper.beat_valid & Mux(take, count == i + 1, count == i)):
                m.d.sync += entry.eq(mapper.beat)
            if i + 1 < BEATS_AHEAD:
                with m.Elif(take):
                    m.d.sync += entry.eq(entries[i + 1])
        m.d.sync += count.eq(count + mapper.beat_valid - take)
        with m.If(self.clear):
            m.d.sync += count.eq(0)
        m.d.comb += [self.valid.eq(count != 0), self.beat.eq(entries[0])]

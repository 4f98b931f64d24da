"""Configuration network: bitstream loader and checker, addressed configuration bus,
readback. The format is in ``docs/bitstream.md`` and ``software/rdu/bitstream.py``."""

from types import SimpleNamespace

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import enum, stream, wiring
from amaranth.lib.wiring import In, Out

from .interfaces import WORD_BITS, ConfigPort

__all__ = ["MAGIC", "VERSION", "HEADER_WORDS", "RECORD_COUNT_BITS", "MAX_RECORD_WORDS",
           "RECORD_CLEAR",
           "ConfigStatus", "LoaderState", "UnitKind", "crc32_word_matrix", "ConfigNetwork"]

# The format's constants; software/rdu/bitstream.py (writer and reader) imports them.
#: Word 0: the bytes "RDU1" read as a little-endian word (docs/bitstream.md).
MAGIC = 0x31554452
#: The format version the hardware accepts (and the compiler writes). Version 2 added
#: the record header's clear flag (``RECORD_CLEAR``).
VERSION = 2
#: Header words of this version (readers accept longer headers and skip the rest).
HEADER_WORDS = 5
#: Width of a record header's word count (bits 0..7).
RECORD_COUNT_BITS = 8
#: Most configuration words one record carries.
MAX_RECORD_WORDS = (1 << RECORD_COUNT_BITS) - 1
#: Record header bit 28: the unit's configuration is set to zero before the record's
#: words are written (in the record header's cycle), so the words the record leaves
#: out are zero and an idle unit costs one word.
RECORD_CLEAR = 1 << 28


class UnitKind(enum.IntEnum, shape=4):
    """Record unit kinds (bits 24..27 of a record header) and configuration-bus targets."""
    PCU = 1
    PMU = 2
    SWITCH = 3
    AGCU = 4


class ConfigStatus(enum.IntEnum, shape=3):
    """``config_error`` codes of the loader (``rdu.bitstream`` raises the same codes)."""
    OK = 0
    BAD_MAGIC = 1
    BAD_VERSION = 2        # unsupported version, or a header shorter than 5 words
    GEOMETRY = 3           # rows, cols or lanes differ from the array
    LENGTH = 4             # truncated (stream stopped early) or a record overruns the payload
    CRC = 5                # CRC-32 of the payload differs from header word 4
    BAD_RECORD = 6         # unknown kind, no such unit, reserved bits set, too many words


class LoaderState(enum.IntEnum, shape=2):
    """``config_state`` values."""
    EMPTY = 0        # nothing loaded since reset or ``config_clear``
    LOADING = 1      # a bitstream is being received
    LOADED = 2       # the last bitstream passed every check: the array may start
    ERROR = 3        # the last bitstream was rejected (``config_error`` says why)


_POLY = 0xEDB88320


def _crc_bitwise(state, word):
    for bit in range(WORD_BITS):
        feedback = (state ^ (word >> bit)) & 1
        state = (state >> 1) ^ (_POLY if feedback else 0)
    return state


def crc32_word_matrix():
    """For each bit of the next CRC state, the (state, data) bit masks it XORs.

    The reflected CRC-32 of zlib over one little-endian 32-bit word is linear in the
    previous state and the word; ``next[i] = parity(state & s[i]) ^ parity(word & d[i])``.
    """
    state_masks = [0] * WORD_BITS
    data_masks = [0] * WORD_BITS
    for j in range(WORD_BITS):
        from_state = _crc_bitwise(1 << j, 0)
        from_data = _crc_bitwise(0, 1 << j)
        for i in range(WORD_BITS):
            if from_state >> i & 1:
                state_masks[i] |= 1 << j
            if from_data >> i & 1:
                data_masks[i] |= 1 << j
    return state_masks, data_masks


class ConfigNetwork(wiring.Component):
    """Loads a bitstream into the units' configuration ports, checks it, reads it back.

    An addressed configuration bus: every record names its unit (kind, row, col); the
    loader writes the record's words to that unit's :class:`ConfigPort`, one per cycle,
    while it checks the header and accumulates the payload CRC-32; a record header with
    the clear flag (:data:`RECORD_CLEAR`) zeroes the unit's configuration in its own
    cycle (the port's ``clear``), before the record's words. The bitstream is
    accepted (``state`` = ``LOADED``) only when every check passed; otherwise ``state``
    is ``ERROR`` with the reason in ``error``.

    Parameters
    ----------
    targets : list of (kind, row, col, words)
        The units on the bus, in readback order, with their configuration word counts.
    rows, cols, lanes : int
        The array geometry the header must carry.
    idle_timeout : int
        Cycles without a bitstream word, in the middle of a bitstream, after which it is
        declared truncated (``LENGTH``).

    Attributes
    ----------
    bitstream : In(stream.Signature(32))
        One word per beat; accepted at one word per cycle (except in ``ERROR`` state,
        where words are discarded, and while a readback runs).
    ports : Out(ConfigPort()).array(len(targets))
    clear : In(1)
        Leave ``ERROR``/``LOADED`` and expect a new bitstream header.
    state : Out(LoaderState)
        :class:`LoaderState`.
    error : Out(ConfigStatus)
        :class:`ConfigStatus` of the last bitstream.
    readback_start : In(1)
        Pulse: emit every target's configuration on ``readback``.
    readback : Out(stream.Signature(32))
        For each target in order: its record header word, then its configuration words
        (the same record format as the bitstream payload).
    readback_busy : Out(1)
    """
    def __init__(self, targets, *, rows, cols, lanes, idle_timeout=4096):
        targets = [tuple(int(v) for v in target) for target in targets]
        if not targets:
            raise ValueError("Configuration network needs at least one target")
        keys = [target[:3] for target in targets]
        if len(set(keys)) != len(keys):
            raise ValueError("Configuration network targets must be distinct (kind, row, col)")
        for kind, row, col, words in targets:
            if not (1 <= kind <= 15 and 0 <= row <= 255 and 0 <= col <= 255 and
                    1 <= words <= MAX_RECORD_WORDS):
                raise ValueError(f"Bad configuration target {(kind, row, col, words)}")
        if not isinstance(idle_timeout, int) or idle_timeout < 2:
            raise ValueError(f"Idle timeout must be an integer of at least 2, "
                             f"not {idle_timeout!r}")
        self._targets = targets
        self._geometry = rows | cols << 8 | lanes << 16
        self._idle_timeout = idle_timeout
        super().__init__({
            "bitstream": In(stream.Signature(WORD_BITS)),
            "ports": Out(ConfigPort()).array(len(targets)),
            "clear": In(1),
            "state": Out(LoaderState),
            "error": Out(ConfigStatus),
            "readback_start": In(1),
            "readback": Out(stream.Signature(WORD_BITS)),
            "readback_busy": Out(1),
        })

    @property
    def targets(self):
        return list(self._targets)

    def elaborate(self, platform):
        m = Module()
        targets = self._targets
        word = self.bitstream.payload
        s = SimpleNamespace(
            take=Signal(name="take"),
            crc=Signal(WORD_BITS, init=0xFFFF_FFFF, name="crc"),
            crc_next=Signal(WORD_BITS, name="crc_next"),
            crc_expected=Signal(WORD_BITS, name="crc_expected"),
            header_index=Signal(16, name="header_index"),
            header_words=Signal(16, name="header_words"),
            remaining=Signal(WORD_BITS, name="remaining"),     # payload words still to come
            record_left=Signal(8, name="record_left"),   # words of this record still to come
            target=Signal(range(len(targets)), name="target"),
            idle=Signal(range(self._idle_timeout + 1), name="idle"),
            writing=Signal(name="writing"),
            clearing=Signal(name="clearing"),     # a record header with the clear flag
            write_index=Signal(8, name="write_index"),
            readback_index=Signal(8, name="readback_index"),
        )
        m.d.comb += s.take.eq(self.bitstream.valid & self.bitstream.ready)
        # CRC-32 of the payload, one word per cycle
        state_masks, data_masks = crc32_word_matrix()
        for i in range(WORD_BITS):
            m.d.comb += s.crc_next[i].eq((s.crc & state_masks[i]).xor() ^
                                         (word & data_masks[i]).xor())
        self._record_lookup(m, s)
        for index, port in enumerate(self.ports):
            m.d.comb += [
                port.write.eq(s.writing & (s.target == index)),
                port.clear.eq(s.clearing & (s.hit_index == index)),
                port.index.eq(Mux(self.readback_busy, s.readback_index, s.write_index)),
                port.data.eq(word),
            ]
        m.d.comb += self.bitstream.ready.eq(~self.readback_busy)
        with m.FSM(name="loader"):
            with m.State("HEADER"):
                self._header(m, s)
            with m.State("RECORD"):
                self._record(m, s)
            with m.State("DATA"):
                self._data(m, s)
            with m.State("DONE"):
                # a further word starts a new bitstream (taken in HEADER)
                m.d.comb += self.bitstream.ready.eq(0)
                m.d.sync += [s.header_index.eq(0), s.idle.eq(0)]
                with m.If(self.clear):
                    m.d.sync += [self.state.eq(LoaderState.EMPTY), self.error.eq(0)]
                    m.next = "HEADER"
                with m.Elif(self.bitstream.valid):
                    m.next = "HEADER"
            with m.State("ERROR"):
                # words are discarded until ``clear``
                m.d.sync += [s.header_index.eq(0), s.idle.eq(0)]
                with m.If(self.clear):
                    m.d.sync += [self.state.eq(LoaderState.EMPTY), self.error.eq(0)]
                    m.next = "HEADER"
        self._readback(m, s)
        return m

    def _record_lookup(self, m, s):
        """The target a record header word names: ``hit``, its index and size, and
        ``record_ok`` (a known target, reserved bits 0, count within its size)."""
        word = self.bitstream.payload
        s.rec_kind, s.rec_row = word[24:28], word[16:24]
        s.rec_col, s.rec_count = word[8:16], word[:RECORD_COUNT_BITS]
        hit = Signal()
        s.hit_index = Signal(range(len(self._targets)), name="hit_index")
        hit_words = Signal(9)
        for index, (kind, row, col, words) in enumerate(self._targets):
            with m.If((s.rec_kind == kind) & (s.rec_row == row) & (s.rec_col == col)):
                m.d.comb += [hit.eq(1), s.hit_index.eq(index), hit_words.eq(words)]
        s.rec_clear = word[RECORD_CLEAR.bit_length() - 1]
        s.record_ok = hit & (word[RECORD_CLEAR.bit_length():] == 0) & (s.rec_count <= hit_words)

    def _fail(self, code):
        return [self.error.eq(code), self.state.eq(LoaderState.ERROR)]

    def _timeout(self, m, s):
        """Truncation: a bitstream that stops part-way (in a loader state, no word)."""
        with m.If(self.state == LoaderState.LOADING):
            m.d.sync += s.idle.eq(s.idle + 1)
            with m.If(s.idle == self._idle_timeout - 1):
                m.d.sync += self._fail(ConfigStatus.LENGTH)
                m.next = "ERROR"

    def _finish(self, m, s):
        """The last payload word: LOADED if the CRC matches, else ERROR (``CRC``)."""
        finish_check = Mux(s.crc_next ^ 0xFFFF_FFFF == s.crc_expected, LoaderState.LOADED,
                           LoaderState.ERROR)
        m.d.sync += self.state.eq(finish_check)
        with m.If(finish_check == LoaderState.ERROR):
            m.d.sync += self.error.eq(ConfigStatus.CRC)
            m.next = "ERROR"
        with m.Else():
            m.next = "DONE"

    def _header(self, m, s):
        """The header words: magic, version and size, geometry, payload length, CRC."""
        word = self.bitstream.payload
        header_index = s.header_index
        with m.If(s.take):
            m.d.sync += [header_index.eq(header_index + 1),
                         self.state.eq(LoaderState.LOADING), self.error.eq(0), s.idle.eq(0)]
            with m.Switch(header_index):
                with m.Case(0):
                    with m.If(word != MAGIC):
                        m.d.sync += self._fail(ConfigStatus.BAD_MAGIC)
                        m.next = "ERROR"
                with m.Case(1):
                    m.d.sync += s.header_words.eq(word[16:])
                    with m.If((word[:16] != VERSION) | (word[16:] < HEADER_WORDS)):
                        m.d.sync += self._fail(ConfigStatus.BAD_VERSION)
                        m.next = "ERROR"
                with m.Case(2):
                    with m.If(word[:24] != self._geometry):
                        m.d.sync += self._fail(ConfigStatus.GEOMETRY)
                        m.next = "ERROR"
                with m.Case(3):
                    m.d.sync += s.remaining.eq(word)
                with m.Case(4):
                    m.d.sync += s.crc_expected.eq(word)
            with m.If((header_index >= 4) & (header_index + 1 >= s.header_words)):
                m.d.sync += s.crc.eq(0xFFFF_FFFF)
                with m.If(s.remaining == 0):
                    # empty payload: the CRC of nothing is 0
                    with m.If(Mux(header_index == 4, word, s.crc_expected) == 0):
                        m.d.sync += self.state.eq(LoaderState.LOADED)
                        m.next = "DONE"
                    with m.Else():
                        m.d.sync += self._fail(ConfigStatus.CRC)
                        m.next = "ERROR"
                with m.Else():
                    m.next = "RECORD"
        with m.Else():
            self._timeout(m, s)

    def _record(self, m, s):
        """A record header word: its target and word count."""
        with m.If(s.take):
            m.d.sync += [s.crc.eq(s.crc_next), s.remaining.eq(s.remaining - 1), s.idle.eq(0),
                         s.target.eq(s.hit_index), s.record_left.eq(s.rec_count),
                         s.write_index.eq(0)]
            with m.If(~s.record_ok):
                m.d.sync += self._fail(ConfigStatus.BAD_RECORD)
                m.next = "ERROR"
            with m.Elif(s.rec_count + 1 > s.remaining):
                m.d.sync += self._fail(ConfigStatus.LENGTH)
                m.next = "ERROR"
            with m.Else():
                m.d.comb += s.clearing.eq(s.rec_clear)
                with m.If(s.remaining == 1):
                    self._finish(m, s)
                with m.Elif(s.rec_count != 0):
                    m.next = "DATA"
        with m.Else():
            self._timeout(m, s)

    def _data(self, m, s):
        """A record's configuration words, written to its target's port."""
        m.d.comb += s.writing.eq(s.take)
        with m.If(s.take):
            m.d.sync += [s.crc.eq(s.crc_next), s.remaining.eq(s.remaining - 1), s.idle.eq(0),
                         s.write_index.eq(s.write_index + 1),
                         s.record_left.eq(s.record_left - 1)]
            with m.If(s.remaining == 1):
                self._finish(m, s)
            with m.Elif(s.record_left == 1):
                m.next = "RECORD"
        with m.Else():
            self._timeout(m, s)

    def _readback(self, m, s):
        """Every target's record header and configuration words on ``readback``."""
        targets = self._targets
        readback_index = s.readback_index
        readback_target = Signal(range(len(targets)))
        header_word = Signal(WORD_BITS)
        target_words = Signal(9)
        read_data = Signal(WORD_BITS)
        with m.Switch(readback_target):
            for index, (kind, row, col, words) in enumerate(targets):
                with m.Case(index):
                    m.d.comb += [header_word.eq(Const(words | col << 8 | row << 16 |
                                                      kind << 24, WORD_BITS)),
                                 target_words.eq(words),
                                 read_data.eq(self.ports[index].read_data)]
        last_target = readback_target == len(targets) - 1
        with m.FSM(name="readback"):
            with m.State("IDLE"):
                with m.If(self.readback_start & (self.state != LoaderState.LOADING)):
                    m.d.sync += [readback_target.eq(0), readback_index.eq(0),
                                 self.readback_busy.eq(1)]
                    m.next = "HEADER"
            with m.State("HEADER"):
                m.d.comb += [self.readback.valid.eq(1), self.readback.payload.eq(header_word)]
                with m.If(self.readback.ready):
                    m.d.sync += readback_index.eq(0)
                    m.next = "ADDRESS"
            with m.State("ADDRESS"):
                m.next = "WORD"             # read_data is registered: one cycle
            with m.State("WORD"):
                m.d.comb += [self.readback.valid.eq(1), self.readback.payload.eq(read_data)]
                with m.If(self.readback.ready):
                    m.d.sync += readback_index.eq(readback_index + 1)
                    m.next = "ADDRESS"
                    with m.If(readback_index + 1 == target_words):
                        m.d.sync += readback_target.eq(readback_target + 1)
                        m.next = "HEADER"
                        with m.If(last_target):
                            m.d.sync += self.readback_busy.eq(0)
                            m.next = "IDLE"

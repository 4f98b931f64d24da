"""Word-by-word model of the configuration loader (``hdl/config_net.py``, ``ConfigNetwork``).

:func:`rdu.bitstream.read_bitstream` checks a whole bitstream at once; the hardware
loader instead takes one word per cycle from AGCU 0's ``PROGRAM_LOAD`` and writes every
record's words into the units' configuration registers *as they arrive*. That matters
for a sequence of programs: a rejected bitstream has already written the records that
came before the failing word (and a CRC error is only detected at the last word, after
every record was written), ``config_clear`` resets the loader but not the registers,
and words that follow a complete bitstream start a new one. :class:`ConfigLoader`
follows the loader FSM (``HEADER``, ``RECORD``, ``DATA``, ``DONE``, ``ERROR``) word
by word, with the same checks in the same order, and writes into the
:class:`rdu.models.array.FunctionalArray`'s configuration words.

One assumption about timing: a bitstream that stops part-way (the ``PROGRAM_LOAD``
ended inside it) is declared truncated (``LENGTH``) at :meth:`ConfigLoader.end_of_stream`,
i.e. the loader's ``idle_timeout`` (4096 cycles) elapses before the host sends more
words. The RTL would continue the same bitstream if a second ``PROGRAM_LOAD`` on AGCU 0
started within the timeout.
"""

import zlib

from hdl.config_net import HEADER_WORDS, MAGIC, RECORD_CLEAR, VERSION, LoaderState

from ..bitstream import ConfigStatus, UnitKind

__all__ = ["ConfigLoader", "STATE_NAMES"]

#: ``LoaderState`` value -> name (``host.config_state``).
STATE_NAMES = {LoaderState.EMPTY: "EMPTY", LoaderState.LOADING: "LOADING",
               LoaderState.LOADED: "LOADED", LoaderState.ERROR: "ERROR"}

_KIND_NAMES = {int(kind): kind.name for kind in UnitKind}


class ConfigLoader:
    """The loader of one array: feed it words, read ``state`` / ``status``.

    Parameters
    ----------
    geometry : rdu.bitstream.Geometry
        The array's geometry (header word 2 must match).
    targets : dict
        ``{(kind, row, col): word count}``: the configuration-bus targets.
    storage : dict
        ``{(kind, row, col): list of words}``, written in place (the configuration
        registers; :attr:`rdu.models.array.FunctionalArray.words`).

    Attributes
    ----------
    state : int
        :class:`hdl.config_net.LoaderState` (``EMPTY``, ``LOADING``, ``LOADED``, ``ERROR``).
    status : rdu.bitstream.ConfigStatus
        ``host.error``: why the last bitstream was rejected (``OK`` otherwise).
    detail : str
        One line: where and why it was rejected.
    words_written : int
        Configuration words written into registers since construction.
    """

    def __init__(self, geometry, targets, storage):
        self.geometry_word = geometry.rows | geometry.cols << 8 | geometry.lanes << 16
        self.targets = dict(targets)
        self.storage = storage
        self.fsm = "HEADER"
        self.state = LoaderState.EMPTY
        self.status = ConfigStatus.OK
        self.detail = ""
        self.words_written = 0
        self._follows = False         # the current bitstream follows a complete one
        self._reset_header()

    def _reset_header(self):
        self.header_index = 0
        self.header_words = 0
        self.remaining = 0
        self.crc_expected = 0
        self.crc = 0
        self.record_left = 0
        self.target = None
        self.write_index = 0
        self.payload_length = 0

    @property
    def state_name(self):
        return STATE_NAMES[self.state]

    def _fail(self, status, detail):
        self.status = ConfigStatus(status)
        self.state = LoaderState.ERROR
        self.detail = detail
        self.fsm = "ERROR"

    def _finish(self):
        if self.crc == self.crc_expected:
            self.state = LoaderState.LOADED
            self.fsm = "DONE"
        else:
            self._fail(ConfigStatus.CRC, f"payload CRC-32 is 0x{self.crc:08x}, the header "
                                         f"says 0x{self.crc_expected:08x}")

    def _crc(self, word):
        self.crc = zlib.crc32(word.to_bytes(4, "little"), self.crc)

    def feed(self, words):
        """Words arriving on ``bitstream`` (one per cycle, in order)."""
        for word in words:
            self.word(int(word) & 0xFFFF_FFFF)

    def word(self, word):
        """One word on ``bitstream``."""
        if self.fsm == "DONE":
            # a further word after a complete bitstream starts a new one
            self.fsm = "HEADER"
            self._reset_header()
            self._follows = True
        if self.fsm == "ERROR":
            return                              # discarded until clear
        if self.fsm == "HEADER":
            self._header(word)
        elif self.fsm == "RECORD":
            self._record(word)
        else:
            self._data(word)

    def _header(self, word):
        index = self.header_index
        self.header_index += 1
        self.state = LoaderState.LOADING
        self.status = ConfigStatus.OK
        self.detail = ""
        if index == 0 and word != MAGIC:
            after = (" (it follows a complete bitstream: extra words start a new one)"
                     if self._follows else "")
            return self._fail(ConfigStatus.BAD_MAGIC, f"bitstream word 0 is 0x{word:08x}, not "
                                                      f"the magic 0x{MAGIC:08x}{after}")
        if index == 1:
            self.header_words = word >> 16
            if (word & 0xFFFF) != VERSION or self.header_words < HEADER_WORDS:
                return self._fail(ConfigStatus.BAD_VERSION,
                                  f"version {word & 0xFFFF} with a {word >> 16}-word header "
                                  f"(the loader takes version {VERSION}, at least "
                                  f"{HEADER_WORDS} header words)")
        if index == 2 and (word & 0xFF_FFFF) != self.geometry_word:
            g = self.geometry_word
            return self._fail(ConfigStatus.GEOMETRY,
                              f"bitstream for a {word & 0xFF}x{(word >> 8) & 0xFF} array of "
                              f"{(word >> 16) & 0xFF} lanes, the array is "
                              f"{g & 0xFF}x{(g >> 8) & 0xFF} of {(g >> 16) & 0xFF} lanes")
        if index == 3:
            self.remaining = self.payload_length = word
        if index == 4:
            self.crc_expected = word
        if index >= 4 and index + 1 >= self.header_words:
            self.crc = 0
            if self.remaining == 0:
                if self.crc_expected == 0:          # the CRC of nothing is 0
                    self.state = LoaderState.LOADED
                    self.fsm = "DONE"
                else:
                    self._fail(ConfigStatus.CRC, f"empty payload, the header's CRC-32 is "
                                                 f"0x{self.crc_expected:08x}, not 0")
            else:
                self.fsm = "RECORD"

    def _record(self, word):
        self._crc(word)
        remaining = self.remaining
        self.remaining -= 1
        kind, row, col, count = (word >> 24) & 0xF, (word >> 16) & 0xFF, (word >> 8) & 0xFF, \
            word & 0xFF
        key = (kind, row, col)
        payload_word = self.payload_length - remaining
        reserved = word >> RECORD_CLEAR.bit_length()
        if key not in self.targets or reserved or count > self.targets[key]:
            unit = f"{_KIND_NAMES.get(kind, f'kind {kind}')} ({row}, {col})"
            why = ("no such unit" if key not in self.targets else
                   "reserved bits 29..31 set" if reserved else
                   f"{count} words, the unit takes {self.targets[key]}")
            return self._fail(ConfigStatus.BAD_RECORD,
                              f"record header 0x{word:08x} at payload word {payload_word} "
                              f"for {unit}: {why}")
        if count + 1 > remaining:
            return self._fail(ConfigStatus.LENGTH,
                              f"record for {_KIND_NAMES[kind]} ({row}, {col}) with {count} "
                              f"words overruns the payload ({remaining - 1} words left)")
        if word & RECORD_CLEAR:
            storage = self.storage[key]
            storage[:] = [0] * len(storage)
        if remaining == 1:
            return self._finish()
        if count:
            self.fsm = "DATA"
            self.target = key
            self.record_left = count
            self.write_index = 0

    def _data(self, word):
        self.storage[self.target][self.write_index] = word
        self.words_written += 1
        self.write_index += 1
        self._crc(word)
        remaining, left = self.remaining, self.record_left
        self.remaining -= 1
        self.record_left -= 1
        if remaining == 1:
            self._finish()
        elif left == 1:
            self.fsm = "RECORD"

    def end_of_stream(self):
        """The words stopped (the ``PROGRAM_LOAD`` ended): a bitstream still being
        received is truncated (``LENGTH``, after the loader's idle timeout)."""
        if self.state == LoaderState.LOADING:
            if self.fsm == "HEADER":
                where = f"{self.header_index} header words"
            else:
                where = (f"{self.payload_length - self.remaining} of the "
                         f"{self.payload_length} payload words")
            self._fail(ConfigStatus.LENGTH, f"the bitstream stopped after {where} (truncated: "
                                            f"the loader's idle timeout)")

    def clear(self):
        """``host.config_clear``: leave ``LOADED`` / ``ERROR`` for ``EMPTY``. The
        configuration registers keep their words; a loader still receiving a bitstream
        ignores it (as ``ConfigNetwork`` does)."""
        if self.fsm in ("DONE", "ERROR"):
            self.fsm = "HEADER"
            self.state = LoaderState.EMPTY
            self.status = ConfigStatus.OK
            self.detail = ""
            self._reset_header()
            self._follows = False

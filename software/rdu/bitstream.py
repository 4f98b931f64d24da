"""Writer, reader and validator of the RDU configuration bitstream (``docs/bitstream.md``).

Python (``zlib.crc32`` for the checksum; the constants and codes from ``hdl.config_net``);
shared by the compiler, the functional model and the tests.
A bitstream is a list of 32-bit words; :func:`to_bytes` gives its little-endian bytes.

>>> words = write_bitstream(Geometry(2, 2, 8), [Record(UnitKind.PMU, 0, 1, [1, 2, 3])])
>>> header, records = read_bitstream(words, Geometry(2, 2, 8))
>>> records[0].words
[1, 2, 3]
"""

import zlib
from dataclasses import dataclass, field

from hdl.config_net import (
    HEADER_WORDS,
    MAGIC,
    MAX_RECORD_WORDS,
    RECORD_CLEAR,
    VERSION,
    ConfigStatus,
    UnitKind,
)

__all__ = ["MAGIC", "VERSION", "HEADER_WORDS", "MAX_RECORD_WORDS", "RECORD_CLEAR", "UnitKind",
           "ConfigStatus",
           "Geometry", "Record", "Header", "BitstreamError", "payload_crc", "record_header",
           "parse_record_header", "cleared", "write_bitstream", "read_bitstream", "to_bytes",
           "from_bytes"]

# The format's constants (MAGIC, VERSION, HEADER_WORDS, MAX_RECORD_WORDS, RECORD_CLEAR), the record
# unit kinds (UnitKind) and the loader's error codes (ConfigStatus) are the hardware's
# (hdl.config_net), re-exported here.

_MASK32 = 0xFFFF_FFFF


@dataclass(frozen=True)
class Geometry:
    rows: int
    cols: int
    lanes: int

    def __post_init__(self):
        for name in ("rows", "cols", "lanes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"Geometry {name} must be an integer, not {value!r}")
            if not 1 <= value <= 255:
                raise ValueError(f"Geometry {name} must be between 1 and 255, not {value}")


@dataclass
class Record:
    """Configuration words of one unit: ``kind`` at grid ``(row, col)``.

    AGCUs are not on the grid: their records use ``row = 0`` and ``col`` = AGCU index.
    With ``clear`` the unit's configuration is zeroed before ``words`` are written: the
    words past them are zero (:func:`cleared` writes such a record with its trailing zero
    words left out).
    """
    kind: UnitKind
    row: int
    col: int
    words: list = field(default_factory=list)
    clear: bool = False

    def apply(self, target):
        """Write this record into ``target``, the unit's configuration words (a list,
        changed in place) as the loader does: zeroed first with ``clear``."""
        if self.clear:
            target[:] = [0] * len(target)
        target[:len(self.words)] = self.words


def cleared(kind, row, col, words):
    """The record that sets a unit's whole configuration to ``words``, in as few words as
    the format allows: the clear flag, then ``words`` without their trailing zeros (an
    all-zero configuration is the record header alone)."""
    words = list(words)
    while words and words[-1] == 0:
        words.pop()
    return Record(kind, row, col, words, clear=True)


@dataclass(frozen=True)
class Header:
    version: int
    header_words: int
    geometry: Geometry
    flags: int
    length: int
    crc: int


class BitstreamError(ValueError):
    """A bitstream that the hardware would reject; ``status`` is its :class:`ConfigStatus`."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = ConfigStatus(status)


def payload_crc(payload):
    """CRC-32 (zlib) of the payload words as little-endian bytes."""
    return zlib.crc32(to_bytes(payload)) & _MASK32


def to_bytes(words):
    return b"".join((word & _MASK32).to_bytes(4, "little") for word in words)


def from_bytes(raw):
    if len(raw) % 4:
        raise BitstreamError(ConfigStatus.LENGTH, f"Bitstream of {len(raw)} bytes is not a "
                                                  f"whole number of 32-bit words")
    return [int.from_bytes(raw[i:i + 4], "little") for i in range(0, len(raw), 4)]


def record_header(kind, row, col, count, clear=False):
    """Record header word: ``count | col << 8 | row << 16 | kind << 24``, with
    :data:`RECORD_CLEAR` (bit 28) if ``clear`` (bits 29..31 zero)."""
    kind = UnitKind(kind)
    for name, value, limit in (("row", row, 255), ("col", col, 255),
                               ("word count", count, MAX_RECORD_WORDS)):
        if not isinstance(value, int) or not 0 <= value <= limit:
            raise ValueError(f"Record {name} must be an integer in 0..{limit}, not {value!r}")
    return count | col << 8 | row << 16 | int(kind) << 24 | (RECORD_CLEAR if clear else 0)


def parse_record_header(word):
    """``(kind, row, col, count, clear)`` of a record header word; raises
    :class:`BitstreamError`."""
    kind = (word >> 24) & 0xF
    if word >> RECORD_CLEAR.bit_length() or kind not in UnitKind._value2member_map_:
        raise BitstreamError(ConfigStatus.BAD_RECORD,
                             f"Record header 0x{word:08x} has an unknown unit kind {kind} "
                             f"or reserved bits set")
    return (UnitKind(kind), (word >> 16) & 0xFF, (word >> 8) & 0xFF, word & 0xFF,
            bool(word & RECORD_CLEAR))


def write_bitstream(geometry, records, *, flags=0):
    """The words of a bitstream holding ``records`` for an array of ``geometry``."""
    if not isinstance(geometry, Geometry):
        raise TypeError(f"Geometry must be a Geometry, not {geometry!r}")
    if not 0 <= flags <= 255:
        raise ValueError(f"Flags must be in 0..255, not {flags}")
    payload = []
    for record in records:
        words = list(record.words)
        for word in words:
            if not isinstance(word, int) or not 0 <= word <= _MASK32:
                raise ValueError(f"Configuration word {word!r} of {record.kind.name} "
                                 f"({record.row}, {record.col}) is not a 32-bit unsigned int")
        payload.append(record_header(record.kind, record.row, record.col, len(words),
                                     record.clear))
        payload += words
    header = [
        MAGIC,
        VERSION | HEADER_WORDS << 16,
        geometry.rows | geometry.cols << 8 | geometry.lanes << 16 | flags << 24,
        len(payload),
        payload_crc(payload),
    ]
    return header + payload


def read_bitstream(words, geometry=None, units=None):
    """Parse and check a bitstream exactly as the hardware does.

    Parameters
    ----------
    words : list of int
    geometry : Geometry, optional
        The array's geometry; a mismatch raises (status ``GEOMETRY``).
    units : dict, optional
        ``{(kind, row, col): config_words}`` of the array's units; a record for another
        unit or with more words raises (status ``BAD_RECORD``).

    Returns
    -------
    (Header, list of Record)

    Raises
    ------
    BitstreamError
        With the :class:`ConfigStatus` the hardware would report.
    """
    words = list(words)
    if len(words) < 1 or words[0] != MAGIC:
        found = f"0x{words[0]:08x}" if words else "nothing"
        raise BitstreamError(ConfigStatus.BAD_MAGIC,
                             f"Bitstream starts with {found}, not the magic 0x{MAGIC:08x}")
    if len(words) < HEADER_WORDS:
        raise BitstreamError(ConfigStatus.LENGTH, f"Bitstream of {len(words)} words is shorter "
                                                  f"than its {HEADER_WORDS}-word header")
    version, header_words = words[1] & 0xFFFF, words[1] >> 16
    if version != VERSION or header_words < HEADER_WORDS:
        raise BitstreamError(ConfigStatus.BAD_VERSION,
                             f"Bitstream version {version} with a {header_words}-word header is "
                             f"not supported (version {VERSION}, at least {HEADER_WORDS} words)")
    found = Geometry(max(1, words[2] & 0xFF), max(1, (words[2] >> 8) & 0xFF),
                     max(1, (words[2] >> 16) & 0xFF))
    if geometry is not None and (words[2] & 0xFFFFFF) != (
            geometry.rows | geometry.cols << 8 | geometry.lanes << 16):
        raise BitstreamError(ConfigStatus.GEOMETRY,
                             f"Bitstream is for a {words[2] & 0xFF}x{(words[2] >> 8) & 0xFF} "
                             f"array of {(words[2] >> 16) & 0xFF} lanes, not "
                             f"{geometry.rows}x{geometry.cols} of {geometry.lanes}")
    length, crc = words[3], words[4]
    payload = words[header_words:header_words + length]

    def truncated():
        return BitstreamError(ConfigStatus.LENGTH, f"Bitstream is truncated: "
                                                   f"{max(0, len(words) - header_words)} of "
                                                   f"{length} payload words")
    if len(words) < header_words:
        raise truncated()
    records = []
    position = 0
    while position < length:
        if position >= len(payload):
            raise truncated()
        kind, row, col, count, clear = parse_record_header(payload[position])
        if units is not None:
            key = (kind, row, col)
            if key not in units or count > units[key]:
                raise BitstreamError(ConfigStatus.BAD_RECORD,
                                     f"Record for {kind.name} ({row}, {col}) with {count} "
                                     f"words matches no unit of the array")
        if position + 1 + count > length:
            raise BitstreamError(ConfigStatus.LENGTH,
                                 f"Record for {kind.name} ({row}, {col}) overruns the payload")
        if position + 1 + count > len(payload):
            raise truncated()
        records.append(Record(kind, row, col, payload[position + 1:position + 1 + count],
                              clear))
        position += 1 + count
    actual = payload_crc(payload)
    if actual != crc:
        raise BitstreamError(ConfigStatus.CRC, f"Payload CRC-32 is 0x{actual:08x}, the header "
                                               f"says 0x{crc:08x}")
    header = Header(version, header_words, found, words[2] >> 24, length, crc)
    return header, records

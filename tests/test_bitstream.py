"""Bitstream format: writer/reader round trip, every error status, CRC equal to the
hardware's word-parallel CRC-32."""

import random
import zlib

import pytest
from rdu.bitstream import (
    MAGIC,
    RECORD_CLEAR,
    VERSION,
    BitstreamError,
    ConfigStatus,
    Geometry,
    Record,
    UnitKind,
    cleared,
    from_bytes,
    parse_record_header,
    payload_crc,
    read_bitstream,
    record_header,
    to_bytes,
    write_bitstream,
)

from hdl.config_net import crc32_word_matrix

GEOMETRY = Geometry(4, 4, 8)


def _records(rng, count=6):
    return [Record(rng.choice(list(UnitKind)), rng.randrange(4), rng.randrange(4),
                   [rng.getrandbits(32) for _ in range(rng.randrange(0, 20))],
                   clear=rng.random() < 0.5)
            for _ in range(count)]


def test_round_trip(seed):
    rng = random.Random(seed)
    records = _records(rng)
    words = write_bitstream(GEOMETRY, records, flags=3)
    assert words[0] == MAGIC == 0x31554452 and to_bytes(words)[:4] == b"RDU1"
    header, parsed = read_bitstream(from_bytes(to_bytes(words)), GEOMETRY)
    assert parsed == records
    assert (header.version, header.header_words, header.flags) == (VERSION, 5, 3) == (2, 5, 3)
    assert header.length == len(words) - 5
    assert header.crc == zlib.crc32(to_bytes(words[5:]))


def test_longer_header_is_skipped(seed):
    rng = random.Random(seed)
    words = write_bitstream(GEOMETRY, _records(rng))
    extended = words[:1] + [words[1] + (2 << 16)] + words[2:5] + [0xAAAA, 0xBBBB] + words[5:]
    assert read_bitstream(extended, GEOMETRY)[1] == read_bitstream(words, GEOMETRY)[1]


@pytest.mark.parametrize("mutate,status", [
    (lambda w: w.__setitem__(0, 0x12345678), ConfigStatus.BAD_MAGIC),
    (lambda w: w.__setitem__(1, 1 | 5 << 16), ConfigStatus.BAD_VERSION),
    (lambda w: w.__setitem__(1, 3 | 5 << 16), ConfigStatus.BAD_VERSION),
    (lambda w: w.__setitem__(1, 2 | 4 << 16), ConfigStatus.BAD_VERSION),
    (lambda w: w.__setitem__(2, 4 | 4 << 8 | 16 << 16), ConfigStatus.GEOMETRY),
    (lambda w: w.__delitem__(slice(-1, None)), ConfigStatus.LENGTH),
    (lambda w: w.__setitem__(6, w[6] ^ 1), ConfigStatus.CRC),
    (lambda w: w.__setitem__(5, w[5] | 0xF << 28), ConfigStatus.BAD_RECORD),
    (lambda w: w.__setitem__(5, w[5] | 1 << 29), ConfigStatus.BAD_RECORD),
])
def test_errors(mutate, status):
    words = write_bitstream(GEOMETRY, [Record(UnitKind.PMU, 1, 2, [5, 6, 7])])
    mutate(words)
    with pytest.raises(BitstreamError) as info:
        read_bitstream(words, GEOMETRY)
    assert info.value.status == status


def test_unknown_unit_and_overrun():
    words = write_bitstream(GEOMETRY, [Record(UnitKind.PMU, 1, 2, [5, 6, 7])])
    with pytest.raises(BitstreamError, match="matches no unit") as info:
        read_bitstream(words, GEOMETRY, {(UnitKind.PMU, 1, 2): 2})
    assert info.value.status == ConfigStatus.BAD_RECORD
    words[3] -= 1
    words.pop()
    with pytest.raises(BitstreamError, match="overruns") as info:
        read_bitstream(words, GEOMETRY)
    assert info.value.status == ConfigStatus.LENGTH


def test_cleared_record_leaves_out_trailing_zeros():
    assert cleared(UnitKind.PCU, 1, 0, [0, 5, 0, 0]) == Record(UnitKind.PCU, 1, 0, [0, 5],
                                                                clear=True)
    idle = cleared(UnitKind.SWITCH, 2, 3, [0] * 40)
    words = write_bitstream(GEOMETRY, [idle])
    assert words[5:] == [RECORD_CLEAR | 3 << 24 | 2 << 16 | 3 << 8]
    assert read_bitstream(words, GEOMETRY)[1] == [idle]


def test_record_header_packing():
    word = record_header(UnitKind.SWITCH, 3, 7, 200)
    assert word == 200 | 7 << 8 | 3 << 16 | 3 << 24
    assert parse_record_header(word) == (UnitKind.SWITCH, 3, 7, 200, False)
    cleared_word = record_header(UnitKind.PMU, 2, 1, 0, clear=True)
    assert cleared_word == RECORD_CLEAR | 2 << 24 | 2 << 16 | 1 << 8
    assert parse_record_header(cleared_word) == (UnitKind.PMU, 2, 1, 0, True)
    with pytest.raises(ValueError, match="Record word count must be an integer in 0..255"):
        record_header(UnitKind.PMU, 0, 0, 256)
    with pytest.raises(ValueError, match="Geometry rows must be between 1 and 255, not 0"):
        Geometry(0, 1, 1)


def test_hardware_crc_matrix_equals_zlib(seed):
    """The word-parallel CRC the loader computes equals zlib.crc32 of the bytes."""
    rng = random.Random(seed)
    state_masks, data_masks = crc32_word_matrix()
    for _ in range(20):
        payload = [rng.getrandbits(32) for _ in range(rng.randrange(1, 30))]
        state = 0xFFFF_FFFF
        for word in payload:
            state = sum(((bin(state & s).count("1") ^ bin(word & d).count("1")) & 1) << i
                        for i, (s, d) in enumerate(zip(state_masks, data_masks, strict=True)))
        assert state ^ 0xFFFF_FFFF == payload_crc(payload) == zlib.crc32(to_bytes(payload))

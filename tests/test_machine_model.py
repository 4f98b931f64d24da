"""The machine-level functional model (``rdu.models.machine``): AGCU commands (COPY,
PROGRAM_LOAD, ARGUMENT_LOAD, EXECUTE) on a persistent memory, the word-by-word
configuration loader, program sequences, and damaged bitstreams. Software only (no
simulation); every output is checked against a numpy reference built from the inputs."""

import random
import time

import numpy as np
import pytest
from amaranth.lib import data
from rdu.bitstream import (
    BitstreamError,
    ConfigStatus,
    Geometry,
    Record,
    UnitKind,
    read_bitstream,
    write_bitstream,
)
from rdu.frontend import gemm
from rdu.machine import Machine
from rdu.mapper import ArrayGeometry
from rdu.memory_map import DDR, HBM, HOST
from rdu.models import pcu_reference
from rdu.models.array import FunctionalArray
from rdu.models.loader import ConfigLoader
from rdu.models.machine import AGCUError, AGCUOp, FunctionalMachine, run_program
from rdu.models.pcu import Iterations
from rdu.models.shared import CommandError, LoaderError, ModelDeadlock, ModelError, UnitError
from rdu.program import Program
from rdu.unitconfig import pack_config

from hdl.agcu import agcu_config_layout
from hdl.interfaces import config_words
from hdl.pmu import pmu_config_layout
from hdl.switch import Source, switch_config_layout
from tb.suites.fuzz import flip_fix_crc, leaves, mutate

SMALL = ArrayGeometry(2, 2, 4, pmu_words=4096)
GEMM_MACHINE = Machine(rows=2, cols=2, lanes=4, pmu_bytes=16384)
PMU_MACHINE = Machine(rows=2, cols=2, lanes=4, compute=False, pmu_bytes=16384)
VECTOR_OUT = {"north": 0, "east": 1, "south": 2, "west": 3, "local0": 4, "local1": 5}
NARROW_OUT = {"north": 0, "east": 1, "south": 2, "west": 3, "local": 4}


# -- program builders (hand-packed records, every switch written) ---------------------------

def _switches(rows, cols, routes):
    """Switch records of every switch: ``routes`` maps ``(row, col, network, output
    name)`` to a :class:`Source`; everything else idle."""
    records = []
    for row in range(rows):
        for col in range(cols):
            table = {"vector": [0] * 6, "scalar": [0] * 5, "control": [0] * 5}
            for (r, c, network, out), source in routes.items():
                if (r, c) == (row, col):
                    names = VECTOR_OUT if network == "vector" else NARROW_OUT
                    table[network][names[out]] = source
            records.append(Record(UnitKind.SWITCH, row, col,
                                  pack_config(switch_config_layout(), table)))
    return records


def _agcu(index, **fields):
    return Record(UnitKind.AGCU, 0, index, pack_config(agcu_config_layout(), fields))


def _pmu(row, col, **fields):
    return Record(UnitKind.PMU, row, col, pack_config(pmu_config_layout(), fields))


def transpose_program(name, size, src, dst, lanes=4, image=None):
    """2x2 PMU-only array: AGCU 0 (west of row 0) loads a ``size x size`` uint32 matrix
    at ``src`` into PMU (0,0), which reads it column-major; the beats and its DONE go
    east, south, east to AGCU 1 (east of row 1), which stores the transpose at ``dst``.
    ``image``: the input image (``None``: the program has no input, it reads what is
    in memory)."""
    beat = 4 * lanes
    beats = size * size // lanes
    pmu = _pmu(0, 0, write_enable=1, read_enable=1, buffers=1, read_repeat=1, read_passes=1,
               buffer_words=size * size, skew_shift=size.bit_length() - 1,
               write={"start": 0, "stride": [lanes, size, 0], "bound": [size // lanes, size, 1],
                      "lane_stride": 1},
               read={"start": 0, "stride": [1, lanes * size, 0],
                     "bound": [size, size // lanes, 1], "lane_stride": size})
    routes = {(0, 0, "vector", "local0"): Source.WEST, (0, 0, "vector", "east"): Source.LOCAL,
              (0, 1, "vector", "south"): Source.WEST, (1, 1, "vector", "east"): Source.NORTH,
              (0, 0, "control", "east"): Source.LOCAL, (0, 1, "control", "south"): Source.WEST,
              (1, 1, "control", "east"): Source.NORTH}
    records = [pmu, *_switches(2, 2, routes),
               _agcu(0, load_enable=1, load={"base": src, "count": [beats, 1, 1],
                                             "stride": [beat, 0, 0]}),
               _agcu(1, store_enable=1, wait_done=1,
                     store={"base": dst, "count": [size, size // lanes, 1],
                            "stride": [4 * size, beat, 0]})]
    inputs = {} if image is None else {"a": (src, np.asarray(image, np.uint32).reshape(-1))}
    return Program(name, {"rows": 2, "cols": 2, "lanes": lanes, "agcus": 2},
                   write_bitstream(Geometry(2, 2, lanes), records), HBM.base + 0x10_0000,
                   inputs=inputs, outputs={"t": (dst, size * size)}, execute=[0, 1])


def _gemm(shape, seed):
    program = gemm.compile_gemm(*shape, SMALL)
    a, b = gemm.random_inputs(*shape, seed)
    gemm.pack_inputs(program, a, b)
    return program, a, b


def _one_line(error):
    text = str(error)
    assert text and "\n" not in text, repr(text)
    return text


# -- COPY --------------------------------------------------------------------------------

def test_copy_ddr_to_hbm_then_gemm(seed):
    """The GEMM's A and B images are placed in DDR, copied to the HBM addresses the
    kernel reads by one COPY each (on AGCU 1 and AGCU 0), and the program runs without
    input images: C within numpy's FP32 budget of A @ B."""
    program, a, b = _gemm((9, 6, 13), seed)
    machine = FunctionalMachine(GEMM_MACHINE)
    staging = DDR.base + 0x20_0000
    for agcu, name in ((1, "a"), (0, "b")):
        address, words = program.inputs.pop(name)
        machine.write(staging, words)
        length = -(-4 * len(words) // machine.beat) * machine.beat
        result = machine.command(agcu, AGCUOp.COPY, src=staging, dst=address, length=length)
        assert result.ok and result.error == AGCUError.NONE
        assert np.array_equal(machine.read(address, len(words)), words)
        staging += 0x10_0000
    outputs, _ = machine.run_program(program)
    c = gemm.unpack_output(program, outputs["c"])
    ok, error = gemm.check_result(c, a, b)
    assert ok, f"C differs from numpy A @ B by {error}"


def test_copy_every_error():
    """Every AGCUError a COPY can end with, with the RTL's precedence of checks
    (length before alignment), what reaches memory, and the unit working afterwards."""
    machine = FunctionalMachine(Machine(rows=2, cols=2, lanes=8, compute=False))
    rng = np.random.default_rng(5)
    source = rng.integers(0, 1 << 32, 64, dtype=np.uint32)
    machine.write(DDR.base, source)

    def copy(src, dst, length, agcu=1):
        return machine.command(agcu, AGCUOp.COPY, src=src, dst=dst, length=length)

    cases = [
        (copy(DDR.base, HBM.base, 0), AGCUError.BAD_LENGTH, "length 0"),
        (copy(DDR.base, HBM.base, 48), AGCUError.BAD_LENGTH, "length 48"),
        (copy(DDR.base + 4, HBM.base, 40), AGCUError.BAD_LENGTH, "length 40"),  # length first
        (copy(DDR.base + 4, HBM.base, 64), AGCUError.MISALIGNED,
         "src 0x40000004 is not a multiple of 32 bytes"),
        (copy(DDR.base, HBM.base + 16, 64), AGCUError.MISALIGNED, "dst 0x00000010"),
    ]
    for result, code, text in cases:
        assert result.error == code and text in result.detail, result
    assert not machine.read(HBM.base, 64).any()              # rejected: no traffic
    message = _one_line(pytest.raises(CommandError, cases[3][0].check).value)
    assert message == "AGCU 1: COPY ended with MISALIGNED (src 0x40000004 is not a " \
                      "multiple of 32 bytes)"
    with pytest.raises(CommandError) as error:
        cases[3][0].check()
    assert error.value.error == AGCUError.MISALIGNED and error.value.agcu == 1

    # the source runs off the end of HBM into the unmapped gap: the mapped beat is
    # copied, the unmapped one reads as zeros (DECERR data) and is written
    hbm_end = HBM.base + HBM.size
    machine.write(hbm_end - 32, source[:8])
    machine.write(DDR.base + 0x1000, np.full(16, 7, np.uint32))
    result = copy(hbm_end - 32, DDR.base + 0x1000, 64)
    assert result.error == AGCUError.READ_DECERR and "0x02000000" in result.detail
    assert np.array_equal(machine.read(DDR.base + 0x1000, 16),
                          np.concatenate([source[:8], np.zeros(8, np.uint32)]))

    # the destination runs off the end of DDR: the first beat is written, the second
    # is dropped
    ddr_end = DDR.base + DDR.size
    result = copy(DDR.base, ddr_end - 32, 64)
    assert result.error == AGCUError.WRITE_DECERR and f"0x{ddr_end:08x}" in result.detail
    assert np.array_equal(machine.read(ddr_end - 32, 8), source[:8])

    # both unmapped: the read of beat 0 fails before its write
    result = copy(0x2000_0000, 0x3000_0000, 32)
    assert result.error == AGCUError.READ_DECERR

    # the destination passes 2**32 (the top of the address space is unmapped, the
    # wrapped beat lands at address 0): the generator's wrap flag wins
    machine.write(HBM.base, np.zeros(8, np.uint32))
    result = copy(DDR.base, (1 << 32) - 32, 64)
    assert result.error == AGCUError.ADDRESS_WRAP
    assert np.array_equal(machine.read(HBM.base, 8), source[8:16])

    # unknown opcodes
    for op in (0, 5, 7):
        assert machine.command(0, op, src=DDR.base, dst=HBM.base, length=32).error == \
            AGCUError.BAD_OPCODE

    # the unit works again; host window -> HBM, 4 KiB boundaries crossed
    machine.write(HOST.base + 0xFE0, source)
    assert copy(HOST.base + 0xFE0, HBM.base + 0x3000, 256).ok
    assert np.array_equal(machine.read(HBM.base + 0x3000, 64), source)
    with pytest.raises(ModelError, match="AGCU 2 does not exist"):
        machine.command(2, AGCUOp.COPY, src=DDR.base, dst=HBM.base, length=32)
    with pytest.raises(ModelError, match="src -1 does not fit"):
        machine.command(0, AGCUOp.COPY, src=-1, dst=HBM.base, length=32)


# -- PROGRAM_LOAD and the loader -------------------------------------------------------------

def test_program_load_errors(seed):
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, 1 << 32, (16, 16), dtype=np.uint32)
    good = transpose_program("t", 16, HBM.base + 0x1000, HBM.base + 0x8000, image=matrix)

    bad_crc = transpose_program("crc", 16, HBM.base + 0x1000, HBM.base + 0x8000, image=matrix)
    bad_crc.bitstream[7] ^= 1 << 3
    machine = FunctionalMachine(PMU_MACHINE)
    with pytest.raises(LoaderError) as error:
        machine.run_program(bad_crc)
    assert error.value.status == ConfigStatus.CRC and error.value.state == "ERROR"
    assert isinstance(error.value, BitstreamError)          # earlier callers still catch it
    assert _one_line(error.value).startswith(
        "program 'crc': bitstream rejected by the configuration loader: CRC (payload CRC-32 "
        "is 0x")
    # the loader wrote every record before it saw the CRC (as the RTL does), and the
    # array refuses to start
    assert machine.array.config(UnitKind.AGCU, 0, 1)["store"]["base"] == HBM.base + 0x8000
    with pytest.raises(LoaderError, match=r"start ignored: the configuration is ERROR \(CRC"):
        machine.execute([0, 1])
    # in ERROR the loader discards words until config_clear
    machine.write(good.bitstream_address, good.bitstream)
    result = machine.command(0, AGCUOp.PROGRAM_LOAD, src=good.bitstream_address,
                             length=4 * len(good.bitstream))
    assert result.ok and result.config_state == "ERROR" and result.config_status == \
        ConfigStatus.CRC
    machine.config_clear()
    assert machine.config_state == "EMPTY"
    outputs, _ = machine.run_program(good)                     # run_program clears too
    assert np.array_equal(outputs["t"].reshape(16, 16), matrix.T)

    # words after a complete bitstream start a new one: here zeros, BAD_MAGIC
    machine.config_clear()
    machine.write(good.bitstream_address + 4 * len(good.bitstream), np.zeros(4, np.uint32))
    result = machine.command(0, AGCUOp.PROGRAM_LOAD, src=good.bitstream_address,
                             length=4 * len(good.bitstream) + 8)
    assert (result.config_state, result.config_status) == ("ERROR", ConfigStatus.BAD_MAGIC)
    assert "follows a complete bitstream" in machine.loader.detail
    # truncated: the loader's idle timeout ends it with LENGTH
    machine.config_clear()
    result = machine.command(0, AGCUOp.PROGRAM_LOAD, src=good.bitstream_address,
                             length=4 * (len(good.bitstream) - 3))
    assert (result.config_state, result.config_status) == ("ERROR", ConfigStatus.LENGTH)
    # the command's own errors
    machine.config_clear()
    for src, length, code in ((good.bitstream_address, 6, AGCUError.BAD_LENGTH),
                              (good.bitstream_address, 0, AGCUError.BAD_LENGTH),
                              (good.bitstream_address + 8, 64, AGCUError.MISALIGNED)):
        result = machine.command(0, AGCUOp.PROGRAM_LOAD, src=src, length=length)
        assert result.error == code and result.config_state is None
    assert machine.config_state == "EMPTY"
    # an unmapped bitstream address: READ_DECERR, and the zeros the memory answers
    # reach the loader
    result = machine.command(0, AGCUOp.PROGRAM_LOAD, src=0x2000_0000, length=64)
    assert result.error == AGCUError.READ_DECERR
    assert result.config_status == ConfigStatus.BAD_MAGIC
    # a misaligned bitstream address in a program
    machine = FunctionalMachine(PMU_MACHINE)
    good.bitstream_address += 4
    with pytest.raises(CommandError) as error:
        machine.run_program(good)
    assert error.value.error == AGCUError.MISALIGNED and error.value.op == AGCUOp.PROGRAM_LOAD
    assert _one_line(error.value) == ("program 't': program load on AGCU 0 ended with "
                                      "MISALIGNED (src 0x00100004 is not a multiple of 16 "
                                      "bytes)")
    good.bitstream_address -= 4
    # PROGRAM_LOAD on AGCU 1 runs to its end and configures nothing
    machine.write(good.bitstream_address, good.bitstream)
    result = machine.command(1, AGCUOp.PROGRAM_LOAD, src=good.bitstream_address,
                             length=4 * len(good.bitstream))
    assert result.ok and result.config_state is None and machine.config_state == "EMPTY"
    with pytest.raises(LoaderError, match="start ignored: the configuration is EMPTY"):
        machine.execute([0])
    # geometry: a 2x2 program on a 2x4 machine
    wide = FunctionalMachine(Machine(rows=2, cols=4, lanes=4, compute=False))
    with pytest.raises(LoaderError) as error:
        wide.run_program(good)
    assert error.value.status == ConfigStatus.GEOMETRY
    assert "bitstream for a 2x2 array of 4 lanes, the array is 2x4 of 4 lanes" in \
        str(error.value)


def test_config_clear_keeps_registers():
    """``config_clear`` resets the loader, not the units' registers: a later bitstream
    overwrites only the records it carries (``hdl/config_net.py``, ``ConfigRegister``)."""
    machine = FunctionalMachine(PMU_MACHINE)
    first = write_bitstream(Geometry(2, 2, 4), [_pmu(1, 1, buffers=2, buffer_words=64),
                                                 _pmu(0, 1, buffers=1, buffer_words=32)])
    second = write_bitstream(Geometry(2, 2, 4), [_pmu(0, 1, buffers=3, buffer_words=16)])
    for words in (first, second):
        machine.config_clear()
        machine.write(HBM.base, words)
        assert machine.command(0, AGCUOp.PROGRAM_LOAD, src=HBM.base,
                               length=4 * len(words)).config_state == "LOADED"
    assert machine.array.config(UnitKind.PMU, 1, 1)["buffer_words"] == 64
    assert machine.array.config(UnitKind.PMU, 0, 1)["buffers"] == 3
    # a second bitstream right after a loaded one (no clear) is taken too
    machine.write(HBM.base, first)
    assert machine.command(0, AGCUOp.PROGRAM_LOAD, src=HBM.base,
                           length=4 * len(first)).config_state == "LOADED"
    assert machine.array.config(UnitKind.PMU, 0, 1)["buffers"] == 1


def test_loader_checks_header_words_as_they_arrive():
    """The loader checks each header word when it arrives: two words with a bad version
    are BAD_VERSION (``read_bitstream`` calls them too short: LENGTH); a stream that
    stops in the header or the payload is LENGTH; an empty payload needs CRC 0."""
    geometry = Geometry(2, 2, 4)
    magic, version = 0x31554452, 2 | 5 << 16

    def verdict(words):
        loader = ConfigLoader(geometry, {(UnitKind.PMU, 0, 1): 13}, {(UnitKind.PMU, 0, 1):
                                                                     [0] * 13})
        loader.feed(words)
        loader.end_of_stream()
        return loader.status, loader.state

    assert verdict([magic, 1 | 5 << 16])[0] == ConfigStatus.BAD_VERSION
    with pytest.raises(BitstreamError) as error:
        read_bitstream([magic, 1 | 5 << 16])
    assert error.value.status == ConfigStatus.LENGTH
    assert verdict([magic, version, 2 | 2 << 8 | 8 << 16])[0] == ConfigStatus.GEOMETRY
    assert verdict([magic, version, 2 | 2 << 8 | 4 << 16])[0] == ConfigStatus.LENGTH
    assert verdict([magic, version, 2 | 2 << 8 | 4 << 16, 0, 0]) == (ConfigStatus.OK, 2)
    assert verdict([magic, version, 2 | 2 << 8 | 4 << 16, 0, 1])[0] == ConfigStatus.CRC
    # a longer header: words 5.. are skipped
    words = write_bitstream(geometry, [Record(UnitKind.PMU, 0, 1, [7])])
    longer = [magic, 2 | 7 << 16, *words[2:5], 0xDEAD, 0xBEEF, *words[5:]]
    assert verdict(longer) == (ConfigStatus.OK, 2)


def test_loader_agrees_with_read_bitstream(seed):
    """The word-by-word loader and ``read_bitstream`` give the same verdict on damaged
    bitstreams of the bitstream's own length, and the loader writes exactly the
    records of an accepted one."""
    rng = random.Random(seed)
    program, _, _ = _gemm((5, 7, 9), seed)
    geometry = Geometry(2, 2, 4)
    array = FunctionalArray(2, 2, 4, agcu_config_words=config_words(agcu_config_layout()))
    verdicts = set()
    for _ in range(300):
        words = flip_fix_crc(rng, program.bitstream)
        try:
            _, records = read_bitstream(words, geometry, array.units)
            expected = ConfigStatus.OK
        except BitstreamError as error:
            expected, records = error.status, None
        storage = {key: [0] * count for key, count in array.units.items()}
        loader = ConfigLoader(geometry, array.units, storage)
        loader.feed(words)
        loader.end_of_stream()
        assert loader.status == expected, (loader.detail, words)
        if records is not None:
            reference = {key: [0] * count for key, count in array.units.items()}
            for record in records:
                record.apply(reference[record.kind, record.row, record.col])
            assert storage == reference
        verdicts.add(expected)
    assert {ConfigStatus.OK, ConfigStatus.CRC, ConfigStatus.BAD_RECORD} <= verdicts


# -- ARGUMENT_LOAD -------------------------------------------------------------------------

def test_argument_load_to_pmu_scalar_input(seed):
    """Program 1 fills PMU (0,0) from HBM (linear layout: word ``a`` of the SRAM is
    element ``a``); program 2 routes AGCU 0's scalar output to the PMU's scalar input
    and its answers back: an ARGUMENT_LOAD of addresses (held until the array starts)
    looks them up in the SRAM kept from program 1."""
    rng = np.random.default_rng(seed)
    lanes, beats = 4, 32
    table = rng.integers(0, 1 << 32, beats * lanes, dtype=np.uint32)
    linear = {"start": 0, "stride": [lanes, 0, 0], "bound": [beats, 1, 1], "lane_stride": 1}
    fill = Program("fill", {"rows": 2, "cols": 2, "lanes": lanes, "agcus": 2},
                   write_bitstream(Geometry(2, 2, lanes), [
                       _pmu(0, 0, write_enable=1, buffers=1, buffer_words=beats * lanes,
                            write=linear),
                       *_switches(2, 2, {(0, 0, "vector", "local0"): Source.WEST}),
                       _agcu(0, load_enable=1, load={"base": HBM.base + 0x4000,
                                                     "count": [beats, 1, 1],
                                                     "stride": [4 * lanes, 0, 0]})]),
                   HBM.base + 0x10_0000, inputs={"table": (HBM.base + 0x4000, table)},
                   execute=[0])
    machine = FunctionalMachine(PMU_MACHINE)
    machine.run_program(fill)
    lookup = write_bitstream(Geometry(2, 2, lanes), [
        _pmu(0, 0, buffers=1, buffer_words=beats * lanes),
        *_switches(2, 2, {(0, 0, "scalar", "local"): Source.WEST,
                          (0, 0, "scalar", "west"): Source.LOCAL}),
        _agcu(0)])
    machine.config_clear()
    machine.write(HBM.base + 0x10_0000, lookup)
    assert machine.command(0, AGCUOp.PROGRAM_LOAD, src=HBM.base + 0x10_0000,
                           length=4 * len(lookup)).config_state == "LOADED"
    addresses = rng.integers(0, beats * lanes, 21, dtype=np.uint32)
    machine.write(DDR.base + 0x100, addresses)
    result = machine.command(0, AGCUOp.ARGUMENT_LOAD, src=DDR.base + 0x100, length=4 * 21)
    assert result.ok and result.words == addresses.tolist()
    assert machine.pending_arguments == {0: addresses.tolist()}
    run = machine.execute([0])
    assert run.scalar_results[0] == table[addresses].tolist()
    assert machine.pending_arguments == {}
    # a second execute delivers nothing more
    assert machine.execute([0]).scalar_results[0] == []
    # argument-load errors: length, alignment; unmapped words arrive as zeros
    assert machine.command(0, AGCUOp.ARGUMENT_LOAD, src=DDR.base, length=6).error == \
        AGCUError.BAD_LENGTH
    assert machine.command(0, AGCUOp.ARGUMENT_LOAD, src=DDR.base + 4, length=8).error == \
        AGCUError.MISALIGNED
    result = machine.command(0, AGCUOp.ARGUMENT_LOAD, src=0x2000_0000, length=8)
    assert result.error == AGCUError.READ_DECERR and result.words == [0, 0]
    assert machine.execute([0]).scalar_results[0] == [int(table[0])] * 2
    # words the array does not route stay at its edge: the AGCU would stay busy
    machine.write(DDR.base, addresses)
    machine.command(1, AGCUOp.ARGUMENT_LOAD, src=DDR.base, length=4 * 5)
    with pytest.raises(ModelDeadlock, match=r"edge scalar_in 3 has 3 items left"):
        machine.execute([0])


# -- sequences -------------------------------------------------------------------------------

def test_two_program_sequence(seed):
    """Program 1 transposes A (HBM -> HBM); program 2 has no input image: it transposes
    what program 1 stored. Memory is kept, the configuration cleared and reloaded."""
    rng = np.random.default_rng(seed)
    size = 16
    matrix = rng.integers(0, 1 << 32, (size, size), dtype=np.uint32)
    first = transpose_program("first", size, HBM.base + 0x1000, DDR.base + 0x8000,
                              image=matrix)
    second = transpose_program("second", size, DDR.base + 0x8000, HBM.base + 0x2_0000)
    machine = FunctionalMachine(PMU_MACHINE)
    (out1, run1), (out2, run2) = machine.run_programs([first, second])
    assert np.array_equal(out1["t"].reshape(size, size), matrix.T)
    assert np.array_equal(out2["t"].reshape(size, size), matrix)
    for run in (run1, run2):
        assert run.counters["AGCU 1"]["beats_stored"] == size * size // 4
        assert run.done_tokens == 1
    # memory kept after the sequence; a failing third program names itself
    assert np.array_equal(machine.read(DDR.base + 0x8000, size * size), matrix.T.reshape(-1))
    third = transpose_program("third", size, 0x2000_0000, HBM.base)
    with pytest.raises(CommandError) as error:
        machine.run_programs([third])
    assert error.value.error == AGCUError.READ_DECERR and error.value.agcu == 0
    assert isinstance(error.value, UnitError)       # what kernel-execute errors were before
    assert _one_line(error.value).startswith("program 'third': AGCU 0: error READ_DECERR")


def test_gemm_sequence_keeps_memory(seed):
    """Two GEMMs on one machine: the second's output region is preset by the host and
    overwritten, the first's output survives the second run."""
    first, a1, b1 = _gemm((5, 7, 9), seed)
    machine = FunctionalMachine(GEMM_MACHINE)
    (out1, _), = machine.run_programs([first])
    second, a2, b2 = _gemm((5, 7, 9), seed + 1)
    # move the second GEMM's C elsewhere in HBM: its store patterns are in the AGCU
    # records, so compile at the same addresses and copy C1 away first
    address, count = first.outputs["c"]
    assert machine.command(1, AGCUOp.COPY, src=address, dst=DDR.base,
                           length=4 * count).ok
    (out2, _), = machine.run_programs([second])
    for program, output, a, b in ((first, machine.read(DDR.base, count), a1, b1),
                                  (second, out2["c"], a2, b2)):
        ok, error = gemm.check_result(gemm.unpack_output(program, output), a, b)
        assert ok, error
    assert np.array_equal(machine.read(DDR.base, count), out1["c"])


def test_module_run_program_and_positions():
    """The module-level ``run_program`` builds a fresh machine from the program's
    geometry; ``agcu_positions`` of a machine reach the array's edges."""
    machine = FunctionalMachine(Machine(rows=2, cols=2, lanes=4, compute=False,
                                        agcu_positions=(("east", 0), ("west", 1))))
    assert machine.array.agcu_edges == [2, 1]
    assert FunctionalMachine(PMU_MACHINE).array.agcu_edges == [0, 3]
    matrix = np.arange(256, dtype=np.uint32).reshape(16, 16)
    program = transpose_program("t", 16, HBM.base, HBM.base + 0x8000, image=matrix)
    outputs, _ = run_program(program, compute=False, capacity_bytes=16384)
    assert np.array_equal(outputs["t"].reshape(16, 16), matrix.T)
    program.execute = []
    with pytest.raises(ModelError, match="program 't': executes no AGCU"):
        run_program(program, compute=False)


def test_iterations_match_pcu_model(seed):
    rng = random.Random(seed)
    for _ in range(50):
        counters = []
        for _ in range(3):
            low = rng.randrange(5)
            counters.append({"min": low, "max": low + rng.randrange(1, 9),
                             "stride": rng.randrange(1, 4)})
        reference = pcu_reference.iterations({"counters": counters})
        lazy = Iterations(counters)
        assert len(lazy) == len(reference)
        assert [lazy[i] for i in range(len(lazy))] == reference
    huge = Iterations([{"min": 0, "max": 65535, "stride": 1}] * 3)
    assert len(huge) == 65535 ** 3 and huge[-1] == ((65534,) * 3, False, True, True)


# -- damaged bitstreams --------------------------------------------------------------------------

def test_damaged_bitstreams_end_cleanly(seed):
    """200 damaged bitstreams of two small compiled GEMMs (fixed seed): every run ends
    with outputs or a one-line ModelError / BitstreamError, never another exception or
    a hang (``max_items``); a damage that changes no decoded field leaves C correct."""
    rng = random.Random(1234 + seed)
    start = time.perf_counter()
    geometry = Geometry(2, 2, 4)
    array = FunctionalMachine(GEMM_MACHINE).array
    field_leaves = {kind: list(leaves(data.Layout.cast(layout)))
              for kind, layout in array.layouts.items()}
    cases = [_gemm(shape, seed) for shape in ((4, 4, 8), (5, 7, 9))]
    originals = [list(program.bitstream) for program, _, _ in cases]
    outcomes = {}
    for index in range(200):
        program, a, b = cases[index % 2]
        words = mutate(rng, originals[index % 2], field_leaves, geometry)
        program.bitstream = words
        try:
            outputs, _ = FunctionalMachine(GEMM_MACHINE, max_items=200_000).run_program(
                program)
            ok, _ = gemm.check_result(gemm.unpack_output(program, outputs["c"]), a, b)
            outcome = "correct" if ok else "different"
            try:
                same = read_bitstream(words)[1] == read_bitstream(originals[index % 2])[1]
            except BitstreamError:
                same = False
            assert ok or not same, "an unchanged configuration computed a wrong C"
        except (ModelError, BitstreamError) as error:
            _one_line(error)
            assert str(error).startswith(f"program '{program.name}': ")
            outcome = type(error).__name__
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    for program, words in zip((case[0] for case in cases), originals, strict=True):
        program.bitstream = words
    assert {"correct", "LoaderError", "ModelDeadlock", "UnitError"} <= set(outcomes), outcomes
    print(f"200 damaged bitstreams: {outcomes} ({time.perf_counter() - start:.1f} s)")

"""Test programs of :class:`hdl.system.RDUSystem` (both tiers).

The host driver itself (program load, start, execute, wait, outputs) is product code:
:mod:`rdu.sim.host`. Here: hand-built programs the system tests run through it.
"""

import numpy as np
from rdu.bitstream import Geometry, Record, UnitKind, write_bitstream
from rdu.machine import Machine
from rdu.memory_map import HBM
from rdu.program import Program
from rdu.sim.host import load_outputs, run_program

from hdl.agcu import agcu_config_layout
from hdl.pmu import pmu_config_layout
from hdl.switch import Direction, Source

from .array import LOCAL0, switch_records
from .common import pack_config
from .pmu import pattern, pmu_config

__all__ = ["transpose_program", "program_and_run"]

NORTH, EAST, SOUTH, WEST = Direction
WORD_BYTES = 4


# --------------------------------------------------------------------------------------
# Test programs
# --------------------------------------------------------------------------------------

def _edge_position(edge, rows, cols):
    """``(row, col, side)`` of the switch behind array edge index ``edge``."""
    return (edge, 0, WEST) if edge < rows else (edge - rows, cols - 1, EAST)


def _route_to_edge(rows, cols, start, edge):
    """Hops ``((row, col, output), input)`` of a route from the unit at ``start`` to the
    array edge ``edge``: first along the column, then along the row (Y then X)."""
    row, col = start
    came = Source.LOCAL
    dest_row, dest_col, side = _edge_position(edge, rows, cols)
    hops = []
    while row != dest_row:
        out = SOUTH if dest_row > row else NORTH
        hops.append(((row, col, out), came))
        row += 1 if out == SOUTH else -1
        came = Source.NORTH if out == SOUTH else Source.SOUTH
    while col != dest_col:
        out = EAST if dest_col > col else WEST
        hops.append(((row, col, out), came))
        col += 1 if out == EAST else -1
        came = Source.WEST if out == EAST else Source.EAST
    hops.append(((row, col, side), came))
    return hops


def transpose_program(rows, cols, lanes, *, matrix_rows, matrix_cols, seed,
                      input_address=HBM.base + 0x1_0000, output_address=HBM.base + 0x2_0000,
                      bitstream_address=HBM.base + 0x100, store_beats=None,
                      agcus=2, load_agcu=0, store_agcu=1, agcu_positions=None,
                      name="transpose", pmu_bytes=4096):
    """A copy kernel: HBM -> AGCU ``load_agcu`` -> a PMU -> AGCU ``store_agcu`` -> HBM,
    transposing.

    The load AGCU streams the ``matrix_rows x matrix_cols`` uint32 matrix ``A``
    row-major into the PMU next to its edge (``agcu_positions``, default
    :func:`hdl.system.agcu_edge`: AGCU 0 is west of row 0, so PMU (0, 0)); the PMU
    writes it row-major (diagonal layout) and reads it column-major (beat ``(b, c)`` =
    ``A[b*lanes:(b+1)*lanes, c]``); the beats and the PMU's DONE token travel column
    first, then row, to the store AGCU's edge, whose strided store pattern puts beat
    ``(b, c)`` at row ``c``, columns ``b*lanes..`` of ``A.T``; the store AGCU also
    waits for the DONE token.
    ``store_beats`` (default: all) replaces the store pattern by a linear one of that
    many beats, e.g. more than arrive, to make a program that never completes.
    Needs a PMU at the load AGCU's edge position (``compute_unit=None`` arrays). The
    positions are recorded in ``program.machine`` (PMUs only, ``pmu_bytes`` each).
    Returns ``(program, expected output words)``.
    """
    from hdl.system import default_agcu_positions, position_edge
    if agcu_positions is None:
        agcu_positions = default_agcu_positions(agcus, rows)
    agcu_positions = [list(position) for position in agcu_positions]
    edges = [position_edge(side, row, rows) for side, row in agcu_positions]
    if matrix_rows % lanes or matrix_cols < lanes or matrix_cols & (matrix_cols - 1):
        raise ValueError(f"Transpose needs rows a multiple of {lanes} lanes and columns a "
                         f"power of two >= {lanes}, not {matrix_rows}x{matrix_cols}")
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, 1 << 32, (matrix_rows, matrix_cols), dtype=np.uint32)
    beat = lanes * WORD_BYTES
    beats = matrix_rows * matrix_cols // lanes
    config = pmu_config(lanes, write=pattern("row_major", lanes, matrix_rows, matrix_cols),
                        read=pattern("column_major", lanes, matrix_rows, matrix_cols),
                        buffer_words=matrix_rows * matrix_cols,
                        skew_shift=matrix_cols.bit_length() - 1, read_passes=1)
    pmu_row, pmu_col, side = _edge_position(edges[load_agcu], rows, cols)
    extra = [((pmu_row, pmu_col, "vector", LOCAL0),
              Source.WEST if side == WEST else Source.EAST)]
    for (row, col, out), came in _route_to_edge(rows, cols, (pmu_row, pmu_col),
                                                edges[store_agcu]):
        extra += [((row, col, "vector", out), came), ((row, col, "control", out), came)]
    agcu_layout = agcu_config_layout()
    load = {"base": input_address, "count": [beats, 1, 1], "stride": [beat, 0, 0]}
    blocks = matrix_rows // lanes
    if store_beats is None:
        store = {"base": output_address, "count": [matrix_cols, blocks, 1],
                 "stride": [matrix_rows * WORD_BYTES, beat, 0]}
    else:
        store = {"base": output_address, "count": [store_beats, 1, 1],
                 "stride": [beat, 0, 0]}
    records = [Record(UnitKind.PMU, pmu_row, pmu_col,
                      pack_config(pmu_config_layout(), config)),
               *switch_records(rows, cols, {}, extra),
               Record(UnitKind.AGCU, 0, load_agcu, pack_config(agcu_layout, {
                   "load_enable": 1, "load": load})),
               Record(UnitKind.AGCU, 0, store_agcu, pack_config(agcu_layout, {
                   "store_enable": 1, "wait_done": 1, "store": store}))]
    program = Program(
        name=name,
        machine=Machine(rows, cols, lanes, agcus=agcus, compute=False, pmu_bytes=pmu_bytes,
                        agcu_positions=tuple(tuple(p) for p in agcu_positions)),
        bitstream=write_bitstream(Geometry(rows, cols, lanes), records),
        bitstream_address=bitstream_address,
        inputs={"a": (input_address, matrix.reshape(-1))},
        outputs={"a_t": (output_address, matrix_rows * matrix_cols)},
        execute=[load_agcu, store_agcu],
        meta={"kernel": "transpose", "shape": [matrix_rows, matrix_cols], "beats": beats,
              "pmu": [pmu_row, pmu_col]},
    )
    return program, matrix.T.reshape(-1).copy()


async def program_and_run(bench, *, program_dir, expected_path=None, **params):
    """:func:`run_program`, then compare each output with ``expected_path`` (.npz)."""
    result = await run_program(bench, program_dir, **params)
    if expected_path is not None:
        outputs = load_outputs(result)
        with np.load(expected_path) as expected:
            for name in expected.files:
                if not np.array_equal(outputs[name], expected[name]):
                    index = int(np.flatnonzero(outputs[name] != expected[name])[0])
                    raise AssertionError(
                        f"output {name!r} differs from the reference at word {index}: "
                        f"{outputs[name][index]:#x} != {expected[name][index]:#x}")
    return result

"""The RTL runtime of :class:`hdl.system.RDUSystem` and its test programs (both tiers).

:func:`run_program` runs a compiled :class:`rdu.program.Program` (saved as a directory
by :meth:`Program.save`) on the system: memory models on every AGCU port, program
load, start, execute, wait, outputs. It is a :class:`tb.bench.Bench` body, so the same
code runs in the Amaranth simulator and under cocotb + Verilator; ``docs/system.md``
describes the sequence and its errors.
"""

from pathlib import Path

import numpy as np
from rdu.bitstream import ConfigStatus, Geometry, Record, UnitKind, write_bitstream
from rdu.memory_map import HBM
from rdu.program import Program

from hdl.agcu import AGCUError, AGCUOp, agcu_command_layout, agcu_config_layout
from hdl.config_net import LoaderState
from hdl.pmu import pmu_config_layout
from hdl.switch import Direction, Source
from sim_models.memory import ddr_model, hbm_model, host_link_model
from sim_models.memory_system import MemorySystem

from .array import LOCAL0, switch_records
from .common import pack_config
from .pmu import pattern, pmu_config

__all__ = ["RunError", "system_memory", "check_program", "run_program", "load_outputs",
           "transpose_program", "program_and_run"]

NORTH, EAST, SOUTH, WEST = Direction
WORD_BYTES = 4
#: Total output words returned inline in the result (more: only in the .npz file).
INLINE_OUTPUT_WORDS = 1 << 16

_COMMAND = agcu_command_layout()


class RunError(AssertionError):
    """A program that did not run to a clean end (a one-line message says why)."""


def system_memory(beat_bytes, overrides=None):
    """HBM, DDR and host link at the :mod:`rdu.memory_map` bases for ``beat_bytes``-wide
    AXI ports; ``overrides`` maps ``"hbm"``/``"ddr"``/``"host"`` to model arguments."""
    overrides = overrides or {}
    return MemorySystem([
        hbm_model(beat_bytes=beat_bytes, **overrides.get("hbm", {})),
        ddr_model(beat_bytes=beat_bytes, **overrides.get("ddr", {})),
        host_link_model(beat_bytes=beat_bytes, **overrides.get("host", {})),
    ], beat_bytes=beat_bytes)


def _command(op, *, src=0, dst=0, length=0):
    return _COMMAND.const({"op": op, "src": src, "dst": dst,
                           "length": length}).as_value().value


def _error_name(code):
    try:
        return AGCUError(code).name
    except ValueError:
        return f"unknown code {code}"


async def _issue(bench, agcus, command, timeout, what):
    """Drive ``command`` on ``cmd[k]`` of every AGCU in ``agcus`` for one cycle, once
    none of them is busy (``cmd.ready`` is ``~busy``, so the edge at the end of that
    cycle accepts them all). Commands are driven by the body itself, not by a stream
    agent, so that they are accepted on the same edge in both tiers."""
    for _ in range(timeout):
        busy = [k for k in agcus if await bench.read(f"agcu_busy.{k}")]
        await bench.cycles(1)
        if not busy:
            break
    else:
        raise RunError(f"{what}: AGCUs {busy} still busy after {timeout} cycles")
    for k in agcus:
        bench.set(f"cmd.{k}.valid", 1)
        bench.set(f"cmd.{k}.payload", command)


async def _end_issue(bench, agcus):
    await bench.cycles(1)
    for k in agcus:
        bench.set(f"cmd.{k}.valid", 0)


def check_program(program):
    """Raise :class:`RunError` if ``program`` cannot be run (before any simulation)."""
    name, agcus = program.name, program.geometry["agcus"]
    if not program.execute:
        raise RunError(f"program {name!r}: executes no AGCU (program.execute is empty)")
    if len(set(program.execute)) != len(program.execute):
        raise RunError(f"program {name!r}: executes an AGCU twice: {program.execute}")
    for k in program.execute:
        if not 0 <= k < agcus:
            raise RunError(f"program {name!r}: executes AGCU {k}, the system has {agcus}")


async def run_program(bench, program_dir, *, timeout=200_000, progress=False, memory=None,
                      stall="none", perf_counters=None, load_timeout=100_000,
                      outputs_file=None, inline_output_words=INLINE_OUTPUT_WORDS):
    """Run the program saved in ``program_dir`` on an :class:`RDUSystem`; return results.

    Parameters
    ----------
    program_dir : str
        Directory written by :meth:`rdu.program.Program.save`.
    timeout : int
        Cycles from ``start`` after which a still-busy AGCU fails the run (watchdog).
    progress : bool or int
        Print a progress line every ``timeout // 10`` cycles (``True``) or every
        ``progress`` cycles (an int).
    memory : dict, optional
        Memory-model overrides (:func:`system_memory`), e.g. shorter latencies.
    stall : str
        Stall pattern of the memory side of every AXI channel.
    perf_counters : list of str, optional
        Names of the array's performance counters in ``host.perf_select`` order
        (:meth:`RDUSystem.perf_counter_names`); they are read after the run.
    load_timeout : int
        Cycles allowed for the program load and the loader's verdict.
    outputs_file : str, optional
        Where to write the outputs as ``.npz`` (default ``program_dir/outputs.npz``).
    inline_output_words : int
        Outputs are also returned inline (as lists) when they hold at most this many
        words in total.

    Returns
    -------
    dict
        ``cycles`` (edges from the one that sampled ``start`` and the ``EXECUTE``
        commands to the one that raised the last ``done``), ``load_cycles`` (from the
        edge that accepted ``PROGRAM_LOAD`` to the loader's verdict), ``agcu_cycles``
        (per executing AGCU, string keys, the same measure), ``array_cycles``
        (``host.cycles``: start to the first ``DONE`` token at the edge, or ``None``),
        ``outputs`` (name -> list of uint32, or ``None`` when larger than
        ``inline_output_words`` in total), ``outputs_file``, ``perf`` and ``memory``
        statistics.

    Raises
    ------
    RunError
        Program load failed or the bitstream was rejected (names the
        :class:`ConfigStatus`), an AGCU still busy after ``timeout`` cycles (names the
        AGCUs), an AGCU ended with an error (names the :class:`AGCUError`).
    """
    program = Program.load(program_dir)
    name = program.name
    geometry = program.geometry
    lanes, agcus = geometry["lanes"], geometry["agcus"]
    beat = lanes * WORD_BYTES
    check_program(program)

    mem = system_memory(beat, memory)
    for k in range(agcus):
        mem.attach(bench, f"axi.{k}", stall=stall)
    mem.load(program.bitstream_address, np.asarray(program.bitstream, dtype=np.uint32))
    for address, words in program.inputs.values():
        mem.load(address, np.asarray(words, dtype=np.uint32))
    # -- program load on AGCU 0 ----------------------------------------------------------
    what = f"program {name!r}: program load"
    await _issue(bench, [0], _command(AGCUOp.PROGRAM_LOAD, src=program.bitstream_address,
                                      length=WORD_BYTES * len(program.bitstream)),
                 load_timeout, what)
    await _end_issue(bench, [0])           # the edge that accepted the command
    load_cycles = 0
    while True:
        done = await bench.read("agcu_done.0")
        state = await bench.read("host.config_state")
        if done and state != LoaderState.LOADING:
            break
        if load_cycles >= load_timeout:
            raise RunError(f"{what} not finished after {load_timeout} cycles (AGCU 0 "
                           f"done={done}, configuration state {state})")
        await bench.cycles(1)
        load_cycles += 1
    load_error = await bench.read("agcu_error.0")
    if load_error != AGCUError.NONE:
        raise RunError(f"{what} on AGCU 0 ended with {_error_name(load_error)} "
                       f"(bitstream at {program.bitstream_address:#x})")
    if state != LoaderState.LOADED:
        code = await bench.read("host.error")
        try:
            status = ConfigStatus(code).name
        except ValueError:
            status = f"unknown code {code}"
        raise RunError(f"program {name!r}: bitstream rejected by the configuration loader: "
                       f"{status} (host.error = {code})")

    # -- start and execute on one edge, then wait ----------------------------------------
    execute = list(program.execute)
    await _issue(bench, execute, _command(AGCUOp.EXECUTE), load_timeout,
                 f"program {name!r}: execute")
    bench.set("host.start", 1)
    await _end_issue(bench, execute)       # the edge that sampled start and the commands
    bench.set("host.start", 0)
    pending = set(execute)
    finished = {}
    elapsed = 0                            # edges since the start edge
    every = (progress if isinstance(progress, int) and not isinstance(progress, bool)
             else max(1, timeout // 10)) if progress else 0
    while True:
        for k in sorted(pending):
            if await bench.read(f"agcu_done.{k}"):
                finished[k] = elapsed
                pending.discard(k)
        if not pending:
            break
        if elapsed >= timeout:
            busy = sorted(pending)
            unit_error = await bench.read("host.unit_error")
            raise RunError(
                f"program {name!r}: watchdog: AGCU{'s' if len(busy) > 1 else ''} "
                f"{', '.join(map(str, busy))} still busy after {timeout} cycles from start "
                f"(cycle {bench.cycle}); done: {sorted(finished) or 'none'}"
                + ("; a unit reports an error (host.unit_error)" if unit_error else ""))
        if every and elapsed and elapsed % every == 0:
            print(f"[run_program {name}] {elapsed}/{timeout} cycles: busy AGCUs "
                  f"{sorted(pending)}, done {sorted(finished)}", flush=True)
        await bench.cycles(1)
        elapsed += 1
    cycles = max(finished.values())

    for k in execute:
        code = await bench.read(f"agcu_error.{k}")
        if code != AGCUError.NONE:
            detail = f"; memory: {mem.errors[0]}" if mem.errors else ""
            raise RunError(f"program {name!r}: AGCU {k} ended EXECUTE with "
                           f"{_error_name(code)} (code {code}){detail}")
    array_done = await bench.read("host.done")
    array_cycles = await bench.read("host.cycles") if array_done else None
    unit_error = await bench.read("host.unit_error")

    # -- counters and outputs ------------------------------------------------------------
    perf = {}
    for index, counter in enumerate(perf_counters or []):
        await bench.cycles(1)
        bench.set("host.perf_select", index)
        await bench.cycles(1)
        perf[counter] = await bench.read("host.perf_value")
    outputs = {out: mem.dump(address, WORD_BYTES * words, dtype=np.uint32)
               for out, (address, words) in program.outputs.items()}
    path = Path(outputs_file) if outputs_file else Path(program_dir) / "outputs.npz"
    np.savez(path, **outputs)
    total_words = sum(array.size for array in outputs.values())
    stats = {region.name: dict(region.stats) for region in mem.regions}
    return {
        "program": name,
        "cycles": cycles,
        "load_cycles": load_cycles,
        "agcu_cycles": {str(k): finished[k] for k in execute},
        "array_cycles": array_cycles,
        "unit_error": unit_error,
        "outputs": ({out: array.tolist() for out, array in outputs.items()}
                    if total_words <= inline_output_words else None),
        "outputs_file": str(path),
        "perf": perf,
        "memory": stats,
        "memory_errors": [str(error) for error in mem.errors],
    }


def load_outputs(result):
    """The outputs of a :func:`run_program` result as numpy arrays (from its .npz file)."""
    with np.load(result["outputs_file"]) as arrays:
        return {name: arrays[name] for name in arrays.files}


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
                      name="transpose"):
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
    positions are recorded in ``program.geometry["agcu_positions"]``.
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
        geometry={"rows": rows, "cols": cols, "lanes": lanes, "agcus": agcus,
                  "agcu_positions": agcu_positions},
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

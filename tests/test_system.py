"""RDUSystem: a compiled program (bitstream + memory images) run end to end by the RTL
runtime: program load through AGCU 0, start, execute on both AGCUs, outputs from HBM."""

import re

import numpy as np
import pytest
from rdu.bitstream import (
    HEADER_WORDS,
    BitstreamError,
    ConfigStatus,
    Geometry,
    UnitKind,
    read_bitstream,
)
from rdu.sim.host import RunError, check_program, load_outputs, run_program
from rdu.sim.memory_system import FaultInjector
from rdu.sim.runner import run_amaranth

from hdl.agcu import AGCUError
from hdl.array import WATCHDOG_NONE, watchdog_location
from hdl.config_net import LoaderState
from hdl.interfaces import NETWORKS
from hdl.switch import Port
from hdl.system import RDUSystem, agcu_edge
from tb.suites.system import transpose_program

SMALL = {"rows": 2, "cols": 2, "lanes": 4}
#: shorter memory latencies for the error tests (the copy test uses the defaults)
FAST_MEMORY = {"hbm": {"hit_latency": 8, "miss_latency": 12, "write_latency": 4}}


def small_system():
    return RDUSystem(2, 2, 4, compute_unit=None, capacity_bytes=4096, idle_timeout=256)


def run(program_dir, watchdog=5000, seed=None, **params):
    system = small_system()
    return run_amaranth(system, run_program, seed=seed, watchdog=watchdog,
                        program_dir=str(program_dir), **params), system


def test_agcu_edge_assignment():
    # mid-edge first: AGCU 0 west of row 1, AGCU 1 east of row 2, then downwards, wrapping
    assert [agcu_edge(k, 4) for k in range(8)] == [1, 6, 2, 7, 3, 4, 0, 5]
    assert [agcu_edge(k, 1) for k in range(2)] == [0, 1]
    with pytest.raises(ValueError, match=r"^AGCU index must be between 0 and 3 for 2 rows, "
                                         r"not 4$"):
        agcu_edge(4, 2)
    with pytest.raises(TypeError, match=r"^AGCU index must be an integer, not '1'$"):
        agcu_edge("1", 2)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_system_argument_checks():
    with pytest.raises(ValueError, match=r"^AGCU count must be between 1 and 4 \(two per "
                                         r"row\) for 2 rows, not 5$"):
        RDUSystem(2, 2, 4, agcus=5, compute_unit=None)
    with pytest.raises(ValueError, match=r"^AGCU count must be between 1 and 2 \(two per "
                                         r"row\) for 1 rows, not 0$"):
        RDUSystem(1, 2, 4, agcus=0, compute_unit=None)
    with pytest.raises(TypeError, match=r"^AGCU count must be an integer, not 2.0$"):
        RDUSystem(2, 2, 4, agcus=2.0, compute_unit=None)
    with pytest.raises(ValueError, match=r"^System rows must be between 1 and 255, not 0$"):
        RDUSystem(0, 2, 4)
    system = RDUSystem(2, 2, 4, agcus=3, compute_unit=None)
    assert [system.edge_of(k) for k in range(3)] == [0, 3, 1]
    assert len(system.cmd) == len(system.axi) == len(system.agcu_error) == 3
    for positions, message in (
            ([["west", 0]], r"AGCU positions must be 2 \(side, row\) pairs, one per AGCU, "
                            r"not \[\['west', 0\]\]"),
            ([["west", 0], ["west", 0]], r"AGCU positions must be distinct, not "
                                         r"\[\['west', 0\], \['west', 0\]\]"),
            ([["north", 0], ["east", 0]], r"AGCU side must be 'west' or 'east', not 'north'"),
            ([["west", 0], ["east", 2]], r"AGCU row must be an integer between 0 and 1, "
                                         r"not 2")):
        with pytest.raises(ValueError, match=rf"^{message}$"):
            RDUSystem(2, 2, 4, compute_unit=None, agcu_positions=positions)
    with_pcus = RDUSystem(2, 2, 4)                  # default compute unit: the PCU
    assert [with_pcus.array.unit_kind(r, c) for r in range(2) for c in range(2)] == [
        UnitKind.PCU, UnitKind.PMU, UnitKind.PMU, UnitKind.PCU]
    with pytest.raises(ValueError, match=r"^Transpose needs rows a multiple of 4 lanes and "
                                         r"columns a power of two >= 4, not 6x8$"):
        transpose_program(**SMALL, matrix_rows=6, matrix_cols=8, seed=1)
    assert system.agcu_config_words == 13       # docs/agcu.md: 389 bits
    assert [t for t in system.config_targets() if t[0] == 4] == [(4, 0, k, 13) for k in range(3)]


@pytest.mark.parametrize("shape, stall, memory", [
    ((16, 16), "none", None),                   # default HBM latencies: measured cycles
    ((8, 32), "random", FAST_MEMORY),           # non-square, random stalls on every AXI channel
])
def test_transpose_program_amaranth(shape, stall, memory, sim_dir, seed):
    """HBM -> AGCU 0 -> PMU (write row-major, read column-major) -> AGCU 1 (strided
    store) -> HBM: the HBM output is the numpy transpose."""
    matrix_rows, matrix_cols = shape
    beats = matrix_rows * matrix_cols // 4
    program, expected = transpose_program(**SMALL, matrix_rows=matrix_rows,
                                          matrix_cols=matrix_cols, seed=seed)
    program.save(sim_dir / "program")
    system = small_system()
    inline = 1 << 16 if stall == "none" else 0       # 0: outputs only in the .npz file
    stats, _ = run(sim_dir / "program", seed=seed, timeout=20_000, stall=stall, memory=memory,
                   perf_counters=system.perf_counter_names(), inline_output_words=inline)
    result = stats.result
    if inline:
        got = np.asarray(result["outputs"]["a_t"], dtype=np.uint32)
        assert np.array_equal(got, expected), "transposed output differs from numpy"
    else:
        assert result["outputs"] is None
    assert np.array_equal(load_outputs(result)["a_t"], expected)
    assert result["perf"]["pmu(0,0).beats_written"] == beats
    assert result["perf"]["pmu(0,0).beats_read"] == beats
    for unit in ("pmu(0,1)", "pmu(1,0)", "pmu(1,1)"):
        assert result["perf"][f"{unit}.beats_written"] == 0
    assert result["unit_error"] == 0
    assert result["array_cycles"] is not None and result["array_cycles"] <= result["cycles"]
    assert result["memory"]["hbm"]["write_beats"] == beats
    assert result["memory_errors"] == []
    print(f"transpose {matrix_rows}x{matrix_cols} (lanes 4, stall {stall}): load "
          f"{result['load_cycles']} cycles, run {result['cycles']} cycles, AGCU "
          f"{result['agcu_cycles']}, array {result['array_cycles']}")


@pytest.mark.parametrize("load_agcu, store_agcu", [(2, 1), (1, 2)])
def test_third_agcu_edge_amaranth(load_agcu, store_agcu, sim_dir, seed):
    """Three AGCUs on two rows: AGCU 1 east of row 1, AGCU 2 west of row 1. A transpose
    loaded by one and stored by the other reaches its destination only if both sit at
    their documented edges."""
    program, expected = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                          agcus=3, load_agcu=load_agcu,
                                          store_agcu=store_agcu)
    assert program.meta["pmu"] == ([1, 0] if load_agcu == 2 else [1, 1])
    program.save(sim_dir / "program")
    system = RDUSystem(2, 2, 4, agcus=3, compute_unit=None, capacity_bytes=4096,
                       idle_timeout=256)
    stats = run_amaranth(system, run_program, seed=seed, watchdog=5000,
                         program_dir=str(sim_dir / "program"), timeout=5000,
                         memory=FAST_MEMORY, stall="random")
    assert np.array_equal(load_outputs(stats.result)["a_t"], expected)
    assert sorted(stats.result["agcu_cycles"]) == sorted([str(load_agcu), str(store_agcu)])


def test_agcu_positions_amaranth(sim_dir, seed):
    """AGCUs placed by ``agcu_positions`` (here the compiler mapper's mid-edge default on
    two rows: west of row 0, east of row 1): the transpose crosses the array diagonally."""
    positions = [["west", 0], ["east", 1]]
    program, expected = transpose_program(**SMALL, matrix_rows=8, matrix_cols=16, seed=seed,
                                          agcu_positions=positions)
    assert program.geometry["agcu_positions"] == positions
    program.save(sim_dir / "program")
    system = RDUSystem(2, 2, 4, compute_unit=None, capacity_bytes=4096, idle_timeout=256,
                       agcu_positions=positions)
    assert [system.edge_of(k) for k in range(2)] == [0, 3]
    stats = run_amaranth(system, run_program, seed=seed, watchdog=5000,
                         program_dir=str(sim_dir / "program"), timeout=5000,
                         memory=FAST_MEMORY, stall="random")
    assert np.array_equal(load_outputs(stats.result)["a_t"], expected)


def test_bad_crc_is_reported_amaranth(sim_dir, seed):
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed)
    program.bitstream[-1] ^= 1 << (seed % 32)       # a configuration word, not a header
    with pytest.raises(BitstreamError) as error:
        read_bitstream(program.bitstream, Geometry(2, 2, 4))
    assert error.value.status == ConfigStatus.CRC
    program.save(sim_dir / "program")
    with pytest.raises(RunError) as failure:
        run(sim_dir / "program", seed=seed, timeout=5000, memory=FAST_MEMORY)
    message = str(failure.value)
    assert message == ("program 'transpose': bitstream rejected by the configuration "
                       "loader: CRC (host.error = 5)")
    assert "\n" not in message


@pytest.mark.parametrize("case, status", [("bad_magic", "BAD_MAGIC"),
                                          ("truncated", "LENGTH")])
def test_bad_bitstream_is_reported_amaranth(case, status, sim_dir, seed):
    """A wrong magic word, and a bitstream cut short (the loader gives up after
    ``idle_timeout`` cycles without words): one-line errors naming the loader status."""
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed)
    assert HEADER_WORDS == 5
    if case == "bad_magic":
        program.bitstream[0] ^= 0x100
    else:
        program.bitstream = program.bitstream[:-3]
    program.save(sim_dir / "program")
    code = int(ConfigStatus[status])
    with pytest.raises(RunError, match=rf"^program 'transpose': bitstream rejected by the "
                                       rf"configuration loader: {status} "
                                       rf"\(host.error = {code}\)$"):
        run(sim_dir / "program", seed=seed, timeout=5000, memory=FAST_MEMORY)


def test_misaligned_bitstream_address_amaranth(sim_dir, seed):
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                   bitstream_address=0x104, name="misaligned")
    program.save(sim_dir / "program")
    with pytest.raises(RunError, match=r"^program 'misaligned': program load on AGCU 0 ended "
                                       r"with MISALIGNED \(bitstream at 0x104\)$"):
        run(sim_dir / "program", seed=seed, timeout=5000, memory=FAST_MEMORY)


def test_program_checks(sim_dir, seed):
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed)
    for execute, message in (([], r"executes no AGCU \(program.execute is empty\)"),
                             ([0, 0], r"executes an AGCU twice: \[0, 0\]"),
                             ([0, 2], r"executes AGCU 2, the system has 2")):
        program.execute = execute
        with pytest.raises(RunError, match=rf"^program 'transpose': {message}$"):
            check_program(program)
    # run_program makes the same check
    program.save(sim_dir / "program")
    with pytest.raises(RunError, match=r"executes AGCU 2, the system has 2$"):
        run(sim_dir / "program", seed=seed)


def test_unmapped_load_address_names_agcu_error_amaranth(sim_dir, seed):
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                   input_address=0x2000_0000, name="unmapped")
    # the input image cannot live at an unmapped address: load it elsewhere
    program.inputs = {"a": (0x1_0000, program.inputs["a"][1])}
    program.save(sim_dir / "program")
    with pytest.raises(RunError) as failure:
        run(sim_dir / "program", seed=seed, timeout=5000, memory=FAST_MEMORY)
    message = str(failure.value)
    assert message.startswith("program 'unmapped': AGCU 0 ended EXECUTE with READ_DECERR "
                              "(code 6); memory: DECERR on read"), message
    assert "\n" not in message


def test_watchdog_names_busy_agcu_amaranth(sim_dir, seed):
    """AGCU 1 is told to store twice the beats the PMU sends: it never finishes. The
    array's watchdog (programmed by the host driver to half the launch timeout) stops
    it; nothing waits in the mesh, so the busy AGCU is named."""
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                   store_beats=32, name="stuck")
    program.save(sim_dir / "program")
    with pytest.raises(RunError, match=r"^program 'stuck': hardware watchdog: no transfer "
                                       r"for 750 cycles \(cycle \d+\); first stalled: AGCU 1 "
                                       r"\(busy, no item waiting in the mesh\); done: \[0\]; "
                                       r"aborted: AGCU 1 drained, array flushed in \d+ "
                                       r"cycles$"):
        run(sim_dir / "program", seed=seed, timeout=1500, memory=FAST_MEMORY, progress=500)


def test_watchdog_off_host_watchdog_amaranth(sim_dir, seed):
    """``watchdog_cycles=0`` turns the array's watchdog off: the host's own watchdog
    (AGCUs still busy ``timeout`` cycles after start) names the AGCU."""
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                   store_beats=32, name="stuck")
    program.save(sim_dir / "program")
    with pytest.raises(RunError, match=r"^program 'stuck': watchdog: AGCU 1 still busy after "
                                       r"1500 cycles from start \(cycle \d+\); done: \[0\]; "
                                       r"aborted: AGCU 1 drained, array flushed in \d+ "
                                       r"cycles$"):
        run(sim_dir / "program", seed=seed, timeout=1500, memory=FAST_MEMORY,
            watchdog_cycles=0)


def test_run_budget_stops_a_moving_run_amaranth(sim_dir, seed):
    """The run budget (``host.cycle_budget``, the launch's timeout): a 32x32 transpose
    (256 beats each way, about 860 cycles) launched with a 400-cycle timeout keeps
    moving, so the no-progress watchdog (100 cycles) never fires; the array stops itself
    at the budget, the host names it (not its own watchdog), aborts, and the same
    program then runs bit-exact with its full timeout."""
    program, expected = transpose_program(**SMALL, matrix_rows=32, matrix_cols=32,
                                          seed=seed, name="long")
    stats = run_amaranth(small_system(), _budget_runs, seed=seed, watchdog=10**9,
                         program_dir=str(program.save(sim_dir / "program")))
    message, last = stats.result
    assert re.fullmatch(r"program 'long': hardware watchdog: run budget of 400 cycles spent, "
                        r"the array still moving \(cycle \d+\); busy: AGCUs? [\d, ]+; done: "
                        r"(none|\[0\]); aborted: AGCUs? [\d, ]+ drained, array flushed in \d+ "
                        r"cycles", message), message
    assert np.array_equal(np.asarray(last, np.uint32), expected)


async def _budget_runs(bench, program_dir):
    from rdu.program import Program
    from rdu.sim.host import HostDriver
    program = Program.load(program_dir)
    driver = HostDriver(bench, program.machine, memory=FAST_MEMORY)
    try:
        await driver.run(program, timeout=400, watchdog_cycles=100)
        message = None
    except RunError as error:
        message = str(error)
    last = (await driver.run(program, timeout=5000))["outputs"]["a_t"]
    return message, last


def test_watchdog_names_stalled_switch_amaranth(sim_dir, seed):
    """A program routed to an edge without an AGCU (compiled for an AGCU east of row 0,
    run on the default system, whose AGCU 1 is east of row 1): the transposed beats
    back up from that edge to PMU (0,0); the watchdog stops the array and names the
    first switch input holding an undeliverable item (the PMU's output into its
    switch), with AGCU 1 still waiting."""
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                   agcu_positions=[["west", 0], ["east", 0]], name="lost")
    program.save(sim_dir / "program")
    with pytest.raises(RunError) as failure:
        run(sim_dir / "program", seed=seed, timeout=4000, memory=FAST_MEMORY,
            watchdog_cycles=300)
    message = str(failure.value)
    assert re.fullmatch(r"program 'lost': hardware watchdog: no transfer for 300 cycles "
                        r"\(cycle \d+\); first stalled: switch\(0,0\) vector input local "
                        r"holds an item; busy: AGCU 1; done: \[0\]; aborted: AGCU 1 drained, "
                        r"array flushed in \d+ cycles", message), message


def test_watchdog_location_codes():
    assert watchdog_location(WATCHDOG_NONE, 2, 2) is None
    assert watchdog_location(0, 2, 2) == "switch(0,0) vector input north"
    last = 2 * 2 * len(NETWORKS) * len(Port) - 1
    assert watchdog_location(last, 2, 2) == "switch(1,1) control input local"
    assert watchdog_location(last + 1, 2, 2) is None


@pytest.mark.parametrize("faults, message", [
    ({"read": [0], "resp": "SLVERR"},
     r"program load on AGCU 0 ended with READ_SLVERR \(bitstream at 0x100\); memory: SLVERR "
     r"on read of \d+ beats at 0x100 \(port axi.0, cycle \d+\): injected fault \(read burst 0\)"),
    ({"read": [2], "resp": "DECERR"},
     r"AGCU 0 ended EXECUTE with READ_DECERR \(code 6\); memory: DECERR on read of 16 beats "
     r"at 0x10000 \(port axi.0, cycle \d+\): injected fault \(read burst 2\); aborted: "
     r"AGCU 1 drained, array flushed in \d+ cycles"),
    ({"write": [0]},
     r"AGCU 1 ended EXECUTE with WRITE_SLVERR \(code 7\); memory: SLVERR on write of 1 beats "
     r"at 0x20000 \(port axi.1, cycle \d+\): injected fault \(write burst 0\)"),
    ({"write": [5], "resp": "DECERR"},
     r"AGCU 1 ended EXECUTE with WRITE_DECERR \(code 8\); memory: DECERR on write of 1 beats "
     r"at 0x\w+ \(port axi.1, cycle \d+\): injected fault \(write burst 5\)"),
])
def test_axi_fault_injection_amaranth(faults, message, sim_dir, seed):
    """Error responses injected by the memory system on chosen bursts (the bitstream's
    first read, the kernel's load, the transposing store's single-beat bursts): the
    AGCU finishes its command and reports the code; the one-line error names the AGCU,
    the code and the faulted burst."""
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed)
    program.save(sim_dir / "program")
    with pytest.raises(RunError) as failure:
        run(sim_dir / "program", seed=seed, timeout=5000, memory=FAST_MEMORY, faults=faults)
    text = str(failure.value)
    assert re.fullmatch(rf"program 'transpose': {message}", text), text


def test_random_axi_faults_amaranth(sim_dir, seed):
    """Random faults (seeded) on a third of all bursts, under random stalls: the launch
    ends with the first faulted AGCU's error, never a hang or a watchdog."""
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=16, seed=seed)
    program.save(sim_dir / "program")
    with pytest.raises(RunError) as failure:
        run(sim_dir / "program", seed=seed, timeout=5000, memory=FAST_MEMORY, stall="random",
            faults={"read": 0.34, "write": 0.34, "resp": "DECERR", "seed": seed})
    text = str(failure.value)
    assert re.fullmatch(r"program 'transpose': (program load on AGCU 0 ended with READ_DECERR "
                        r"\(bitstream at 0x100\)|AGCU [01] ended EXECUTE with (READ|WRITE)_DECERR "
                        r"\(code [68]\)); memory: DECERR on (read|write) of \d+ beats at 0x\w+ "
                        r"\(port axi.[01], cycle \d+\): injected fault \((read|write) burst \d+\)"
                        r"(; aborted: AGCUs? [\d, ]+ drained, array flushed in \d+ cycles)?",
                        text), text


def test_fault_options_are_checked():
    for faults, error in (({"reads": 0.1}, "Unknown fault option 'reads'; expected read, write, "
                                           "resp, seed"),
                          ({"read": 2.0}, "Fault read must be a probability in [0, 1] or a "
                                          "list of burst indices, not 2.0"),
                          ({"resp": "OKAY"}, "Fault response must be 'SLVERR' or 'DECERR', "
                                             "not 'OKAY'")):
        with pytest.raises(ValueError) as failure:
            FaultInjector(faults)
        assert str(failure.value) == error


@pytest.mark.parametrize("recovery", ["abort", "reset"])
def test_recovery_between_launches_amaranth(recovery, sim_dir, seed):
    """A launch stopped by the watchdog leaves AGCU 1 busy and an item in the mesh; the
    host driver aborts (AGCU 1 ends with ``ABORTED``, the array is flushed: nothing
    left busy, holding or loaded) and says so; the next program then runs bit-exact
    with no reset, or after ``HostDriver.reset`` (the system's reset, memory ports
    emptied, memory kept) as before the abort existed."""
    stuck, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                 agcu_positions=[["west", 0], ["east", 0]], name="stuck")
    good, expected = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed + 1,
                                       name="good")
    dirs = [str(stuck.save(sim_dir / "stuck")), str(good.save(sim_dir / "good"))]
    stats = run_amaranth(small_system(), _stuck_then_good, seed=seed, watchdog=10**9,
                         program_dirs=dirs, recovery=recovery)
    first, after, outputs = stats.result
    assert re.fullmatch(r"program 'stuck': hardware watchdog: no transfer for 400 cycles "
                        r"\(cycle \d+\); first stalled: switch\(0,0\) vector input local "
                        r"holds an item; busy: AGCU 1; done: \[0\]; aborted: AGCU 1 "
                        r"drained, array flushed in \d+ cycles", first), first
    assert after == {"agcu_busy.1": 0, "agcu_error.1": AGCUError.ABORTED, "aborting": 0,
                     "host.holding": 0, "host.units_busy": 0, "host.watchdog": 0,
                     "host.config_state": LoaderState.EMPTY}
    assert np.array_equal(np.asarray(outputs, np.uint32), expected)


async def _stuck_then_good(bench, program_dirs, recovery):
    from rdu.program import Program
    from rdu.sim.host import HostDriver
    programs = [Program.load(directory) for directory in program_dirs]
    driver = HostDriver(bench, programs[0].machine, memory=FAST_MEMORY)
    try:
        await driver.run(programs[0], timeout=800)
        first = None
    except RunError as error:
        first = str(error)
    after = {name: await bench.read(name) for name in (
        "agcu_busy.1", "agcu_error.1", "aborting", "host.holding", "host.units_busy",
        "host.watchdog", "host.config_state")}
    if recovery == "reset":
        await driver.reset()
    result = await driver.run(programs[1], timeout=5000)
    return first, after, result["outputs"]["a_t"]


def test_windows_confine_a_launch_amaranth(sim_dir, seed):
    """A program confined to the memory windows of its manifest runs bit-exact; the
    same program with its output left out of the windows ends with ``WINDOW`` naming
    the AGCU and the output's address, the output region keeps what was there, and the
    driver's abort lets the next (confined) launch run bit-exact."""
    program, expected = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                          name="confined")
    stats = run_amaranth(small_system(), _confined_runs, seed=seed, watchdog=10**9,
                         program_dir=str(program.save(sim_dir / "program")))
    first, message, kept, last = stats.result
    assert np.array_equal(np.asarray(first, np.uint32), expected)
    address = program.outputs["a_t"][0]
    assert re.fullmatch(rf"program 'confined': AGCU 1 ended EXECUTE with WINDOW \(code 11\) "
                        rf"at {address:#x} \(outside its windows\); aborted: AGCUs? [\d, ]+ "
                        rf"drained, array flushed in \d+ cycles", message), message
    assert kept
    assert np.array_equal(np.asarray(last, np.uint32), expected)


async def _confined_runs(bench, program_dir):
    from rdu.program import Program
    from rdu.sim.host import HostDriver
    program = Program.load(program_dir)
    driver = HostDriver(bench, program.machine, memory=FAST_MEMORY, windows=True)
    first = (await driver.run(program, timeout=5000))["outputs"]["a_t"]
    address, words = program.outputs["a_t"]
    driver.write(address, np.full(words, 0x5A5A_A5A5, np.uint32))
    windows = [window for window in program.dma_windows(4) if not window[3]]
    try:
        await driver.run(program, timeout=5000, windows=windows)
        message = None
    except RunError as error:
        message = str(error)
    kept = bool(np.all(driver.read(address, words) == 0x5A5A_A5A5))
    last = (await driver.run(program, timeout=5000))["outputs"]["a_t"]
    return first, message, kept, last


@pytest.mark.verilator
def test_transpose_program_verilator(sim_dir, seed):
    """The registered minimal system (``system_2x2``: 2x2 PMUs, 4 lanes, 16 KiB, two
    AGCUs) under cocotb + Verilator: a 64x64 transpose (1024 beats, a full PMU) with the
    default memory latencies, then a corrupted bitstream that the runtime reports."""
    from rdu.apps.designs import get_design
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build
    design = get_design("system_2x2")
    built = build(RDUSystem, **design.params)
    program, expected = transpose_program(**SMALL, matrix_rows=64, matrix_cols=64, seed=seed)
    program.save(sim_dir / "program")
    names = design.instantiate().perf_counter_names()
    stats = run_verilator(built, run_program, sim_dir / "transpose", seed=seed,
                          watchdog=5000, program_dir=str(sim_dir / "program"),
                          timeout=50_000, perf_counters=names)
    result = stats.result
    assert np.array_equal(load_outputs(result)["a_t"], expected)
    assert np.array_equal(np.asarray(result["outputs"]["a_t"], dtype=np.uint32), expected)
    assert result["perf"]["pmu(0,0).beats_read"] == 1024
    assert result["memory_errors"] == []
    print(f"transpose 64x64 (Verilator): load {result['load_cycles']} cycles, run "
          f"{result['cycles']} cycles, AGCU {result['agcu_cycles']}, "
          f"{stats.cycles_per_second:.0f} cycles/s")
    # both tiers count the same cycles for the same program (commands and start are
    # driven by the body on a known edge, not by a stream agent)
    small, _ = transpose_program(**SMALL, matrix_rows=16, matrix_cols=16, seed=seed)
    small.save(sim_dir / "small")
    figures = ("cycles", "load_cycles", "agcu_cycles", "array_cycles")
    verilator = run_verilator(built, run_program, sim_dir / "small_run", seed=seed,
                              program_dir=str(sim_dir / "small"), timeout=5000).result
    amaranth = run_amaranth(design.instantiate(), run_program, seed=seed,
                            program_dir=str(sim_dir / "small"), timeout=5000).result
    assert {f: verilator[f] for f in figures} == {f: amaranth[f] for f in figures}
    bad, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed)
    bad.bitstream[-1] ^= 1
    bad.save(sim_dir / "bad")
    with pytest.raises(Exception, match="bitstream rejected by the configuration loader: CRC"):
        run_verilator(built, run_program, sim_dir / "bad_crc", seed=seed,
                      program_dir=str(sim_dir / "bad"), timeout=5000)


@pytest.mark.parametrize("m, n, k, fp_latency", [(12, 20, 8, "default"),
                                                 (40, 4, 24, "default")])
def test_compiled_gemm_amaranth(m, n, k, fp_latency, sim_dir, seed):
    """The GEMM compiler's program (rdu.frontend.gemm: placement, routes, PCU/PMU/AGCU
    records, bitstream) on a 2x2 system with PCUs, at the AGCU positions its mapper
    assumed (rdu.runtime.system_params): C checked against numpy within the FP32 budget,
    and its words against the functional model's. With ``fp_latency`` the PCUs' systolic
    arrays are on the pipelined PEs (tiles of ``systolic_group`` column tiles, docs/pcu.md)
    and the words are also the bit-exact reference's; a product of one column tile (N =
    4) groups row tiles instead (``Mode.SYSTOLIC_ROWS``, A straight from its loads).
    (Without it, the same RTL's compiled GEMMs run under Verilator:
    tests/test_compiler.py, tests/test_gemm.py.)"""
    from rdu.frontend.gemm import (
        check_result,
        compile_gemm,
        exact_reference,
        pack_inputs,
        random_inputs,
        unpack_output,
    )
    from rdu.machine import Machine
    from rdu.runtime import run_program as run_on_model
    from rdu.runtime import system_params
    machine = Machine(rows=2, cols=2, lanes=4, pmu_bytes=16384, fp_latency=fp_latency)
    program = compile_gemm(m, n, k, machine=machine)
    a, b = random_inputs(m, n, k, seed)
    pack_inputs(program, a, b)
    params = system_params(program)
    assert params["capacity_bytes"] == 16384
    assert ("compute_unit" in params) == (fp_latency != "off")
    program.save(sim_dir / "program")
    system = RDUSystem(**params)
    stats = run_amaranth(system, run_program, seed=seed, watchdog=20_000,
                         program_dir=str(sim_dir / "program"), timeout=20_000)
    result = stats.result
    words = load_outputs(result)["c"]
    assert np.array_equal(words, run_on_model(program, "model").outputs["c"])
    c = unpack_output(program, words)
    ok, error = check_result(c, a, b)
    assert ok, f"C differs from numpy by {error}"
    if fp_latency != "off":
        grouped = "row_group" if n <= machine.lanes else "tile_group"
        assert program.meta[grouped] > 1
        assert np.array_equal(c.view(np.uint32), exact_reference(a, b, program.meta["k_pad"]))
    assert result["memory_errors"] == [] and result["unit_error"] == 0
    print(f"GEMM {m}x{n}x{k} on 2x2 (lanes 4, fp_latency {fp_latency}): load "
          f"{result['load_cycles']} cycles, run {result['cycles']} cycles")


def test_program_sequence_keeps_memory_amaranth(sim_dir, seed):
    """Two launches on one system and memory (rdu.sim.host.run_programs): program 1
    transposes A into HBM; program 2 has no image of its input, it transposes what
    program 1 stored. The second launch's output is A again, measured from HBM; each
    launch reports its own configuration and execution cycles."""
    from rdu.sim.host import run_programs
    first, expected_t = transpose_program(**SMALL, matrix_rows=8, matrix_cols=16, seed=seed,
                                          name="first")
    second, _ = transpose_program(**SMALL, matrix_rows=16, matrix_cols=8, seed=seed + 1,
                                  input_address=first.outputs["a_t"][0],
                                  output_address=first.outputs["a_t"][0] + 0x1_0000,
                                  name="second")
    second.inputs = {"a": (first.outputs["a_t"][0], None)}     # produced by program 1
    original = first.inputs["a"][1]
    dirs = [str(first.save(sim_dir / "p1")), str(second.save(sim_dir / "p2"))]
    stats = run_amaranth(small_system(), run_programs, seed=seed, watchdog=5000,
                         program_dirs=dirs, timeout=20_000, memory=FAST_MEMORY)
    launches = stats.result["launches"]
    assert [launch["program"] for launch in launches] == ["first", "second"]
    with np.load(launches[0]["outputs_file"]) as out:
        assert np.array_equal(out["a_t"], expected_t)
    with np.load(launches[1]["outputs_file"]) as out:
        assert np.array_equal(out["a_t"], np.asarray(original, np.uint32))
    for launch in launches:
        assert launch["load_cycles"] > 0 and launch["cycles"] > 0
    assert stats.result["memory_errors"] == []

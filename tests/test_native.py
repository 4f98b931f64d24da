"""The native runner (rdu.sim.native): the Verilated system with the memory models in
C++. On the same build and program it must take the cycles cocotb takes and produce
the same words, counters, memory traffic and error messages; what it does not support
is refused with a message."""

import numpy as np
import pytest
from rdu.sim.host import load_outputs, run_program
from rdu.sim.native import NativeBench, NativeError, build_native, run_native
from rdu.sim.runner import BodyError, run_verilator

from hdl.system import RDUSystem
from tb.suites.system import transpose_program

pytestmark = pytest.mark.verilator

SMALL = {"rows": 2, "cols": 2, "lanes": 4}
#: everything a launch reports but the paths of its files
FIGURES = ("cycles", "load_cycles", "agcu_cycles", "array_cycles", "execute_beats", "perf",
           "memory", "memory_errors", "unit_error")


@pytest.fixture(scope="module")
def system_2x2():
    from rdu.apps.designs import get_design
    from rdu.sim.verilator import build
    design = get_design("system_2x2")
    return build(RDUSystem, **design.params), design.instantiate().perf_counter_names()


def both(built, sim_dir, name, **params):
    """``run_program`` on both tiers: ``(cocotb result or error, native result or error)``."""
    out = []
    for runner in (run_verilator, run_native):
        try:
            out.append(runner(built, run_program, sim_dir / f"{name}_{runner.__name__}",
                              **params).result)
        except BodyError as error:
            out.append(error)
    return out


def test_native_matches_cocotb(system_2x2, sim_dir, seed):
    built, names = system_2x2
    program, expected = transpose_program(**SMALL, matrix_rows=32, matrix_cols=32, seed=seed)
    program.save(sim_dir / "program")
    cocotb, native = both(built, sim_dir, "transpose", seed=seed,
                          program_dir=str(sim_dir / "program"), timeout=20_000,
                          perf_counters=names)
    assert np.array_equal(load_outputs(native)["a_t"], expected)
    assert {f: native[f] for f in FIGURES} == {f: cocotb[f] for f in FIGURES}
    assert native["outputs"] == cocotb["outputs"]
    assert native["perf"]["pmu(0,0).beats_read"] == 256
    assert native["memory"]["hbm"]["read_beats"] > 0


@pytest.mark.parametrize("case", ["decerr", "stuck", "crc"])
def test_native_errors_match_cocotb(system_2x2, sim_dir, seed, case):
    """An unmapped address (an AXI DECERR named with its cycle), a store that never ends
    (the array's watchdog naming the busy AGCU), a corrupted bitstream (the loader's
    verdict): the same one-line message, cycle for cycle, on both tiers."""
    built, names = system_2x2
    options = {"decerr": dict(input_address=0x2000_0000, name="unmapped"),
               "stuck": dict(store_beats=32, name="stuck"),
               "crc": {}}[case]
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed,
                                   **options)
    if case == "decerr":
        program.inputs = {"a": (0x1_0000, program.inputs["a"][1])}
    if case == "crc":
        program.bitstream[-1] ^= 1
    program.save(sim_dir / "program")
    cocotb, native = both(built, sim_dir, case, seed=seed, program_dir=str(sim_dir / "program"),
                          timeout=20_000, watchdog_cycles=750, perf_counters=names)
    assert isinstance(cocotb, BodyError) and isinstance(native, BodyError)
    assert str(native) == str(cocotb)
    assert (native.error_type, native.cycle) == (cocotb.error_type, cocotb.cycle)
    assert {"decerr": "DECERR on read", "stuck": "hardware watchdog",
            "crc": "CRC"}[case] in str(native)


def test_native_refuses_what_it_does_not_model(system_2x2, sim_dir, seed):
    built, names = system_2x2
    program, _ = transpose_program(**SMALL, matrix_rows=8, matrix_cols=8, seed=seed)
    program.save(sim_dir / "program")
    for option, message in ((dict(faults={"read": [0]}), "does not inject AXI faults"),
                            (dict(stall="random"), "stall 'none'")):
        with pytest.raises(NativeError, match=message):
            run_native(built, run_program, sim_dir, seed=seed, timeout=3000,
                       program_dir=str(sim_dir / "program"), **option)
    bench = NativeBench(build_native(built), seed=seed)
    try:
        with pytest.raises(NativeError, match=r"no Python stream agents \(source 'cmd.0'\)"):
            bench.source("cmd.0")
        with pytest.raises(AttributeError, match=r"design has no port 'nope'"):
            bench.set("nope", 1)
    finally:
        bench.close()


def test_runtime_native_gemm(seed):
    """``rdu.runtime`` on ``native``: a GEMM bit-exact against the functional model,
    in the cycles of the ``verilator`` tier."""
    from rdu.frontend import gemm
    from rdu.mapper import ArrayGeometry
    from rdu.runtime import run_program as launch
    geometry = ArrayGeometry(rows=2, cols=2, lanes=4, pmu_words=4096)
    program = gemm.compile_gemm(32, 32, 32, geometry)
    a, b = gemm.random_inputs(32, 32, 32, seed)
    gemm.pack_inputs(program, a, b)
    native = launch(program, "native", seed=seed)
    model = launch(program, "model", seed=seed)
    verilator = launch(program, "verilator", seed=seed)
    assert native.sim == "native"
    for name, words in model.outputs.items():
        assert np.array_equal(native.outputs[name], words)
    assert (native.cycles, native.load_cycles) == (verilator.cycles, verilator.load_cycles)
    assert native.memory_bytes == verilator.memory_bytes


def _vcd_changes(text, name):
    """Value changes ``[(time, value)]`` of the first VCD variable called ``name``."""
    code = None
    for line in text.splitlines():
        parts = line.split()
        if code is None and parts[:1] == ["$var"] and parts[4] == name:
            code = parts[3]
    assert code is not None, f"no variable {name} in the waves"
    changes, time = [], 0
    for line in text.split("$enddefinitions", 1)[1].splitlines():
        line = line.strip()
        if line.startswith("#"):
            time = int(line[1:])
        elif line.startswith("b") and line.split()[-1] == code:
            changes.append((time, int(line.split()[0][1:], 2)))
        elif line[1:] == code and line[:1] in "01":
            changes.append((time, int(line[0])))
    return changes


def test_native_waves(sim_dir, seed, monkeypatch):
    """From a build with waves the native runner writes them, as cocotb does
    (``dump.<format>`` in the run's directory): VCD here, read back: one rising clock
    edge per cycle run, and the FIFO's output the values the body read, in order."""
    from rdu.sim import verilator

    from hdl.stream_fifo import StreamFIFO
    monkeypatch.setattr(verilator, "_fst_ok", False)      # VCD: text to read back
    built = verilator.build(StreamFIFO, shape=32, depth=4, waves=True)
    words = [0x1234_5678 + 0x1111 * k for k in range(3)]

    async def body(bench):
        bench.set("o.ready", 0)
        for word in words:
            bench.set("i.valid", 1)
            bench.set("i.payload", word)
            await bench.cycles(1)
        bench.set("i.valid", 0)
        bench.set("o.ready", 1)
        seen = []
        for _ in range(5):
            if await bench.read("o.valid"):
                seen.append(await bench.read("o.payload"))
            await bench.cycles(1)
        return seen

    stats = run_native(built, body, sim_dir / "waves", seed=seed)
    assert stats.result == words
    text = (sim_dir / "waves" / "dump.vcd").read_text()
    rising = [time for time, value in _vcd_changes(text, "clk") if value == 1]
    assert len(rising) == stats.cycles + 2            # and the two edges of reset
    payloads = [value for _, value in _vcd_changes(text, "o__payload")]
    assert [value for value in payloads if value in words] == words
    with pytest.raises(NativeError, match="linked from a build without waves"):
        NativeBench(build_native(verilator.build(StreamFIFO, shape=32, depth=4)),
                    waves=sim_dir / "none.vcd")

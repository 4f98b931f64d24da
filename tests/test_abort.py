"""Abort and recovery without reset (``docs/system.md``, **Abort**) on the functional
model: the same trials as ``benchmarks/abort.py`` (a stalled or damaged launch, the
abort, then an undamaged program that must run bit-exact on the same machine). The
gateware's abort is tested in ``tests/test_agcu.py::test_abort_amaranth`` (the AGCU's
drain against the memory image), ``tests/test_system.py::
test_recovery_between_launches_amaranth`` (the system's drain and flush, the next
program bit-exact) and ``tests/test_ip.py::test_sequencer_against_stand_in_agcus``."""

import numpy as np
import pytest
from rdu.models.machine import FunctionalMachine
from rdu.models.shared import ModelDeadlock

from hdl.agcu import AGCUError, AGCUOp
from tb.suites.abort import model_trials, recovery_trials
from tb.suites.fuzz import TARGETS


def test_model_recovers_after_stalls_and_damaged_bitstreams(seed):
    """After each of 24 bad cases (a launch without one of its AGCUs, a damaged
    bitstream), :meth:`FunctionalMachine.abort` where the case stopped, then the next
    undamaged program's outputs equal a fresh machine's, bit for bit; the stalls all end
    in a deadlock and are aborted."""
    trials = recovery_trials(TARGETS[0], 24, seed % 1000)
    results = model_trials(trials)
    assert all(result["equal"] for result in results), results
    stalls = [result for result in results if result["kind"] == "stall"]
    assert len(stalls) == 12 and all(result["bad"] == "ModelDeadlock" for result in stalls)
    assert any(result["aborted"] for result in stalls)


def test_model_abort_reports_the_busy_agcus_and_flushes(seed):
    """A GEMM launched without AGCU 1: AGCU 0 waits for what AGCU 1 would have loaded
    and is the one aborted (``ABORTED``, op ``EXECUTE``); the array's configuration is
    flushed (loader ``EMPTY``, every unit's words zero) while the PMU SRAM is kept; a
    second abort has nothing left to abort; the full program then runs as on a fresh
    machine."""
    program = TARGETS[0].bases(seed % 1000)[0]
    expected, _ = FunctionalMachine(program.machine).run_program(program)
    machine = FunctionalMachine(program.machine, max_items=200_000)
    machine.run_program(program)
    stalled = type(program)(**{**program.__dict__, "execute": [0]})
    with pytest.raises(ModelDeadlock):
        machine.run_program(stalled)
    assert machine.array.busy_agcus == [0]
    sram = {key: words.copy() for key, words in machine.array.sram.items()}
    results = machine.abort()
    assert [(r.agcu, r.op, r.error) for r in results] == [(0, AGCUOp.EXECUTE,
                                                           AGCUError.ABORTED)]
    assert machine.config_state == "EMPTY" and not machine.array.loaded
    assert all(not any(words) for words in machine.array.words.values())
    assert all(np.array_equal(machine.array.sram[key], sram[key]) for key in sram)
    assert machine.abort() == []
    outputs, _ = machine.run_program(program)
    assert all(np.array_equal(outputs[name], expected[name]) for name in expected)


def test_model_windows_confine_a_launch(seed):
    """The functional model's memory windows (``FunctionalMachine.dma_windows``, the
    rule of ``hdl.agcu_engines.window_allows``): a GEMM confined to its manifest's
    windows runs as unconfined; without its output's window the store ends with
    ``WINDOW`` at the output's first beat and the output region keeps what was there;
    a ``COPY`` into a read-only window writes nothing past the window and ends with
    ``WINDOW``; a ``PROGRAM_LOAD`` running past its window feeds the loader only the
    beats before it."""
    from rdu.models.shared import CommandError

    from hdl.agcu_engines import DMA_WINDOWS
    program = TARGETS[0].bases(seed % 1000)[0]
    expected, _ = FunctionalMachine(program.machine).run_program(program)
    machine = FunctionalMachine(program.machine)
    outputs, _ = machine.run_program(program, windows=True)
    assert all(np.array_equal(outputs[name], expected[name]) for name in expected)
    windows = program.dma_windows(DMA_WINDOWS)
    address, words = program.outputs["c"]
    machine.write(address, np.full(words, 0x5A5A_A5A5, np.uint32))
    unwritable = [(base, size, read, 0) for base, size, read, _ in windows]
    with pytest.raises(CommandError) as failure:
        machine.run_program(program, windows=unwritable)
    assert failure.value.error == AGCUError.WINDOW
    assert f"at 0x{address & ~(machine.beat - 1):08x} is outside its windows" in \
        str(failure.value)
    assert np.all(machine.read(address, words) == 0x5A5A_A5A5)
    machine.abort()
    beat = machine.beat
    machine.dma_windows = [(0x1000, 4 * beat, 1, 0), (0x2000, 2 * beat, 1, 1)]
    machine.write(0x2000, np.zeros(4 * beat // 4, np.uint32))
    machine.write(0x1000, np.arange(4 * beat // 4, dtype=np.uint32) + 1)
    copy = machine.command(0, AGCUOp.COPY, src=0x1000, dst=0x2000, length=4 * beat)
    assert copy.error == AGCUError.WINDOW and f"0x{0x2000 + 2 * beat:08x}" in copy.detail
    assert np.array_equal(machine.read(0x2000, 2 * beat // 4),
                          np.arange(2 * beat // 4, dtype=np.uint32) + 1)
    assert not np.any(machine.read(0x2000 + 2 * beat, 2 * beat // 4))
    load = machine.command(0, AGCUOp.PROGRAM_LOAD, src=0x1000, length=8 * beat)
    assert load.error == AGCUError.WINDOW and len(load.words) == beat
    machine.dma_windows = None
    outputs, _ = machine.run_program(program)
    assert all(np.array_equal(outputs[name], expected[name]) for name in expected)


def test_runtime_confines_launches_by_default(seed):
    """``rdu.runtime.run_programs`` confines each launch to its manifest's windows
    unless ``windows=False``: a GEMM whose manifest declares only half of C (its store
    writes all of it) ends with ``WINDOW`` at the first undeclared beat; unconfined it
    runs and its declared half equals the full program's."""
    from rdu.runtime import RunFailure, run_programs
    program = TARGETS[0].bases(seed % 1000)[0]
    address, words = program.outputs["c"]
    beat = program.machine.beat_bytes
    half = words // 2 // (beat // 4) * (beat // 4)
    short = type(program)(**{**program.__dict__, "outputs": {"c": (address, half)}})
    with pytest.raises(RunFailure, match=rf"WINDOW .*0x{address + 4 * half:08x} is outside "
                                         rf"its windows"):
        run_programs([short], "model")
    full, = run_programs([program], "model")
    unconfined, = run_programs([short], "model", windows=False)
    assert np.array_equal(unconfined.outputs["c"], full.outputs["c"][:half])

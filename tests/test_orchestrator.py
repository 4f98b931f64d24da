"""The hardware orchestrator (``docs/orchestrator.md``): schedules of kernels run from
memory with the host idle, on the functional model, in the Amaranth simulator and under
Verilator; the host's launch latency of host-issued schedules."""

import copy

import numpy as np
import pytest
from rdu.frontend import gemm
from rdu.mapper import ArrayGeometry
from rdu.relocate import relocate_image, relocate_output
from rdu.runtime import (
    Copy,
    Launch,
    RunFailure,
    Write,
    orchestration_files,
    run_schedule,
    system_params,
)
from rdu.schedule import Command, ScheduleFormatError, decode, encode, error_message
from rdu.sim.host import RunError
from rdu.sim.orchestrated import run_orchestrated
from rdu.sim.runner import run_amaranth

from hdl.orchestrator import (
    COMMAND_BYTES,
    DEFAULT_COMMANDS,
    FETCH_INDEX,
    Orchestrator,
    ScheduleError,
    ScheduleOp,
)
from hdl.sequencer import ErrorSource
from hdl.system import RDUSystem

SMALL = ArrayGeometry(2, 2, 4, pmu_words=4096)
SHAPES = ((8, 8, 8), (12, 8, 16), (16, 12, 8))
DDR = 0x4000_0000


def gemms(seed, shapes=SHAPES):
    """Compiled GEMMs with their images and outputs moved apart (an orchestrated
    schedule writes every image first and reads every output at the end):
    ``[(program, a, b)]``."""
    result = []
    for index, shape in enumerate(shapes):
        program = gemm.compile_gemm(*shape, SMALL)
        a, b = gemm.random_inputs(*shape, seed + index)
        base = 0x10000 * (index + 1)
        program = relocate_image(program, "a", base)
        program = relocate_image(program, "b", base + 0x4000)
        program = relocate_output(program, "c", base + 0x8000)
        gemm.pack_inputs(program, a, b)
        result.append((program, a, b))
    return result


def three_kernels(seed):
    """Three GEMMs and a COPY of the first one's C to DDR between the first two."""
    kernels = gemms(seed)
    first = kernels[0][0]
    address, words = first.outputs["c"]
    steps = [Launch(first), Copy(address, DDR, 4 * words), Launch(kernels[1][0]),
             Launch(kernels[2][0])]
    return kernels, steps


def test_orchestrator_argument_checks():
    with pytest.raises(TypeError, match=r"^AGCU count must be an integer, not 2.0$"):
        Orchestrator(2.0)
    with pytest.raises(ValueError, match=r"^AGCU count must be between 1 and 24, not 25$"):
        Orchestrator(25)
    with pytest.raises(ValueError,
                       match=r"^Schedule memory depth must be between 1 and 4096, not 0$"):
        Orchestrator(2, commands=0)
    with pytest.raises(TypeError, match=r"^Schedule memory depth must be an integer, not '8'$"):
        RDUSystem(2, 2, 4, compute_unit=None, schedule_commands="8")
    assert RDUSystem(2, 2, 4, compute_unit=None, schedule_commands=0).orchestrator is None


def test_encoding_round_trip_and_errors():
    commands = [Command(ScheduleOp.PROGRAM_LOAD, 0, 0x1000, 0, 700),
                Command(ScheduleOp.EXECUTE, 0b11), Command(ScheduleOp.COPY, 1, 0x20, DDR, 64),
                Command(ScheduleOp.WAIT, 0b10), Command(ScheduleOp.END)]
    words = encode(commands)
    assert words.dtype == np.uint32 and words.size == 4 * len(commands)
    assert words[4] == ScheduleOp.EXECUTE | 0b11 << 8      # word 0: op, argument << 8
    assert list(words[8:12]) == [ScheduleOp.COPY | 1 << 8, 0x20, DDR, 64]
    assert decode(words) == commands
    with pytest.raises(ScheduleFormatError, match="4 words per command, not 5 words"):
        decode(np.zeros(5, np.uint32))
    with pytest.raises(ScheduleFormatError, match="argument 16777216 does not fit its 24-bit"):
        encode([Command(ScheduleOp.EXECUTE, 1 << 24)])
    assert error_message(commands, 1, ErrorSource.AGCU, 6, 1) == (
        "schedule command 1 (EXECUTE AGCUs 0, 1): AGCU 1 ended EXECUTE with READ_DECERR "
        "(code 6)")
    assert error_message(commands, FETCH_INDEX, ErrorSource.REQUEST, ScheduleError.TOO_LONG,
                         capacity=64, length=65 * COMMAND_BYTES) == (
        "schedule fetch: 65 commands do not fit the schedule memory (64 commands)")


def test_orchestrated_equals_host_on_the_model(seed):
    kernels, steps = three_kernels(seed)
    host = run_schedule(steps, "model")
    orchestrated = run_schedule(steps, "model", execution="orchestrated")
    assert [r.kind for r in orchestrated] == ["launch", "copy", "launch", "launch"]
    for mine, theirs in zip(orchestrated, host, strict=True):
        if mine.kind == "launch":
            assert np.array_equal(mine.launch.outputs["c"], theirs.launch.outputs["c"])


def test_orchestrated_schedule_refusals():
    kernels = gemms(1)
    program = kernels[0][0]
    with pytest.raises(RunFailure, match=r"step 1 \(a host write at 0x0\) comes after the "
                                         r"first launch"):
        run_schedule([Launch(program), Write(0, [1, 2])], "model", execution="orchestrated")
    clash = gemm.compile_gemm(8, 8, 8, SMALL)            # at the compiler's addresses
    gemm.pack_inputs(clash, *gemm.random_inputs(8, 8, 8, 2))
    with pytest.raises(RunFailure, match="outputs are read after the end"):
        run_schedule([Launch(clash), Launch(clash)], "model", execution="orchestrated")
    with pytest.raises(ValueError, match="orchestrated schedule only"):
        run_schedule([Launch(program), Command(ScheduleOp.END)], "model")
    with pytest.raises(ValueError, match="unknown execution 'gpu'"):
        run_schedule([Launch(program)], "model", execution="gpu")
    with pytest.raises(ValueError, match="launch latency must be a non-negative integer"):
        run_schedule([Launch(program)], "model", launch_latency=-1)


def bad_schedules(kernels):
    """``{case: (steps, the start of its message, which names the failing command)}``: a
    bad opcode, a program whose bitstream fails its CRC, a COPY of a bad length, a
    schedule too long for the schedule memory."""
    first, second = kernels[0][0], kernels[1][0]
    corrupt = copy.deepcopy(second)
    corrupt.bitstream = list(corrupt.bitstream)
    corrupt.bitstream[-1] ^= 1
    return {
        "opcode": ([Launch(first), Command(0x77), Launch(second)],
                   "schedule command 2 (opcode 119): unknown opcode 119"),
        "crc": ([Launch(first), Launch(corrupt)],
                "schedule command 2 (PROGRAM_LOAD of"),
        "length": ([Launch(first), Command(ScheduleOp.COPY, 1, 0x1_0000, DDR, 7),
                    Launch(second)],
                   "schedule command 2 (COPY on AGCU 1: 0x10000 -> 0x40000000, 7 bytes): "
                   "AGCU 1 ended COPY with BAD_LENGTH (code 3)"),
        "too long": ([Launch(first)] + [Command(ScheduleOp.WAIT, 1)] * (DEFAULT_COMMANDS - 2),
                     f"schedule fetch: {DEFAULT_COMMANDS + 1} commands do not fit the "
                     f"schedule memory"),
    }


def _model_message(steps):
    with pytest.raises(RunFailure) as caught:
        run_schedule(steps, "model", execution="orchestrated")
    message = str(caught.value)
    assert message.count(" (functional model") == 1
    return message[:message.index(" (functional model")]


def test_orchestrated_gemms_and_errors_amaranth(sim_dir, seed):
    """The system with its orchestrator in the Amaranth simulator: two GEMMs and a COPY
    run with the host idle, outputs equal to the functional model's; then a schedule
    failing at the fetch ends with the model's message, without a hang (the ones failing
    mid-run: the Verilator test)."""
    kernels = gemms(seed, SHAPES[:2])
    first = kernels[0][0]
    address, words = first.outputs["c"]
    steps = [Launch(first), Copy(address, DDR, 4 * words), Launch(kernels[1][0])]
    plan_file, limit = orchestration_files(steps, sim_dir / "good")
    system = RDUSystem(**system_params(first))
    result = run_amaranth(system, run_orchestrated, seed=seed, watchdog=limit,
                          plan_file=str(plan_file)).result
    model = run_schedule(steps, "model", execution="orchestrated")
    for launch, step in zip(result["launches"], (model[0], model[2]), strict=True):
        assert np.array_equal(np.asarray(launch["outputs"]["c"], np.uint32),
                              step.launch.outputs["c"])
    # 2 + COPY + WAIT + 2 + END commands, each ending later than the one before
    assert len(result["ends"]) == 7 and result["ends"] == sorted(result["ends"])
    assert result["ends"][-1] == result["cycles"] and result["host_commands"] == 0
    assert result["starts"] == 2                     # one per EXECUTE, none per load
    # one of the four bad schedules (each a simulation of its own): the one failing at
    # the fetch; test_orchestrated_schedule_verilator runs the three failing mid-run
    cases = bad_schedules(kernels)
    for case, (bad, start) in ((name, cases[name]) for name in ("too long",)):
        plan_file, limit = orchestration_files(bad, sim_dir / case.replace(" ", "_"))
        with pytest.raises(RunError) as caught:
            run_amaranth(RDUSystem(**system_params(first)), run_orchestrated, seed=seed,
                         watchdog=limit, plan_file=str(plan_file))
        message = str(caught.value)
        assert message.startswith(start), (case, message)
        assert message == _model_message(bad), case
        if case == "crc":
            assert message.endswith("bitstream rejected by the configuration loader: CRC "
                                    "(code 5)")


@pytest.mark.verilator
def test_orchestrated_schedule_verilator(sim_dir, seed):
    """(a) Three GEMMs and a COPY, orchestrated under Verilator with the host idle from
    start to done: outputs bit-exact with host-launched execution, the functional model
    and the exact BF16/FP32 reference, within the FP32 budget of numpy float64; (b) bad
    schedules end with the model's message naming the command; (c) a host launch
    latency of L costs exactly L cycles per launch and copy."""
    kernels, steps = three_kernels(seed)
    rtl = run_schedule(steps, "verilator", seed=seed, execution="orchestrated",
                       work_dir=sim_dir / "orchestrated")
    host = run_schedule(steps, "verilator", seed=seed, work_dir=sim_dir / "host")
    model = run_schedule(steps, "model", execution="orchestrated")
    assert rtl.host_commands == 0
    launches = [index for index, step in enumerate(steps) if isinstance(step, Launch)]
    for index, (program, a, b) in zip(launches, kernels, strict=True):
        c_words = rtl[index].launch.outputs["c"]
        assert np.array_equal(c_words, host[index].launch.outputs["c"])
        assert np.array_equal(c_words, model[index].launch.outputs["c"])
        c = gemm.unpack_output(program, c_words)
        assert np.array_equal(c.view(np.uint32), gemm.exact_reference(a, b,
                                                                      program.meta["k_pad"]))
        ok, error = gemm.check_result(c, a, b)
        assert ok, f"C differs from numpy float64 by {error}"
        assert rtl[index].launch.cycles > 0 and rtl[index].launch.load_cycles > 0
    assert sum(step.cycles for step in rtl) <= rtl.cycles
    # the host's steps alone (its launch latency, loads, runs, copies; not its backdoor
    # writes and counter reads between them) take longer than the whole orchestrated run
    host_steps = sum(step.cycles for step in host)
    assert rtl.cycles < host_steps
    print(f"3 GEMMs + COPY: orchestrated {rtl.cycles} cycles (steps "
          f"{[s.cycles for s in rtl]}); host-launched steps {host_steps} cycles (launch "
          f"latency {host[0].launch_cycles}; steps {[s.cycles for s in host]}), whole host "
          f"schedule {host.cycles} cycles")
    # (b)
    for case, (bad, start) in bad_schedules(kernels).items():
        if case == "too long":
            continue            # checked in the Amaranth simulator
        with pytest.raises(RunFailure) as caught:
            run_schedule(bad, "verilator", seed=seed, execution="orchestrated",
                         work_dir=sim_dir / case)
        message = str(caught.value)
        assert message.startswith(start) and " (RTL, cycle " in message, message
        assert message[:message.index(" (RTL, cycle ")] == _model_message(bad)
    # (c)
    latency = 777
    zero = run_schedule(steps, "verilator", seed=seed, work_dir=sim_dir / "l0",
                        launch_latency=0)
    some = run_schedule(steps, "verilator", seed=seed, work_dir=sim_dir / "lL",
                        launch_latency=latency)
    issued = len(steps)                       # three launches and a copy
    assert some.cycles - zero.cycles == latency * issued
    assert [s.launch_cycles for s in some] == [latency] * issued
    assert host.cycles - zero.cycles == host[0].launch_cycles * issued
    for mine, theirs in zip(some, zero, strict=True):
        assert mine.cycles - theirs.cycles == latency


@pytest.mark.verilator
def test_schedule_through_ip_verilator(sim_dir, seed):
    """The IP top's CONTROL.SCHEDULE_START (cocotbext-axi AXI4-Lite master and AXI4
    memories, random pauses on every channel): the three-GEMM schedule runs with one
    interrupt and the model's outputs; a bad opcode ends with STATUS.ERROR and the
    model's message, the failing command read from SCHEDULE_INDEX."""
    pytest.importorskip("cocotbext.axi")
    from rdu.sim.ip_host import run_ip_schedule
    from rdu.sim.runner import BodyError, run_verilator
    from rdu.sim.verilator import build

    from hdl.ip import RDUIP
    kernels, steps = three_kernels(seed)
    built = build(RDUIP, toplevel="rdu_ip", **system_params(kernels[0][0]))
    plan_file, limit = orchestration_files(steps, sim_dir / "good")
    result = run_verilator(built, run_ip_schedule, sim_dir / "run", seed=seed,
                           plan_file=str(plan_file), pause=True,
                           timeout=limit + 100_000).result
    model = run_schedule(steps, "model", execution="orchestrated")
    launches = [step for step in model if step.kind == "launch"]
    for launch, step in zip(result["launches"], launches, strict=True):
        with np.load(launch["outputs_file"]) as out:
            assert np.array_equal(out["c"], step.launch.outputs["c"])
    assert result["completed"] == 9 and result["irq_edges"] == 1 and result["cycles"] > 0
    bad, start = bad_schedules(kernels)["opcode"]
    plan_file, limit = orchestration_files(bad, sim_dir / "bad")
    with pytest.raises(BodyError) as caught:
        run_verilator(built, run_ip_schedule, sim_dir / "bad_run", seed=seed,
                      plan_file=str(plan_file), timeout=limit + 100_000)
    message = str(caught.value).strip().splitlines()[0]
    assert message.startswith(start) and message == _model_message(bad), message

"""The runtime's structure: back ends registered by name, one RunResult constructor,
one watchdog estimate from the program, the host protocol as typed messages."""

import pytest
from rdu.cli import main
from rdu.frontend.kernels import get_kernel
from rdu.machine import Machine
from rdu.runtime import BACKENDS, SIMULATORS, RunResult, run_kernel, run_programs
from rdu.runtime.watchdog import (
    WATCHDOG_FLOOR_CYCLES,
    copy_timeout,
    estimate_cycles,
    launch_timeout,
    work_cycles,
)
from rdu.sim.protocol import (
    CopyDone,
    CopyStep,
    HostSchedule,
    LaunchStep,
    MemoryImage,
    OrchestrationPlan,
    PlannedLaunch,
    WriteDone,
    WriteStep,
    done_from_json,
    step_from_json,
)


def test_backends_registered_by_name():
    assert SIMULATORS == ("model", "verilator", "native", "ip")
    assert [backend.name for backend in BACKENDS.values()] == list(SIMULATORS)
    assert [name for name, backend in BACKENDS.items() if backend.timed] == \
        ["verilator", "native", "ip"]
    assert [name for name, backend in BACKENDS.items() if not backend.orchestrates] == ["ip"]


def test_unknown_backend_is_one_error(capsys):
    program = get_kernel("gemm").compile(Machine(), m=16, n=16, k=16)
    with pytest.raises(ValueError, match=r"unknown simulator 'fpga'; expected one of "
                                         r"model, verilator, native, ip"):
        run_programs([program], "fpga")
    with pytest.raises(SystemExit):
        main(["run", "gemm", "--m", "16", "--n", "16", "--k", "16", "--sim", "fpga"])
    assert "invalid choice: 'fpga'" in capsys.readouterr().err


def test_run_result_fields_are_named():
    with pytest.raises(TypeError):
        RunResult({"c": []}, 10)                    # the positional form is gone
    result = RunResult(outputs={}, cycles=10, sim="native")
    assert (result.cycles, result.sim, result.load_cycles) == (10, "native", None)


@pytest.mark.parametrize("shape", [(16, 16, 16), (64, 64, 64), (96, 200, 128),
                                   (512, 512, 512)])
def test_watchdog_from_the_program(shape):
    """No kernel name: the estimate reads the program's bitstream (its busiest unit's
    beats), MACs and the peak; never below what the runtime allowed a GEMM before (its
    streamed rows per pass and tile)."""
    m, n, k = shape
    program = get_kernel("gemm").compile(Machine(), m=m, n=n, k=k)
    meta = program.meta
    former = meta["passes"] * meta["col_tiles"] * meta["k_pad"] + 4 * meta["m_pad"] + 2000
    assert estimate_cycles(program) >= max(former, WATCHDOG_FLOOR_CYCLES)
    assert estimate_cycles(program) == WATCHDOG_FLOOR_CYCLES + 4 * work_cycles(program)
    assert work_cycles(program) >= -(-m * n * k // meta["peak_macs_per_cycle"])
    # the same MACs on fewer systolic PCUs (the epilogue takes two): more beats a PCU
    other = get_kernel("linear_relu").compile(Machine(), m=m, n=n, k=k)
    assert work_cycles(other) >= work_cycles(program)
    assert launch_timeout(program) == 4 * estimate_cycles(program) + 20_000
    assert launch_timeout(program, 123) == 123
    assert copy_timeout(4096) == 4 * 4096 + 50_000


def test_watchdog_of_an_iterative_special_function():
    softmax = get_kernel("softmax")
    standard = softmax.compile(Machine(lanes=4), m=16, n=64)
    iterative = softmax.compile(Machine(lanes=4, pcu="fpga"), m=16, n=64)
    assert estimate_cycles(standard) == WATCHDOG_FLOOR_CYCLES + 4 * work_cycles(standard)
    assert work_cycles(iterative) == work_cycles(standard) == 16 * 64 // 4
    assert estimate_cycles(iterative) > 10 * estimate_cycles(standard)


def test_host_protocol_round_trip(tmp_path):
    schedule = HostSchedule([WriteStep(0x100, "w0"), CopyStep([[0, 0, 64, 64]], 50_256),
                             LaunchStep("/x/step2", 420_000)], "/x/writes.npz")
    schedule.save(tmp_path / "schedule.json")
    assert HostSchedule.load(tmp_path / "schedule.json") == schedule
    assert [step["kind"] for step in schedule.to_json()["steps"]] == \
        ["write", "copy", "launch"]
    assert step_from_json({"kind": "copy", "jobs": [], "timeout": 5}) == CopyStep([], 5)
    with pytest.raises(ValueError, match="unknown schedule step kind 'jump'; expected one "
                                         "of write, copy, launch"):
        step_from_json({"kind": "jump"})
    done = CopyDone(12, 3, {"0": 12})
    assert done.to_json() == {"kind": "copy", "cycles": 12, "launch_cycles": 3,
                              "agcu_cycles": {"0": 12}}
    assert done_from_json(done.to_json()) == done
    assert done_from_json({"kind": "write"}) == WriteDone()
    plan = OrchestrationPlan("/x/writes.npz", 0x1000, [MemoryImage(0, "m0")],
                             [PlannedLaunch("/x/step0", {"c": [64, 16]})], 90_000)
    assert "watchdog_cycles" not in plan.to_json()
    plan.save(tmp_path / "plan.json")
    assert OrchestrationPlan.load(tmp_path / "plan.json") == plan


def test_model_backend_runs_a_kernel():
    kernel = get_kernel("gemm")
    program = kernel.compile(Machine(), m=16, n=16, k=16)
    figures, _, result = run_kernel(kernel, program, kernel.random_inputs(program, 1))
    assert figures["ok"] and result.sim == "model" and result.cycles is None
    assert "config_cycles" not in figures          # an untimed back end

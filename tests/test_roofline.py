"""The roofline of every run (rdu.roofline, docs/compiler.md "Roofline"): the machine's
peaks from the design, a program's work from the program, the bound, what binds, the
share a timed run achieves, in ``rdu run --json``, the report, schedules and the sweep.

Every expected value is measured here: the PCU count from the array's checkerboard
(:func:`hdl.array.is_compute_position`), the HBM peak from the memory model the runs
use, the MACs from the model's PCU counters and the operand shapes, the bytes from the
arrays given and returned, the traffic from the functional model's memory counters.
"""

import contextlib
import io
import json
import math

import numpy as np
import pytest
from rdu.apps.sweep import Point, Table, read_table, run_point
from rdu.apps.sweep_plots import plot_table
from rdu.apps.unfused import compile_unfused
from rdu.cli import main
from rdu.compiler.families import family_named, program_work
from rdu.compiler.families.attention import ATTENTION
from rdu.compiler.families.matmul import MATMUL
from rdu.frontend.kernels import get_kernel
from rdu.machine import DEFAULT_MACHINE, MACHINE_OPTIONS, Machine
from rdu.program import Program
from rdu.roofline import COMPUTE, HBM
from rdu.runtime import run_kernel, run_sequence

from hdl import defaults
from hdl.array import is_compute_position
from sim_models.memory import hbm_model

BF16_BYTES = np.dtype(np.uint16).itemsize      # a BF16 value: the top half of an FP32


def _pcus(machine):
    """PCUs of the array, counted on the hardware's checkerboard."""
    return sum(is_compute_position(row, col) for row in range(machine.rows)
               for col in range(machine.cols))


def _run(name, **params):
    kernel = get_kernel(name)
    program = kernel.compile(Machine(**kernel.machine), **params)
    inputs = kernel.random_inputs(program, 1)
    figures, results, run = run_kernel(kernel, program, inputs, "model")
    assert figures["ok"]
    return program, inputs, figures, results, run


def test_the_machine_peaks_are_the_designs():
    """MACs a cycle: every PCU's lanes x lanes PEs; HBM bytes a cycle: the memory model's
    channels streaming; the default machine of the issue: 8 PCUs, 512 MACs, 32 B."""
    for machine in (DEFAULT_MACHINE, Machine(rows=2, cols=4, lanes=4), Machine(rows=3)):
        assert machine.macs_per_cycle == _pcus(machine) * machine.lanes ** 2
        assert machine.hbm_bytes_per_cycle == hbm_model(
            beat_bytes=machine.beat_bytes).timing.peak_bytes_per_cycle
    assert Machine(compute=False).macs_per_cycle == 0
    assert (DEFAULT_MACHINE.rows, DEFAULT_MACHINE.cols) == (defaults.ROWS, defaults.COLS)
    assert _pcus(DEFAULT_MACHINE) == 8 and DEFAULT_MACHINE.macs_per_cycle == 512
    assert DEFAULT_MACHINE.hbm_bytes_per_cycle == 32


def test_gemm_work_and_bound_from_the_program():
    """GEMM 64^3: the MACs the model's PCUs did, A and B read and C written once (what
    the model moved), bound by the larger of the two times."""
    program, inputs, figures, results, run = _run("gemm", m=64, n=64, k=64)
    assert family_named(program.meta["group"]) is MATMUL
    line = run.roofline
    counted = sum(unit.get("macs", 0) for unit in run.counters.values())
    assert line.macs == counted == 64 ** 3
    moved = (inputs["a"].size + inputs["b"].size) * BF16_BYTES + results["c"].nbytes
    hbm = run.memory_bytes["hbm"]
    assert line.hbm_bytes == moved <= hbm["read_bytes"] + hbm["write_bytes"]
    machine = program.machine
    assert line.compute_cycles == math.ceil(counted / (_pcus(machine) * machine.lanes ** 2))
    assert line.compute_cycles == 512                 # the figure on the 4x4
    assert line.hbm_cycles == math.ceil(moved / hbm_model().timing.peak_bytes_per_cycle)
    assert line.bound_cycles == max(line.compute_cycles, line.hbm_cycles)
    assert line.binding == (COMPUTE if line.compute_cycles >= line.hbm_cycles else HBM)
    assert line.share is None and figures["roofline"] == line.to_json()  # the model: no cycles


def test_attention_decode_moves_q_k_v_and_o():
    """Decode: Q, K and V read once, O written once; two products of dim MACs per head
    and key; HBM-bound (K and V stream for one query per head)."""
    program, inputs, figures, results, run = _run(
        "attention", seq=64, dim=32, heads=2, kv_heads=1, mode="decode", causal=False)
    assert family_named(program.meta["group"]) is ATTENTION
    q, k = inputs["q"], inputs["k"]
    moved = sum(inputs[name].size for name in "qkv") * BF16_BYTES + results["o"].nbytes
    heads, rows, dim = q.shape
    macs = 2 * heads * rows * k.shape[1] * dim         # Q K^T, then P V
    line = figures["roofline"]
    assert (line["hbm_bytes"], line["macs"]) == (moved, macs)
    hbm = run.memory_bytes["hbm"]
    assert moved <= hbm["read_bytes"] + hbm["write_bytes"]
    assert line["binding"] == HBM and line["bound_cycles"] == line["hbm_cycles"]


def test_a_row_kernels_work_is_its_traffic_and_travels_with_the_program_file(tmp_path):
    """Softmax: no MACs, X read and Y written once; a program file read back has the
    same work (it comes from the manifest)."""
    program, inputs, figures, results, run = _run("softmax", m=8, n=64)
    moved = inputs["x"].size * BF16_BYTES + results["y"].nbytes
    assert run.roofline.macs == 0 and run.roofline.hbm_bytes == moved
    assert run.roofline.binding == HBM
    program.write(tmp_path / "softmax.rdu")
    assert program_work(Program.read(tmp_path / "softmax.rdu")) == program_work(program)


def _cli(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(argv)
    assert status == 0
    return out.getvalue()


def test_rdu_run_reports_the_roofline():
    """``--json``: the roofline object; the printed report: one line of it."""
    argv = ["run", "gemm", "--m", "16", "--n", "16", "--k", "32"]
    report = json.loads(_cli(argv + ["--json"]))
    line = report["roofline"]
    assert {"macs", "hbm_bytes", "bound_cycles", "binding", "share"} <= set(line)
    assert line["macs"] == report["macs"] == 16 * 16 * 32 and line["share"] is None
    assert line["binding"] in (COMPUTE, HBM)
    lines = [text for text in _cli(argv).splitlines() if text.startswith("roofline")]
    assert len(lines) == 1 and f"{line['bound_cycles']} cycles, {line['binding']}-bound" \
        in lines[0]


def test_a_schedule_does_its_programs_work():
    """Unfused MLP: the programs' work summed; the same MACs as the fused kernel, and the
    intermediates' bytes twice more (written by one program, read by the next)."""
    kernel = get_kernel("mlp")
    params = {"m": 8, "d": 64, "f": 256}
    machine = Machine(**kernel.machine)
    fused = kernel.compile(machine, **params)
    inputs = kernel.random_inputs(fused, 1)
    fused_line = run_kernel(kernel, fused, inputs, "model")[0]["roofline"]
    sequence = compile_unfused("mlp", machine, **params)
    figures, _, steps = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"] and len(steps) == len(sequence.programs) > 1
    line = figures["roofline"]
    assert line == steps.roofline.to_json()
    assert line["macs"] == sum(step.launch.roofline.macs for step in steps) \
        == fused_line["macs"]
    assert line["hbm_bytes"] == sum(step.launch.roofline.hbm_bytes for step in steps)
    produced = {name for program in sequence.programs for name in program.outputs}
    between = produced - set(kernel.outputs)
    round_trip = 0
    for name in between:
        step = next(s for s, p in zip(steps, sequence.programs, strict=True)
                    if name in p.outputs)
        words = step.launch.outputs[name]            # the image the model wrote
        spec = next(p.tensors[name] for p in sequence.programs if name in p.outputs)
        itemsize = 4 if spec["dtype"] == "fp32" else BF16_BYTES
        assert words.size * 4 >= math.prod(spec["shape"]) * itemsize
        round_trip += 2 * math.prod(spec["shape"]) * itemsize
    assert between and line["hbm_bytes"] == fused_line["hbm_bytes"] + round_trip


@pytest.mark.verilator
def test_a_timed_run_achieves_a_share_of_its_bound(tmp_path):
    """On the RTL (native): 0 < share <= 1, the bound over the measured cycles, in the
    sweep's row and on its roofline plot. (Four AGCUs: the attention tests' build.)"""
    machine = tuple((option, 4 if option == "agcus" else getattr(DEFAULT_MACHINE, name) // unit)
                    for option, (name, unit, _) in MACHINE_OPTIONS.items())
    point = Point("gemm", (("m", 64), ("n", 64), ("k", 64)), machine, "native", 1)
    row = run_point(point, tmp_path)
    assert row["status"] == "ok", row["error"]
    assert 0 < row["roofline_share"] <= 1
    assert row["roofline_share"] == round(row["bound_cycles"] / row["cycles"], 4)
    table = tmp_path / "results.csv"
    Table(table).append(row)
    assert read_table(table)[0]["binding"] == row["binding"]
    written = plot_table(table, tmp_path / "plots")
    assert tmp_path / "plots" / "roofline-gemm.png" in written
    assert (tmp_path / "plots" / "roofline-gemm.png").read_bytes()[:4] == b"\x89PNG"


def test_compile_and_inspect_state_the_bound_before_a_run(tmp_path):
    """``rdu compile`` and ``rdu inspect`` give a program's bound without running it: the
    MACs of the operands' shapes, the bytes of its inputs and output, the bound of the
    machine's peaks; no share (nothing was timed)."""
    path = tmp_path / "g.rdu"
    m, n, k = 48, 40, 24
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compile", "gemm", "--m", str(m), "--n", str(n), "--k", str(k),
                     "-o", str(path), "--json"]) == 0
    compiled = json.loads(out.getvalue())["roofline"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", str(path), "--json"]) == 0
    inspected = json.loads(out.getvalue())["roofline"]
    assert compiled == inspected and compiled["share"] is None
    machine = Program.read(path).machine
    hbm = (m * k + k * n) * BF16_BYTES + m * n * 4              # BF16 in, FP32 C out
    assert compiled["macs"] == m * n * k and compiled["hbm_bytes"] == hbm
    assert compiled["bound_cycles"] == max(math.ceil(m * n * k / machine.macs_per_cycle),
                                           math.ceil(hbm / machine.hbm_bytes_per_cycle))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["inspect", str(path)]) == 0
    line, = (line for line in out.getvalue().splitlines() if "roofline:" in line)
    assert f"{compiled['bound_cycles']} cycles" in line and "achieved" not in line

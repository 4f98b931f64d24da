"""Kernel families as objects (rdu.compiler.families), the pass registry and its
selection (``rdu compile --passes/--skip``), and the worked example of a new family
(``docs/compiler.md``, "Adding a kernel family"): scale-and-shift on the model."""

import ast
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import rdu.compiler
from rdu.cli import main
from rdu.compiler import PASSES, PIPELINE, CompileError, PassSelectionError, compile_graph
from rdu.compiler.families import FAMILIES, family_named
from rdu.compiler.families.scale_shift import SCALE_SHIFT
from rdu.frontend.graph import Graph, exp, reciprocal
from rdu.frontend.kernels import KERNELS, Kernel
from rdu.machine import Machine
from rdu.runtime import run_program

ROOT = Path(__file__).resolve().parents[1]
COMPILER = ROOT / "software" / "rdu" / "compiler"


# -- the worked example: scale-and-shift ----------------------------------------------------

def scale_shift_graph(m, n):
    """``Y = X * G + B``: every row of X scaled and shifted column by column."""
    graph = Graph("scale_shift")
    x = graph.input("x", (m, n))
    g = graph.input("g", (n,))
    b = graph.input("b", (n,))
    graph.output("y", x * g + b)
    return graph


SCALE_SHIFT_KERNEL = Kernel("scale_shift", ("m", "n"),
                            {"x": ("m", "n"), "g": ("n",), "b": ("n",)}, {"y": ("m", "n")},
                            "Y = X * G + B", scale_shift_graph)
#: Three loads at once: three AGCUs (the fused kernels' machine has four).
FUSED_MACHINE = Machine(**KERNELS["attention"].machine)


@pytest.mark.parametrize("shape", [(6, 32), (1, 16), (37, 208)])
def test_scale_shift_on_the_model(shape, seed):
    """Compiled by its family, run on the functional model: bit-exact against the row
    reference (FP32 multiply then add, rdu.reference.exact_rows) and within the float64
    budget of the same BF16 inputs (x g of two BF16 values is exact in FP32; the add
    rounds once: within 2^-23 of |y|, stated here as 2 ulp of |x g| + |y|)."""
    kernel = SCALE_SHIFT_KERNEL
    state = []
    program = kernel.compile(FUSED_MACHINE, state=state, m=shape[0], n=shape[1])
    assert [group.family for group in state[0].groups] == [SCALE_SHIFT]
    assert program.meta["group"] == "scale_shift" and program.meta["pcus"] == 2
    inputs = kernel.random_inputs(program, seed)
    kernel.pack(program, inputs)
    results = kernel.unpack(program, run_program(program, "model").outputs)
    assert np.array_equal(results["y"].view(np.uint32), kernel.exact(program)["y"])
    ok, error = kernel.check(program, inputs, results)
    assert ok, f"outside the float64 budget: {error}"
    x, g, b = (inputs[name].view(np.float32).astype(np.float64) for name in "xgb")
    expected = x * g + b
    budget = 2 * 2.0 ** -23 * (np.abs(x * g) + np.abs(expected)) + 2.0 ** -126
    assert np.all(np.abs(results["y"] - expected) <= budget)


@pytest.mark.verilator
def test_scale_shift_on_verilator(sim_dir, seed):
    """The same program on the 4x4 RTL of the fused kernels: the model's words."""
    from rdu.runtime import run_programs
    kernel = SCALE_SHIFT_KERNEL
    program, inputs = kernel.random_program(FUSED_MACHINE, seed, m=5, n=48)
    rtl, = run_programs([program], "verilator", seed=seed, work_dir=sim_dir / "scale_shift")
    model, = run_programs([program], "model")
    assert np.array_equal(rtl.outputs["y"], model.outputs["y"])
    results = kernel.unpack(program, rtl.outputs)
    assert np.array_equal(results["y"].view(np.uint32), kernel.exact(program)["y"])
    assert kernel.check(program, inputs, results)[0]
    print(f"scale_shift 5 x 48 on the 4x4 RTL: {rtl.cycles} cycles")


def test_scale_shift_exact_reference_can_fail(seed):
    kernel = SCALE_SHIFT_KERNEL
    program = kernel.compile(FUSED_MACHINE, m=4, n=16)
    inputs = kernel.random_inputs(program, seed)
    kernel.pack(program, inputs)
    results = kernel.unpack(program, run_program(program, "model").outputs)
    wrong = results["y"].copy()
    wrong.view(np.uint32)[2, 3] ^= 1                        # one ulp
    assert not np.array_equal(wrong.view(np.uint32), kernel.exact(program)["y"])


def test_scale_shift_refusals_name_the_rule():
    graph = Graph("scale_only")
    x = graph.input("x", (4, 16))
    g = graph.input("g", (16,))
    graph.output("y", x * g - 1.0)
    with pytest.raises(CompileError, match=r"test_families.py:\d+: .*x \* g \+ b"):
        compile_graph(graph, FUSED_MACHINE)
    with pytest.raises(CompileError, match="needs 3 AGCUs, the machine has 2"):
        compile_graph(scale_shift_graph(4, 16), Machine())
    with pytest.raises(CompileError, match="multiple of 16 values"):
        compile_graph(scale_shift_graph(4, 24), FUSED_MACHINE)


# -- families as objects ----------------------------------------------------------------

def test_every_family_compiles_its_benchmark_into_its_own_group():
    names = [family.name for family in FAMILIES]
    assert len(set(names)) == len(names) and FAMILIES[-1].name == "rows"
    for family in FAMILIES:
        assert family_named(family.name) is family
        if family.benchmark is None:
            continue
        kernel_name, params = family.benchmark
        kernel = KERNELS[kernel_name]
        state = []
        program = kernel.compile(Machine(**kernel.machine), state=state, **params)
        groups = state[0].groups
        assert [group.family for group in groups] == [family]
        assert program.meta["group"] == family.name
    with pytest.raises(KeyError, match="no kernel family 'gemm'"):
        family_named("gemm")


def test_a_graph_of_two_groups_is_lowered_per_group_then_refused_in_one_line():
    graph = Graph("two")
    a = graph.input("a", (8, 16))
    b = graph.input("b", (16, 8))
    x = graph.input("x", (4, 32))
    graph.output("c", a @ b)
    e = exp(x - x.max())
    graph.output("y", e * reciprocal(e.sum()))
    state = []
    with pytest.raises(CompileError) as error:
        compile_graph(graph, Machine(), state=state)
    assert str(error.value) == ("kernel 'two' fuses into 2 groups (matmul 'c', rows 'y'): "
                                "one configuration holds one group yet; compile each "
                                "output as its own kernel")
    compilation, = state
    assert [g.family.name for g in compilation.groups] == ["matmul", "rows"]
    assert len(compilation.tilings) == 2 and compilation.kernel is None


# -- passes: what they read and write, the order as data ------------------------------

def test_the_module_docstring_is_the_pass_table():
    table = "\n".join("    " + line for line in rdu.compiler.pass_table().splitlines())
    assert table in rdu.compiler.__doc__
    assert set(PASSES) == set(PIPELINE)


def test_passes_declare_typed_fields_and_the_pipeline_reads_only_what_is_written():
    from rdu.compiler.core import Compilation, select_passes
    annotations = Compilation.__annotations__
    assert not [name for name, kind in annotations.items() if "object" in str(kind)]
    assert select_passes(PIPELINE) == PIPELINE
    assert select_passes(PIPELINE, skip=("check",)) == tuple(p for p in PIPELINE
                                                            if p != "check")
    with pytest.raises(PassSelectionError, match="pass 'emit' reads bitstream, written by "
                                                 "encode, which does not run before it"):
        select_passes(PIPELINE, skip=("encode",))


def _python_files():
    return sorted((ROOT / "software" / "rdu").rglob("*.py"))


def test_passes_dispatch_on_family_objects_not_strings():
    """No `pattern ==/!=/in` test, no single-group unpacking in a pass, no private name
    imported across the compiler's modules."""
    import re
    for path in _python_files():
        text = path.read_text()
        assert not re.search(r"pattern ?(==|!=|in) ", text), path
        if COMPILER in path.parents:
            assert "group, = " not in text, path
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.ImportFrom):
                    private = [a.name for a in node.names if a.name.startswith("_")]
                    assert not private, f"{path}: imports {private} from {node.module}"


def test_the_retry_with_fewer_pcus_restarts_at_the_pass_that_reads_max_pcus(monkeypatch):
    """A placement that fails while the matmul uses more than one PCU: the driver tiles
    again (tile reads max_pcus) with one PCU fewer until it places."""
    from rdu.compiler import place
    real = place.search_placement
    seen = []

    def fussy(kernel, geometry, seed, anneal=False, router="greedy"):
        pcus = kernel.units_needed()["pcu"]
        seen.append(pcus)
        return real(kernel, geometry, seed, anneal, router) if pcus <= 2 else None
    monkeypatch.setattr(place, "search_placement", fussy)
    state = []
    program = compile_graph(KERNELS["gemm"].graph({"m": 64, "n": 16, "k": 16}), Machine(),
                            state=state)
    assert seen == [8, 7, 6, 5, 4, 3, 2] and program.meta["pcus"] == 2
    assert state[0].max_pcus == 2


# -- rdu compile --passes / --skip ------------------------------------------------------

GEMM = ["compile", "gemm", "--m", "16", "--n", "16", "--k", "16"]


def test_compile_runs_a_prefix_and_writes_no_program(tmp_path, capsys):
    out = tmp_path / "p.rdu"
    assert main([*GEMM, "--passes", "fuse,tile,lower", "-o", str(out),
                 "--dump-after", "lower"]) == 0
    captured = capsys.readouterr()
    assert "passes           fuse, tile, lower" in captured.out
    assert "== after lower" in captured.err and "systolic" in captured.err
    assert not out.exists()


def test_compile_skip_check_gives_the_same_program(tmp_path):
    from rdu.program import Program
    full, skipped = tmp_path / "full.rdu", tmp_path / "skipped.rdu"
    assert main([*GEMM, "-o", str(full)]) == 0
    assert main([*GEMM, "--skip", "check", "-o", str(skipped)]) == 0
    assert Program.read(full).bitstream == Program.read(skipped).bitstream


@pytest.mark.parametrize("options, message", [
    (["--passes", "fuse,tiles"], "--passes: unknown pass 'tiles' (passes: fuse, tile, "),
    (["--passes", "lower"], "--passes: pass 'lower' reads groups, tilings, written by "
                            "fuse, tile, which do not run before it"),
    (["--skip", "bind", "-o", "x.rdu"], "--skip: pass 'check' reads blocks, written by "
                                        "bind, which does not run before it"),
    (["--skip", "fuse2", "-o", "x.rdu"], "--skip: unknown pass 'fuse2'"),
    (["--passes", "tile,fuse"], "--passes: passes run once each in pipeline order"),
])
def test_compile_refuses_a_bad_selection_in_one_line(options, message, capsys):
    assert main([*GEMM, *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rdu compile: error: {message}") and err.count("\n") == 1


def test_compile_selection_error_through_the_command(tmp_path):
    run = subprocess.run([sys.executable, "-m", "rdu.cli", *GEMM, "--skip", "encode", "-o",
                          str(tmp_path / "x.rdu")], capture_output=True, text=True,
                         cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr == ("rdu compile: error: --skip: pass 'emit' reads bitstream, written "
                          "by encode, which does not run before it\n")
    assert not (tmp_path / "x.rdu").exists()

"""The command line and the Verilog path."""

import json

import numpy as np
import pytest
from rdu.apps.designs import DESIGNS, get_design
from rdu.cli import build_parser, main
from rdu.sim.verilator import generate_verilog, lint_verilog

#: Designs linted here at a smaller size (the same code; ``make verilog`` lints every
#: design at its registered size): the 8-lane PCU's Verilog takes about 30 s to write.
LINT_SIZES = {"pcu": {"lanes": 4, "stages": 2}}


@pytest.mark.parametrize("name", sorted(n for n, d in DESIGNS.items() if d.quick))
def test_registered_design_lints(name, sim_dir):
    """Every quick registered design's Verilog passes ``verilator --lint-only``."""
    path = sim_dir / f"{name}.v"
    path.write_text(generate_verilog(get_design(name).instantiate(**LINT_SIZES.get(name, {})),
                                     name))
    ok, report = lint_verilog(path, name)
    assert ok, report


def test_unknown_design_is_one_line_error(capsys, tmp_path):
    assert main(["verilog", "no_such_design", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown design 'no_such_design'" in err[0]


@pytest.mark.verilator
def test_rdu_sim_gemm_on_the_default_4x4_system(capsys, tmp_path):
    """The main job (make sim): a GEMM on the 4x4 RDUSystem under Verilator (with four
    AGCUs, the attention tests' build: the default two would be one build more in CI).
    C is checked here, independently of the tool, against numpy float64 of the saved
    BF16 inputs; the cycles and configuration cycles are the RTL's own counts."""
    save = tmp_path / "sim"
    assert main(["sim", "--m", "64", "--n", "48", "--k", "40", "--seed", "5", "--agcus", "4",
                 "--save", str(save), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    a, b, c = (np.load(save / f"{name}.npy").astype(np.float64) for name in "abc")
    assert a.shape == (64, 40) and b.shape == (40, 48) and c.shape == (64, 48)
    budget = 40 * 2.0 ** -22 * (np.abs(a) @ np.abs(b)) + 1e-30
    assert np.all(np.abs(c - a @ b) <= budget)
    assert report["machine"].startswith("4x4 array, 8 lanes")
    # lower bound from the hardware: each PCU streams at most one K beat per cycle
    assert report["cycles"] >= 40 * 48 // 8 and report["config_cycles"] > 0
    assert report["sim_cycles_per_second"] > 0


_TWO_COPIES = """\
module top(clk, a, y0, y1);
  input clk;
  input [3:0] a;
  output [3:0] y0;
  output [3:0] y1;
  \\top.u0  u0 (.clk(clk), .a(a), .y(y0));
  \\top.u1  u1 (.clk(clk), .a(a), .y(y1));
endmodule

module \\top.u0 (clk, a, y);
  wire \\$auto$x.cc:1:f$17 ;
  wire \\$auto$x.cc:1:f$9 ;
  input clk;
  input [3:0] a;
  output [3:0] y;
  reg [3:0] r = 4'h0;
  assign \\$auto$x.cc:1:f$9  = a[0];
  assign \\$auto$x.cc:1:f$17  = ~ a[1];
  always @(posedge clk) begin
    r <= a;
    r[0] <= \\$auto$x.cc:1:f${first} ;
  end
  assign y = r;
endmodule

module \\top.u1 (clk, a, y);
  wire \\$auto$x.cc:1:f$40 ;
  wire \\$auto$x.cc:1:f$41 ;
  input clk;
  input [3:0] a;
  output [3:0] y;
  reg [3:0] r = 4'h0;
  assign \\$auto$x.cc:1:f$41  = ~ a[1];
  assign \\$auto$x.cc:1:f$40  = a[0];
  always @(posedge clk) begin
    r <= a;
    r[0] <= \\$auto$x.cc:1:f$40 ;
  end
  assign y = r;
endmodule
"""


@pytest.mark.parametrize("first, merged", [("9", True), ("17", False)])
def test_dedupe_merges_only_equal_modules(first, merged):
    """u0 and u1 differ only in Yosys's numbering when u0's register takes ``a[0]``
    (wire 9), and really differ when it takes ``~a[1]`` (wire 17)."""
    from rdu.sim.verilog_dedupe import dedupe_modules
    text, before, after = dedupe_modules(_TWO_COPIES.replace("{first}", first))
    assert before == 3
    assert after == (2 if merged else 3)
    if merged:
        assert "module \\top.u1 " not in text
        assert text.count("\\top.u0  u") == 2        # both instances use u0
    ok, report = _lint_text(text)
    assert ok, report


def _lint_text(text, top="top"):
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"{top}.v"
        path.write_text(text)
        return lint_verilog(path, top)


# -- rdu compile / inspect / run --------------------------------------------------------

SMALL_ARRAY = ["--rows", "2", "--cols", "2", "--lanes", "4", "--pmu-kib", "16"]


def _compile(tmp_path, *shape, extra=()):
    path = tmp_path / "gemm.rdu"
    m, n, k = shape
    assert main(["compile", "gemm", "--m", str(m), "--n", str(n), "--k", str(k), "-o",
                 str(path), *extra]) == 0
    return path


def _one_error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_rdu_compile_inspect_run(capsys, tmp_path):
    """compile -> inspect (manifest, every record decoded, codes named) -> run that
    program file on the model with no shape options; C checked here against numpy."""
    program = _compile(tmp_path, 9, 10, 11, extra=[*SMALL_ARRAY, "--json"])
    capsys.readouterr()
    assert main(["inspect", str(program), "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    manifest = inspected["manifest"]
    assert manifest["kernel"] == "gemm" and manifest["params"] == {"m": 9, "n": 10, "k": 11}
    assert manifest["machine"]["rows"] == 2 and manifest["machine"]["pmu_bytes"] == 16384
    assert manifest["tensors"]["a"]["shape"] == [9, 11]
    assert inspected["header"]["rows"] == 2 and inspected["header"]["lanes"] == 4
    kinds = [unit["kind"] for unit in inspected["units"]]
    assert kinds.count("SWITCH") == 4 and kinds.count("AGCU") == 2
    pcus = [u for u in inspected["units"] if u["kind"] == "PCU"]
    assert pcus and all(u["fields"]["mode"] == "SYSTOLIC" for u in pcus)
    assert main(["inspect", str(program)]) == 0
    text = capsys.readouterr().out
    assert "PCU(0,0)" in text and "counters[0].max = 16" in text   # K padded to 16
    assert "mode = SYSTOLIC" in text and "vector.local1 = " in text
    save = tmp_path / "saved"
    assert main(["run", str(program), "--seed", "4", "--save", str(save), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["kernel"] == "gemm M=9 N=10 K=11"
    a, b, c = (np.load(save / f"{name}.npy").astype(np.float64) for name in "abc")
    assert c.shape == (9, 10) and np.allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_rdu_run_takes_user_arrays(capsys, tmp_path):
    """--a/--b: the user's float arrays (shapes implied), rounded to BF16; the result
    matches numpy of the rounded inputs; the same arrays run through a program file."""
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((13, 21)), rng.standard_normal((21, 6)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    save = tmp_path / "out"
    assert main(["run", "gemm", "--a", str(tmp_path / "a.npy"), "--b", str(tmp_path / "b.npy"),
                 "--save", str(save), "--json", *SMALL_ARRAY]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["kernel"] == "gemm M=13 N=6 K=21"
    import ml_dtypes
    a16 = a.astype(ml_dtypes.bfloat16).astype(np.float64)
    b16 = b.astype(ml_dtypes.bfloat16).astype(np.float64)
    c = np.load(save / "c.npy").astype(np.float64)
    assert np.allclose(c, a16 @ b16, rtol=1e-5, atol=1e-5)
    assert not np.allclose(a16, a, rtol=0, atol=0)        # the rounding happened
    program = _compile(tmp_path, 13, 6, 21, extra=SMALL_ARRAY)
    capsys.readouterr()
    assert main(["run", str(program), "--a", str(tmp_path / "a.npy"), "--b",
                 str(tmp_path / "b.npy"), "--save", str(save)]) == 0
    assert np.array_equal(np.load(save / "c.npy"), c.astype(np.float32))


@pytest.mark.parametrize("damage, message", [
    (lambda raw: raw[:-4], "truncated"),
    (lambda raw: raw[:-1] + bytes([raw[-1] ^ 0x10]), "CRC"),
    (lambda raw: raw[:30] + bytes([raw[30] ^ 1]) + raw[31:], "manifest CRC"),
    (lambda raw: raw[:10], "not an rdu program file"),
    (lambda raw: raw[:8] + b"\x09" + raw[9:], "program format 9"),
])
def test_rdu_run_rejects_a_damaged_program(capsys, tmp_path, damage, message):
    program = _compile(tmp_path, 4, 4, 4, extra=SMALL_ARRAY)
    program.write_bytes(damage(program.read_bytes()))
    capsys.readouterr()
    assert main(["run", str(program)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith("rdu run: error:") and message in line, line


def test_rdu_run_rejects_another_machine_or_shape(capsys, tmp_path):
    program = _compile(tmp_path, 4, 4, 4)                  # for the default 4x4 machine
    capsys.readouterr()
    assert main(["run", str(program), *SMALL_ARRAY]) == 2
    assert "compiled for another machine: rows 4 (program) vs 2 (machine)" in \
        _one_error_line(capsys)
    assert main(["run", str(program), "--k", "5"]) == 2
    assert "compiled for K=4, not 5 (--k)" in _one_error_line(capsys)
    np.save(tmp_path / "a.npy", np.ones((4, 5)))
    np.save(tmp_path / "b.npy", np.ones((4, 4)))
    assert main(["run", str(program), "--a", str(tmp_path / "a.npy"), "--b",
                 str(tmp_path / "b.npy")]) == 2
    assert "shape (4, 5), the program 'gemm_4x4x4' takes A as (4, 4)" in _one_error_line(capsys)


def test_rdu_pcu_option(capsys, tmp_path):
    """``--pcu fpga``: the machine records it, builds its RTL with the FPGA PCU, and
    refuses a machine it cannot have in one line."""
    from rdu.machine import Machine
    from rdu.units.registry import PCU_VARIANTS
    assert main(["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--pcu", "fpga"]) == 2
    assert "machine parameter pcu fpga: Shared units need at least as many stages as " \
        "lanes (the 8 x 8 systolic array on the stages' ALUs), not 4 stages for 8 lanes" \
        in _one_error_line(capsys)
    machine = Machine(rows=2, cols=2, lanes=4, pcu="fpga")
    assert machine.system_params()["compute_unit"] is PCU_VARIANTS["fpga"]
    assert "compute_unit" not in Machine(rows=2, cols=2, lanes=4).system_params()
    assert Machine.from_json(machine.to_json()) == machine
    program = _compile(tmp_path, 4, 4, 4, extra=[*SMALL_ARRAY, "--pcu", "fpga"])
    capsys.readouterr()
    assert main(["run", str(program), "--pcu", "standard"]) == 2
    assert "compiled for another machine: pcu fpga (program) vs standard (machine)" in \
        _one_error_line(capsys)


def test_rdu_run_checks_output_paths_first(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--save",
                 str(blocker / "sub")]) == 2
    assert "cannot write directory" in _one_error_line(capsys)
    assert main(["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--sim", "verilator",
                 "--waves", str(blocker / "w.vcd")]) == 2
    assert "cannot write file" in _one_error_line(capsys)


def test_rdu_compile_reports_a_kernel_that_does_not_fit(capsys, tmp_path):
    assert main(["compile", "gemm", "--m", "1024", "--n", "1024", "--k", "1024",
                 "--hbm-mib", "4", "-o", str(tmp_path / "x.rdu")]) == 2
    line = _one_error_line(capsys)
    assert "bytes of HBM, the machine has 4194304" in line and "short" in line
    assert "--hbm-mib" in line


def test_rdu_inspect_rejects_garbage(capsys, tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\x01\x02\x03\x04" * 8)
    assert main(["inspect", str(path)]) == 2
    assert "magic" in _one_error_line(capsys).lower()


def test_generation_converts_each_unit_kind_once():
    """In generated Verilog a TileArray's units are instances of one module per distinct
    kind (hdl.shared): here one PCU, one PMU and one switch module; simulation objects
    are untouched (the same array still elaborates its real units)."""
    import re

    from hdl.array import TileArray
    from hdl.pcu import PCU
    # 2 lanes: the smallest PCU (a 2x2 systolic array) has every module kind; 4 lanes
    # took twice as long to generate and lint
    text = generate_verilog(TileArray(2, 2, 2, compute_unit=PCU,
                                      capacity_bytes=1024), "tile_array")
    shared = sorted(set(re.findall(r"^module (rdu_(?:unit|switch)_\d+)", text, re.M)))
    assert len(shared) == 3, shared
    instances = re.findall(r"^\s+(rdu_(?:unit|switch)_\d+) (\w+) \(", text, re.M)
    assert sorted(name for _, name in instances) == sorted(
        [f"unit_{r}_{c}" for r in range(2) for c in range(2)] +
        [f"switch_{r}_{c}" for r in range(2) for c in range(2)])
    assert _combinational_reset_reads(text) == []
    ok, report = _lint_text(text, "tile_array")
    assert ok, report


def _combinational_reset_reads(text):
    """Lines of generated Verilog that read ``rst`` other than as an asynchronous reset
    (``always @(posedge clk, posedge rst)`` and its ``if (rst)``), a port or a port's
    alias."""
    import re
    allowed = re.compile(r"^\s*(always @\(posedge clk, posedge rst\)|if \(rst\) \S+\s*<=|"
                         r"\.rst\(rst\),?$|input rst;|wire rst;|"
                         r"assign \\rst\$\d+\s*= rst;)")
    text = re.sub(r"^module [^;]*;", "", text, flags=re.M)     # port lists
    return [line for line in text.splitlines()
            if re.search(r"(?<![\\$\w])rst\b", line) and not allowed.match(line)]


def test_verilog_top_resets_asynchronously():
    """Every generated module is a VerilogTop: each flip-flop with a reset value is reset
    by ``posedge rst``, and no logic reads ``rst`` combinationally (which Verilator
    would evaluate on every eval(), docs/simulation-speed.md)."""
    import re

    from hdl.stream_fifo import StreamFIFO
    from hdl.top import VerilogTop
    text = generate_verilog(StreamFIFO(8, 4, flush=True), "fifo")
    assert re.search(r"^module fifo \(", text, re.M)
    assert len(re.findall(r"always @\(posedge clk, posedge rst\)", text)) >= 3
    assert _combinational_reset_reads(text) == []
    with pytest.raises(TypeError, match="VerilogTop wraps a wiring.Component"):
        VerilogTop(object())
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In

    class Clocked(wiring.Component):
        clk: In(1)

        def elaborate(self, platform):
            raise AssertionError("not elaborated")
    with pytest.raises(ValueError, match="already has a port named 'clk'"):
        VerilogTop(Clocked())


def test_simulation_builds_gate_idle_units():
    """What Verilator builds (``gate_clocks=True``) clocks the PCU's special-function
    stages, systolic data path and SIMD stage registers from gated clocks, ``clk`` AND a
    gate taken on the falling edge, so that Verilator skips them when unused
    (docs/simulation-speed.md); the default, the Verilog ``rdu verilog`` ships for FPGA
    and ASIC tools, has one clock and no falling edge."""
    import collections
    import re

    from hdl.pcu import PCU
    from hdl.special_function import SPECIAL_STEPS
    lanes = 2
    gated = generate_verilog(PCU(lanes=lanes, stages=1), "pcu", gate_clocks=True)
    plain = generate_verilog(PCU(lanes=lanes, stages=1), "pcu")
    clocks = collections.Counter(re.findall(r"always @\((?:pos|neg)edge (\w+)", gated))
    for domain in ("special", "systolic", "simd"):
        assert re.search(rf"assign {domain}_clk = clk & {domain}_enable;", gated)
        assert re.search(rf"always @\(negedge clk, posedge rst\)\s+if \(rst\) "
                         rf"{domain}_enable <= 1'h0;", gated)
    # the special function's registers: its function and SPECIAL_STEPS + 1 per lane
    assert clocks["special_clk"] == 1 + (SPECIAL_STEPS + 1) * lanes
    # at least one accumulator per systolic PE
    assert clocks["systolic_clk"] >= lanes * lanes
    # each SIMD stage's result, REG and LAST per lane
    assert clocks["simd_clk"] >= 3 * lanes
    plain_clocks = collections.Counter(re.findall(r"always @\((?:pos|neg)edge (\w+)",
                                                  plain))
    assert set(plain_clocks) == {"clk"} and "negedge" not in plain
    # the same flip-flops, less the three gates
    assert plain_clocks["clk"] == sum(clocks.values()) - 3


def test_every_option_has_help_with_its_default():
    """Each option of each command explains itself; one with a default shows it."""
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    for name, command in commands.items():
        text = command.format_help()
        for action in command._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, f"rdu {name} {action.option_strings[0]} has no help"
            if action.default not in (None, False):
                assert f"(default: {action.default})" in " ".join(text.split()), \
                    f"rdu {name} {action.option_strings[0]}: default not shown"


def test_inspect_into_a_closed_pipe_is_quiet(tmp_path):
    """`rdu inspect FILE | head`: the reader is gone before rdu writes (its end of the
    pipe is closed at once); rdu says nothing on stderr and exits 0."""
    import subprocess
    import sys
    program = _compile(tmp_path, 4, 4, 4)
    child = subprocess.Popen([sys.executable, "-m", "rdu.cli", "inspect", str(program)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.stdout.close()
    stderr = child.stderr.read().decode()
    assert child.wait() == 0 and stderr == "", stderr


def test_rdu_compile_dumps_a_pass(capsys, tmp_path):
    """--dump-after prints what a pass produced (here the deadlock check's item counts)
    on stderr; the program file is written as usual."""
    path = tmp_path / "sm.rdu"
    assert main(["compile", "softmax", "--m", "4", "--n", "16", "-o", str(path),
                 "--dump-after", "check"]) == 0
    err = capsys.readouterr().err
    assert "== after check" in err and "row4.vector_out: 8 items" in err
    assert "== after place" not in err and path.exists()


def test_rdu_run_softmax_on_the_model(capsys):
    assert main(["run", "softmax", "--m", "3", "--n", "32", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["ok"] and report["pcus_used"] == 5


def test_rdu_compile_says_when_it_tiles_again_with_fewer_pcus(capsys, tmp_path):
    """A GEMM on a 3x6 array: 9 PCUs and 9 PMUs, but no placement pairs every PCU with a
    PMU beside it; ``rdu compile`` says so on stderr (with the time it took) and tiles
    again with one systolic PCU fewer; with --json stdout is the report alone and stderr
    stays quiet."""
    argv = ["compile", "gemm", "--m", "96", "--n", "16", "--k", "16", "--rows", "3",
            "--cols", "6", "--lanes", "4", "-o", str(tmp_path / "g.rdu")]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    said, = err.strip().splitlines()
    assert said.startswith("[rdu] gemm_96x16x16: no routable placement on the 3x6 array")
    assert said.endswith("tiling again with at most 8 systolic PCUs")
    assert "8/9 PCU" in out
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "8/9 PCU" in json.loads(out)["mapping"]


def test_shared_unit_verilog_is_converted_once_per_unit():
    """A shared unit's Verilog is kept by its key (class, plain settings, ports, the hdl
    hash): the same unit under another module name is the same text renamed; another
    setting is another conversion."""
    from rdu.sim.verilator import project_root, shared_unit_verilog

    from hdl.switch import Switch
    cache = project_root() / "build" / "verilog-units"
    first = shared_unit_verilog(Switch(lanes=2, fifo_depth=2), "rdu_switch_7")
    assert "module rdu_switch_7" in first and "rdu_cached_unit" not in first
    files = set(cache.glob("*.v"))
    again = shared_unit_verilog(Switch(lanes=2, fifo_depth=2), "rdu_switch_3")
    assert again == first.replace("rdu_switch_7", "rdu_switch_3")
    assert set(cache.glob("*.v")) == files              # read, not converted
    deeper = shared_unit_verilog(Switch(lanes=2, fifo_depth=3), "rdu_switch_7")
    assert deeper != first


def test_prune_builds_removes_the_least_recently_used_and_keeps_a_locked_one(tmp_path):
    import fcntl
    import os

    from rdu.sim.verilator import prune_builds
    for age, name in enumerate(["newest", "middle", "oldest", "locked", "partial"]):
        build = tmp_path / name
        build.mkdir()
        (build / "model.bin").write_bytes(bytes(1000))
        if name != "partial":               # no marker: not a finished build, left alone
            marker = build / "build-ok.json"
            marker.write_text("{}")
            os.utime(marker, (1e9 - age * 100, 1e9 - age * 100))
    with open(tmp_path / "locked.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        removed = prune_builds(tmp_path, limit=2500)
    assert removed == ["oldest", "middle"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == \
        ["locked", "newest", "partial"]
    assert prune_builds(tmp_path, limit=10**6) == []

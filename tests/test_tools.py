"""The command line and the Verilog path."""

import json

import numpy as np
import pytest
from rdu.cli import main
from rdu.designs import DESIGNS, get_design

from tb.verilator import generate_verilog, lint_verilog


@pytest.mark.parametrize("name", sorted(n for n, d in DESIGNS.items() if d.quick))
def test_registered_design_lints(name, sim_dir):
    path = sim_dir / f"{name}.v"
    path.write_text(generate_verilog(get_design(name).instantiate(), name))
    ok, report = lint_verilog(path, name)
    assert ok, report


def test_unknown_design_is_one_line_error(capsys, tmp_path):
    assert main(["verilog", "no_such_design", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown design 'no_such_design'" in err[0]


@pytest.mark.verilator
def test_rdu_sim_json(capsys):
    assert main(["sim", "--items", "500", "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["items"] == 500 and report["cycles"] >= 500


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
    from tb.verilog_dedupe import dedupe_modules
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


def test_rdu_compile_inspect_run(capsys, tmp_path):
    """compile -> inspect (every record decoded) -> run that bitstream on the model."""
    bitstream = tmp_path / "gemm.bin"
    assert main(["compile", "gemm", "--m", "9", "--n", "10", "--k", "11", "-o",
                 str(bitstream), "--json", *SMALL_ARRAY]) == 0
    compiled = json.loads(capsys.readouterr().out)
    assert "2/2 PCU" in compiled["mapping"]
    assert main(["inspect", str(bitstream), "--json"]) == 0
    inspected = json.loads(capsys.readouterr().out)
    assert inspected["header"]["rows"] == 2 and inspected["header"]["lanes"] == 4
    kinds = [unit["kind"] for unit in inspected["units"]]
    assert kinds.count("SWITCH") == 4 and kinds.count("AGCU") == 2
    pcus = [u for u in inspected["units"] if u["kind"] == "PCU"]
    assert all(u["fields"]["mode"] == 1 for u in pcus)         # systolic
    assert main(["inspect", str(bitstream)]) == 0
    text = capsys.readouterr().out
    assert "PCU(0,0)" in text and "counters[0].max = 16" in text   # K padded to 16
    save = tmp_path / "saved"
    assert main(["run", "gemm", "--m", "9", "--n", "10", "--k", "11", "--bitstream",
                 str(bitstream), "--sim", "model", "--seed", "4", "--save", str(save),
                 "--json", *SMALL_ARRAY]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["macs"] == 9 * 10 * 11 and report["max_abs_err"] < 1e-3
    for key in ("ok", "cycles", "macs", "utilization", "max_abs_err"):
        assert key in report
    a, b, c = (np.load(save / f"{name}.npy") for name in "abc")
    assert np.allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("damage, message", [
    (lambda raw: raw[:-4], "truncated"),
    (lambda raw: raw[:-1] + bytes([raw[-1] ^ 0x10]), "CRC"),
    (lambda raw: raw[:10], "not a whole number of 32-bit words"),
    (lambda raw: raw[:4] + b"\x00" * 4 + raw[8:], "version"),
])
def test_rdu_run_rejects_a_damaged_bitstream(capsys, tmp_path, damage, message):
    bitstream = tmp_path / "gemm.bin"
    assert main(["compile", "gemm", "--m", "4", "--n", "4", "--k", "4", "-o",
                 str(bitstream), *SMALL_ARRAY]) == 0
    bitstream.write_bytes(damage(bitstream.read_bytes()))
    capsys.readouterr()
    assert main(["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--bitstream",
                 str(bitstream), *SMALL_ARRAY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rdu run: error:") and message in err[0], err


def test_rdu_run_rejects_another_geometry(capsys, tmp_path):
    bitstream = tmp_path / "gemm.bin"
    assert main(["compile", "gemm", "--m", "4", "--n", "4", "--k", "4", "-o",
                 str(bitstream)]) == 0                    # made for the 4x4 array
    capsys.readouterr()
    assert main(["run", "gemm", "--m", "4", "--n", "4", "--k", "4", "--bitstream",
                 str(bitstream), *SMALL_ARRAY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is for a 4x4 array of 8 lanes, not 2x2 of 4" in err[0], err


def test_rdu_compile_reports_a_kernel_that_does_not_fit(capsys, tmp_path):
    assert main(["compile", "gemm", "--m", "4", "--n", "4", "--k", "5000", "-o",
                 str(tmp_path / "x.bin")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not fit" in err[0] and "K <= 2048" in err[0]


def test_rdu_inspect_rejects_garbage(capsys, tmp_path):
    path = tmp_path / "junk.bin"
    path.write_bytes(b"\x01\x02\x03\x04" * 8)
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "magic" in err[0].lower()


def test_generation_converts_each_unit_kind_once():
    """In generated Verilog a TileArray's units are instances of one module per distinct
    kind (hdl.shared): here one PCU, one PMU and one switch module; simulation objects
    are untouched (the same array still elaborates its real units)."""
    import re

    from hdl.array import TileArray
    text = generate_verilog(TileArray(2, 2, 4, compute_unit="hdl.pcu:PCU",
                                      capacity_bytes=1024), "tile_array")
    shared = sorted(set(re.findall(r"^module (rdu_(?:unit|switch)_\d+)", text, re.M)))
    assert len(shared) == 3, shared
    instances = re.findall(r"^\s+(rdu_(?:unit|switch)_\d+) (\w+) \(", text, re.M)
    assert sorted(name for _, name in instances) == sorted(
        [f"unit_{r}_{c}" for r in range(2) for c in range(2)] +
        [f"switch_{r}_{c}" for r in range(2) for c in range(2)])
    ok, report = _lint_text(text, "tile_array")
    assert ok, report

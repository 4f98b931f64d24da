"""The command line and the Verilog path."""

import json

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


def _lint_text(text):
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "top.v"
        path.write_text(text)
        return lint_verilog(path, "top")

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

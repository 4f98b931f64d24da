"""The command line and the Verilog path."""

import json
import subprocess

import pytest
from rdu.cli import main
from rdu.designs import DESIGNS, get_design

from tb.verilator import ensure_verilator, generate_verilog


@pytest.mark.parametrize("name", sorted(DESIGNS))
def test_registered_design_lints(name, sim_dir):
    ensure_verilator()
    path = sim_dir / f"{name}.v"
    path.write_text(generate_verilog(get_design(name).instantiate(), name))
    lint = subprocess.run(["verilator", "--lint-only", "--top-module", name, str(path)],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stderr


def test_unknown_design_is_one_line_error(capsys, tmp_path):
    assert main(["verilog", "no_such_design", "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown design 'no_such_design'" in err[0]


@pytest.mark.verilator
def test_rdu_sim_json(capsys):
    assert main(["sim", "--items", "500", "--seed", "3", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["items"] == 500 and report["cycles"] >= 500

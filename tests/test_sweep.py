"""`rdu sweep`: grids, points as Ray tasks, the results table, resume, failures.

One local Ray (2 CPUs) serves the module's tests; it is shut down at the end. Every
figure of the table is compared with what `rdu run` / `rdu compile` measure for the same
point on their own, never with a value computed here.
"""

import csv
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from rdu.apps.sweep import _code_paths, load_grid, read_table, run_sweep
from rdu.cli import main
from rdu.program import Program

# gemm (2 shapes) and softmax (2 shapes) on a 2x2 and a 2x4 array of 4 lanes: 8 points;
# softmax needs 5 PCUs, so it does not fit either array (compile_error).
GRID = ["--kernel", "gemm,softmax", "--m", "8,16", "--n", "16", "--k", "24", "--rows", "2",
        "--cols", "2,4", "--lanes", "4"]


@pytest.fixture(scope="module")
def cluster():
    ray.init(address="local", num_cpus=2, include_dashboard=False,
             object_store_memory=100 << 20,
             log_to_driver=False, logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": _code_paths()}})
    try:
        yield ray.get_runtime_context().get_node_id()
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def swept(cluster, tmp_path_factory):
    """The 8-point sweep of GRID, run once for the module: (table, summary)."""
    table = tmp_path_factory.mktemp("sweep") / "results.csv"
    summary = _sweep(GRID, table)
    return table, summary


def _sweep(options, table, expect=0):
    stdout, stderr, status = _main(["sweep", *options, "-o", str(table), "--json"])
    assert status == expect, stderr
    return json.loads(stdout)


def _main(argv):
    import contextlib
    import io
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit_:          # a usage error (argparse)
            status = exit_.code
    return out.getvalue(), err.getvalue(), status


def _point_options(row):
    options = [f"--{name}" for name in ("m", "n", "k") if row[name] is not None]
    shape = [item for name in options for item in (name, str(row[name[2:]]))]
    machine = [item for name in ("rows", "cols", "lanes", "pmu_kib")
               for item in (f"--{name.replace('_', '-')}", str(row[name]))]
    return [row["kernel"], *shape, *machine]


def test_model_sweep_through_ray_records_what_rdu_run_measures(swept, cluster):
    table, summary = swept
    assert summary["points"] == 8 and summary["ran"] == 8 and summary["missing"] == 0
    rows = read_table(table)
    assert len(rows) == 8 and len({row["point"] for row in rows}) == 8
    assert {row["node"] for row in rows} == {cluster[:8]}
    statuses = {(row["kernel"], row["m"], row["cols"]): row["status"] for row in rows}
    assert statuses == {(k, m, c): "ok" if k == "gemm" else "compile_error"
                        for k in ("gemm", "softmax") for m in (8, 16) for c in (2, 4)}
    assert summary["ok"] == 4 and summary["compile_error"] == 4
    for row in rows:
        if row["status"] == "ok":
            out, err, status = _main(["run", *_point_options(row), "--seed",
                                      str(row["seed"]), "--json"])
            assert status == 0, err
            report = json.loads(out)
            for name in ("ok", "hbm_bytes", "macs", "max_abs_err", "pcus_used",
                         "peak_macs_per_cycle"):
                assert row[name] == report[name], (name, row, report)
            assert row["hbm_bytes"] > 0 and row["cycles"] is None    # the model: no cycles
            program = Program.read(row["program"])
            assert program.kernel == row["kernel"] and len(program.bitstream) == \
                row["bitstream_words"]
            assert program.params == {"m": row["m"], "n": row["n"], "k": row["k"]}
        else:
            out, err, status = _main(["compile", *_point_options(row), "-o",
                                      str(table.parent / "x.rdu")])
            assert status == 2
            assert err.strip().endswith(row["error"].split(": ", 1)[1]), (err, row)


def test_rerun_skips_done_points_and_runs_only_new_ones(swept):
    table, _ = swept
    before = table.read_bytes()
    again = _sweep(GRID, table)
    assert again["ran"] == 0 and again["skipped"] == 8 and table.read_bytes() == before
    wider = _sweep(GRID + ["--seed", "1,2"], table)
    assert wider["points"] == 16 and wider["ran"] == 8 and wider["skipped"] == 8
    rows = read_table(table)
    assert len(rows) == 16 and len({row["point"] for row in rows}) == 16
    assert table.read_bytes().startswith(before)          # appended, not rewritten
    seeds = {(row["m"], row["cols"], row["seed"]): row["max_abs_err"]
             for row in rows if row["status"] == "ok"}
    assert seeds[8, 2, 1] != seeds[8, 2, 2]               # other inputs, other errors


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(cluster, tmp_path):
    """A point for the RTL with 2-stage PCUs cannot run (the RTL builds 4 stages); the
    other points run; the table says why in one line, the exit status is 1."""
    table = tmp_path / "t.csv"
    grid = tmp_path / "grid.toml"
    grid.write_text('kernels = ["gemm"]\ntiers = ["model", "verilator"]\n'
                    'machines = [{rows = 2, cols = 2, lanes = 4, stages = 2}]\n'
                    '[shape]\nm = [8]\nn = [8, 16]\nk = [8]\n')
    out, err, status = _main(["sweep", str(grid), "-o", str(table), "--json"])
    assert status == 1 and err.count("\n") == 1 and "2 run errors" in err
    rows = read_table(table)
    assert sorted((row["n"], row["tier"], row["status"]) for row in rows) == [
        (8, "model", "ok"), (8, "verilator", "run_error"),
        (16, "model", "ok"), (16, "verilator", "run_error")]
    out, err, status = _main(["run", "gemm", "--m", "8", "--n", "8", "--k", "8", "--rows",
                              "2", "--cols", "2", "--lanes", "4", "--stages", "2", "--sim",
                              "verilator"])
    assert status == 2
    failed = [row for row in rows if row["status"] == "run_error"]
    assert all(err.strip().endswith(row["error"].split(": ", 1)[1]) for row in failed)
    # --retry-failed runs exactly those again (and they fail again: same rows count)
    summary = json.loads(_main(["sweep", str(grid), "-o", str(table), "--json",
                                "--retry-failed"])[0])
    assert summary["ran"] == 2 and len(read_table(table)) == 4


def _task_workers():
    """PIDs of Ray workers running a sweep point (their process title)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes().startswith(b"ray::rdu-point"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_a_worker_killed_mid_sweep_loses_no_point(cluster, tmp_path):
    table = tmp_path / "t.csv"
    points = load_grid(None, {"kernels": ["gemm"], "shape": {"m": [48, 64], "n": [64],
                                                             "k": [32, 64]},
                              "machine": {"rows": [2], "cols": [2]},
                              "seeds": [1, 2]}).points()
    killed = []

    def kill_one():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            if table.exists() and table.read_bytes().count(b"\n") >= 3:   # 2 rows in
                workers = _task_workers()
                if workers:
                    os.kill(workers[0], signal.SIGKILL)
                    killed.append(workers[0])
            time.sleep(0.05)

    thread = threading.Thread(target=kill_one)
    thread.start()
    summary = run_sweep(points, table, progress=False)
    thread.join()
    assert killed, "no worker was caught running a point"
    rows = read_table(table)
    assert summary["missing"] == 0 and summary["ok"] == len(points) == 8
    assert sorted(row["point"] for row in rows) == sorted(p.key for p in points)


BAD_GRIDS = [
    ('kernels = ["gemm", "fft"]', "unknown kernel 'fft'"),
    ('kernels = ["gemm"]\n[shape]\nm = [8]\nn = [8]', "no values for 'k'"),
    ('kernels = ["gemm"]\n[shape]\nm = [8]\nn = [8]\nk = [0]', "expected positive"),
    ('kernels = ["gemm"]\ntiers = ["fpga"]\n[shape]\nm=[8]\nn=[8]\nk=[8]', "unknown tier"),
    ('kernels = ["gemm"]\nshape = {m=[8], n=[8], k=[8]}\n[machine]\nwidth = [2]',
     "unknown machine option 'width'"),
    ('kernels = ["gemm"]\nshape = {m=[8], n=[8], k=[8]}\nmachine = {rows = [2]}\n'
     'machines = [{}]', "not both"),
    ('kernels = ["gemm"]\nshape = {m=[8], n=[8], k=[8]}\nmachines = [{rows = [2, 4]}]',
     "one integer"),
    ('kernels = ["softmax"]\n[shape]\nsoftmax = [{m = 4}]', "missing 'n'"),
    ('kernels = "gemm"\nseed = 3', "unknown key 'seed'"),
    ('kernels = [', "not valid TOML"),
]


@pytest.mark.parametrize("text, message", BAD_GRIDS)
def test_a_bad_grid_is_one_line_and_exit_2(tmp_path, text, message):
    grid = tmp_path / "grid.toml"
    grid.write_text(text)
    out, err, status = _main(["sweep", str(grid), "-o", str(tmp_path / "t.csv")])
    assert status == 2 and err.count("\n") == 1 and err.startswith("rdu sweep: error:")
    assert message in err, err
    assert not (tmp_path / "t.csv").exists()


def test_bad_options_are_one_line_and_exit_2(tmp_path):
    for argv in (["sweep", "--kernel", "gemm", "--m", "8,x"], ["sweep"],
                 ["sweep", "--m", "8"], ["sweep", "--resource", "=2"],
                 ["sweep", str(tmp_path / "none.toml")],
                 ["sweep", "--kernel", "gemm", "--m", "8", "--n", "8", "--k", "8",
                  "--tier", "rtl"]):
        out, err, status = _main(argv)
        assert status == 2 and err.count("\n") == 1, (argv, err)
        assert err.startswith("rdu sweep: error:"), err


def test_without_ray_run_and_compile_work_and_sweep_says_why(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)          # `import ray` fails
    assert main(["compile", "gemm", "--m", "8", "--n", "8", "--k", "8", "-o",
                 str(tmp_path / "g.rdu")]) == 0
    assert main(["run", str(tmp_path / "g.rdu")]) == 0
    capsys.readouterr()
    assert main(["sweep", "--kernel", "gemm", "--m", "8", "--n", "8", "--k", "8", "-o",
                 str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs Ray" in err


def test_plot_draws_the_traffic_of_the_table(swept, tmp_path):
    table, _ = swept
    out, err, status = _main(["sweep", "--plot", "-o", str(table), "--plot-dir",
                              str(tmp_path)])
    assert status == 0, err
    assert [line.split()[-1] for line in out.splitlines()] == [str(tmp_path /
                                                                   "traffic-gemm.png")]
    assert (tmp_path / "traffic-gemm.png").read_bytes()[:4] == b"\x89PNG"


def test_the_same_sweep_again_agrees_point_for_point(swept, tmp_path):
    """A second run of the grid into another table measures the same figures; --compare
    says so, and names a value that differs (exit 1)."""
    table, _ = swept
    other = tmp_path / "again.csv"
    again = ["gemm" if option == "gemm,softmax" else option for option in GRID]
    _sweep(again, other)                                  # the grid's 4 gemm points
    out, err, status = _main(["sweep", "--compare", str(table), "-o", str(other), "--json"])
    result = json.loads(out)
    assert status == 0 and result["common"] == result["same"] == 4, (out, err)
    assert result["only_reference"] == len(read_table(table)) - 4
    with open(other, newline="") as stream:
        rows = list(csv.DictReader(stream))
    rows[0]["hbm_bytes"] = "1"                            # damage one figure
    with open(other, "w", newline="") as stream:
        writer = csv.DictWriter(stream, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    out, err, status = _main(["sweep", "--compare", str(table), "-o", str(other)])
    assert status == 1 and "1 points differ" in err and "hbm_bytes '1'" in err, err


def test_options_replace_the_grid_files_entries(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text('kernels = ["gemm", "softmax"]\nseeds = [1, 2]\n'
                    'machines = [{rows = 4, cols = 4}, {rows = 2, cols = 2, lanes = 4}]\n'
                    '[shape]\nm = [8, 16]\nn = [32]\nk = [8]\n')
    points = load_grid(grid).points()
    assert len(points) == 2 * 2 * 2 * 2                    # kernels x m x machines x seeds
    narrowed = load_grid(grid, {"kernels": ["gemm"], "machine": {"rows": [2], "cols": [2]},
                                "seeds": [3]}).points()
    assert [(dict(p.params)["m"], dict(p.machine)["rows"], dict(p.machine)["lanes"], p.seed)
            for p in narrowed] == [(8, 2, 8, 3), (16, 2, 8, 3)]   # default lanes again

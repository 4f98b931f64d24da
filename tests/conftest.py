"""pytest fixtures shared by both tiers.

* ``sim_dir``: this test's own directory, ``build/tests/<test name>`` (emptied first);
  logs, results and waveforms of the test land there.
* Seeds: every randomised test takes its seed from ``SEED`` or draws one and prints
  it; a failing test's report shows the seed to replay it with.
* ``RDU_PREBUILD=1`` (``make test``): the suite's Verilator builds start at once in a
  process of their own (``tests/prebuild.py``, its output in ``build/prebuild.log``),
  and the tests marked ``verilator`` run after the others, when their builds are done.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rdu.sim.seed import get_seed

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def sim_dir(request):
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid.split("::", 1)[-1])
    path = ROOT / "build" / "tests" / name
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


@pytest.fixture
def seed(request):
    value = get_seed()
    request.node.user_properties.append(("seed", value))
    return value


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed:
        seeds = [value for key, value in item.user_properties if key == "seed"]
        if seeds:
            report.sections.append(("seed", f"replay with SEED={seeds[0]}"))


def pytest_report_header(config):
    return f"SEED={os.environ.get('SEED', '<drawn per process>')}"


_prebuild = None


def _prebuilding(config):
    """Whether this process starts the builds: ``RDU_PREBUILD=1``, the controller (not
    an xdist worker), tests marked ``verilator`` selected."""
    return (os.environ.get("RDU_PREBUILD") == "1" and not hasattr(config, "workerinput")
            and "not verilator" not in (config.getoption("markexpr") or "")
            and not config.getoption("collectonly"))


def pytest_sessionstart(session):
    global _prebuild
    if _prebuilding(session.config):
        log = ROOT / "build" / "prebuild.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "w") as out:
            _prebuild = subprocess.Popen([sys.executable, str(ROOT / "tests" / "prebuild.py")],
                                         cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)


def pytest_collection_modifyitems(config, items):
    if os.environ.get("RDU_PREBUILD") == "1":       # (in the workers too: the same order)
        items.sort(key=lambda item: item.get_closest_marker("verilator") is not None)


def pytest_sessionfinish(session):
    if _prebuild is not None and _prebuild.poll() is None:
        _prebuild.terminate()                       # a run stopped early (-x, ^C)
        _prebuild.wait()

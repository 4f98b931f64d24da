"""pytest fixtures shared by both tiers.

* ``sim_dir``: this test's own directory, ``build/tests/<test name>`` (emptied first);
  logs, results and waveforms of the test land there.
* Seeds: every randomised test takes its seed from ``SEED`` or draws one and prints
  it; a failing test's report shows the seed to replay it with.
"""

import os
import re
import shutil
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

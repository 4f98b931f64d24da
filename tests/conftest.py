"""pytest fixtures shared by both tiers.

* ``sim_dir``: this test's own directory, ``build/tests/<test name>`` (emptied first);
  logs, results and waveforms of the test land there.
* Seeds: every randomised test takes its seed from ``SEED`` or draws one and prints
  it; a failing test's report shows the seed to replay it with.
* Order: :data:`BUILDS_FIRST` run first (see there).
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


#: One test for each large Verilator build, run before all others in this order.
#: pytest-xdist hands its first tests to the workers in turn, so the two workers start
#: different builds at once (the 4x4 and the 2x2 system, then the IP top and the 2x2
#: of PMUs, ...). Left in file order, a build started when its first test came up and
#: the other worker often waited on the same build's lock, one core idle through its
#: single-threaded steps (Amaranth writing the Verilog, Verilating): about 100 s of a
#: fresh clone's 25 minutes. A name no longer collected is skipped here.
BUILDS_FIRST = (
    "tests/test_attention.py::test_attention_on_verilator",         # 4x4, 4 AGCUs
    "tests/test_fuzz.py::test_fuzz_and_faults_verilator",           # 2x2 PCUs and PMUs
    "tests/test_ip.py::test_gemm_through_ip_verilator",             # the IP top (2x2)
    "tests/test_system.py::test_transpose_program_verilator",       # 2x2 of PMUs
    "tests/test_array.py::test_array_2x2_verilator",                # the tile array
    "tests/test_pcu.py::test_simd_op_sweep_verilator",              # the 4-lane PCU
)


def pytest_collection_modifyitems(config, items):
    first = []
    for name in BUILDS_FIRST:
        found = next((item for item in items if item.nodeid.split("[")[0] == name), None)
        if found is not None:
            items.remove(found)
            first.append(found)
    items[:0] = first

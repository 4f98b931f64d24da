"""The suite's Verilator builds, started at once in the background (``make test`` sets
``RDU_PREBUILD=1``; ``tests/conftest.py`` runs this module in a process of its own).

On a fresh clone the builds are about a third of the suite's CPU time. Left to the
tests, each starts when the first test needing it comes up, and the largest (the 4x4
system) came near the end, with the other worker waiting on its lock: the run ended
with one build and nothing else left to do. Built from the start, largest first, while
the workers run the tests that need no build, they overlap with the rest.

Each entry is the build a test makes (:func:`rdu.sim.verilator.build` with the same
class, top-level name and parameters: the same cache entry, under the same lock); a
build already in the cache costs nothing, one no test uses costs its build time. A build
that fails here is left for its test to report. ``python tests/prebuild.py`` runs it in
the foreground, saying what it builds.
"""

import sys
import time


def builds():
    """``(class, toplevel or None, parameters)`` of each build, largest first."""
    from rdu.apps.designs import get_design
    from rdu.frontend.kernels import KERNELS
    from rdu.machine import Machine

    from hdl.agcu import AGCU
    from hdl.array import TileArray
    from hdl.ip import RDUIP
    from hdl.pcu import FPGA_PCU_OPTIONS, PCU
    from hdl.pmu import PMU
    from hdl.switch import Switch
    from hdl.system import RDUSystem
    small = Machine(rows=2, cols=2, lanes=4, pmu_bytes=16384)       # tb.suites.fuzz
    return [
        (RDUSystem, None, Machine(**KERNELS["attention"].machine).system_params()),
        (RDUSystem, None, small.system_params()),
        (RDUIP, "rdu_ip", small.system_params()),
        (RDUSystem, None, get_design("system_2x2").params),
        (TileArray, None, {"rows": 2, "cols": 2, "lanes": 8}),
        (PCU, None, {"lanes": 4, "stages": 4, "fifo_depth": 4}),
        (PCU, None, {"lanes": 4, "stages": 4, "fifo_depth": 4, **FPGA_PCU_OPTIONS}),
        (Switch, None, {"lanes": 8}),
        (PMU, None, {"lanes": 8, "capacity_bytes": 65536}),
        (AGCU, None, {}),
    ]


def main(progress=True):
    from rdu.sim.verilator import build
    for cls, toplevel, params in builds():
        start = time.perf_counter()
        try:
            built = build(cls, toplevel=toplevel, progress=progress, **params)
        except Exception as error:                  # its test reports it
            print(f"prebuild: {cls.__name__}: {type(error).__name__}: {error}", flush=True)
            continue
        print(f"prebuild: {built.build_dir.name}: "
              f"{'cached' if built.cached else f'{time.perf_counter() - start:.0f} s'}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

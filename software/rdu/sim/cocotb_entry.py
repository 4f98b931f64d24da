"""The one cocotb test module: runs a :class:`rdu.sim.bench.Bench` body under Verilator.

When the body raises, the stats file holds ``error`` (its message) and ``error_type``
instead of ``result``, so the caller reports the cause itself, not a log path.

The pytest side (:func:`rdu.sim.runner.run_verilator`) names the body and its parameters
in the environment:

``TB_BODY``    ``module:function`` of an ``async def body(bench, **params)``
``TB_PARAMS``  JSON object of keyword arguments
``TB_STATS``   file to write ``{"cycles", "seconds", "result"}`` to
``TB_TIMEOUT`` hard limit in cycles for the whole test (a last-resort watchdog)
``TB_WATCHDOG`` cycles without any stream transfer before the stream watchdog fires
``TB_PROFILE`` optional: write a ``cProfile`` of the Python side of the run (test body,
               agents, memory models) to this file (``python -m pstats FILE``)
"""

import importlib
import json
import os

import cocotb
from cocotb.triggers import ClockCycles

from .agents import HarnessError
from .cocotb_bench import CocotbBench


def _load_body():
    module_name, _, function = os.environ["TB_BODY"].partition(":")
    return getattr(importlib.import_module(module_name), function)


async def _hard_timeout(dut, cycles):
    await ClockCycles(dut.clk, cycles)
    raise HarnessError(f"hard timeout: test still running after {cycles} cycles")


@cocotb.test()
async def run_body(dut):
    body = _load_body()
    params = json.loads(os.environ.get("TB_PARAMS", "{}"))
    bench = CocotbBench(dut, watchdog=int(os.environ.get("TB_WATCHDOG", "2000")))
    await bench.start()
    cocotb.start_soon(_hard_timeout(dut, int(os.environ.get("TB_TIMEOUT", "10000000"))))
    stats_path = os.environ.get("TB_STATS")
    profile_path = os.environ.get("TB_PROFILE")
    profiler = None
    if profile_path:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    try:
        result = await body(bench, **params)
    except Exception as error:
        # the cause travels back to the caller as data, not only as a log line
        if stats_path:
            with open(stats_path, "w") as stats:
                json.dump({"cycles": bench.cycle, "seconds": bench.elapsed, "seed": bench.seed,
                           "error": str(error), "error_type": type(error).__name__},
                          stats, default=repr)
        raise
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile_path)
    seconds = bench.elapsed
    if stats_path:
        with open(stats_path, "w") as stats:
            json.dump({"cycles": bench.cycle, "seconds": seconds, "seed": bench.seed,
                       "result": result}, stats, default=repr)

"""Run one test body in either tier and return what it measured.

>>> stats = run_amaranth(StreamFIFO(16, 4), fifo_body, depth=4)
>>> stats = run_verilator(build(StreamFIFO, shape=16, depth=4), fifo_body, test_dir, depth=4)

Both return a :class:`BodyStats` with ``cycles``, ``seconds``, ``cycles_per_second``,
the seed and whatever the body returned.
"""

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .amaranth_bench import AmaranthBench
from .seed import get_seed
from .verilator import run_cocotb

__all__ = ["BodyStats", "BodyError", "run_amaranth", "run_verilator"]


class BodyError(AssertionError):
    """A body that raised under Verilator: its own message, the exception's type name
    (``error_type``), the cycle it stopped at and the test directory (log, waves)."""

    def __init__(self, message, error_type, cycle, test_dir):
        super().__init__(message)
        self.error_type, self.cycle, self.test_dir = error_type, cycle, test_dir


@dataclass
class BodyStats:
    tier: str
    cycles: int
    seconds: float
    seed: int
    result: object = None
    extra: dict = field(default_factory=dict)

    @property
    def cycles_per_second(self):
        return self.cycles / self.seconds if self.seconds else float("inf")


def run_amaranth(component, body, *, seed=None, watchdog=2000, vcd=None, **params):
    """Run ``body(bench, **params)`` on ``component`` in the Amaranth simulator."""
    bench = AmaranthBench(component, seed=seed, watchdog=watchdog)
    result = {}

    async def wrapped(bench):
        result["value"] = await body(bench, **params)

    stats = bench.run(wrapped, vcd=vcd)
    return BodyStats("amaranth", stats.cycles, stats.seconds, bench.seed, result.get("value"))


def _body_ref(body):
    return f"{body.__module__}:{body.__qualname__}"


def run_verilator(built, body, test_dir, *, seed=None, watchdog=2000, timeout=10_000_000,
                  **params):
    """Run ``body(bench, **params)`` under cocotb + Verilator on ``built``.

    ``test_dir`` is this test's own directory (results, log, ``dump.fst`` with waves).
    """
    test_dir = Path(test_dir).resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    stats_path = test_dir / "stats.json"
    if stats_path.exists():
        stats_path.unlink()
    seed = get_seed() if seed is None else seed
    try:
        run_cocotb(built, "rdu.sim.cocotb_entry", test_dir, seed=seed, timeout=timeout, env={
            "TB_BODY": _body_ref(body),
            "TB_PARAMS": json.dumps(params),
            "TB_STATS": str(stats_path),
            "TB_WATCHDOG": str(watchdog),
        })
    except AssertionError:
        if stats_path.exists():
            stats = json.loads(stats_path.read_text())
            if "error" in stats:
                raise BodyError(stats["error"], stats["error_type"], stats["cycles"],
                                test_dir) from None
        raise
    stats = json.loads(stats_path.read_text())
    return BodyStats("verilator", stats["cycles"], stats["seconds"], stats["seed"],
                     stats["result"], {"test_dir": os.fspath(test_dir)})

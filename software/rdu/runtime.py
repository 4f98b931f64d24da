"""The runtime: run a compiled :class:`~rdu.program.Program` on a model of the machine.

Two back ends, one result:

* ``model``: the functional model (:mod:`rdu.funcmodel`) executes the bitstream in
  numpy, item by item: seconds even for large kernels, no cycle counts;
* ``verilator``: the generated Verilog of :class:`hdl.system.RDUSystem` (tile array +
  AGCUs) under cocotb + Verilator, with the HBM/DDR models behind the AGCUs
  (:mod:`sim_models`): the program is loaded through AGCU 0 (``PROGRAM_LOAD``), the
  array started, every AGCU of the program sent ``EXECUTE``, and the run waits for
  them with a watchdog. Cycle-accurate.

Both return a :class:`RunResult` with the output words by name.
"""

import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["RunResult", "run_program", "SIMULATORS", "system_params"]

SIMULATORS = ("model", "verilator")


@dataclass
class RunResult:
    outputs: dict                     # name -> np.uint32 array
    cycles: int = None                # None for the functional model
    sim: str = "model"
    seconds: float = 0.0
    build_seconds: float = 0.0
    counters: dict = field(default_factory=dict)
    waves: str = None


def system_params(program):
    """Constructor arguments of the :class:`hdl.system.RDUSystem` a program needs."""
    geometry = program.geometry
    return {"rows": geometry["rows"], "cols": geometry["cols"], "lanes": geometry["lanes"],
            "agcus": geometry.get("agcus", 2),
            "capacity_bytes": geometry.get("capacity_bytes", 65536)}


def run_program(program, sim="model", *, seed=1, work_dir=None, waves=False,
                timeout=None, progress=False):
    """Run ``program``; return a :class:`RunResult` (raise ``AssertionError`` with a
    one-line first line when the machine reports an error or the watchdog fires)."""
    if sim not in SIMULATORS:
        raise ValueError(f"unknown simulator {sim!r}; expected one of {', '.join(SIMULATORS)}")
    start = time.perf_counter()
    if sim == "model":
        from .funcmodel import run_program as model_run
        geometry = program.geometry
        outputs, result = model_run(program, stages=geometry.get("stages", 4),
                                    capacity_bytes=geometry.get("capacity_bytes", 65536))
        outputs = {name: np.asarray(words, np.uint32) for name, words in outputs.items()}
        return RunResult(outputs, None, "model", time.perf_counter() - start,
                         counters=result.counters)

    from hdl.system import RDUSystem
    from tb.runner import run_verilator
    from tb.suites.system import run_program as body
    from tb.verilator import build, project_root
    work_dir = Path(work_dir or project_root() / "build" / "run" / program.name)
    program_dir = program.save(work_dir / "program")
    params = system_params(program)
    built = build(RDUSystem, waves=waves, **params)
    perf_counters = _perf_counter_names(RDUSystem, params)
    if timeout is None:
        timeout = estimate_cycles(program) * 4 + 20000
    with _LogProgress(work_dir / "sim" / "sim.log", enabled=progress):
        stats = run_verilator(built, body, work_dir / "sim", seed=seed,
                              program_dir=str(program_dir), timeout=timeout,
                              progress=progress, perf_counters=perf_counters)
    result = stats.result
    outputs = _read_outputs(result, program)
    wave_files = sorted((work_dir / "sim").glob("dump.*")) if waves else []
    return RunResult(outputs, result["cycles"], "verilator", time.perf_counter() - start,
                     built.seconds, {k: v for k, v in result.items()
                                     if k not in ("outputs", "outputs_file")},
                     str(wave_files[0]) if wave_files else None)


def _perf_counter_names(system_class, params):
    """The array's performance counters (switch stalls, PMU beats and stalls), read
    through ``host.perf_select`` after the run. The names come from a system object
    that is never elaborated: Amaranth's warning about that is silenced here."""
    import gc
    import warnings

    from amaranth.hdl import UnusedElaboratable
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        system = system_class(**params)
        names = system.perf_counter_names()
        del system
        gc.collect()
    return names


class _LogProgress:
    """While the simulation runs in its own process, show its latest progress line
    (``[run_program ...] N/T cycles``) on one updating stderr line."""

    def __init__(self, log_path, enabled):
        self.log_path, self.enabled = Path(log_path), enabled and sys.stderr.isatty()
        self.stop = threading.Event()

    def __enter__(self):
        if self.enabled:
            self.thread = threading.Thread(target=self._watch, daemon=True)
            self.thread.start()
        return self

    def _watch(self):
        shown = ""
        while not self.stop.wait(0.5):
            try:
                lines = self.log_path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            latest = next((line for line in reversed(lines) if "[run_program" in line), "")
            if latest and latest != shown:
                shown = latest
                text = latest[latest.index("[run_program"):]
                print(f"\r{text[:100]:<100}", end="", file=sys.stderr, flush=True)
        if shown:
            print(file=sys.stderr)

    def __exit__(self, *exc):
        if self.enabled:
            self.stop.set()
            self.thread.join()
        return False


def _read_outputs(result, program):
    if "outputs_file" in result:
        with np.load(result["outputs_file"]) as arrays:
            return {name: np.asarray(arrays[name], np.uint32) for name in program.outputs}
    return {name: np.asarray(result["outputs"][name], np.uint32) for name in program.outputs}


def estimate_cycles(program):
    """A rough cycle count of a program (for watchdogs): the items its AGCUs move."""
    meta = program.meta
    if meta.get("kernel") == "gemm":
        return meta["passes"] * meta["col_tiles"] * meta["k_pad"] + 4 * meta["m_pad"] + 2000
    return 100000

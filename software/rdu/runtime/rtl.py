"""What every RTL back end shares: the cached Verilator build of a design for a
machine, its performance counters' names, and a host body run under cocotb or on the
native runner with every failure turned into one :class:`RunFailure`."""

import gc
import sys
import threading
import warnings
from pathlib import Path

from amaranth.hdl import UnusedElaboratable

from ..sim.native import NativeError, run_native
from ..sim.runner import BodyError, run_verilator
from ..sim.verilator import VerilatorError, build, project_root
from .results import RunFailure

__all__ = ["build_design", "perf_counter_names", "run_body", "run_dir"]


def run_dir(work_dir, name):
    """The directory of a run: ``work_dir`` or ``build/run/<name>``, absolute."""
    return Path(work_dir or project_root() / "build" / "run" / name).resolve()


def perf_counter_names(design, params):
    """The array's performance counters (switch stalls, PMU beats and stalls, unit
    errors), read through ``host.perf_select`` after each launch. The names come from a
    ``design`` object that is never elaborated: Amaranth's warning about that is
    silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        system = design(**params)
        names = system.perf_counter_names()
        del system
        gc.collect()
    return names


def build_design(design, machine, *, toplevel=None, waves=False, progress=False):
    """``(built, perf_counters)``: the cached Verilator build of ``design`` for
    ``machine`` and the names of its performance counters; a machine the RTL cannot have
    or a failed build is one :class:`RunFailure`."""
    try:
        params = machine.system_params()
    except ValueError as error:
        raise RunFailure(str(error), "machine") from None
    try:
        built = build(design, toplevel=toplevel, waves=waves, progress=progress, **params)
    except VerilatorError as error:
        raise RunFailure(str(error).splitlines()[0], "build") from None
    return built, perf_counter_names(design, params)


def run_body(built, body, sim_dir, *, native, log_progress, seed, where="RTL", **params):
    """Run the host body ``body`` on ``built`` with ``params`` under cocotb (its log
    echoed with ``log_progress``), or with ``native`` on the native runner
    (:mod:`rdu.sim.native`); every failure becomes one :class:`RunFailure` (a failure of
    the body says ``(WHERE, cycle N)``)."""
    try:
        with LogProgress(sim_dir / "sim.log", enabled=log_progress and not native):
            return (run_native if native else run_verilator)(
                built, body, sim_dir, seed=seed, **params)
    except NativeError as error:
        raise RunFailure(str(error), "build") from None
    except BodyError as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else \
            error.error_type
        raise RunFailure(f"{message} ({where}, cycle {error.cycle})", error.error_type) \
            from None
    except AssertionError as error:
        first = str(error).strip().splitlines()[0]
        raise RunFailure(f"the RTL simulation failed: {first} (log: {sim_dir / 'sim.log'})",
                         "simulation") from None


class LogProgress:
    """While the simulation runs in its own process, show its latest progress line
    (``[run_program ...] N cycles, R cycles/s``) on one updating stderr line."""

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

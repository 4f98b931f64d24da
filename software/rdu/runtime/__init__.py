"""The runtime: run compiled :class:`~rdu.program.Program` s on a model of the machine.

One code path, several back ends behind one interface (:class:`Backend`, registered by
name in :data:`BACKENDS`; ``--sim`` offers :data:`SIMULATORS`):

* ``model`` (:mod:`rdu.runtime.model_backend`): the functional model executes the
  bitstreams in numpy: seconds even for large kernels, no cycle counts;
* ``verilator``, ``native``, ``ip`` (:mod:`rdu.runtime.rtl_backends`): the generated
  Verilog under cocotb + Verilator, the same build with the memory side in C++, and the
  IP top driven over AXI4-Lite on cocotbext-axi's models. Cycle-accurate.

Modules: :mod:`~rdu.runtime.launch` (:func:`run_programs`, :func:`run_schedule`),
:mod:`~rdu.runtime.kernel_runs` (:func:`run_kernel`, :func:`run_sequence`: runs checked
against the reference), :mod:`~rdu.runtime.steps` (schedule steps and checks),
:mod:`~rdu.runtime.orchestrate` (an orchestrated schedule's commands and plan),
:mod:`~rdu.runtime.generation` (:func:`run_generation`: that schedule once per token),
:mod:`~rdu.runtime.results` (:class:`RunResult` and friends, :func:`roofline`),
:mod:`~rdu.runtime.watchdog` (the one watchdog estimate and its timeouts),
:mod:`~rdu.runtime.backend` (the contract and registry), :mod:`~rdu.runtime.rtl` (build
and host-body runs). The messages between the runtime and the host bodies are
:mod:`rdu.sim.protocol`.

:func:`run_programs` launches a sequence of programs on one machine with one memory
(configuration cleared and reloaded before each, memory kept): a later program reads
what an earlier one stored. Each launch reports its configuration and execution
cycles. :func:`run_program` is the one-program case.

Every failure of a run is a :class:`RunFailure` whose message is one line naming the
unit and the cause (a deadlock, a unit's error status, a watchdog, the loader's
verdict, a program for another machine); the command line prints it and exits 2.
"""

from . import model_backend, rtl_backends  # noqa: F401  (they register the back ends)
from .backend import BACKENDS, Backend, RunOptions, backend_named, register_backend
from .generation import (
    GenerationResult,
    GenerationRun,
    LogitsOutput,
    TokenInput,
    run_generation,
)
from .kernel_runs import run_kernel, run_sequence
from .launch import (
    hbm_peak_bytes_per_cycle,
    orchestrating_backends,
    run_program,
    run_programs,
    run_schedule,
    system_params,
)
from .orchestrate import orchestration_files
from .results import RunFailure, RunResult, ScheduleResult, StepResult, roofline
from .steps import EXECUTIONS, Copy, Launch, Write, check_machine
from .watchdog import estimate_cycles

__all__ = ["RunResult", "RunFailure", "run_program", "run_programs", "SIMULATORS",
           "run_kernel", "hbm_peak_bytes_per_cycle",
           "system_params", "check_machine", "Launch", "Copy", "Write", "StepResult",
           "ScheduleResult", "EXECUTIONS", "run_schedule", "orchestration_files",
           "run_sequence", "BACKENDS", "Backend", "RunOptions", "backend_named",
           "register_backend", "orchestrating_backends", "estimate_cycles", "roofline",
           "run_generation", "TokenInput", "LogitsOutput", "GenerationResult",
           "GenerationRun"]

#: The registered back ends' names (``--sim`` choices), in the order they are offered.
SIMULATORS = tuple(BACKENDS)

"""How long a run may take: the one watchdog estimate of a program and the timeouts
derived from it, each written once.

The estimate reads only what every program carries: its bitstream (the beats the
busiest unit will move: every launch, head, pass and chunk the counters and patterns
run), its MACs and the machine's peak MACs per cycle, the PCU's special-function
period. No kernel or family name. It is generous on purpose: a watchdog only has to
stop a run that will never end, never a correct one (``tests/test_watchdog.py``
compares it with measured cycles; ``python -m benchmarks.watchdog`` sweeps more shapes).
"""

from hdl.fp_latency import interval_bound

from ..units.registry import PCU_VARIANTS, busiest_unit

__all__ = ["WATCHDOG_FLOOR_CYCLES", "COMPUTE_MARGIN", "LAUNCH_TIMEOUT_FACTOR",
           "LAUNCH_TIMEOUT_SLACK", "LAUNCH_OVERHEAD_CYCLES", "COPY_CYCLES_PER_BYTE",
           "COPY_TIMEOUT_SLACK", "SIMULATION_SLACK_CYCLES", "special_function_period",
           "work_cycles", "estimate_cycles", "launch_timeout", "copy_timeout", "programs_timeout"]

#: Cycles every program is allowed whatever its size (a small kernel's load, the
#: pipeline's fill and drain, the memory's latencies).
WATCHDOG_FLOOR_CYCLES = 100_000
#: The estimate allows this many times a program's work (:func:`work_cycles`).
COMPUTE_MARGIN = 4
#: A launch's watchdog: ``LAUNCH_TIMEOUT_FACTOR * estimate + LAUNCH_TIMEOUT_SLACK``.
LAUNCH_TIMEOUT_FACTOR = 4
LAUNCH_TIMEOUT_SLACK = 20_000
#: Cycles a host run allows each launch beyond its watchdog (configuration load,
#: reading the counters and the outputs).
LAUNCH_OVERHEAD_CYCLES = 200_000
#: A copy's watchdog: ``COPY_CYCLES_PER_BYTE * length + COPY_TIMEOUT_SLACK``.
COPY_CYCLES_PER_BYTE = 4
COPY_TIMEOUT_SLACK = 50_000
#: Cycles a simulation allows a whole schedule beyond the sum of its steps' watchdogs.
SIMULATION_SLACK_CYCLES = 100_000


def special_function_period(machine):
    """Cycles per vector of ``machine``'s PCU special functions (its
    :class:`~rdu.units.registry.PCUVariant`'s ``special_function_period``), times the
    longest interval the interlock of its pipelined SIMD stages may leave between beats
    (:func:`hdl.fp_latency.interval_bound`: 1 with ``fp_latency`` off)."""
    return PCU_VARIANTS[machine.pcu].special_function_period * interval_bound(
        machine.latency_table)


def work_cycles(program):
    """Cycles ``program``'s work takes at least: the larger of its busiest unit's beats
    (one a cycle: ``meta["busiest_beats"]``, which the compiler records from
    :func:`rdu.units.registry.busiest_unit`, so a bitstream damaged after compilation
    keeps the estimate it was compiled with) and its MACs at the array's peak
    (``meta["macs"]``, ``meta["peak_macs_per_cycle"]``)."""
    meta = program.meta
    macs = meta.get("macs") or 0
    peak = meta.get("peak_macs_per_cycle") or 0
    compute = -(-macs // peak) if macs and peak else 0
    beats = meta.get("busiest_beats")
    if beats is None:                   # a program file written before the field
        try:
            beats, *_ = busiest_unit(program.bitstream, program.machine.stages)
        except ValueError:              # a damaged bitstream: the hardware refuses it
            beats = 0
    return max(compute, beats)


def estimate_cycles(program):
    """A generous cycle count of one execution of ``program``, for watchdogs: the
    special-function period times the floor plus :data:`COMPUTE_MARGIN` times its
    :func:`work_cycles`."""
    return special_function_period(program.machine) * (
        WATCHDOG_FLOOR_CYCLES + COMPUTE_MARGIN * work_cycles(program))


def launch_timeout(program, timeout=None):
    """The watchdog of one launch of ``program``: ``timeout`` if given, else from
    :func:`estimate_cycles`."""
    return timeout or estimate_cycles(program) * LAUNCH_TIMEOUT_FACTOR + LAUNCH_TIMEOUT_SLACK


def copy_timeout(length, timeout=None):
    """The watchdog of a copy of ``length`` bytes: ``timeout`` if given."""
    return timeout or COPY_CYCLES_PER_BYTE * length + COPY_TIMEOUT_SLACK


def programs_timeout(timeouts):
    """The hard limit of a simulation running launches with watchdogs ``timeouts``."""
    return sum(timeouts) + LAUNCH_OVERHEAD_CYCLES * len(timeouts)

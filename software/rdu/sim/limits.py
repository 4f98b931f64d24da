"""What a launch programs besides its bitstream: the array's no-progress watchdog and its
run budget (``docs/system.md``, "Reliability"), from the launch's timeout."""

from hdl.array import BUDGET_BITS, WATCHDOG_BITS

__all__ = ["hardware_watchdog_cycles", "hardware_cycle_budget", "BUDGET_SLACK"]


def hardware_watchdog_cycles(timeout, watchdog_cycles=None):
    """The ``host.watchdog_cycles`` a launch with ``timeout`` programs: ``watchdog_cycles``
    if given (0: off), else half the launch timeout, so that a stall stops the array
    (and is named) before the host's own watchdog; at most ``2**WATCHDOG_BITS - 1``."""
    cycles = timeout // 2 if watchdog_cycles is None else watchdog_cycles
    return max(0, min(int(cycles), (1 << WATCHDOG_BITS) - 1))


#: Cycles the host waits past a launch's run budget before its own watchdog ends the wait
#: (the array's stop, then the driver's reads of it, come first).
BUDGET_SLACK = 256


def hardware_cycle_budget(timeout, watchdog_cycles):
    """The ``host.cycle_budget`` a launch with ``timeout`` programs: the timeout itself
    (the host then waits :data:`BUDGET_SLACK` cycles more, so that a run that keeps
    moving is stopped by the array, and named, not by the host's wait), or 0 (off)
    when the array's watchdog is off (``watchdog_cycles`` 0)."""
    return min(int(timeout), (1 << BUDGET_BITS) - 1) if watchdog_cycles else 0

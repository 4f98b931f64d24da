"""The roofline of a run: the fewest cycles a machine could run a program's work in, and
what share of that a run achieved.

A program's *work* (:class:`Work`) is what its kernel must do at least, counted from
the program itself by its kernel family (:meth:`rdu.compiler.families.base.Family.work`):

* ``macs``: the multiply-accumulates of the operators as written (a matmul ``M x N x K``
  is ``M N K``; padding, masked keys and the lanes a decode query leaves idle are not
  work); row-wise kernels have none;
* ``hbm_bytes``: every input tensor read once and every output written once, in their
  stored dtype (BF16 2 bytes, FP32 4), at their shapes (no padding, no re-reads).

A schedule of several programs (an unfused kernel) does the sum of its programs' work:
its intermediates are written and read again through HBM.

The *bound* of work on a :class:`~rdu.machine.Machine` is the larger of ``macs /
machine.macs_per_cycle`` (the PCUs' systolic arrays all busy) and ``hbm_bytes /
machine.hbm_bytes_per_cycle`` (the HBM streaming at its peak), rounded up to whole
cycles; the resource behind the larger one *binds* (``"compute"`` or ``"HBM"``). A run
of ``cycles`` achieved ``share = bound / cycles`` of the roofline (``None`` without a
cycle count: the functional model).

>>> from rdu.machine import Machine
>>> line = Roofline.of(Work(macs=64 ** 3, hbm_bytes=32768), Machine(), cycles=1024)
>>> line.bound_cycles, line.binding, line.share
(1024, 'HBM', 1.0)
"""

import math
from dataclasses import dataclass

__all__ = ["Work", "Roofline", "COMPUTE", "HBM", "describe"]

#: The binding resources.
COMPUTE, HBM = "compute", "HBM"


@dataclass(frozen=True)
class Work:
    """What a program must do at least: ``macs`` and ``hbm_bytes`` (read + written)."""
    macs: int = 0
    hbm_bytes: int = 0

    def __add__(self, other):
        return Work(self.macs + other.macs, self.hbm_bytes + other.hbm_bytes)

    @classmethod
    def total(cls, works):
        """The work of a schedule: the sum of its programs'."""
        result = cls()
        for work in works:
            result = result + work
        return result


@dataclass(frozen=True)
class Roofline:
    """The roofline of ``work`` on a machine and, with ``cycles``, a run's share of it."""
    macs: int
    hbm_bytes: int
    compute_cycles: int          # macs / the array's MAC peak per cycle, rounded up
    hbm_cycles: int              # hbm_bytes / the HBM's peak bytes per cycle, rounded up
    cycles: int | None = None    # the run's measured cycles (None: not timed)

    @classmethod
    def of(cls, work, machine, cycles=None):
        """The roofline of :class:`Work` ``work`` on ``machine``
        (:attr:`~rdu.machine.Machine.macs_per_cycle`,
        :attr:`~rdu.machine.Machine.hbm_bytes_per_cycle`) for a run of ``cycles``."""
        compute = math.ceil(work.macs / machine.macs_per_cycle) if work.macs else 0
        memory = math.ceil(work.hbm_bytes / machine.hbm_bytes_per_cycle)
        return cls(work.macs, work.hbm_bytes, compute, memory, cycles)

    @property
    def bound_cycles(self):
        """The fewest cycles the work takes on the machine."""
        return max(self.compute_cycles, self.hbm_cycles)

    @property
    def binding(self):
        """The resource behind the bound: ``"compute"`` or ``"HBM"``."""
        return COMPUTE if self.compute_cycles >= self.hbm_cycles else HBM

    @property
    def share(self):
        """``bound_cycles / cycles`` (4 decimals), or ``None`` without cycles."""
        return round(self.bound_cycles / self.cycles, 4) if self.cycles else None

    def to_json(self):
        """The ``roofline`` object of ``rdu run --json`` and the sweep's records."""
        return {"macs": self.macs, "hbm_bytes": self.hbm_bytes,
                "compute_cycles": self.compute_cycles, "hbm_cycles": self.hbm_cycles,
                "bound_cycles": self.bound_cycles, "binding": self.binding,
                "share": self.share}

    def describe(self):
        """One line: the bound, what binds, the share achieved (:func:`describe`)."""
        return describe(self.to_json())


def describe(figures):
    """One line of a roofline's :meth:`~Roofline.to_json` ``figures``: the bound, what
    binds, the share achieved (``rdu run``'s ``roofline`` line)."""
    share = figures["share"]
    achieved = "" if share is None else f", {share:.1%} achieved"
    return (f"{figures['bound_cycles']} cycles, {figures['binding']}-bound "
            f"({figures['macs']} MACs: {figures['compute_cycles']} cycles; "
            f"{figures['hbm_bytes']} HBM bytes: {figures['hbm_cycles']} cycles){achieved}")

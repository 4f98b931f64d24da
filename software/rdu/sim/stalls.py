"""Idle and backpressure patterns for stream drivers.

A pattern answers one question per cycle: may the driver offer (source) or accept
(sink) on this cycle? Patterns are deterministic given their seed, so a failing
run replays exactly with the same ``SEED``.
"""

import random

__all__ = ["StallPattern", "NoStall", "CyclicStall", "RandomStall", "stall_pattern"]


class StallPattern:
    """Base class: ``next()`` returns True when the driver may act on this cycle."""

    def next(self):
        raise NotImplementedError

    def __repr__(self):
        return type(self).__name__ + "()"


class NoStall(StallPattern):
    """Never stall: offer or accept on every cycle."""

    def next(self):
        return True


class CyclicStall(StallPattern):
    """Act for ``active`` cycles, then stall for ``idle`` cycles, repeating."""

    def __init__(self, active, idle):
        if active < 1 or idle < 0:
            raise ValueError(f"Cyclic stall needs active >= 1 and idle >= 0, "
                             f"not active={active}, idle={idle}")
        self.active = active
        self.idle = idle
        self._phase = 0

    def next(self):
        go = self._phase < self.active
        self._phase = (self._phase + 1) % (self.active + self.idle)
        return go

    def __repr__(self):
        return f"CyclicStall(active={self.active}, idle={self.idle})"


class RandomStall(StallPattern):
    """Act with probability ``probability`` on each cycle, from its own seeded generator."""

    def __init__(self, probability, seed):
        if not 0.0 < probability <= 1.0:
            raise ValueError(f"Random stall probability must be in (0, 1], not {probability}")
        self.probability = probability
        self.seed = seed
        self._rng = random.Random(seed)

    def next(self):
        return self._rng.random() < self.probability

    def __repr__(self):
        return f"RandomStall(probability={self.probability}, seed={self.seed})"


def stall_pattern(kind, seed=0):
    """Build a pattern from a short name: ``none``, ``cyclic`` (3 on, 2 off),
    ``random`` (p = 0.5) or ``random:P``."""
    if kind in (None, "none"):
        return NoStall()
    if kind == "cyclic":
        return CyclicStall(3, 2)
    if kind.startswith("cyclic:"):
        active, idle = kind.split(":")[1].split("/")
        return CyclicStall(int(active), int(idle))
    if kind == "random":
        return RandomStall(0.5, seed)
    if kind.startswith("random:"):
        return RandomStall(float(kind.split(":")[1]), seed)
    raise ValueError(f"Unknown stall pattern {kind!r}; expected none, cyclic, cyclic:A/I, "
                     f"random or random:P")

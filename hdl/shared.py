"""Shared units in Verilog generation: convert each distinct unit once.

Amaranth elaborates and converts every instance of a unit separately: the 4x4 array's
eight PCUs cost eight conversions (three of the four minutes it takes to write its
Verilog). Inside :func:`shared_units`, a container that wraps its units with
:func:`share` instantiates them as Verilog modules (``Instance``) instead, and records
one unit object per distinct kind; the caller converts each recorded unit once, under
the module name the instances use (``rdu.sim.verilator.generate_verilog``). Outside that
context :func:`share` returns the unit itself, so simulation is unchanged.

A unit is shared only with units of the same class whose plain constructor settings
(the ``int``/``str``/``bool`` attributes it keeps) are equal; those are what the
containers vary (lanes, stages, FIFO depth, capacity).
"""

import contextvars
from contextlib import contextmanager

from amaranth import ClockSignal, Instance, ResetInserter, ResetSignal, Value
from amaranth.hdl import Elaboratable
from amaranth.lib import wiring

__all__ = ["shared_units", "share"]

_registry = contextvars.ContextVar("shared_units", default=None)


@contextmanager
def shared_units():
    """Within this context :func:`share` records units; yields ``{module: unit}``."""
    modules, keys = {}, {}
    token = _registry.set((modules, keys))
    try:
        yield modules
    finally:
        _registry.reset(token)


def _key(unit):
    settings = tuple(sorted((name, value) for name, value in vars(unit).items()
                            if isinstance(value, (bool, int, str))))
    ports = tuple((path, repr(member.flow), repr(member.shape))
                  for path, member in unit.signature.members.flatten() if member.is_port)
    return (type(unit).__module__, type(unit).__qualname__, settings, ports)


class _SharedInstance(Elaboratable):
    def __init__(self, unit, module, reset=None):
        self._unit, self._module, self._reset = unit, module, reset

    def elaborate(self, platform):
        reset = ResetSignal("sync")
        if self._reset is not None:
            reset = reset | self._reset
        ports = {"i_clk": ClockSignal("sync"), "i_rst": reset}
        for path, member, value in self._unit.signature.flatten(self._unit):
            direction = "i" if member.flow == wiring.In else "o"
            ports[f"{direction}_{'__'.join(map(str, path))}"] = Value.cast(value)
        return Instance(self._module, **ports)


def share(unit, kind, reset=None):
    """``unit`` itself, or, inside :func:`shared_units`, an instance of the module
    ``<kind>_<n>`` that stands for every unit equal to it.

    ``reset`` (a 1-bit value, optional) also resets the unit: ``ResetInserter`` on the
    unit itself, or ORed into the instance's reset (an instance's registers are not
    reached by a ``ResetInserter`` around its parent)."""
    registry = _registry.get()
    if registry is None:
        return unit if reset is None else ResetInserter(reset)(unit)
    modules, keys = registry
    key = _key(unit)
    if key not in keys:
        keys[key] = f"{kind}_{len(modules)}"
        modules[keys[key]] = unit
    else:
        unit._MustUse__silence = True       # the recorded unit stands in for it
    return _SharedInstance(unit, keys[key], reset)

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

from amaranth import ClockSignal, Const, Instance, Module, ResetInserter, ResetSignal, Value
from amaranth.hdl import Elaboratable
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["shared_units", "share", "unit_key", "module_key", "Flushable"]

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


def unit_key(unit):
    """What makes two units the same module: class, plain settings (``int``, ``str``,
    ``bool`` attributes), ports."""
    settings = tuple(sorted((name, value) for name, value in vars(unit).items()
                            if isinstance(value, (bool, int, str))))
    ports = tuple((path, repr(member.flow), repr(member.shape))
                  for path, member in unit.signature.members.flatten() if member.is_port)
    return (type(unit).__module__, type(unit).__qualname__, settings, ports)


def module_key(recorded):
    """:func:`unit_key` of a unit :func:`shared_units` recorded (a :class:`Flushable`:
    of the unit it wraps, marked): equal keys convert to the same Verilog."""
    if isinstance(recorded, Flushable):
        return ("flushable", unit_key(recorded.wrapped))
    return unit_key(recorded)


class Flushable(wiring.Component):
    """``unit`` with one more input, ``flush``: a synchronous reset of its registers (a
    ``ResetInserter``), so that a shared unit's module is flushed through a port of its
    own and nothing reads the asynchronous ``rst`` combinationally (``docs/
    simulation-speed.md``; ``tests/test_tools.py``).

    Attributes
    ----------
    wrapped : wiring.Component
        The unit.
    flush : In(1)
    """

    def __init__(self, unit):
        members = dict(unit.signature.members.items())
        if "flush" in members:
            raise ValueError(f"unit {unit!r} already has a port named 'flush'")
        self.wrapped = unit
        super().__init__({**members, "flush": In(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = ResetInserter(self.flush)(self.wrapped)
        for path, member, outer in self.signature.flatten(self):
            if path == ("flush",):
                continue
            inner = self.wrapped
            for part in path:
                inner = inner[part] if isinstance(part, int) else getattr(inner, part)
            if isinstance(outer, Const) or isinstance(inner, Const):
                continue            # e.g. the ready of an always_ready stream
            m.d.comb += inner.eq(outer) if member.flow == In else outer.eq(inner)
        return m


class _SharedInstance(Elaboratable):
    def __init__(self, unit, module, flush=None):
        self._unit, self._module, self._flush = unit, module, flush

    def elaborate(self, platform):
        ports = {"i_clk": ClockSignal("sync"), "i_rst": ResetSignal("sync")}
        for path, member, value in self._unit.signature.flatten(self._unit):
            direction = "i" if member.flow == wiring.In else "o"
            ports[f"{direction}_{'__'.join(map(str, path))}"] = Value.cast(value)
        if self._flush is not None:
            ports["i_flush"] = self._flush
        return Instance(self._module, **ports)


def share(unit, kind, reset=None):
    """``unit`` itself, or, inside :func:`shared_units`, an instance of the module
    ``<kind>_<n>`` that stands for every unit equal to it.

    ``reset`` (a 1-bit value, optional) also resets the unit, synchronously:
    ``ResetInserter`` on the unit itself, or the ``flush`` port of its module (the
    recorded unit is then :class:`Flushable`; an instance's registers are not reached
    by a ``ResetInserter`` around its parent)."""
    registry = _registry.get()
    if registry is None:
        return unit if reset is None else ResetInserter(reset)(unit)
    modules, keys = registry
    key = (unit_key(unit), reset is not None)
    if key not in keys:
        keys[key] = f"{kind}_{len(modules)}"
        modules[keys[key]] = unit if reset is None else Flushable(unit)
    else:
        unit._MustUse__silence = True       # the recorded unit stands in for it
    return _SharedInstance(unit, keys[key], reset)

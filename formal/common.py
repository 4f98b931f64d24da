"""Building blocks shared by the harnesses."""

from amaranth import ResetSignal, Signal
from amaranth.hdl import Assert, Assume, Cover
from amaranth.hdl._ast import AnyConst, AnySeq  # not re-exported by amaranth.hdl 0.5

__all__ = ["AnyConst", "AnySeq", "Assert", "Assume", "Cover", "elaborate_open", "no_reset",
           "open_submodule", "stream_stable"]


def no_reset(m):
    """Reset is never asserted: the traces start from the reset state (the registers'
    initial values) and run without a later reset."""
    m.d.comb += Assume(~ResetSignal())


def stream_stable(m, stream, name, enable=1, rule=Assert):
    """Assert the ``lib.stream`` producer rule on ``stream``: once ``valid`` is offered
    without ``ready``, ``valid`` stays high and ``payload`` unchanged on the next cycle
    (only checked while ``enable`` was high on the stalled cycle and is high now).
    ``rule=Assume`` makes it a constraint on a producer the harness drives.
    Returns the harness's registers ``(stalled, held)``: a stall on the last cycle, and
    the payload then."""
    stalled = Signal(name=f"{name}_stalled")
    held = Signal.like(stream.payload, name=f"{name}_held")
    m.d.sync += [stalled.eq(stream.valid & ~stream.ready & enable), held.eq(stream.payload)]
    with m.If(stalled & enable):
        m.d.comb += [rule(stream.valid, f"{name}: valid withdrawn before ready"),
                     rule(stream.payload.as_value() == held.as_value()
                          if hasattr(stream.payload, "as_value")
                          else stream.payload == held,
                          f"{name}: payload changed while stalled")]
    return stalled, held


def elaborate_open(component, platform=None):
    """Elaborate ``component`` here, so that the harness can read its internal signals.

    Returns ``(module, signals)``: the ``Module`` its ``elaborate`` built (to add as the
    harness's submodule instead of ``component``) and a dict of the signals it drives,
    by name (``"write_ptr"``, ...; a name given to two signals is left out), plus its
    named submodules under ``"submodule:<name>"``. Nothing is added to the unit's ports:
    Amaranth lets any module of a design read a signal of another one.
    """
    module = component.elaborate(platform)
    component._MustUse__used = True        # elaborated here, not by Fragment.get
    signals, ambiguous = {}, set()
    for signal in module._driving.keys():
        if signal.name in signals and signals[signal.name] is not signal:
            ambiguous.add(signal.name)
        signals[signal.name] = signal
    for name in ambiguous:
        del signals[name]
    for name, (submodule, _src_loc) in module._named_submodules.items():
        signals[f"submodule:{name}"] = submodule
    return module, signals


def open_submodule(module, name, platform=None):
    """Like :func:`elaborate_open` for the submodule ``name`` of an already elaborated
    ``module`` (one from :func:`elaborate_open`): elaborates it in place and returns
    ``(submodule_module, signals)``."""
    component, src_loc = module._named_submodules[name]
    submodule, signals = elaborate_open(component, platform)
    module._named_submodules[name] = (submodule, src_loc)
    return submodule, signals

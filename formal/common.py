"""Building blocks shared by the harnesses."""

import re

from amaranth import Mux, ResetSignal, Signal
from amaranth.hdl import Assert, Assume, Cover
from amaranth.hdl._ast import AnyConst, AnySeq  # not re-exported by amaranth.hdl 0.5

__all__ = ["AnyConst", "AnySeq", "Assert", "Assume", "Cover", "elaborate_open",
           "fifo_invariants", "no_reset", "open_submodule", "stream_stable"]


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


def fifo_invariants(m, fifo, signals, prefix=""):
    """Assert the invariants of a ``StreamFIFO`` opened with :func:`elaborate_open` or
    :func:`open_submodule` (``fifo`` the component, ``signals`` its internals):
    ``level <= depth``, both pointers inside the storage, ``write_ptr = (read_ptr +
    level) mod depth``. Returns one ``(data, position, held)`` per storage slot, read
    through a read port the harness adds: the slot's contents, its distance from
    ``read_ptr`` (the item's place in the queue) and whether it holds an item, and the
    contents of slot ``read_ptr`` (the head)."""
    depth, level = fifo.depth, fifo.level
    write_ptr, read_ptr = signals["write_ptr"], signals["read_ptr"]
    storage = signals["submodule:storage"]
    wrap_sum = read_ptr + level
    m.d.comb += [
        Assert(level <= depth, f"{prefix}level beyond depth"),
        Assert(write_ptr < depth, f"{prefix}write pointer outside the storage"),
        Assert(read_ptr < depth, f"{prefix}read pointer outside the storage"),
        Assert(write_ptr == Mux(wrap_sum >= depth, wrap_sum - depth, wrap_sum),
               f"{prefix}write pointer is not read pointer + level (mod depth)"),
    ]
    slots = []
    for slot in range(depth):
        port = storage.read_port(domain="comb")
        position = Signal(range(depth),
                          name=re.sub(r"\W+", "_", f"{prefix}position{slot}").strip("_"))
        m.d.comb += [port.addr.eq(slot),
                     position.eq(Mux(slot >= read_ptr, slot - read_ptr,
                                     slot + depth - read_ptr))]
        slots.append((port.data, position, position < level))
    head = storage.read_port(domain="comb")
    m.d.comb += head.addr.eq(read_ptr)
    return slots, head.data

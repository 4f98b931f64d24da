"""Deliberately faulty designs that prove the harness catches faults.

They live in the package (not in tests/) so the Verilator tier can build them too.
"""

from amaranth import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StallingStage"]


class StallingStage(wiring.Component):
    """A register stage that passes ``stall_after`` items, then never raises ``i.ready``
    again (a hung DUT for the watchdog self-test)."""

    def __init__(self, width, stall_after):
        self.width = width
        self.stall_after = stall_after
        super().__init__({
            "i": In(stream.Signature(width)),
            "o": Out(stream.Signature(width)),
        })

    def elaborate(self, platform):
        m = Module()
        passed = Signal(range(self.stall_after + 1))
        hung = passed == self.stall_after
        with m.If(self.o.ready | ~self.o.valid):
            m.d.sync += self.o.valid.eq(0)
        m.d.comb += self.i.ready.eq(~hung & (self.o.ready | ~self.o.valid))
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [self.o.valid.eq(1), self.o.payload.eq(self.i.payload),
                         passed.eq(passed + 1)]
        return m

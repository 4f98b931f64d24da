"""Test-only units for array tests. NOT a PCU: stand-ins with the PCU's port names so
that the array's compute positions can be wired and tested before the real PCU lands."""

from amaranth import Module, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hdl.interfaces import (
    ConfigPort,
    ConfigRegister,
    control_stream,
    scalar_stream,
    vector_layout,
    vector_stream,
)
from hdl.stream_fifo import StreamFIFO

__all__ = ["LaneAdderTestUnit"]


class LaneAdderTestUnit(wiring.Component):
    """Test-only unit with the PCU's ports: ``vector_out = vector_in0 + vector_in1 +
    offset`` lane by lane (mod 2**32); scalar and control inputs pass to the outputs.

    Configuration: one word, ``offset``.
    """
    def __init__(self, lanes=8):
        self._lanes = lanes
        self.config_layout = data.StructLayout({"offset": unsigned(32)})
        super().__init__({
            "vector_in0": In(vector_stream(lanes)),
            "vector_in1": In(vector_stream(lanes)),
            "scalar_in": In(scalar_stream()),
            "control_in": In(control_stream()),
            "vector_out": Out(vector_stream(lanes)),
            "scalar_out": Out(scalar_stream()),
            "control_out": Out(control_stream()),
            "cfg": In(ConfigPort()),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.config = config = ConfigRegister(self.config_layout)
        wiring.connect(m, wiring.flipped(self.cfg), config.port)
        m.submodules.out_fifo = out = StreamFIFO(vector_layout(self._lanes), 2)
        m.submodules.scalar_fifo = scalar = StreamFIFO(32, 2)
        m.submodules.control_fifo = control = StreamFIFO(1, 2)
        wiring.connect(m, out.o, wiring.flipped(self.vector_out))
        wiring.connect(m, wiring.flipped(self.scalar_in), scalar.i)
        wiring.connect(m, scalar.o, wiring.flipped(self.scalar_out))
        wiring.connect(m, wiring.flipped(self.control_in), control.i)
        wiring.connect(m, control.o, wiring.flipped(self.control_out))
        both = self.vector_in0.valid & self.vector_in1.valid
        m.d.comb += [
            out.i.valid.eq(both),
            self.vector_in0.ready.eq(both & out.i.ready),
            self.vector_in1.ready.eq(both & out.i.ready),
        ]
        for lane in range(self._lanes):
            m.d.comb += out.i.payload[lane].eq(self.vector_in0.payload[lane] +
                                               self.vector_in1.payload[lane] +
                                               config.value.offset)
        return m

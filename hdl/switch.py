"""Mesh switch: static routes on the vector, scalar and control networks.

See ``docs/switch.md`` for the port map, the configuration layout, multicast and
flow control.
"""

from amaranth import Cat, Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .interfaces import (
    WORD_BITS,
    ConfigPort,
    ConfigRegister,
    control_stream,
    scalar_stream,
    vector_layout,
    vector_stream,
)
from .stream_fifo import StreamFIFO

__all__ = ["DIRECTIONS", "Source", "VECTOR_OUTPUTS", "NARROW_OUTPUTS",
           "switch_config_layout", "Switch"]

#: Mesh directions, in the index order of the ``*_in`` / ``*_out`` interface arrays.
DIRECTIONS = ("north", "east", "south", "west")


class Source:
    """Route select codes: which input feeds an output (``NONE``: the output is idle)."""
    NONE = 0
    NORTH = 1
    EAST = 2
    SOUTH = 3
    WEST = 4
    LOCAL = 5          # the attached unit's output


#: Vector outputs: the four directions, then the unit's ``vector_in0`` and ``vector_in1``.
VECTOR_OUTPUTS = ("north", "east", "south", "west", "local0", "local1")
#: Scalar and control outputs: the four directions, then the unit's input.
NARROW_OUTPUTS = ("north", "east", "south", "west", "local")

SELECT_BITS = 3


def switch_config_layout():
    """Route table: for each output of each network, the :class:`Source` feeding it."""
    return data.StructLayout({
        "vector": data.ArrayLayout(unsigned(SELECT_BITS), len(VECTOR_OUTPUTS)),
        "scalar": data.ArrayLayout(unsigned(SELECT_BITS), len(NARROW_OUTPUTS)),
        "control": data.ArrayLayout(unsigned(SELECT_BITS), len(NARROW_OUTPUTS)),
    })


class Switch(wiring.Component):
    """One mesh switch (one per grid position) with input FIFOs on every port.

    Every input (four directions and the attached unit's output) goes through a
    :class:`StreamFIFO`; outputs are driven from those FIFOs through a crossbar set by
    the route table. An input feeding several outputs (multicast) is removed from its
    FIFO once every one of those outputs has taken it; each output takes it at most
    once. Output ``valid`` depends only on FIFO state and on which outputs already took
    the item, never on a ``ready`` of this cycle, and every input ``ready`` is a FIFO's
    occupancy, so chained switches have no combinational path around the mesh.

    Parameters
    ----------
    lanes : int
        Vector lanes.
    fifo_depth : int
        Depth of each input FIFO (2 sustains one item per cycle per hop).

    Attributes
    ----------
    vector_in, scalar_in, control_in : In(...).array(4)
        From the neighbours, indexed by :data:`DIRECTIONS`.
    vector_out, scalar_out, control_out : Out(...).array(4)
        To the neighbours.
    local_vector_in, local_scalar_in, local_control_in : In(...)
        From the attached unit's ``vector_out``, ``scalar_out``, ``control_out``.
    local_vector_out : Out(vector_stream(lanes)).array(2)
        To the unit's ``vector_in0`` and ``vector_in1`` (a PMU uses only index 0, as
        ``vector_in``).
    local_scalar_out, local_control_out : Out(...)
        To the unit's ``scalar_in`` and ``control_in``.
    enable : In(1)
        Routes move data only while high (the array holds it low until started).
    cfg : In(ConfigPort())
    vector_stall_cycles, scalar_stall_cycles, control_stall_cycles : Out(32)
        Cycles in which at least one routed input of that network held an item that it
        could not deliver (some destination was not ready).
    """
    def __init__(self, lanes=8, fifo_depth=2):
        if not isinstance(fifo_depth, int) or isinstance(fifo_depth, bool):
            raise TypeError(f"FIFO depth must be an integer, not {fifo_depth!r}")
        if fifo_depth < 1:
            raise ValueError(f"FIFO depth must be at least 1, not {fifo_depth}")
        vector = vector_stream(lanes)
        self._lanes = lanes
        self._fifo_depth = fifo_depth
        self.config_layout = switch_config_layout()
        super().__init__({
            "vector_in": In(vector).array(4),
            "vector_out": Out(vector).array(4),
            "scalar_in": In(scalar_stream()).array(4),
            "scalar_out": Out(scalar_stream()).array(4),
            "control_in": In(control_stream()).array(4),
            "control_out": Out(control_stream()).array(4),
            "local_vector_in": In(vector),
            "local_vector_out": Out(vector).array(2),
            "local_scalar_in": In(scalar_stream()),
            "local_scalar_out": Out(scalar_stream()),
            "local_control_in": In(control_stream()),
            "local_control_out": Out(control_stream()),
            "enable": In(1),
            "cfg": In(ConfigPort()),
            "vector_stall_cycles": Out(32),
            "scalar_stall_cycles": Out(32),
            "control_stall_cycles": Out(32),
        })

    def _network(self, m, name, shape, inputs, outputs, selects, stall_counter):
        fifos = []
        for index, port in enumerate(inputs):
            fifo = StreamFIFO(shape, self._fifo_depth)
            m.submodules[f"{name}_fifo{index}"] = fifo
            wiring.connect(m, wiring.flipped(port), fifo.i)
            fifos.append(fifo.o)
        taken = Signal(len(outputs), name=f"{name}_taken")   # output already took the item
        done = []                                              # output has/has just taken it
        for out_index, out in enumerate(outputs):
            with m.Switch(selects[out_index]):
                for in_index, source in enumerate(fifos):
                    with m.Case(in_index + 1):
                        m.d.comb += [
                            out.valid.eq(self.enable & source.valid & ~taken[out_index]),
                            out.payload.eq(source.payload),
                        ]
            done.append(taken[out_index] | (out.valid & out.ready))
        pops = []
        blocked = []
        for in_index, source in enumerate(fifos):
            members = [select == in_index + 1 for select in selects]
            routed = Cat(*members).any()
            complete = Cat(*(~member | out_done
                             for member, out_done in zip(members, done, strict=True))).all()
            pop = Signal(name=f"{name}_pop{in_index}")
            m.d.comb += [pop.eq(self.enable & source.valid & routed & complete),
                         source.ready.eq(pop)]
            pops.append(pop)
            blocked.append(self.enable & source.valid & routed & ~complete)
        for out_index, out in enumerate(outputs):
            with m.Switch(selects[out_index]):
                for in_index in range(len(fifos)):
                    with m.Case(in_index + 1):
                        with m.If(pops[in_index]):
                            m.d.sync += taken[out_index].eq(0)
                        with m.Elif(out.valid & out.ready):
                            m.d.sync += taken[out_index].eq(1)
                with m.Default():
                    m.d.sync += taken[out_index].eq(0)
        with m.If(self.cfg.write):
            m.d.sync += taken.eq(0)
        with m.If(Cat(*blocked).any()):
            m.d.sync += stall_counter.eq(stall_counter + 1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.config = config_reg = ConfigRegister(self.config_layout)
        wiring.connect(m, wiring.flipped(self.cfg), config_reg.port)
        routes = config_reg.value
        self._network(m, "vector", vector_layout(self._lanes),
                      [*self.vector_in, self.local_vector_in],
                      [*self.vector_out, *self.local_vector_out],
                      [routes.vector[i] for i in range(len(VECTOR_OUTPUTS))],
                      self.vector_stall_cycles)
        self._network(m, "scalar", WORD_BITS,
                      [*self.scalar_in, self.local_scalar_in],
                      [*self.scalar_out, self.local_scalar_out],
                      [routes.scalar[i] for i in range(len(NARROW_OUTPUTS))],
                      self.scalar_stall_cycles)
        self._network(m, "control", 1,
                      [*self.control_in, self.local_control_in],
                      [*self.control_out, self.local_control_out],
                      [routes.control[i] for i in range(len(NARROW_OUTPUTS))],
                      self.control_stall_cycles)
        return m

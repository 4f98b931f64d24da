"""Mesh switch: static routes on the vector, scalar and control networks.

See ``docs/switch.md`` for the port map, the configuration layout, multicast and
flow control.
"""

from types import SimpleNamespace

from amaranth import Cat, Module, Mux, Signal, Value, unsigned
from amaranth.lib import data, enum, wiring
from amaranth.lib.wiring import In, Out

from . import defaults
from .interfaces import (
    NETWORKS,
    WORD_BITS,
    ConfigPort,
    ConfigRegister,
    config_changed,
    control_stream,
    scalar_stream,
    vector_layout,
    vector_stream,
)
from .stream_fifo import StreamFIFO

__all__ = ["Direction", "DIRECTIONS", "Port", "Source", "VectorOutput", "VECTOR_OUTPUTS",
           "NARROW_OUTPUTS", "SELECT_BITS", "MERGE_BITS", "MERGE_SOURCES", "FIFO_DEPTH",
           "switch_config_layout", "decode_route", "Switch"]


class Direction(enum.IntEnum, shape=2):
    """Mesh directions, in the index order of the ``*_in`` / ``*_out`` interface arrays."""
    NORTH = 0
    EAST = 1
    SOUTH = 2
    WEST = 3

    @property
    def port(self):
        """The direction's port name: ``"north"``, ``"east"``, ``"south"``, ``"west"``."""
        return self.name.lower()

    @property
    def opposite(self):
        """The direction a neighbour's link comes back from (NORTH <-> SOUTH, EAST <-> WEST)."""
        return Direction(self ^ 2)

    @property
    def offset(self):
        """``(d_row, d_col)`` of the neighbour in this direction (row 0 is the north edge)."""
        return ((-1, 0), (0, 1), (1, 0), (0, -1))[self]

    @property
    def source(self):
        """The :class:`Source` code that selects the input from this direction."""
        return Source(self + 1)


#: Port names of the mesh directions, in :class:`Direction` order.
DIRECTIONS = tuple(direction.port for direction in Direction)


class Port(enum.IntEnum, shape=3):
    """A network's inputs, in index order (merge counts are indexed the same way), and
    the scalar and control networks' outputs: the four directions, then the attached
    unit (its output on the input side, its input on the output side)."""
    NORTH = int(Direction.NORTH)
    EAST = int(Direction.EAST)
    SOUTH = int(Direction.SOUTH)
    WEST = int(Direction.WEST)
    LOCAL = 4

    @property
    def source(self):
        """The :class:`Source` code that selects this input."""
        return Source(self + 1)


class Source(enum.IntEnum, shape=3):
    """Route select codes: which input feeds an output (``NONE``: the output is idle).

    ``Source(port + 1)`` for each :class:`Port`."""
    NONE = 0
    NORTH = Port.NORTH + 1
    EAST = Port.EAST + 1
    SOUTH = Port.SOUTH + 1
    WEST = Port.WEST + 1
    LOCAL = Port.LOCAL + 1          # the attached unit's output

    @property
    def port(self):
        """The :class:`Port` (input index) this code selects (not for ``NONE``)."""
        if self == Source.NONE:
            raise ValueError("Source.NONE selects no input")
        return Port(self - 1)


class VectorOutput(enum.IntEnum, shape=3):
    """Vector outputs: the four directions, then the unit's ``vector_in0`` and
    ``vector_in1`` (a PMU's ``vector_in`` is ``LOCAL0``)."""
    NORTH = int(Direction.NORTH)
    EAST = int(Direction.EAST)
    SOUTH = int(Direction.SOUTH)
    WEST = int(Direction.WEST)
    LOCAL0 = 4
    LOCAL1 = 5


#: Vector output names, in :class:`VectorOutput` order.
VECTOR_OUTPUTS = tuple(output.name.lower() for output in VectorOutput)
#: Scalar and control output names, in :class:`Port` order (the directions, then the unit's input).
NARROW_OUTPUTS = tuple(port.name.lower() for port in Port)
#: Depth of a switch input FIFO (the default: 2 sustains one item per cycle per hop).
FIFO_DEPTH = 2

#: Width of one route select (a :class:`Source`).
SELECT_BITS = Source.as_shape().width
#: Width of one merge count (items taken from one input per merge round).
MERGE_BITS = 8
#: Inputs per network (four directions and the local one), in :class:`Port` order.
MERGE_SOURCES = len(Port)


def _merge_layout(outputs):
    return data.ArrayLayout(data.ArrayLayout(unsigned(MERGE_BITS), MERGE_SOURCES), outputs)


def switch_config_layout():
    """Route table: for each output of each network, the :class:`Source` feeding it,
    then for each output the merge counts of its inputs (indexed by ``Source - 1``)."""
    return data.StructLayout({
        "vector": data.ArrayLayout(unsigned(SELECT_BITS), len(VECTOR_OUTPUTS)),
        "scalar": data.ArrayLayout(unsigned(SELECT_BITS), len(NARROW_OUTPUTS)),
        "control": data.ArrayLayout(unsigned(SELECT_BITS), len(NARROW_OUTPUTS)),
        "vector_merge": _merge_layout(len(VECTOR_OUTPUTS)),
        "scalar_merge": _merge_layout(len(NARROW_OUTPUTS)),
        "control_merge": _merge_layout(len(NARROW_OUTPUTS)),
    })


def _next_listed(listed, after):
    """Index of the first set bit of ``listed`` after bit ``after``, cyclically (bit
    ``after`` itself last); ``after`` when none is set."""
    width = len(listed)
    order = [(after + step) % width for step in range(1, width + 1)]
    result = after
    for index in reversed(order):
        result = Mux(listed[index], index, result)
    return result


def _one_hot_select(select, values):
    """``values[i]`` where bit ``i`` of the one-hot ``select`` is set (zero where none
    is): an AND-OR, no decoder of a binary index."""
    result = 0
    for index, value in enumerate(values):
        result = result | Mux(select[index], Value.cast(value), 0)
    return result


def decode_route(m, name, index, select, counts, *, domain="comb", update=None):
    """The crossbar's view of output ``index``'s ``select`` and merge ``counts``, as
    input masks (bit ``i``: input ``i``, :class:`Port` order): ``merging`` (a non-zero
    count), ``is_merge``, ``plain`` (the select input, one-hot; none for ``NONE`` and
    the unused codes), ``member`` (the inputs routed to the output), ``first`` (the
    first listed input, one-hot: where a merge starts).

    Returns them as a namespace of signals named ``<name>_<field><index>``, driven in
    ``domain`` (``"sync"``: registers, reset to the decode of an all-zero configuration,
    loaded while ``update`` is high), and the same decode combinationally, valid while
    ``update`` is high, as ``route.decoded`` (the decode is computed only then: the
    simulator evaluates it once per configuration, not on every change of the
    crossbar's inputs)."""
    sources = len(counts)
    update = 1 if update is None else update
    listed = Signal(sources, name=f"{name}_listed{index}")
    first = Signal(range(sources), name=f"{name}_first_listed{index}")
    with m.If(update):
        m.d.comb += [listed.eq(Cat(*(count != 0 for count in counts))),
                     first.eq(_next_listed(listed, sources - 1))]
    plain = Cat(*(select == i + 1 for i in range(sources)))
    decoded = SimpleNamespace(
        merging=listed, is_merge=listed.any(), plain=plain,
        member=Mux(listed.any(), listed, plain),
        first=Cat(*(first == i for i in range(sources))))
    route = SimpleNamespace(decoded=decoded)
    for field, value in vars(decoded).items():
        # reset: an all-zero configuration lists no input (its "first" is the last one)
        init = 1 << (sources - 1) if field == "first" else 0
        setattr(route, field, Signal(len(value), init=init, name=f"{name}_{field}{index}"))
        with m.If(update):
            m.d[domain] += getattr(route, field).eq(value)
    return route


class Switch(wiring.Component):
    """One mesh switch (one per grid position) with input FIFOs on every port.

    Every input (four directions and the attached unit's output) goes through a
    :class:`StreamFIFO`; outputs are driven from those FIFOs through a crossbar set by
    the route table. An output whose merge counts are all zero is fed by its ``select``
    input; an output with a non-zero merge count is a merge output: it takes
    ``count[i]`` items from each listed input ``i`` in the order north, east, south,
    west, local, cyclically, waiting for the current input (a static sequence, one item
    per cycle, no gap when it moves on). An input routed to several outputs (multicast,
    plain or merged) is removed from its FIFO once every one of those outputs has taken
    it; each output takes it at most once. Output ``valid`` depends only on FIFO state,
    on the merge position and on which outputs already took the item, never on a
    ``ready`` of this cycle, and every input ``ready`` is a FIFO's occupancy, so chained
    switches have no combinational path around the mesh. The merge position restarts
    while ``enable`` is low and after every configuration write.

    See also
    --------
    Encoder: ``software/rdu/units/switch.py``; functional model: ``SwitchNetworkModel`` in
    ``software/rdu/models/switch.py`` (every piece: ``rdu.units.registry.UNITS``); docs:
    ``docs/switch.md``; tests:
    ``tests/test_switch.py``; tb suite: ``tb/suites/switch.py``; formal:
    ``formal/switch.py``.

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
        Routes move data only while high (the array holds it low until started), from
        the cycle after it rises to the cycle after it falls (a register of its own).
    cfg : In(ConfigPort())
    vector_stall_cycles, scalar_stall_cycles, control_stall_cycles : Out(32)
        Cycles in which at least one routed input of that network held an item that it
        could not deliver (some destination was not ready, or a merge output it is
        listed in was at another input).
    moved : Out(1)
        A transfer on one of the switch's ports this cycle (an input FIFO took an item
        or an output handed one on): the array's no-progress watchdog ORs these.
    holding : Out(3 * len(Port))
        Input FIFOs holding an item routed to some output (an unrouted item is not
        waiting for anything), bit ``network * len(Port) + port`` (networks in
        :data:`hdl.interfaces.NETWORKS` order, ports in :class:`Port` order): what the
        watchdog reports as the first stalled input.
    """
    def __init__(self, lanes=defaults.LANES, fifo_depth=FIFO_DEPTH):
        if not isinstance(fifo_depth, int) or isinstance(fifo_depth, bool):
            raise TypeError(f"FIFO depth must be an integer, not {fifo_depth!r}")
        if fifo_depth < 1:
            raise ValueError(f"FIFO depth must be at least 1, not {fifo_depth}")
        vector = vector_stream(lanes)
        self._lanes = lanes
        self._fifo_depth = fifo_depth
        self.config_layout = switch_config_layout()
        super().__init__({
            "vector_in": In(vector).array(len(Direction)),
            "vector_out": Out(vector).array(len(Direction)),
            "scalar_in": In(scalar_stream()).array(len(Direction)),
            "scalar_out": Out(scalar_stream()).array(len(Direction)),
            "control_in": In(control_stream()).array(len(Direction)),
            "control_out": Out(control_stream()).array(len(Direction)),
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
            "moved": Out(1),
            "holding": Out(3 * len(Port)),
        })

    def _network(self, m, name, shape, inputs, outputs, routes, merges, stall_counter,
                 enable):
        """Build one network from its outputs' decoded ``routes`` (:func:`decode_route`)
        and merge counts, moving data while ``enable`` (the registered copy of the
        port); return ``(moved, holding)``: a transfer on one of its ports
        this cycle, and which input FIFOs hold an item routed to some output."""
        sources = len(inputs)
        fifos = []
        pushes = [port.valid & port.ready for port in inputs]
        for index, port in enumerate(inputs):
            # a configuration write empties the input FIFOs: a new program never sees
            # items a previous one left in the network (unrouted DONE or release tokens)
            fifo = StreamFIFO(shape, self._fifo_depth, flush=True)
            m.submodules[f"{name}_fifo{index}"] = fifo
            m.d.comb += fifo.flush.eq(config_changed(self.cfg))
            wiring.connect(m, wiring.flipped(port), fifo.i)
            fifos.append(fifo.o)
        valids = Cat(*(fifo.valid for fifo in fifos))
        # a configuration write on the last cycle (reset counts as one): the input
        # FIFOs are empty, so no output is valid, whatever the routes say
        written = Signal(init=1, name=f"{name}_written")
        m.d.sync += written.eq(config_changed(self.cfg))
        # the merge positions restart from the next cycle on (or, after a write, are
        # loaded again from the configuration now held)
        reload = Signal(name=f"{name}_merge_reload")
        m.d.comb += reload.eq(~enable | config_changed(self.cfg) | written)
        # taken[o][i]: output o already took the item at the head of input i
        taken = [Signal(sources, name=f"{name}_taken{out_index}")
                 for out_index in range(len(outputs))]
        took = []          # took[o][i]: output o takes the head of input i this cycle
        sources_of = []
        transfers = []
        for out_index, (out, route) in enumerate(zip(outputs, routes, strict=True)):
            transfer = Signal(name=f"{name}_transfer{out_index}")
            position, position_next = Switch._merge_position(
                m, f"{name}_merge", out_index, route, merges[out_index], reload, written,
                transfer)
            # the input this output reads, one-hot (none: idle), in a register (it
            # selects the wide payloads); those whose head it may take now
            source = Signal(sources, name=f"{name}_source{out_index}")
            # (the decode of the next cycle: the registers', or while they load, theirs
            # to be)
            is_merge = Mux(written, route.decoded.is_merge, route.is_merge)
            m.d.sync += source.eq(Mux(is_merge, position_next,
                                      Mux(written, route.decoded.plain, route.plain)))
            sources_of.append(source)
            offer = Signal(sources, name=f"{name}_offer{out_index}")
            took.append(Signal(sources, name=f"{name}_took{out_index}"))
            m.d.comb += [
                offer.eq(Mux(enable, source & ~taken[out_index], 0)),
                out.valid.eq((offer & valids).any()),
                out.payload.eq(_one_hot_select(source, [fifo.payload for fifo in fifos])),
                took[-1].eq(Mux(out.ready, offer & valids, 0)),
                transfer.eq(out.valid & out.ready),
            ]
            transfers.append(transfer)
        pops = []
        blocked = []
        waiting = []
        for in_index, fifo in enumerate(fifos):
            routed = Cat(*(route.member[in_index] for route in routes)).any()
            # every output routed from the input took its head or takes it now; only
            # read with ``enable`` and the head valid, so a member output that reads
            # the input and is ready takes it (one LUT per output, not the crossbar)
            complete = Cat(*(~route.member[in_index] | taken[out_index][in_index]
                             | (sources_of[out_index][in_index] & outputs[out_index].ready)
                             for out_index, route in enumerate(routes))).all()
            pop = Signal(name=f"{name}_pop{in_index}")
            m.d.comb += [pop.eq(enable & fifo.valid & routed & complete),
                         fifo.ready.eq(pop)]
            pops.append(pop)
            waiting.append(fifo.valid & routed)
            blocked.append(enable & fifo.valid & routed & ~complete)
        for out_index in range(len(outputs)):
            for in_index in range(sources):
                with m.If(pops[in_index]):
                    m.d.sync += taken[out_index][in_index].eq(0)
                with m.Elif(took[out_index][in_index]):
                    m.d.sync += taken[out_index][in_index].eq(1)
        with m.If(config_changed(self.cfg)):
            m.d.sync += [flags.eq(0) for flags in taken]
        with m.If(Cat(*blocked).any()):
            m.d.sync += stall_counter.eq(stall_counter + 1)
        return Cat(*pushes, *transfers).any(), Cat(*waiting)

    @staticmethod
    def _merge_position(m, prefix, out_index, route, counts, reload, written, transfer):
        """The merge position of output ``out_index``: its input (one-hot) and the items
        still to take from it this round, advanced on each ``transfer`` of a merge
        output. Returns the input's register and its next value.

        Both are registers that ``reload`` sets to the first listed input and its count
        (a merge restarts while ``enable`` is low and after a configuration write), so
        that no cycle waits for a restart mux or an adder: the last item of an input is
        a compare of a register. In the cycle after a write (``written``: the decode
        registers load then, the first input is the decode's) they may hold the
        previous configuration's, but then every input FIFO is empty."""
        sources = len(route.merging)
        position = Signal(sources, init=1 << (sources - 1), name=f"{prefix}_input{out_index}")
        position_next = Signal(sources, name=f"{prefix}_input_next{out_index}")
        remaining = Signal(MERGE_BITS, name=f"{prefix}_remaining{out_index}")
        # the input listed after each one (signals: each priority chain built once), and
        # after the current one
        after = [Signal(range(sources), name=f"{prefix}_after{out_index}_{i}")
                 for i in range(sources)]
        following = Signal(sources, name=f"{prefix}_next{out_index}")
        with m.If(route.is_merge):      # (only evaluated for a merge output)
            m.d.comb += [index.eq(_next_listed(route.merging, i))
                         for i, index in enumerate(after)]
            m.d.comb += following.eq(_one_hot_select(position, [
                Cat(*(index == j for j in range(sources))) for index in after]))
        m.d.comb += position_next.eq(position)

        def load(one_hot):
            m.d.comb += position_next.eq(one_hot)
            m.d.sync += remaining.eq(_one_hot_select(one_hot, [counts[i]
                                                               for i in range(sources)]))
        m.d.sync += position.eq(position_next)
        with m.If(transfer & route.is_merge):
            with m.If(remaining == 1):
                load(following)
            with m.Else():
                m.d.sync += remaining.eq(remaining - 1)
        with m.If(reload):
            load(Mux(written, route.decoded.first, route.first))
        return position, position_next

    def elaborate(self, platform):
        m = Module()
        m.submodules.config = config_reg = ConfigRegister(self.config_layout)
        wiring.connect(m, wiring.flipped(self.cfg), config_reg.port)
        routes = config_reg.value
        # the configuration changed on the last cycle (reset counts as a change): the
        # decode registers load only then (they hold the same value otherwise)
        changed = Signal(init=1)
        m.d.sync += changed.eq(config_changed(self.cfg))
        ports = {
            "vector": (vector_layout(self._lanes), [*self.vector_in, self.local_vector_in],
                       [*self.vector_out, *self.local_vector_out]),
            "scalar": (WORD_BITS, [*self.scalar_in, self.local_scalar_in],
                       [*self.scalar_out, self.local_scalar_out]),
            "control": (1, [*self.control_in, self.local_control_in],
                        [*self.control_out, self.local_control_out]),
        }
        # ``enable`` in a register of the switch's own: the array's ``active`` reaches
        # every switch, and from it through the offers to the outputs' ``valid`` and
        # the neighbours' FIFOs was the critical path (``docs/fpga.md``); the routes
        # move data from the cycle after it rises to the cycle after it falls
        enabled = Signal(name="enabled")
        m.d.sync += enabled.eq(self.enable)
        activity = {}
        for network, (shape, inputs, outputs) in ports.items():
            merges = [routes[f"{network}_merge"][index] for index in range(len(outputs))]
            # the route decode in registers (the path from the configuration through
            # the decode and the merge logic to the stall counters was the critical
            # one): a cycle behind the configuration, which shows only in the cycle
            # after a write, when the input FIFOs are empty (``_merge_position``)
            decoded = [decode_route(m, network, index, routes[network][index],
                                    merges[index], domain="sync", update=changed)
                       for index in range(len(outputs))]
            activity[network] = self._network(
                m, network, shape, inputs, outputs, decoded, merges,
                getattr(self, f"{network}_stall_cycles"), enabled)
        m.d.comb += [
            self.moved.eq(Cat(*(activity[network][0] for network in NETWORKS)).any()),
            self.holding.eq(Cat(*(activity[network][1] for network in NETWORKS))),
        ]
        return m

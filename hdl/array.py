"""TileArray: the top level, a mesh of switches with a unit at every grid position.

See ``docs/switch.md`` (mesh, edge ports) and ``docs/bitstream.md`` (configuration,
host status) for the documentation.
"""


from amaranth import Cat, Module, ResetInserter, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import defaults
from .config_net import ConfigNetwork, ConfigStatus, LoaderState, UnitKind
from .interfaces import (
    NETWORKS,
    WORD_BITS,
    ConfigPort,
    ControlToken,
    config_words,
    control_stream,
    scalar_stream,
    vector_stream,
)
from .pmu import PMU
from .shared import share
from .switch import FIFO_DEPTH, Direction, Port, Switch

__all__ = ["HostPort", "TileArray", "is_compute_position", "unit_kind_at",
           "WATCHDOG_BITS", "WATCHDOG_NONE", "WATCHDOG_BUDGET", "BUDGET_BITS",
           "watchdog_location",
           "NORTH", "EAST", "SOUTH", "WEST"]

NORTH, EAST, SOUTH, WEST = Direction.NORTH, Direction.EAST, Direction.SOUTH, Direction.WEST

#: Width of ``host.watchdog_cycles`` (and of the watchdog's idle counter).
WATCHDOG_BITS = 24
#: ``host.watchdog_unit`` when no switch input held an item as the watchdog fired.
WATCHDOG_NONE = 0xFFFF_FFFF
#: ``host.watchdog_unit`` when the run budget (``host.cycle_budget``) stopped the array.
WATCHDOG_BUDGET = 0xFFFF_FFFE
#: Width of ``host.cycle_budget`` (and of the counter of the cycles a run spent).
BUDGET_BITS = 32
#: Switch inputs the watchdog tells apart: every network's :class:`Port` s.
_SWITCH_INPUTS = len(NETWORKS) * len(Port)


def watchdog_location(code, rows, cols):
    """What ``host.watchdog_unit`` = ``code`` names on a ``rows x cols`` array:
    ``"switch(1,0) vector input west"`` (the lowest-index switch input FIFO holding an
    item when the watchdog fired: switches in row-major order, then networks in
    :data:`NETWORKS` order, then inputs in :class:`Port` order), or ``None`` for
    :data:`WATCHDOG_NONE` (the mesh was empty: the stall is outside it, e.g. an AGCU
    waiting for data or a token that never comes) and :data:`WATCHDOG_BUDGET` (the run
    budget stopped a run that kept moving)."""
    if code == WATCHDOG_NONE or not 0 <= code < rows * cols * _SWITCH_INPUTS:
        return None
    switch, rest = divmod(code, _SWITCH_INPUTS)
    network, port = divmod(rest, len(Port))
    row, col = divmod(switch, cols)
    return f"switch({row},{col}) {NETWORKS[network]} input {Port(port).name.lower()}"


def is_compute_position(row, col):
    """Whether grid position ``(row, col)`` holds a compute unit (PCU): the checkerboard
    rule, ``row + col`` even. The other positions hold PMUs."""
    return (row + col) % 2 == 0


def unit_kind_at(row, col, compute=True):
    """The :class:`UnitKind` at ``(row, col)``: a PCU on a compute position when the
    array has compute units (``compute``), else a PMU."""
    return UnitKind.PCU if compute and is_compute_position(row, col) else UnitKind.PMU


class HostPort(wiring.Signature):
    """Host control and status port (the host's view: it drives ``start``).

    Members
    -------
    start : Out(1)
        Pulse: run the loaded configuration (ignored unless ``config_state`` is LOADED).
    config_clear : Out(1)
        Forget a rejected or loaded bitstream and wait for a new one.
    config_state : In(LoaderState)
        ``LoaderState``: EMPTY, LOADING, LOADED, ERROR.
    error : In(ConfigStatus)
        ``ConfigStatus`` of the last bitstream (0 = accepted).
    unit_error : In(1)
        Some unit reports an error (PMU ``error`` codes are perf counters).
    running : In(1)
    done : In(1)
        A ``DONE`` control token left the array at an edge control port.
    cycles : In(32)
        Cycles from ``start`` to ``done``.
    perf_select : Out(16)
        Index of a performance counter (:meth:`TileArray.perf_counter_names`).
    perf_value : In(32)
        Value of the selected counter, one cycle after ``perf_select``.
    readback_start : Out(1)
        Pulse: read the whole array's configuration back on ``TileArray.readback``.
    watchdog_cycles : Out(WATCHDOG_BITS)
        No-progress watchdog: while the mesh is open and the array is ``running``, an
        AGCU executes (``TileArray.kernel_busy``), an item waits in the mesh
        (``holding``) or a unit is busy (``units_busy``), this many consecutive
        cycles without a transfer on any switch port stop the array (0: off).
    cycle_budget : Out(BUDGET_BITS)
        Run budget: a run (from ``start``) that has counted this many cycles under the
        watchdog's condition stops as the watchdog stops it, ``watchdog_unit`` =
        :data:`WATCHDOG_BUDGET`, however it moves (a livelock, a pattern damaged to
        millions of beats); 0: off.
    watchdog : In(1)
        The watchdog (or the run budget) stopped the array (``running`` dropped, mesh
        closed); cleared by ``start`` and by a configuration change.
    watchdog_unit : In(32)
        Where the stall was when the watchdog fired (:func:`watchdog_location`), or
        :data:`WATCHDOG_BUDGET`.
    holding : In(1)
        Some switch input holds an item routed to an output (the mesh is not empty;
        after a run, an item left waiting).
    units_busy : In(1)
        Some unit has work it cannot finish alone (the OR of the units' ``pending``: a
        PCU started and not finished or holding input, a PMU in the middle of a write
        pass, with input waiting or a read pass armed). After the AGCUs finished, the
        array has settled when neither this nor ``holding`` is high.
    """
    def __init__(self):
        super().__init__({
            "start": Out(1),
            "config_clear": Out(1),
            "config_state": In(LoaderState),
            "error": In(ConfigStatus),
            "unit_error": In(1),
            "running": In(1),
            "done": In(1),
            "cycles": In(32),
            "perf_select": Out(16),
            "perf_value": In(32),
            "readback_start": Out(1),
            "watchdog_cycles": Out(WATCHDOG_BITS),
            "cycle_budget": Out(BUDGET_BITS),
            "watchdog": In(1),
            "watchdog_unit": In(32),
            "holding": In(1),
            "units_busy": In(1),
        })


def _resolve_unit(factory):
    if factory is None or callable(factory):
        return factory
    raise TypeError(f"Compute unit must be a class or a callable (e.g. hdl.pcu.PCU, or "
                    f"rdu.units.registry.PCU_VARIANTS['fpga']), not {factory!r}")


def _unit_config_words(unit):
    layout = getattr(unit, "config_layout", None)
    if layout is None:
        raise TypeError(f"Unit {type(unit).__name__} has no config_layout attribute (the "
                        f"configuration network needs its word count)")
    return config_words(layout)


class TileArray(wiring.Component):
    """``rows x cols`` grid: a unit and a :class:`Switch` at each position.

    Compute positions are those of :func:`is_compute_position` (a checkerboard with PMUs);
    they hold ``compute_unit(lanes=lanes)`` when a compute unit is given, and PMUs
    otherwise.

    Parameters
    ----------
    rows, cols : int
    lanes : int
    compute_unit : class or callable, optional
        Factory of the compute unit (ports of the PCU: ``vector_in0``, ``vector_in1``,
        ``scalar_in``, ``control_in``, ``vector_out``, ``scalar_out``, ``control_out``,
        ``cfg``; and a ``config_layout`` attribute).
    capacity_bytes : int
        Capacity of each PMU.
    fifo_depth : int
        Depth of the switches' input FIFOs.
    agcus : int
        AGCU configuration ports at the edge (``agcu_cfg``).
    agcu_config_words : int
        Configuration words of each AGCU.
    idle_timeout : int
        Bitstream truncation timeout (cycles).

    Attributes
    ----------
    bitstream : In(stream.Signature(32))
    readback : Out(stream.Signature(32))
    host : In(HostPort())
    agcu_vector_in, agcu_scalar_in, agcu_control_in : In(...).array(2 * rows)
        Into the mesh: index ``r`` enters switch ``(r, 0)`` from the west, index
        ``rows + r`` enters switch ``(r, cols - 1)`` from the east.
    agcu_vector_out, agcu_scalar_out, agcu_control_out : Out(...).array(2 * rows)
        Out of the mesh, same indexing.
    agcu_cfg : Out(ConfigPort()).array(agcus)
    kernel_busy : In(1)
        An AGCU executes a kernel: the watchdog also counts after ``running`` fell (an
        AGCU still waiting for data or a token). ``RDUSystem`` drives it.
    flush : In(1)
        Pulse: return every unit, switch, the configuration loader and the run state to
        their reset values (streams emptied, units idle, configuration ``EMPTY``, the
        watchdog cleared), as a reset of the array alone does; PMU SRAM keeps its
        words. The last step of an abort (``RDUSystem.abort_start``).
    """
    def __init__(self, rows=defaults.ROWS, cols=defaults.COLS, lanes=defaults.LANES, *,
                 compute_unit=None, capacity_bytes=defaults.PMU_BYTES,
                 fifo_depth=FIFO_DEPTH, agcus=defaults.AGCUS, agcu_config_words=16,
                 idle_timeout=4096):
        for name, value in (("rows", rows), ("cols", cols)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"Array {name} must be an integer, not {value!r}")
            if not 1 <= value <= 255:
                raise ValueError(f"Array {name} must be between 1 and 255, not {value}")
        if not isinstance(agcus, int) or not 0 <= agcus <= 255:
            raise ValueError(f"AGCU count must be an integer in 0..255, not {agcus!r}")
        self._rows, self._cols, self._lanes = rows, cols, lanes
        self._compute_unit = _resolve_unit(compute_unit)
        self._capacity_bytes = capacity_bytes
        self._fifo_depth = fifo_depth
        self._agcus = agcus
        self._agcu_config_words = agcu_config_words
        self._idle_timeout = idle_timeout

        # the units are built here so that their configuration sizes are known
        self.units = {}
        self.switches = {}
        for row in range(rows):
            for col in range(cols):
                if self.is_compute(row, col):
                    self.units[row, col] = self._compute_unit(lanes=lanes)
                else:
                    self.units[row, col] = PMU(lanes=lanes, capacity_bytes=capacity_bytes)
                self.switches[row, col] = Switch(lanes=lanes, fifo_depth=fifo_depth)
        vector = vector_stream(lanes)
        super().__init__({
            "bitstream": In(stream.Signature(WORD_BITS)),
            "readback": Out(stream.Signature(WORD_BITS)),
            "host": In(HostPort()),
            "agcu_vector_in": In(vector).array(2 * rows),
            "agcu_vector_out": Out(vector).array(2 * rows),
            "agcu_scalar_in": In(scalar_stream()).array(2 * rows),
            "agcu_scalar_out": Out(scalar_stream()).array(2 * rows),
            "agcu_control_in": In(control_stream()).array(2 * rows),
            "agcu_control_out": Out(control_stream()).array(2 * rows),
            "agcu_cfg": Out(ConfigPort()).array(agcus),
            "kernel_busy": In(1),
            "flush": In(1),
        })

    def is_compute(self, row, col):
        return self._compute_unit is not None and is_compute_position(row, col)

    def unit_kind(self, row, col):
        return unit_kind_at(row, col, self._compute_unit is not None)

    def config_targets(self):
        """``[(kind, row, col, words)]`` in configuration-bus (and readback) order: for each
        grid position in row-major order its unit then its switch, then the AGCUs."""
        targets = []
        for (row, col), unit in self.units.items():
            targets.append((self.unit_kind(row, col), row, col, _unit_config_words(unit)))
            targets.append((UnitKind.SWITCH, row, col,
                            config_words(self.switches[row, col].config_layout)))
        for index in range(self._agcus):
            targets.append((UnitKind.AGCU, 0, index, self._agcu_config_words))
        return targets

    def _perf_counters(self):
        counters = []
        for (row, col), switch in self.switches.items():
            for network in NETWORKS:
                counters.append((f"switch({row},{col}).{network}_stall_cycles",
                                 getattr(switch, f"{network}_stall_cycles")))
        for (row, col), unit in self.units.items():
            if isinstance(unit, PMU):
                for name in ("write_stall_cycles", "read_stall_cycles", "beats_written",
                             "beats_read", "error"):
                    counters.append((f"pmu({row},{col}).{name}", getattr(unit, name)))
            elif hasattr(unit, "error"):
                counters.append((f"pcu({row},{col}).error", unit.error))
        return counters

    def perf_counter_names(self):
        """Names of the performance counters, in ``host.perf_select`` order."""
        return [name for name, _ in self._perf_counters()]

    def elaborate(self, platform):
        m = Module()
        config = self._configuration(m)
        # ``active``: the mesh moves data (from start until the configuration changes);
        # ``running``: from start until a DONE token leaves the array (cycles counted).
        active = Signal()
        loaded = config.state == LoaderState.LOADED
        self._run_control(m, active, loaded)
        idle = self._watchdog(m, active, loaded)
        with m.If(self.flush):
            host = self.host
            m.d.sync += [host.running.eq(0), active.eq(0), host.done.eq(0),
                         host.cycles.eq(0), idle.eq(0), host.watchdog.eq(0),
                         host.watchdog_unit.eq(0)]
        self._connect_units(m, active)
        self._mesh_links(m)
        self._edge_ports(m, active)
        self._perf_select(m)
        return m

    def _configuration(self, m):
        """The configuration network, to every unit's, switch's and AGCU's port."""
        host = self.host
        targets = self.config_targets()
        config = ConfigNetwork(targets, rows=self._rows, cols=self._cols,
                               lanes=self._lanes, idle_timeout=self._idle_timeout)
        m.submodules.config = ResetInserter(self.flush)(config)
        wiring.connect(m, wiring.flipped(self.bitstream), config.bitstream)
        wiring.connect(m, config.readback, wiring.flipped(self.readback))
        m.d.comb += [config.clear.eq(host.config_clear),
                     config.readback_start.eq(host.readback_start),
                     host.config_state.eq(config.state), host.error.eq(config.error)]

        index = 0
        for (row, col), unit in self.units.items():
            # one Verilog module per distinct unit when generating (hdl.shared)
            m.submodules[f"unit_{row}_{col}"] = share(unit, "rdu_unit", reset=self.flush)
            m.submodules[f"switch_{row}_{col}"] = share(self.switches[row, col], "rdu_switch",
                                                        reset=self.flush)
            wiring.connect(m, config.ports[index], unit.cfg)
            wiring.connect(m, config.ports[index + 1], self.switches[row, col].cfg)
            index += 2
        for agcu in range(self._agcus):
            wiring.connect(m, config.ports[index + agcu], wiring.flipped(self.agcu_cfg[agcu]))
        return config

    def _run_control(self, m, active, loaded):
        """``start`` runs a loaded configuration until a DONE token leaves the array."""
        host = self.host
        running = host.running
        with m.If(host.start & ~running & loaded):
            m.d.sync += [running.eq(1), active.eq(1), host.done.eq(0), host.cycles.eq(0)]
        with m.Elif(~loaded):
            m.d.sync += [running.eq(0), active.eq(0)]   # a new bitstream arrived: stop
        with m.Elif(running):
            m.d.sync += host.cycles.eq(host.cycles + 1)
        done_seen = Signal()
        for port in self.agcu_control_out:
            with m.If(port.valid & port.ready & (port.payload == ControlToken.DONE)):
                m.d.comb += done_seen.eq(1)
        with m.If(running & done_seen):
            m.d.sync += [running.eq(0), host.done.eq(1)]

    def _watchdog(self, m, active, loaded):
        """The no-progress watchdog: one counter and an OR tree, cycles since the last
        transfer on any switch port (every stream of the mesh, edge ports included, ends
        at a switch port)."""
        host = self.host
        running = host.running
        moved = Cat(*(switch.moved for switch in self.switches.values())).any()
        holding = Cat(*(switch.holding for switch in self.switches.values()))
        idle = Signal(WATCHDOG_BITS)
        busy_units = [unit.pending for unit in self.units.values()
                      if hasattr(unit, "pending")]
        m.d.comb += [host.holding.eq(holding.any()),
                     host.units_busy.eq(Cat(*busy_units).any() if busy_units else 0)]
        watched = active & (running | self.kernel_busy | host.holding | host.units_busy)
        counting = watched & (host.watchdog_cycles != 0)
        # the run budget: cycles of the run under the same condition, moving or not
        spent = Signal(BUDGET_BITS)
        over = watched & (host.cycle_budget != 0) & (spent + 1 >= host.cycle_budget)
        with m.If((host.start & ~running & loaded) | ~loaded):
            m.d.sync += spent.eq(0)
        with m.Elif(watched & (spent != (1 << BUDGET_BITS) - 1)):
            m.d.sync += spent.eq(spent + 1)
        with m.If(host.start & ~running & loaded):
            m.d.sync += [idle.eq(0), host.watchdog.eq(0)]
        with m.Elif(~loaded):
            m.d.sync += [idle.eq(0), host.watchdog.eq(0)]
        with m.Elif(over):
            m.d.sync += [idle.eq(0), running.eq(0), active.eq(0), host.watchdog.eq(1),
                         host.watchdog_unit.eq(WATCHDOG_BUDGET)]
        with m.Elif(moved | ~counting):
            m.d.sync += idle.eq(0)
        with m.Elif(idle + 1 >= host.watchdog_cycles):
            # stop as when a new bitstream arrives; name the first input holding an item
            m.d.sync += [idle.eq(0), running.eq(0), active.eq(0), host.watchdog.eq(1),
                         host.watchdog_unit.eq(WATCHDOG_NONE)]
            for index in reversed(range(len(holding))):
                with m.If(holding[index]):
                    m.d.sync += host.watchdog_unit.eq(index)
        with m.Else():
            m.d.sync += idle.eq(idle + 1)
        return idle

    def _connect_units(self, m, active):
        """Each unit to its switch's local ports; the units' errors to the host."""
        unit_errors = []
        for (row, col), unit in self.units.items():
            switch = self.switches[row, col]
            m.d.comb += switch.enable.eq(active)
            wiring.connect(m, unit.vector_out, switch.local_vector_in)
            wiring.connect(m, unit.scalar_out, switch.local_scalar_in)
            wiring.connect(m, unit.control_out, switch.local_control_in)
            if self.is_compute(row, col):
                wiring.connect(m, switch.local_vector_out[0], unit.vector_in0)
                wiring.connect(m, switch.local_vector_out[1], unit.vector_in1)
            else:
                wiring.connect(m, switch.local_vector_out[0], unit.vector_in)
            wiring.connect(m, switch.local_scalar_out, unit.scalar_in)
            wiring.connect(m, switch.local_control_out, unit.control_in)
            if hasattr(unit, "error"):
                unit_errors.append(unit.error != 0)
        m.d.comb += self.host.unit_error.eq(Cat(*unit_errors).any() if unit_errors else 0)

    def _mesh_links(self, m):
        """Neighbouring switches, both ways, on every network."""
        for (row, col), switch in self.switches.items():
            for network in NETWORKS:
                outs = getattr(switch, f"{network}_out")
                if col + 1 < self._cols:
                    east = getattr(self.switches[row, col + 1], f"{network}_in")
                    wiring.connect(m, outs[EAST], east[WEST])
                    west_out = getattr(self.switches[row, col + 1], f"{network}_out")
                    wiring.connect(m, west_out[WEST], getattr(switch, f"{network}_in")[EAST])
                if row + 1 < self._rows:
                    south = getattr(self.switches[row + 1, col], f"{network}_in")
                    wiring.connect(m, outs[SOUTH], south[NORTH])
                    north_out = getattr(self.switches[row + 1, col], f"{network}_out")
                    wiring.connect(m, north_out[NORTH], getattr(switch, f"{network}_in")[SOUTH])

    def _edge_ports(self, m, active):
        """The AGCU edge ports (inputs held off until the array is started)."""
        rows, cols = self._rows, self._cols
        for network in NETWORKS:
            edge_in = getattr(self, f"agcu_{network}_in")
            edge_out = getattr(self, f"agcu_{network}_out")
            for row in range(rows):
                for edge, col, side in ((row, 0, WEST), (rows + row, cols - 1, EAST)):
                    switch = self.switches[row, col]
                    port_in = getattr(switch, f"{network}_in")[side]
                    m.d.comb += [
                        port_in.valid.eq(edge_in[edge].valid & active),
                        port_in.payload.eq(edge_in[edge].payload),
                        edge_in[edge].ready.eq(port_in.ready & active),
                    ]
                    wiring.connect(m, getattr(switch, f"{network}_out")[side],
                                   wiring.flipped(edge_out[edge]))

    def _perf_select(self, m):
        """``host.perf_value``: the counter ``host.perf_select`` names, registered."""
        host = self.host
        counters = self._perf_counters()
        with m.Switch(host.perf_select):
            for number, (_, signal) in enumerate(counters):
                with m.Case(number):
                    m.d.sync += host.perf_value.eq(signal)
            with m.Default():
                m.d.sync += host.perf_value.eq(0)

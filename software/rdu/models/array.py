"""Functional model of a configured tile array: runs a bitstream item by item in Python.

The model decodes every unit's configuration from the bitstream with the hardware's own
``lib.data`` layouts (:mod:`rdu.unitconfig`; each unit kind's pieces from
:data:`rdu.units.registry.UNITS`) and moves items (vector beats, scalars,
control tokens) through bounded queues whose capacities are the hardware FIFO depths:
switches route by their tables (multicast, merge), PMUs write and read along their
address generators with N buffers, read passes, predicates and gates, PCUs run their
systolic or SIMD body (bit-exact, :mod:`rdu.models.pcu_reference` / :mod:`rdu.models.fp`), AGCUs
stream memory in and out. It is item-exact, not cycle-exact: the RTL must produce the
same items on every port, in the same order. ``docs/funcmodel.md`` documents it.

>>> array = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024)
>>> array.load(bitstream_words)                                    # doctest: +SKIP
>>> result = array.run(edge_inputs={("vector", 0): beats})         # doctest: +SKIP
>>> result.edge_outputs["vector", 2]                               # doctest: +SKIP
"""

from dataclasses import dataclass, field

import numpy as np

from hdl import defaults
from hdl.array import unit_kind_at
from hdl.interfaces import NETWORKS, config_words
from hdl.pcu import FIFO_DEPTH as PCU_FIFO_DEPTH
from hdl.pmu import FIFO_DEPTH as PMU_INPUT_DEPTH
from hdl.pmu import OUTPUT_FIFO_DEPTH
from hdl.pmu import SCALAR_OUT_FIFO_DEPTH as PMU_SCALAR_OUT_DEPTH
from hdl.switch import FIFO_DEPTH as SWITCH_FIFO_DEPTH
from hdl.switch import Direction, Port
from hdl.system import position_edge

from ..bitstream import Geometry, UnitKind, read_bitstream
from ..unitconfig import unpack_config
from ..units.registry import UNITS, unit_layouts
from .pcu import per_beat_on_cycles
from .pmu import PMUModel
from .shared import (
    DONE,
    UNBOUNDED,
    EdgeSource,
    FlatMemory,
    ModelDeadlock,
    ModelError,
    Queue,
    agcu_edge,
    item_vectors,
    item_word,
)
from .switch import DIRECTION_NAMES, SwitchNetworkModel

__all__ = ["RunResult", "FunctionalArray"]

# Switch input indices (hdl.switch.Port: the four directions, then the unit's output).
NORTH, EAST, SOUTH, WEST, LOCAL = Port
OPPOSITE = {direction: direction.opposite for direction in Direction}
# The queues follow the hardware FIFO depths, imported above: SWITCH_FIFO_DEPTH
# (hdl.switch.FIFO_DEPTH), PMU_INPUT_DEPTH, PMU_SCALAR_OUT_DEPTH and OUTPUT_FIFO_DEPTH
# (hdl.pmu), PCU_FIFO_DEPTH (hdl.pcu.FIFO_DEPTH).


@dataclass
class RunResult:
    """What a run produced.

    ``edge_outputs``: ``{(network, edge): items}`` (vector: a (beats, lanes) uint32
    array; scalar and control: lists of ints); ``counters``: per unit name a dict
    (``items_in``, ``items_out``, PCU ``macs``, PMU ``beats_written``...);
    ``done_tokens``: DONE tokens that left the array at edge control outputs;
    ``items_moved``: item transfers the model made; ``scalar_results``: per AGCU, the
    words its ``scalar_in`` received; ``leftovers``: items that nothing waited for and
    that stayed in the array (e.g. unrouted launch or release tokens).
    """
    edge_outputs: dict
    counters: dict
    done_tokens: int
    items_moved: int
    scalar_results: dict = field(default_factory=dict)
    leftovers: list = field(default_factory=list)


class FunctionalArray:
    """Item-level model of a ``rows x cols`` :class:`hdl.array.TileArray` and its AGCUs.

    Parameters
    ----------
    rows, cols, lanes : int
    compute : bool
        PCUs on the checkerboard's compute positions (:func:`hdl.array.is_compute_position`),
        else PMUs everywhere (as ``TileArray(compute_unit=PCU)`` / ``compute_unit=None``).
    stages : int
        SIMD stages of the PCUs.
    capacity_bytes : int
        PMU capacity.
    agcus : int
        AGCUs; AGCU ``k`` sits at edge :func:`agcu_edge` ``(k, rows)``.
    agcu_config_words : int
        Configuration words an AGCU record may carry (``TileArray`` default 16).
    fifo_depth : int
        Depth of the switches' input FIFOs.
    switch_layout : data.Layout, optional
        The switches' configuration layout (default ``hdl.switch.switch_config_layout()``);
        merge fields (``vector_merge`` ...) are used when the layout has them.
    agcu_positions : sequence of (side, row), optional
        Where each AGCU sits (``hdl.system.RDUSystem``'s parameter); default
        :func:`agcu_edge`'s rule. ``agcu_edges[k]`` is AGCU ``k``'s edge port.
    simd_batch : bool
        SIMD PCUs compute in batches (``False``: one beat at a time).
    fp_latency : str
        The PCUs' ``fp_latency`` (``Machine.fp_latency``): their SIMD pipelines' capacity.
    """

    def __init__(self, rows, cols, lanes, *, compute=True, stages=defaults.STAGES,
                 capacity_bytes=defaults.PMU_BYTES, agcus=defaults.AGCUS, agcu_config_words=16,
                 fifo_depth=SWITCH_FIFO_DEPTH, switch_layout=None, agcu_positions=None,
                 simd_batch=True, fp_latency="off"):
        self.fp_latency = fp_latency
        self.geometry = Geometry(rows, cols, lanes)
        #: SIMD PCUs compute in batches (False: pcu_reference.SimdState.step per beat)
        self.simd_batch = simd_batch
        #: the AGCUs' memory windows (:mod:`rdu.dma_windows`; ``None``: off)
        self.dma_windows = None
        #: the launch's position (``RDUSystem.position``: positioned AGCU patterns move by it)
        self.position = 0
        self.rows, self.cols, self.lanes = rows, cols, lanes
        self.compute, self.stages = compute, stages
        if capacity_bytes % (4 * lanes) or capacity_bytes < 8 * lanes:
            raise ValueError(f"PMU capacity must be a multiple of {4 * lanes} bytes, "
                             f"not {capacity_bytes}")
        self.capacity_words = capacity_bytes // 4
        self.agcus = agcus
        self.fifo_depth = fifo_depth
        if agcus > 2 * rows:
            raise ValueError(f"{agcus} AGCUs do not fit the {2 * rows} edge ports")
        if agcu_positions is None:
            self.agcu_edges = [agcu_edge(index, rows) for index in range(agcus)]
        else:
            self.agcu_edges = [position_edge(side, row, rows)
                               for side, row in agcu_positions]
            if len(self.agcu_edges) != agcus or len(set(self.agcu_edges)) != agcus:
                raise ValueError(f"AGCU positions must be {agcus} distinct (side, row) "
                                 f"pairs, not {agcu_positions!r}")
        self.layouts = unit_layouts(lanes, stages)
        if switch_layout is not None:
            self.layouts[UnitKind.SWITCH] = switch_layout
        self.units = {}
        for row in range(rows):
            for col in range(cols):
                kind = self.unit_kind(row, col)
                self.units[kind, row, col] = config_words(self.layouts[kind])
                self.units[UnitKind.SWITCH, row, col] = config_words(self.layouts[
                    UnitKind.SWITCH])
        for index in range(agcus):
            self.units[UnitKind.AGCU, 0, index] = agcu_config_words
        self.words = {key: [0] * count for key, count in self.units.items()}
        self.sram = {(row, col): np.zeros(self.capacity_words, dtype=np.uint32)
                     for row in range(rows) for col in range(cols)
                     if self.unit_kind(row, col) == UnitKind.PMU}
        self.loaded = False
        #: AGCUs the last :meth:`run` left busy (it ended in a deadlock or an error)
        self.busy_agcus = []

    def flush(self):
        """``TileArray.flush`` (the end of an abort): every unit's configuration back to
        zeros and nothing loaded; the PMU SRAM keeps its words."""
        for words in self.words.values():     # in place: the loader holds this dict
            words[:] = [0] * len(words)
        self.loaded = False
        self.busy_agcus = []

    def unit_kind(self, row, col):
        return unit_kind_at(row, col, self.compute)

    def load(self, bitstream_words):
        """Check and apply a bitstream (raises :class:`rdu.bitstream.BitstreamError`
        exactly where the hardware loader would stop)."""
        _, records = read_bitstream(bitstream_words, self.geometry, self.units)
        for record in records:
            record.apply(self.words[record.kind, record.row, record.col])
        self.loaded = True

    def config(self, kind, row, col):
        """The decoded configuration of one unit (nested dicts of ints)."""
        layout = self.layouts[kind]
        words = self.words[kind, row, col][:config_words(layout)]
        return unpack_config(layout, words)

    def pmu_memory(self, row, col):
        """The SRAM words of the PMU at (row, col), indexed by physical word address."""
        return self.sram[row, col]

    # -- building the queues and units for a run ----------------------------------------
    def build_run(self, memory, execute):
        """The queues and unit models of one run: ``(switch_inputs, edge_out, switches,
        units, agcus)``; the AGCUs in ``execute`` run kernel execute when ``memory`` is
        given. Each unit's model is its kind's in :data:`rdu.units.registry.UNITS`."""
        rows, cols, lanes = self.rows, self.cols, self.lanes
        depth = self.fifo_depth
        switch_inputs = {}
        for row in range(rows):
            for col in range(cols):
                for network in NETWORKS:
                    compute = self.unit_kind(row, col) == UnitKind.PCU
                    unit_depth = {"vector": OUTPUT_FIFO_DEPTH, "scalar": PMU_SCALAR_OUT_DEPTH,
                                  "control": 0}[network] if not compute else PCU_FIFO_DEPTH
                    unit = f"{'PCU' if compute else 'PMU'}({row},{col})"
                    switch_inputs[row, col, network] = [
                        Queue(depth, f"switch({row},{col}) {network} input "
                                     f"{DIRECTION_NAMES[d]}") for d in Direction
                    ] + [Queue(depth + unit_depth, f"{unit} {network}_out")]
        unit_inputs = {}
        for row in range(rows):
            for col in range(cols):
                if self.unit_kind(row, col) == UnitKind.PCU:
                    unit_inputs[row, col] = {name: Queue(PCU_FIFO_DEPTH,
                                                         f"PCU({row},{col}) {name}")
                                             for name in ("vector_in0", "vector_in1",
                                                          "scalar_in", "control_in")}
                else:
                    unit = f"PMU({row},{col})"
                    unit_inputs[row, col] = {
                        "vector_in": Queue(PMU_INPUT_DEPTH, f"{unit} vector_in"),
                        "scalar_in": Queue(PMU_INPUT_DEPTH, f"{unit} scalar_in"),
                        "control_in": Queue(0, f"{unit} control_in")}
        # with memory (an RDUSystem) an edge without an AGCU takes nothing: its outputs'
        # ready is low (a TileArray test without memory collects every edge output)
        def edge_capacity(edge):
            return 0 if memory is not None and edge not in self.agcu_edges else UNBOUNDED
        edge_out = {(network, edge): Queue(edge_capacity(edge), f"edge {network}_out {edge}")
                    for network in NETWORKS for edge in range(2 * rows)}
        switches = []
        for row in range(rows):
            for col in range(cols):
                cfg = self.config(UnitKind.SWITCH, row, col)
                local = unit_inputs[row, col]
                for network in NETWORKS:
                    outputs = []
                    for direction in Direction:
                        d_row, d_col = row + direction.offset[0], col + direction.offset[1]
                        if 0 <= d_row < rows and 0 <= d_col < cols:
                            outputs.append(switch_inputs[d_row, d_col, network][
                                OPPOSITE[direction]])
                        elif direction == WEST and col == 0:
                            outputs.append(edge_out[network, row])
                        elif direction == EAST and col == cols - 1:
                            outputs.append(edge_out[network, rows + row])
                        else:
                            outputs.append(None)
                    if network == "vector":
                        if "vector_in0" in local:
                            outputs += [local["vector_in0"], local["vector_in1"]]
                        else:
                            outputs += [local["vector_in"], None]
                    else:
                        outputs.append(local[f"{network}_in"])
                    merges = cfg.get(f"{network}_merge")
                    if merges is None:
                        merges = [[0] * len(Port) for _ in outputs]
                    switches.append(UNITS[UnitKind.SWITCH].model(
                        f"switch({row},{col}) {network}", switch_inputs[row, col, network],
                        outputs, cfg[network], merges))
        units = []
        for row in range(rows):
            for col in range(cols):
                queues = dict(unit_inputs[row, col])
                for network in NETWORKS:
                    queues[f"{network}_out"] = switch_inputs[row, col, network][LOCAL]
                kind = self.unit_kind(row, col)
                config = self.config(kind, row, col)
                if kind == UnitKind.PCU:
                    units.append(UNITS[kind].model(row, col, lanes, self.stages, config,
                                                   queues, batch=self.simd_batch,
                                                   fp_latency=self.fp_latency))
                else:
                    units.append(UNITS[kind].model(row, col, lanes, self.capacity_words,
                                                   config, self.sram[row, col], queues))
        agcus = []
        if memory is not None:
            for index in range(self.agcus):
                edge = self.agcu_edges[index]
                ins = {network: self._edge_input(switch_inputs, network, edge)
                       for network in NETWORKS}
                outs = {network: edge_out[network, edge] for network in NETWORKS}
                agcus.append(UNITS[UnitKind.AGCU].model(
                    index, self.config(UnitKind.AGCU, 0, index), lanes, memory, ins, outs,
                    index in execute, self.dma_windows, self.position))
        per_beat_on_cycles(switches, units)
        return switch_inputs, edge_out, switches, units, agcus

    def _edge_input(self, switch_inputs, network, edge):
        rows = self.rows
        if not 0 <= edge < 2 * rows:
            raise ValueError(f"Edge index {edge} is not in 0..{2 * rows - 1}")
        if edge < rows:
            return switch_inputs[edge, 0, network][WEST]
        return switch_inputs[edge - rows, self.cols - 1, network][EAST]

    # -- running -------------------------------------------------------------------------
    def run(self, edge_inputs=None, memory=None, *, execute=None, max_items=50_000_000):
        """Run the loaded configuration until nothing moves.

        Parameters
        ----------
        edge_inputs : dict, optional
            ``{(network, edge): items}``; vector items are sequences of ``lanes`` words
            or packed integers (lane 0 in the LSBs), scalar items words, control items
            0 (STEP) or 1 (DONE).
        memory : object with ``read(address, nbytes)`` and ``write(address, raw)``, optional
            Attaches the AGCUs; those in ``execute`` (default: every AGCU with a load or
            store pattern enabled) run kernel execute.
        max_items : int
            Item transfers after which the run is stopped (:class:`ModelError`).

        Raises
        ------
        ModelDeadlock
            Nothing can move and work remains.
        UnitError
            A unit raised an error (the message names it and the code).
        """
        if not self.loaded:
            raise ModelError("No bitstream loaded")
        if memory is not None and execute is None:
            execute = []
            for index in range(self.agcus):
                cfg = self.config(UnitKind.AGCU, 0, index)
                if cfg["load_enable"] or cfg["store_enable"]:
                    execute.append(index)
        switch_inputs, edge_out, switches, units, agcus = self.build_run(memory, execute or [])
        sources = []
        for (network, edge), items in (edge_inputs or {}).items():
            if network not in NETWORKS:
                raise ValueError(f"Unknown network {network!r}")
            queue = self._edge_input(switch_inputs, network, edge)
            if any(self.agcu_edges[agcu.index] == edge and
                   (network == "control" and agcu.execute or
                    network == "vector" and agcu.load_total) for agcu in agcus):
                raise ValueError(f"Edge {network} input {edge} is driven by an AGCU")
            if network == "vector":
                items = [self._beat(item) for item in items]
            else:
                items = [int(item) for item in items]
            sources.append(EdgeSource(network, edge, items, queue))
        collected = {key: [] for key in edge_out}
        agcu_edges = {self.agcu_edges[agcu.index] for agcu in agcus}
        components = sources + agcus + [net for net in switches if net.active()] + units
        moved_total = 0
        done_tokens = 0
        scalar_results = {agcu.index: [] for agcu in agcus}
        try:
            while True:
                moved = 0
                for component in components:
                    moved += component.step()
                for (network, edge), queue in edge_out.items():
                    if not queue.items or (network == "vector" and edge in agcu_edges):
                        continue
                    if network == "control":
                        done_tokens += sum(queue.items)
                        for agcu in agcus:
                            if self.agcu_edges[agcu.index] == edge and DONE in queue.items:
                                agcu.done_seen = True
                    elif network == "scalar":
                        for agcu in agcus:
                            if self.agcu_edges[agcu.index] == edge:
                                scalar_results[agcu.index] += queue.items
                    collected[network, edge].extend(queue.items)
                    moved += len(queue.items)
                    queue.items.clear()
                if not moved:
                    break
                moved_total += moved
                if moved_total > max_items:
                    raise ModelError(f"run stopped after {moved_total} item transfers "
                                     f"(max_items={max_items})")
        finally:
            # SRAM writes of lazy SIMD results land even when the run stops early
            for unit in units:
                if isinstance(unit, PMUModel):
                    unit.flush()
            self.busy_agcus = [agcu.index for agcu in agcus if agcu.busy()]
        for agcu in agcus:
            agcu.flush()
        waiting = []
        for component in units + agcus + switches + sources:
            if component.busy():
                # a switch held up by a full destination is explained by its consumer
                default = [] if isinstance(component, SwitchNetworkModel) else [
                    f"{component.name} is busy"]
                waiting += component.waits() or default
        if not waiting:
            # only switches wait, on destinations that never take anything (a PMU
            # control_in without read_gate, for example)
            waiting = [text for net in switches for text in net.blocked()]
        if waiting:
            raise ModelDeadlock("deadlock: " + "; ".join(waiting))
        edge_outputs = {}
        for (network, edge), items in collected.items():
            if network == "vector":
                if items:
                    edge_outputs[network, edge] = item_vectors(items, self.lanes)
            elif items:
                edge_outputs[network, edge] = [item_word(item) for item in items]
        scalar_results = {index: [item_word(item) for item in items]
                          for index, items in scalar_results.items()}
        counters = {}
        for unit in units:
            counters[unit.name] = unit.counters()
        for net in switches:
            counters[net.name] = {"items_out": net.forwarded}
        for agcu in agcus:
            counters[agcu.name] = {"beats_loaded": agcu.loaded, "beats_stored": agcu.stored}
        leftovers = [text for component in switches + units for text in component.leftovers()]
        return RunResult(edge_outputs, counters, done_tokens, moved_total, scalar_results,
                         leftovers)

    def _beat(self, item):
        if isinstance(item, (int, np.integer)):
            value = int(item)
            return np.array([(value >> (32 * lane)) & 0xFFFF_FFFF for lane in range(self.lanes)],
                            dtype=np.uint32)
        beat = np.asarray(item, dtype=np.uint64)
        if beat.shape != (self.lanes,):
            raise ValueError(f"Vector item of shape {beat.shape}, expected ({self.lanes},)")
        return beat.astype(np.uint32)

    def run_program(self, program, *, max_items=50_000_000):
        """Run an :class:`rdu.program.Program`: inputs into a :class:`FlatMemory`, the
        bitstream loaded from ``bitstream_address`` (as AGCU 0's program load reads it),
        the AGCUs of ``program.execute`` run. Returns ``(outputs, result)``: ``{name:
        uint32 array}`` for ``program.outputs`` and the :class:`RunResult`."""
        memory = FlatMemory()
        for _, (address, words) in program.inputs.items():
            memory.write_words(address, words)
        memory.write_words(program.bitstream_address, program.bitstream)
        header = memory.read_words(program.bitstream_address, 5)
        length = (int(header[1]) >> 16) + int(header[3]) if len(program.bitstream) >= 5 else 0
        words = memory.read_words(program.bitstream_address,
                                  min(max(length, 1), len(program.bitstream)))
        self.load([int(word) for word in words])
        result = self.run(memory=memory, execute=list(program.execute), max_items=max_items)
        outputs = {name: memory.read_words(address, count)
                   for name, (address, count) in program.outputs.items()}
        return outputs, result


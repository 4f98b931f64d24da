"""RDUSystem: the top level, a :class:`TileArray` with its AGCUs at the edge.

``docs/system.md`` documents the edge assignment, the run sequence and the host driver
that runs programs on it (``software/rdu/sim/host.py``: ``run_program``,
``run_programs``, ``HostDriver``).
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from . import defaults
from .agcu import AGCU, POSITION_BITS, agcu_command_layout, agcu_config_layout
from .agcu_engines import dma_windows_layout
from .array import HostPort, TileArray
from .interfaces import NETWORKS, WORD_BITS, AXI4Signature, config_words
from .orchestrator import DEFAULT_COMMANDS, MAX_AGCUS, Orchestrator, ScheduleControl
from .pcu import PCU
from .switch import FIFO_DEPTH

__all__ = ["agcu_position", "agcu_edge", "position_edge", "default_agcu_positions", "RDUSystem"]

SIDES = ("west", "east")
#: The host port's controls the orchestrator drives while it runs a schedule.
ORCHESTRATED_HOST_CONTROLS = ("start", "config_clear", "watchdog_cycles", "cycle_budget")


def agcu_position(k, rows):
    """``(side, row)`` of AGCU ``k`` on a ``rows``-row array.

    Even ``k`` on the west edge, odd ``k`` on the east edge, starting from the middle
    rows: AGCU 0 west of row ``(rows - 1) // 2``, AGCU 1 east of row ``rows // 2``,
    AGCU 2 west of the row below AGCU 0, and so on (wrapping). Mid-edge rather than
    corners: a corner switch has only two mesh links per direction, and a kernel's load
    trees and result merges meet at the AGCUs' switches (on the 4x4 array no placement
    of a GEMM on all eight PCUs routes with corner AGCUs). The compiler's mapper and the
    functional model use this rule (``rdu.mapper.agcu_site``).
    """
    for name, value in (("AGCU index", k), ("Row count", rows)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, not {value!r}")
    if rows < 1:
        raise ValueError(f"Row count must be at least 1, not {rows}")
    if not 0 <= k < 2 * rows:
        raise ValueError(f"AGCU index must be between 0 and {2 * rows - 1} for {rows} rows, "
                         f"not {k}")
    if k % 2 == 0:
        return "west", ((rows - 1) // 2 + k // 2) % rows
    return "east", (rows // 2 + k // 2) % rows


def agcu_edge(k, rows):
    """The :class:`TileArray` edge index AGCU ``k`` attaches to (:func:`agcu_position`)."""
    side, row = agcu_position(k, rows)
    return position_edge(side, row, rows)


def position_edge(side, row, rows):
    """The :class:`TileArray` edge index of the AGCU position ``(side, row)``:
    ``row`` on the west side, ``rows + row`` on the east side."""
    if side not in SIDES:
        raise ValueError(f"AGCU side must be 'west' or 'east', not {side!r}")
    if not isinstance(row, int) or isinstance(row, bool) or not 0 <= row < rows:
        raise ValueError(f"AGCU row must be an integer between 0 and {rows - 1}, not {row!r}")
    return row if side == "west" else rows + row


def default_agcu_positions(agcus, rows):
    """``[(side, row)]`` of :func:`agcu_position` for AGCUs ``0 .. agcus - 1``."""
    return [agcu_position(k, rows) for k in range(agcus)]


class RDUSystem(wiring.Component):
    """A tile array and ``agcus`` AGCUs: the whole chip minus its memories.

    AGCU ``k`` is wired to the edge at ``agcu_positions[k]`` (default
    :func:`agcu_position`: mid-edge rows, even ``k`` west, odd ``k`` east) on
    all three networks (its ``*_out`` into the array, the array's edge output back into
    its ``*_in``) and to the array's ``agcu_cfg[k]`` configuration port. AGCU 0's
    ``bitstream_out`` feeds the array's configuration network (``PROGRAM_LOAD``); the
    other AGCUs' ``bitstream_out`` is always ready and discarded.
    An :class:`hdl.orchestrator.Orchestrator` runs schedules from memory
    (``docs/orchestrator.md``): while it is busy it owns the AGCUs' commands and the
    host port's ``start``, ``config_clear``, ``watchdog_cycles`` and ``cycle_budget`` (the host's
    ``cmd`` streams are not ready), and while it fetches a schedule AGCU 0's
    ``bitstream_out`` goes to it instead of the configuration network. Idle, it changes
    nothing: the host drives ``cmd`` and ``host`` as without it.
    Edge ports without an AGCU are idle: their inputs have ``valid`` low, their outputs
    ``ready`` low (data routed there stalls and shows in the stall counters).

    Parameters
    ----------
    rows, cols, lanes : int
        Array geometry (:class:`TileArray`).
    agcus : int
        Number of AGCUs, 1 to ``2 * rows`` (AGCU 0 loads programs).
    compute_unit : class, callable or None
        Compute unit of the checkerboard's even positions; ``None``: PMUs everywhere.
    capacity_bytes : int
        Capacity of each PMU.
    fifo_depth : int
        Depth of the switches' input FIFOs.
    idle_timeout : int
        Bitstream truncation timeout (cycles).
    agcu_positions : sequence of (side, row), optional
        Where each AGCU sits: ``side`` ``"west"`` or ``"east"``, ``row`` its row; one
        per AGCU, all distinct. Default :func:`default_agcu_positions` (the
        :func:`agcu_edge` assignment). A compiled program must be run on a system whose
        positions are the ones its mapper assumed.
    schedule_commands : int, optional
        Depth of the orchestrator's schedule memory in commands (1 to 4096); 0: no
        orchestrator. Default :data:`hdl.orchestrator.DEFAULT_COMMANDS` (64), or 0 for more than
        :data:`hdl.orchestrator.MAX_AGCUS` AGCUs (its masks have a bit per AGCU).

    Attributes
    ----------
    axi : Out(AXI4Signature).array(agcus)
        Memory port of each AGCU.
    cmd : In(stream.Signature(agcu_command_layout())).array(agcus)
        Host commands of each AGCU.
    agcu_busy, agcu_done : Out(1).array(agcus)
    agcu_error : Out(4).array(agcus)
        ``AGCUError`` of each AGCU's last command (valid with ``agcu_done``).
    agcu_scalar_result, agcu_scalar_count : Out(32).array(agcus)
        Last scalar received by each AGCU from the array, and how many.
    host : In(HostPort())
        The array's host port (start, configuration state, run status, counters).
    readback : Out(stream.Signature(32))
        Configuration readback (``host.readback_start``).
    orch : In(ScheduleControl())
        The orchestrator's start, schedule address and length, and status (with no
        orchestrator: never busy).
    abort_start : In(1)
        Pulse: abort (``docs/system.md``, **Abort**). Every busy AGCU drains its command
        and ends it with ``ABORTED`` (``AGCU.abort_cmd``; no command is accepted meanwhile),
        then the array is flushed for one cycle (``TileArray.flush``: streams, units,
        the loader and the watchdog back to their reset state, PMU SRAM kept). Ignored
        while an abort runs.
    aborting : Out(1)
        An abort runs (from the cycle after the pulse to the end of the flush).
    dma_windows : In(hdl.agcu_engines.dma_windows_layout())
        The memory windows of the launch, checked by every AGCU before it issues a
        burst (``enable`` 0, the reset value: every address allowed; ``agcu.md``,
        **Memory windows**). Set by the host before the launch's commands.
    agcu_error_addr : Out(32).array(agcus)
        Each AGCU's ``error_addr`` (the burst its windows refused, with ``WINDOW``).
    position : In(POSITION_BITS)
        The launch's position, to every AGCU (``AGCU.position``: positioned patterns move
        by it). Set by the host before the launch's commands (an orchestrated schedule:
        before its start) and steady until they end.
    """

    def __init__(self, rows=defaults.ROWS, cols=defaults.COLS, lanes=defaults.LANES, *,
                 agcus=defaults.AGCUS, compute_unit=PCU, capacity_bytes=defaults.PMU_BYTES,
                 fifo_depth=FIFO_DEPTH, idle_timeout=4096,
                 agcu_positions=None, schedule_commands=None):
        for name, value in (("rows", rows), ("cols", cols)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError(f"System {name} must be an integer, not {value!r}")
            if not 1 <= value <= 255:
                raise ValueError(f"System {name} must be between 1 and 255, not {value}")
        if not isinstance(agcus, int) or isinstance(agcus, bool):
            raise TypeError(f"AGCU count must be an integer, not {agcus!r}")
        if not 1 <= agcus <= 2 * rows:
            raise ValueError(f"AGCU count must be between 1 and {2 * rows} (two per row) for "
                             f"{rows} rows, not {agcus}")
        if agcu_positions is None:
            agcu_positions = default_agcu_positions(agcus, rows)
        positions = [tuple(position) for position in agcu_positions]
        if len(positions) != agcus or any(len(position) != 2 for position in positions):
            raise ValueError(f"AGCU positions must be {agcus} (side, row) pairs, one per AGCU, "
                             f"not {agcu_positions!r}")
        edges = [position_edge(side, row, rows) for side, row in positions]
        if len(set(edges)) != len(edges):
            raise ValueError(f"AGCU positions must be distinct, not {agcu_positions!r}")
        self.agcu_positions = positions
        self._edges = edges
        self.rows, self.cols, self.lanes = rows, cols, lanes
        self.agcu_count = agcus
        self.agcus = [AGCU(lanes=lanes) for _ in range(agcus)]
        self.agcu_config_words = config_words(agcu_config_layout(self.agcus[0].addr_width))
        self.array = TileArray(rows, cols, lanes, compute_unit=compute_unit,
                               capacity_bytes=capacity_bytes, fifo_depth=fifo_depth,
                               agcus=agcus, agcu_config_words=self.agcu_config_words,
                               idle_timeout=idle_timeout)
        first = self.agcus[0]
        if schedule_commands is None:
            schedule_commands = DEFAULT_COMMANDS if agcus <= MAX_AGCUS else 0
        if not isinstance(schedule_commands, int) or isinstance(schedule_commands, bool):
            raise TypeError(f"Schedule memory depth must be an integer, not "
                            f"{schedule_commands!r}")
        self.orchestrator = (Orchestrator(agcus, commands=schedule_commands,
                                          addr_width=first.addr_width)
                             if schedule_commands else None)
        super().__init__({
            "axi": Out(AXI4Signature(addr_width=first.addr_width,
                                     data_width=lanes * WORD_BITS,
                                     id_width=first.id_width)).array(agcus),
            "cmd": In(stream.Signature(agcu_command_layout(first.addr_width))).array(agcus),
            "agcu_busy": Out(1).array(agcus),
            "agcu_done": Out(1).array(agcus),
            "agcu_error": Out(4).array(agcus),
            "agcu_scalar_result": Out(WORD_BITS).array(agcus),
            "agcu_scalar_count": Out(WORD_BITS).array(agcus),
            "host": In(HostPort()),
            "readback": Out(stream.Signature(WORD_BITS)),
            "orch": In(ScheduleControl()),
            "abort_start": In(1),
            "aborting": Out(1),
            "dma_windows": In(dma_windows_layout(first.addr_width)),
            "agcu_error_addr": Out(first.addr_width).array(agcus),
            "position": In(POSITION_BITS),
        })

    def edge_of(self, k):
        """Array edge index of AGCU ``k`` (``row`` west, ``rows + row`` east)."""
        return self._edges[k]

    def perf_counter_names(self):
        """Names of the array's performance counters, in ``host.perf_select`` order."""
        return self.array.perf_counter_names()

    def config_targets(self):
        """The array's configuration targets (:meth:`TileArray.config_targets`)."""
        return self.array.config_targets()

    def _abort(self, m):
        """The abort sequence: the AGCUs drain, then the array is flushed."""
        busy = Cat(*(agcu.busy for agcu in self.agcus)).any()
        with m.FSM(name="abort_fsm"):
            with m.State("IDLE"):
                with m.If(self.abort_start):
                    m.next = "DRAIN"
            with m.State("DRAIN"):
                m.d.comb += self.aborting.eq(1)
                for agcu in self.agcus:
                    m.d.comb += agcu.abort_cmd.eq(1)
                with m.If(~busy):
                    m.next = "FLUSH"
            with m.State("FLUSH"):
                m.d.comb += [self.aborting.eq(1), self.array.flush.eq(1)]
                for agcu in self.agcus:
                    m.d.comb += [agcu.abort_cmd.eq(1), agcu.config_flush.eq(1)]
                m.next = "IDLE"

    def elaborate(self, platform):
        m = Module()
        array = self.array
        m.submodules.array = array
        orch = self.orchestrator
        owned = Signal()                 # the orchestrator owns commands and host controls
        capture = Signal()               # AGCU 0's bitstream_out goes to the orchestrator
        if orch is not None:
            m.submodules.orchestrator = orch
            wiring.connect(m, wiring.flipped(self.orch), orch.control)
            m.d.comb += [owned.eq(orch.control.busy), capture.eq(orch.capture),
                         orch.watchdog_cycles.eq(self.host.watchdog_cycles),
                         orch.cycle_budget.eq(self.host.cycle_budget),
                         orch.abort_start.eq(self.abort_start)]
        # the array's host port: the host's, or the orchestrator's controls while it runs
        for name, member in HostPort().members.items():
            outer, inner = getattr(self.host, name), getattr(array.host, name)
            if member.flow == Out:       # driven by the host
                if orch is not None and name in ORCHESTRATED_HOST_CONTROLS:
                    m.d.comb += inner.eq(Mux(owned, getattr(orch.host, name), outer))
                else:
                    m.d.comb += inner.eq(outer)
            else:
                m.d.comb += outer.eq(inner)
                if orch is not None:
                    m.d.comb += getattr(orch.host, name).eq(inner)
        wiring.connect(m, array.readback, wiring.flipped(self.readback))
        m.d.comb += array.kernel_busy.eq(Cat(*(agcu.executing for agcu in self.agcus)).any())
        self._abort(m)
        for k, agcu in enumerate(self.agcus):
            m.submodules[f"agcu{k}"] = agcu
            edge = self.edge_of(k)
            wiring.connect(m, agcu.axi, wiring.flipped(self.axi[k]))
            if orch is None:
                wiring.connect(m, wiring.flipped(self.cmd[k]), agcu.cmd)
            else:
                host_cmd, orch_cmd = self.cmd[k], orch.cmd[k]
                m.d.comb += [
                    agcu.cmd.valid.eq(Mux(owned, orch_cmd.valid, host_cmd.valid)),
                    agcu.cmd.payload.eq(Mux(owned, orch_cmd.payload, host_cmd.payload)),
                    orch_cmd.ready.eq(owned & agcu.cmd.ready),
                    host_cmd.ready.eq(~owned & agcu.cmd.ready),
                    orch.agcu_busy[k].eq(agcu.busy),
                    orch.agcu_done[k].eq(agcu.done),
                    orch.agcu_error[k].eq(agcu.error),
                ]
            wiring.connect(m, array.agcu_cfg[k], agcu.cfg)
            for network in NETWORKS:
                wiring.connect(m, getattr(agcu, f"{network}_out"),
                               getattr(array, f"agcu_{network}_in")[edge])
                wiring.connect(m, getattr(array, f"agcu_{network}_out")[edge],
                               getattr(agcu, f"{network}_in"))
            m.d.comb += [
                agcu.windows.eq(self.dma_windows),
                agcu.position.eq(self.position),
                self.agcu_error_addr[k].eq(agcu.error_addr),
                self.agcu_busy[k].eq(agcu.busy),
                self.agcu_done[k].eq(agcu.done),
                self.agcu_error[k].eq(agcu.error),
                self.agcu_scalar_result[k].eq(agcu.scalar_result),
                self.agcu_scalar_count[k].eq(agcu.scalar_count),
            ]
            if k == 0 and orch is not None:
                # the schedule's fetch captures AGCU 0's words; otherwise they configure
                source, config = agcu.bitstream_out, array.bitstream
                m.d.comb += [
                    config.valid.eq(source.valid & ~capture),
                    config.payload.eq(source.payload),
                    orch.bitstream.valid.eq(source.valid & capture),
                    orch.bitstream.payload.eq(source.payload),
                    source.ready.eq(Mux(capture, orch.bitstream.ready, config.ready)),
                ]
            elif k == 0:
                wiring.connect(m, agcu.bitstream_out, array.bitstream)
            else:
                # only AGCU 0 feeds the configuration network: a program load on another
                # AGCU runs to its end and its words are discarded (never a hang)
                m.d.comb += agcu.bitstream_out.ready.eq(1)
        return m

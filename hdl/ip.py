"""RDUIP: the system as an FPGA IP block.

:class:`RDUIP` wraps :class:`hdl.system.RDUSystem` for a block design or an SoC:

* per AGCU ``k`` an AXI4 manager port with the names vendor IP uses
  (``m00_axi_awaddr``, ``m00_axi_awvalid``, ... ``m01_axi_...``), the full AXI4 signal set
  (the optional signals the AGCU does not use are the constants of
  :data:`AXI4_CONSTANTS`);
* an AXI4-Lite subordinate port ``s_axil_*`` with the register map of
  ``hdl/rdu_ip.rdl`` (:mod:`hdl.regmap`);
* ``irq``: high while ``CONTROL.IRQ_ENABLE`` and a bit of ``IRQ_STATUS`` are set.

Writing ``CONTROL.START`` runs the :class:`hdl.sequencer.Sequencer`, the run sequence of
``docs/system.md`` in gateware: clear the configuration, ``PROGRAM_LOAD`` on AGCU 0
from ``PROG_ADDR``/``PROG_LEN``, the loader's verdict, an optional ``ARGUMENT_LOAD``,
``start`` and ``EXECUTE`` on the AGCUs of ``EXEC_MASK`` on one edge, the wait for them
(an AGCU's error or the array's watchdog ends it at once), the wait for the mesh to
drain; then ``STATUS.DONE`` or ``STATUS.ERROR`` with ``ERROR``/``ERROR_UNIT``, and
``IRQ_STATUS``. Writing ``CONTROL.SCHEDULE_START`` runs the system's orchestrator on
the schedule at ``SCHEDULE_ADDR``/``SCHEDULE_LEN`` (``docs/orchestrator.md``); ``STATUS``,
``ERROR``, ``ERROR_UNIT``, ``RUN_CYCLES`` then report it and ``SCHEDULE_INDEX`` its
progress. ``docs/ip.md`` has the register map and the integration notes.
"""

from amaranth import Array, Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from . import defaults
from .agcu import AGCUError
from .config_net import ConfigStatus
from .interfaces import WORD_BITS, check_int
from .pcu import PCU
from .regmap import AXI4LiteRegisters, register_map
from .sequencer import Sequencer
from .system import RDUSystem

__all__ = ["AXI4_CONSTANTS", "ERROR_CODES", "axi4_manager_members", "Sequencer", "RDUIP",
           "ip_geometry"]

#: The AXI4 signals the AGCU does not use, and the constant each manager port drives:
#: ``AxLOCK`` 0 (normal access), ``AxCACHE`` 0b0011 (normal non-cacheable bufferable:
#: what Xilinx recommends for a data mover, lets an interconnect merge and buffer
#: writes), ``AxPROT`` 0b000 (data, secure, unprivileged), ``AxQOS`` 0 (no QoS),
#: ``AxREGION`` 0 (one region). ``{name: (width, value)}`` for ``aw``; ``ar`` the same.
AXI4_CONSTANTS = {"lock": (1, 0), "cache": (4, 0b0011), "prot": (3, 0b000),
                  "qos": (4, 0), "region": (4, 0)}


def axi4_manager_members(addr_width, data_width, id_width):
    """``{name: (direction, width)}`` of an AXI4 manager port in the AMBA names without
    prefix (``awid``, ``awaddr``, ... ``rready``); ``"out"``: driven by the manager."""
    address = {"id": id_width, "addr": addr_width, "len": 8, "size": 3, "burst": 2,
               **{name: width for name, (width, _) in AXI4_CONSTANTS.items()}}
    members = {}
    for channel in ("aw", "ar"):
        members.update({f"{channel}{name}": ("out", width) for name, width in address.items()})
        members[f"{channel}valid"] = ("out", 1)
        members[f"{channel}ready"] = ("in", 1)
        if channel == "aw":
            members.update({"wdata": ("out", data_width), "wstrb": ("out", data_width // 8),
                            "wlast": ("out", 1), "wvalid": ("out", 1), "wready": ("in", 1),
                            "bid": ("in", id_width), "bresp": ("in", 2), "bvalid": ("in", 1),
                            "bready": ("out", 1)})
    members.update({"rid": ("in", id_width), "rdata": ("in", data_width), "rresp": ("in", 2),
                    "rlast": ("in", 1), "rvalid": ("in", 1), "rready": ("out", 1)})
    return members


def ip_geometry(system):
    """``{"rows", "cols", "lanes", "stages", "pmu_kib", "agcus", "beat_log2"}`` of a
    :class:`RDUSystem`: what the ``GEOMETRY`` and ``RESOURCES`` registers report."""
    array = system.array
    stages = [unit.stages for unit in array.units.values() if hasattr(unit, "stages")]
    pmus = [unit for unit in array.units.values() if hasattr(unit, "capacity_words")]
    return {"rows": system.rows, "cols": system.cols, "lanes": system.lanes,
            "stages": stages[0] if stages else 0,
            "pmu_kib": pmus[0].capacity_words * 4 // 1024 if pmus else 0,
            "agcus": system.agcu_count,
            "beat_log2": (system.lanes * WORD_BITS // 8).bit_length() - 1}


class RDUIP(wiring.Component):
    """The RDU system as an IP block: AXI4 manager ports, AXI4-Lite registers, an irq.

    Parameters
    ----------
    rows, cols, lanes, agcus, compute_unit, capacity_bytes, fifo_depth, idle_timeout, \
agcu_positions
        As :class:`hdl.system.RDUSystem` (at most 32 AGCUs: ``EXEC_MASK``).
    lite_addr_width : int
        Address width of the AXI4-Lite port (its window is ``2**lite_addr_width``
        bytes; default 12, a 4 KiB page).

    Attributes
    ----------
    m<kk>_axi_<signal>
        AXI4 manager port of AGCU ``kk`` (two digits), every signal of
        :func:`axi4_manager_members`.
    s_axil_<signal>
        AXI4-Lite subordinate port (:func:`hdl.regmap.axi4lite_members`).
    irq : Out(1)
        Level interrupt: ``CONTROL.IRQ_ENABLE`` and (``IRQ_STATUS.DONE`` or
        ``IRQ_STATUS.ERROR``).
    """

    def __init__(self, rows=defaults.ROWS, cols=defaults.COLS, lanes=defaults.LANES, *,
                 agcus=defaults.AGCUS, compute_unit=PCU, capacity_bytes=defaults.PMU_BYTES,
                 lite_addr_width=12, **system_params):
        check_int("AGCU count", agcus, 1, 32)
        self.system = RDUSystem(rows, cols, lanes, agcus=agcus, compute_unit=compute_unit,
                                capacity_bytes=capacity_bytes, **system_params)
        self.regmap = register_map()
        self.lite = AXI4LiteRegisters(self.regmap, addr_width=lite_addr_width)
        self.sequencer = Sequencer(agcus, addr_width=self.system.agcus[0].addr_width)
        self.geometry = ip_geometry(self.system)
        axi = self.system.axi[0].signature
        self._axi_members = axi4_manager_members(axi.addr_width, axi.data_width, axi.id_width)
        members = {}
        for k in range(agcus):
            for name, (direction, width) in self._axi_members.items():
                members[f"m{k:02d}_axi_{name}"] = (Out if direction == "out" else In)(width)
        for name, member in self.lite.signature.members.items():
            members[f"s_axil_{name}"] = member
        members["irq"] = Out(1)
        super().__init__(members)

    def perf_counter_names(self):
        """The names of the performance counters behind ``PERF_SELECT``."""
        return self.system.perf_counter_names()

    def elaborate(self, platform):
        m = Module()
        system, lite, seq = self.system, self.lite, self.sequencer
        soft_reset = Signal()
        m.d.comb += soft_reset.eq(lite.regs.control_soft_reset)
        m.submodules.system = ResetInserter(soft_reset)(system)
        m.submodules.sequencer = ResetInserter(soft_reset)(seq)
        m.submodules.lite = lite
        self._lite_port(m)
        self._axi_ports(m)
        self._sequencer(m)
        schedule, busy, ended = self._orchestrator(m)
        self._status_registers(m, soft_reset, schedule, busy, ended)
        return m

    def _lite_port(self, m):
        """The AXI4-Lite port: the same names with the ``s_axil_`` prefix."""
        lite = self.lite
        for name in lite.signature.members:
            port, inner = getattr(self, f"s_axil_{name}"), getattr(lite, name)
            if lite.signature.members[name].flow == In:
                m.d.comb += inner.eq(port)
            else:
                m.d.comb += port.eq(inner)


    def _axi_ports(self, m):
        """The AXI4 manager ports: the system's stream channels, flattened."""
        system = self.system
        for k, axi in enumerate(system.axi):
            def port(name, k=k):
                return getattr(self, f"m{k:02d}_axi_{name}")
            for channel in ("aw", "ar"):
                stream_ = getattr(axi, channel)
                payload = stream_.payload
                m.d.comb += [port(f"{channel}id").eq(payload.id),
                             port(f"{channel}addr").eq(payload.addr),
                             port(f"{channel}len").eq(payload.len),
                             port(f"{channel}size").eq(payload.size),
                             port(f"{channel}burst").eq(payload.burst),
                             port(f"{channel}valid").eq(stream_.valid),
                             stream_.ready.eq(port(f"{channel}ready"))]
                for name, (_, value) in AXI4_CONSTANTS.items():
                    m.d.comb += port(f"{channel}{name}").eq(value)
            m.d.comb += [port("wdata").eq(axi.w.payload.data),
                         port("wstrb").eq(axi.w.payload.strb),
                         port("wlast").eq(axi.w.payload.last),
                         port("wvalid").eq(axi.w.valid),
                         axi.w.ready.eq(port("wready")),
                         axi.b.payload.id.eq(port("bid")),
                         axi.b.payload.resp.eq(port("bresp")),
                         axi.b.valid.eq(port("bvalid")),
                         port("bready").eq(axi.b.ready),
                         axi.r.payload.id.eq(port("rid")),
                         axi.r.payload.data.eq(port("rdata")),
                         axi.r.payload.resp.eq(port("rresp")),
                         axi.r.payload.last.eq(port("rlast")),
                         axi.r.valid.eq(port("rvalid")),
                         port("rready").eq(axi.r.ready)]

    def _sequencer(self, m):
        """The sequencer drives the commands and the host port."""
        system, seq, regs = self.system, self.sequencer, self.lite.regs
        for k in range(system.agcu_count):
            wiring.connect(m, seq.cmd[k], system.cmd[k])
            m.d.comb += [seq.agcu_busy[k].eq(system.agcu_busy[k]),
                         seq.agcu_done[k].eq(system.agcu_done[k]),
                         seq.agcu_error[k].eq(system.agcu_error[k])]
        host = system.host
        for name, member in seq.host.signature.members.items():
            if name in ("perf_select", "readback_start"):
                continue
            inner, outer = getattr(seq.host, name), getattr(host, name)
            if member.flow == Out:          # driven by the host (the sequencer)
                m.d.comb += outer.eq(inner)
            else:
                m.d.comb += inner.eq(outer)
        windows = system.dma_windows
        m.d.comb += [windows.enable.eq(regs.window_ctrl_enable),
                     system.position.eq(regs.position_index)]
        for k, window in enumerate(windows.window):
            m.d.comb += [window.base.eq(getattr(regs, f"window{k}_base_addr")),
                         window.size.eq(getattr(regs, f"window{k}_size_bytes")),
                         window.read.eq(regs.window_ctrl_read[k]),
                         window.write.eq(regs.window_ctrl_write[k])]
        m.d.comb += [host.perf_select.eq(regs.perf_select_index),
                     host.readback_start.eq(0),
                     system.readback.ready.eq(1)]

    def _orchestrator(self, m):
        """The orchestrator (``CONTROL.SCHEDULE_START``): the system's ``orch`` port; a
        START and a SCHEDULE_START are each ignored while the other runs. Returns
        ``(schedule, busy, ended)``: the last run was a schedule, either runs, the
        schedule ended this cycle."""
        seq, regs = self.sequencer, self.lite.regs
        orch = self.system.orch
        schedule = Signal()              # the last run was a schedule
        was_busy = Signal()
        busy = Signal()
        aborting = self.system.aborting
        m.d.comb += [busy.eq(seq.busy | orch.busy),
                     orch.start.eq(regs.control_schedule_start & ~busy & ~aborting),
                     orch.addr.eq(regs.schedule_addr_addr),
                     orch.length.eq(regs.schedule_len_length)]
        m.d.sync += was_busy.eq(orch.busy)
        with m.If(regs.control_schedule_start & ~busy & ~aborting):
            m.d.sync += schedule.eq(1)
        with m.Elif(regs.control_start & ~busy & ~aborting):
            m.d.sync += schedule.eq(0)
        ended = Signal()
        m.d.comb += ended.eq(was_busy & ~orch.busy)
        m.d.comb += [self.system.abort_start.eq(regs.control_abort),
                     seq.abort_start.eq(regs.control_abort),
                     seq.start.eq(regs.control_start & ~orch.busy & ~aborting),
                     seq.prog_addr.eq(regs.prog_addr_addr),
                     seq.prog_len.eq(regs.prog_len_length),
                     seq.arg_addr.eq(regs.arg_addr_addr),
                     seq.arg_len.eq(regs.arg_len_length),
                     seq.exec_mask.eq(regs.exec_mask_mask),
                     seq.watchdog_cycles.eq(regs.watchdog_cycles),
                     seq.cycle_budget.eq(regs.run_budget_cycles)]
        return schedule, busy, ended

    def _status_registers(self, m, soft_reset, schedule, busy, ended):
        """The registers the hardware reports."""
        system, seq, regs = self.system, self.sequencer, self.lite.regs
        host, orch = system.host, system.orch
        geometry = self.geometry
        m.d.comb += [
            regs.geometry_rows.eq(geometry["rows"]), regs.geometry_cols.eq(geometry["cols"]),
            regs.geometry_lanes.eq(geometry["lanes"]),
            regs.geometry_stages.eq(geometry["stages"]),
            regs.resources_pmu_kib.eq(geometry["pmu_kib"]),
            regs.resources_agcus.eq(geometry["agcus"]),
            regs.resources_beat_log2.eq(geometry["beat_log2"]),
            regs.status_config_state.eq(host.config_state),
            regs.status_busy.eq(busy), regs.status_running.eq(host.running),
            regs.status_done.eq(Mux(schedule, orch.done, seq.done)),
            regs.status_error.eq(Mux(schedule, orch.error, seq.error)),
            regs.status_schedule.eq(schedule),
            regs.status_aborting.eq(system.aborting),
            regs.error_addr_addr.eq(Array(system.agcu_error_addr)[
                Mux(schedule, orch.error_unit, seq.error_unit)]),
            regs.status_agcu_busy.eq(Cat(*system.agcu_busy).any()),
            regs.error_code.eq(Mux(schedule, orch.error_code, seq.error_code)),
            regs.error_source.eq(Mux(schedule, orch.error_source, seq.error_source)),
            regs.error_unit_unit.eq(Mux(schedule, orch.error_unit, seq.error_unit)),
            regs.schedule_index_index.eq(Mux(orch.error, orch.error_index, orch.index)),
            regs.schedule_index_completed.eq(orch.completed),
            regs.irq_status_done_set.eq(seq.done_event | (ended & orch.done)),
            regs.irq_status_error_set.eq(seq.error_event | (ended & orch.error)),
            regs.clear_sticky.eq(soft_reset),
            regs.cycles_count.eq(host.cycles),
            regs.run_cycles_count.eq(Mux(schedule, orch.cycles, seq.run_cycles)),
            regs.load_cycles_count.eq(seq.load_cycles),
            regs.perf_count_count.eq(len(system.perf_counter_names())),
            regs.perf_value_value.eq(host.perf_value),
            self.irq.eq(regs.control_irq_enable &
                        (regs.irq_status_done | regs.irq_status_error)),
        ]


#: The enumeration of ``ERROR.CODE`` for each ``ERROR.SOURCE`` that has codes (the
#: units' own enumerations, not copies).
ERROR_CODES = {"LOADER": ConfigStatus, "AGCU": AGCUError}

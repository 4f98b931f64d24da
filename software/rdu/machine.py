"""The machine a program is compiled for and run on: every array and memory parameter.

A :class:`Machine` is the one description of a system that the compiler, the
functional model, the RTL runtime and the program manifest share: the tile array
(rows, columns, lanes, SIMD stages, PMU capacity, compute units or PMUs only), its
AGCUs and where they sit, and the capacities of the off-chip memories. A program
records the machine it was compiled for; the runtime refuses to run it on another
one and names the first parameter that differs (:meth:`Machine.mismatch`).

>>> machine = Machine(rows=2, cols=2, lanes=4)
>>> machine.regions()[0].size == machine.hbm_bytes
True
"""

from dataclasses import asdict, dataclass, fields

from hdl import defaults
from hdl.fp_latency import FP_LATENCY_CHOICES, latency_table

from .bitstream import Geometry
from .mapper import ArrayGeometry
from .memory_map import DDR, HBM, HBM_CHANNEL_BYTES_PER_CYCLE, HBM_CHANNELS, HOST, Region
from .units.registry import PCU_VARIANTS

__all__ = ["Machine", "MachineError", "DEFAULT_MACHINE", "MACHINE_OPTIONS"]

MiB = 1 << 20

#: The machine parameters as options of ``rdu compile/run/sim`` and keys of an ``rdu
#: sweep`` grid: option -> (:class:`Machine` field, the field's value per unit of the
#: option, help).
MACHINE_OPTIONS = {
    "rows": ("rows", 1, "tile array rows"),
    "cols": ("cols", 1, "tile array columns"),
    "lanes": ("lanes", 1, "32-bit lanes per vector beat (and PMU banks)"),
    "stages": ("stages", 1, "SIMD stages per PCU"),
    "pmu_kib": ("pmu_bytes", 1024, "capacity of each PMU in KiB"),
    "agcus": ("agcus", 1, "number of AGCUs (AGCU 0 loads programs)"),
    "hbm_mib": ("hbm_bytes", MiB, "HBM capacity in MiB"),
    "ddr_mib": ("ddr_bytes", MiB, "DDR capacity in MiB"),
}


class MachineError(ValueError):
    """A machine description that is not valid (the message names the parameter)."""


@dataclass(frozen=True)
class Machine:
    """A system: a ``rows x cols`` tile array of ``lanes``-lane units, its AGCUs, memories.

    Parameters
    ----------
    rows, cols : int
        Tile array size (1-255 each).
    lanes : int
        32-bit words per vector beat (and PMU banks).
    stages : int
        SIMD stages of each PCU.
    pmu_bytes : int
        Capacity of each PMU (a multiple of ``4 * lanes``).
    agcus : int
        Number of AGCUs (1 to ``2 * rows``); AGCU 0 loads programs.
    agcu_positions : tuple of (side, row), optional
        Where each AGCU sits; ``None``: :func:`hdl.system.agcu_position`'s rule (the
        attribute then holds those positions).
    compute : bool
        PCUs on the checkerboard's compute positions; ``False``: PMUs everywhere.
    pcu : str
        The kind of PCU the RTL is built with, a name of
        :data:`rdu.units.registry.PCU_VARIANTS`: ``standard``, or ``fpga`` (the FPGA
        configuration's: the same words, exp and the reciprocal 13 and 8 cycles per
        vector; needs ``lanes <= stages``).
    fp_latency : str
        The PCU's ``fp_latency`` (:data:`hdl.fp_latency.FP_LATENCY_CHOICES`): ``"off"``
        (every SIMD stage one cycle) or ``"default"`` (the SIMD stages and the lane
        reduction on the pipelined FP operators of :data:`hdl.fp_latency.DEFAULT_LATENCY`,
        the systolic PEs too, with tiles of :func:`hdl.fp_latency.systolic_group` column
        tiles: the same words, more latency; not with ``pcu = "fpga"``). The RTL, the
        functional model, the compiler's matmul streams and the runtime's watchdog read
        it.
    hbm_bytes, ddr_bytes, host_bytes : int
        Capacities of the HBM, DDR and host-memory windows (at their fixed bases of
        :mod:`rdu.memory_map`; each must end before the next region's base).
    """
    rows: int = defaults.ROWS
    cols: int = defaults.COLS
    lanes: int = defaults.LANES
    stages: int = defaults.STAGES
    pmu_bytes: int = defaults.PMU_BYTES
    agcus: int = defaults.AGCUS
    agcu_positions: tuple = None
    compute: bool = True
    pcu: str = "standard"
    fp_latency: str = "off"
    hbm_bytes: int = HBM.size
    ddr_bytes: int = DDR.size
    host_bytes: int = HOST.size

    def __post_init__(self):
        for item in fields(self):
            if item.name in ("agcu_positions", "compute", "pcu", "fp_latency"):
                continue
            value = getattr(self, item.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise MachineError(f"machine parameter {item.name} must be an integer, "
                                   f"not {value!r}")
        for name in ("rows", "cols", "lanes"):
            if not 1 <= getattr(self, name) <= 255:
                raise MachineError(f"machine parameter {name} must be between 1 and 255, "
                                   f"not {getattr(self, name)}")
        if self.pcu not in PCU_VARIANTS:
            raise MachineError(f"machine parameter pcu must be one of "
                               f"{', '.join(PCU_VARIANTS)}, not {self.pcu!r}")
        if self.fp_latency not in FP_LATENCY_CHOICES:
            raise MachineError(f"machine parameter fp_latency must be one of "
                               f"{', '.join(FP_LATENCY_CHOICES)}, not {self.fp_latency!r}")
        try:
            self.pcu_variant.check(self.lanes, self.stages)
        except ValueError as error:
            raise MachineError(f"machine parameter pcu {self.pcu}: {error}") from None
        if not 1 <= self.stages <= 16:
            raise MachineError(f"machine parameter stages must be between 1 and 16, "
                               f"not {self.stages}")
        if self.pmu_bytes < 8 * self.lanes or self.pmu_bytes % (4 * self.lanes):
            raise MachineError(f"machine parameter pmu_bytes must be a multiple of "
                               f"{4 * self.lanes} bytes (4 x lanes) and at least "
                               f"{8 * self.lanes}, not {self.pmu_bytes}")
        if not 1 <= self.agcus <= 2 * self.rows:
            raise MachineError(f"machine parameter agcus must be between 1 and "
                               f"{2 * self.rows} (two per row), not {self.agcus}")
        if self.agcu_positions is None:
            from hdl.system import default_agcu_positions
            object.__setattr__(self, "agcu_positions", tuple(
                tuple(position) for position in default_agcu_positions(self.agcus, self.rows)))
        else:
            positions = tuple(tuple(position) for position in self.agcu_positions)
            object.__setattr__(self, "agcu_positions", positions)
            if len(positions) != self.agcus:
                raise MachineError(f"machine parameter agcu_positions names "
                                   f"{len(positions)} positions for {self.agcus} AGCUs")
            for side, row in positions:
                if side not in ("west", "east") or not isinstance(row, int) or \
                        not 0 <= row < self.rows:
                    raise MachineError(f"machine parameter agcu_positions: "
                                       f"({side!r}, {row!r}) is not a (west|east, row) "
                                       f"of a {self.rows}-row array")
            if len(set(positions)) != len(positions):
                raise MachineError(f"machine parameter agcu_positions repeats a position: "
                                   f"{list(positions)}")
        bases = (HBM, DDR, HOST)
        limits = (DDR.base - HBM.base, HOST.base - DDR.base, (1 << 32) - HOST.base)
        for region, size, limit in zip(bases, (self.hbm_bytes, self.ddr_bytes,
                                               self.host_bytes), limits, strict=True):
            if not 4096 <= size <= limit or size % 4096:
                raise MachineError(f"machine parameter {region.name}_bytes must be a "
                                   f"multiple of 4096 between 4096 and {limit} (the "
                                   f"{region.name} window at {region.base:#x}), not {size}")

    # -- derived facts -------------------------------------------------------------------
    @property
    def pcu_variant(self):
        """The :class:`~rdu.units.registry.PCUVariant` the RTL builds its PCUs with
        (``pcu`` with ``fp_latency``)."""
        return PCU_VARIANTS[self.pcu].with_fp_latency(self.fp_latency)

    @property
    def latency_table(self):
        """``{FPKind: latency}`` of the PCUs' SIMD stages, or ``None`` (combinational):
        :func:`hdl.fp_latency.latency_table` of ``fp_latency``."""
        return latency_table(self.fp_latency)

    def positions(self):
        """``[(side, row)]`` of every AGCU (the default rule unless given)."""
        return [tuple(position) for position in self.agcu_positions]

    def regions(self):
        """The memory regions (HBM, DDR, host) at their bases with this machine's sizes."""
        return (Region(HBM.name, HBM.base, self.hbm_bytes),
                Region(DDR.name, DDR.base, self.ddr_bytes),
                Region(HOST.name, HOST.base, self.host_bytes))

    def region(self, name):
        return {region.name: region for region in self.regions()}[name]

    def array_geometry(self):
        """The compiler's view of this machine's array (:class:`rdu.mapper.ArrayGeometry`:
        rows, columns, lanes, PMU words, AGCU positions)."""
        return ArrayGeometry(self.rows, self.cols, self.lanes,
                             pmu_words=self.pmu_bytes // 4, agcu_rows=tuple(self.positions()))

    def bitstream_geometry(self):
        """The geometry a bitstream's header records (:class:`rdu.bitstream.Geometry`)."""
        return Geometry(self.rows, self.cols, self.lanes)

    @property
    def beat_bytes(self):
        return 4 * self.lanes

    @property
    def pcus(self):
        """PCUs of the array: its compute positions (none when ``compute`` is off)."""
        return self.array_geometry().capacity()["pcu"] if self.compute else 0

    @property
    def macs_per_cycle(self):
        """The array's MAC peak per cycle: every PCU's ``lanes x lanes`` systolic array
        (:class:`hdl.pcu.PCU`) one multiply-accumulate per PE per cycle (512 on the
        default 4x4 machine: 8 PCUs of 8 lanes)."""
        return self.pcus * self.lanes ** 2

    @property
    def hbm_bytes_per_cycle(self):
        """The HBM's peak bandwidth in bytes per cycle: all its channels streaming
        (:data:`rdu.memory_map.HBM_CHANNELS` x :data:`rdu.memory_map.
        HBM_CHANNEL_BYTES_PER_CYCLE`, what :func:`sim_models.memory.hbm_model` builds
        the runs' HBM with; 32 on the default machine)."""
        return HBM_CHANNELS * HBM_CHANNEL_BYTES_PER_CYCLE

    def system_params(self):
        """Constructor arguments of the :class:`hdl.system.RDUSystem` of this machine."""
        params = {"rows": self.rows, "cols": self.cols, "lanes": self.lanes,
                  "agcus": self.agcus, "capacity_bytes": self.pmu_bytes,
                  "agcu_positions": [list(position) for position in self.positions()]}
        if not self.compute:
            params["compute_unit"] = None
        elif self.pcu != "standard" or self.fp_latency != "off":
            params["compute_unit"] = self.pcu_variant
        if self.compute and self.stages != 4:
            raise MachineError(f"the RTL system builds PCUs of 4 SIMD stages; this machine "
                               f"has {self.stages} (run it on the functional model)")
        return params

    def describe(self):
        return (f"{self.rows}x{self.cols} array, {self.lanes} lanes, {self.stages} stages, "
                f"{self.pmu_bytes // 1024} KiB PMUs, {self.agcus} AGCUs"
                + ("" if self.compute else ", PMUs only")
                + (f", {self.pcu} PCUs" if self.compute and self.pcu != "standard" else "")
                + (f", fp_latency {self.fp_latency}" if self.compute and
                   self.fp_latency != "off" else ""))

    # -- manifest ------------------------------------------------------------------------
    def to_json(self):
        data = asdict(self)
        data["agcu_positions"] = [list(position) for position in self.positions()]
        return data

    @classmethod
    def from_json(cls, data, where="machine"):
        """A machine from its :meth:`to_json` form (unknown keys are an error)."""
        if not isinstance(data, dict):
            raise MachineError(f"{where}: not an object")
        known = {item.name for item in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise MachineError(f"{where}: unknown machine parameter {unknown[0]!r}")
        values = dict(data)
        if values.get("agcu_positions") is not None:
            values["agcu_positions"] = tuple(tuple(p) for p in values["agcu_positions"])
        return cls(**values)

    def mismatch(self, other):
        """The first parameter in which ``other`` differs from this machine, as
        ``"name: this vs other"``, or ``None`` when they are the same machine."""
        mine, theirs = self.to_json(), other.to_json()
        for name in mine:
            if mine[name] != theirs[name]:
                return f"{name} {mine[name]} (program) vs {theirs[name]} (machine)"
        return None

    def replace(self, **changes):
        values = self.to_json()
        values.update(changes)
        if ("agcus" in changes or "rows" in changes) and "agcu_positions" not in changes:
            values["agcu_positions"] = None       # the default rule for the new shape
        return Machine.from_json(values)


DEFAULT_MACHINE = Machine()

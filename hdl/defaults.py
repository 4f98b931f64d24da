"""The scaled machine's default parameters, written once.

Every constructor of the RTL (:class:`hdl.system.RDUSystem`, :class:`hdl.array.TileArray`,
the units) and the software's machine description (:class:`rdu.machine.Machine`, from
which the compiler's :class:`rdu.mapper.ArrayGeometry`, the program's geometry and the
bitstream header derive) take their defaults from here (``docs/architecture.md``,
"Scaled defaults"). The FP operators' latencies are written once in
:mod:`hdl.fp_latency`.
"""

__all__ = ["ROWS", "COLS", "LANES", "STAGES", "PMU_BYTES", "AGCUS"]

#: Tile array rows and columns.
ROWS = 4
COLS = 4
#: 32-bit lanes per vector beat (and PMU banks).
LANES = 8
#: SIMD stages per PCU.
STAGES = 4
#: Capacity of each PMU in bytes (64 KiB).
PMU_BYTES = 64 * 1024
#: AGCUs (AGCU 0 loads programs).
AGCUS = 2

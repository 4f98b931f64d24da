"""Registry of the top-level designs the tools can elaborate.

``rdu verilog`` writes each of these to Verilog and lints it; the test harness and
``rdu sim`` build them under Verilator. A design is a component class and the
constructor parameters of one configuration.
"""

from dataclasses import dataclass, field

from hdl.agcu import AGCU
from hdl.array import TileArray
from hdl.ip import RDUIP
from hdl.pcu import FPGA_PCU_OPTIONS, PCU
from hdl.pmu import PMU
from hdl.stream_fifo import StreamFIFO
from hdl.switch import Switch
from hdl.system import RDUSystem

__all__ = ["Design", "DESIGNS", "get_design"]


@dataclass(frozen=True)
class Design:
    name: str
    cls: type                   # the component class
    params: dict = field(default_factory=dict)
    description: str = ""
    quick: bool = True          # small enough to lint inside the test suite

    def instantiate(self, **overrides):
        """The component, with ``overrides`` of its parameters (e.g. a smaller size)."""
        return self.cls(**{**self.params, **overrides})


DESIGNS = {design.name: design for design in [
    Design("stream_fifo", StreamFIFO, {"shape": 256, "depth": 4},
           "vector-width stream FIFO (the per-port buffer of every unit)"),
    Design("pcu", PCU, {"lanes": 8, "stages": 4},
           "Pattern Compute Unit: SIMD pipeline or 8x8 systolic array"),
    Design("fpga_pcu", PCU,
           {"lanes": 4, "stages": 4, **FPGA_PCU_OPTIONS},
           "the PCU of the FPGA configuration (hdl.pcu.FPGA_PCU_OPTIONS): iterating exp / "
           "reciprocal, 4x4 systolic array on the SIMD ALUs (docs/fpga.md)", quick=False),
    Design("pcu_fp_latency", PCU, {"lanes": 2, "stages": 2, "fp_latency": "default"},
           "the PCU with its SIMD stages and lane reduction on the pipelined FP operators "
           "(fp_latency, hdl.fp_latency.DEFAULT_LATENCY; docs/pcu.md)"),
    Design("pmu", PMU, {"lanes": 8, "capacity_bytes": 65536},
           "Pattern Memory Unit: 8 banks, 64 KiB"),
    Design("switch", Switch, {"lanes": 8},
           "vector/scalar/control switch with static routes"),
    Design("agcu", AGCU, {"lanes": 8},
           "address-generator DMA, AXI4 manager"),
    Design("tile_array_2x2", TileArray,
           {"rows": 2, "cols": 2, "lanes": 8, "compute_unit": PCU},
           "minimal (FPGA) tile array: 2x2 PCU/PMU checkerboard", quick=False),
    Design("tile_array_4x4", TileArray,
           {"rows": 4, "cols": 4, "lanes": 8, "compute_unit": PCU},
           "default tile array: 4x4 PCU/PMU checkerboard, 8 lanes", quick=False),
    Design("system_2x2", RDUSystem,
           {"rows": 2, "cols": 2, "lanes": 4, "agcus": 2, "compute_unit": None,
            "capacity_bytes": 16384},
           "whole system, minimal: 2x2 PMUs (4 lanes, 16 KiB) and two AGCUs"),
    Design("system_4x4", RDUSystem,
           {"rows": 4, "cols": 4, "lanes": 8, "agcus": 2, "compute_unit": PCU},
           "the default machine: 4x4 tile array (8 PCUs, 8 PMUs, 8 lanes) and two AGCUs "
           "(what `make sim` runs)", quick=False),
    Design("ip_2x2", RDUIP,
           {"rows": 2, "cols": 2, "lanes": 4, "agcus": 2, "capacity_bytes": 16384},
           "the minimal system as an IP block: AXI4 manager ports m00_axi/m01_axi, "
           "AXI4-Lite registers s_axil, irq (docs/ip.md)", quick=False),
]}


def get_design(name):
    try:
        return DESIGNS[name]
    except KeyError:
        raise ValueError(f"unknown design {name!r}; known: {', '.join(sorted(DESIGNS))}"
                         ) from None

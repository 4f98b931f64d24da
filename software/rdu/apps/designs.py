"""Registry of the top-level designs the tools can elaborate.

``rdu verilog`` writes each of these to Verilog and lints it; the test harness and
``rdu sim`` build them under Verilator. A design is a component class and the
constructor parameters of one configuration.
"""

import importlib
from dataclasses import dataclass, field

from hdl.pcu import FPGA_PCU_OPTIONS

__all__ = ["Design", "DESIGNS", "get_design"]


@dataclass(frozen=True)
class Design:
    name: str
    module: str
    cls_name: str
    params: dict = field(default_factory=dict)
    description: str = ""
    quick: bool = True          # small enough to lint inside the test suite

    def load_class(self):
        return getattr(importlib.import_module(self.module), self.cls_name)

    def instantiate(self):
        return self.load_class()(**self.params)


DESIGNS = {design.name: design for design in [
    Design("stream_fifo", "hdl.stream_fifo", "StreamFIFO", {"shape": 256, "depth": 4},
           "vector-width stream FIFO (the per-port buffer of every unit)"),
    Design("pcu", "hdl.pcu", "PCU", {"lanes": 8, "stages": 4},
           "Pattern Compute Unit: SIMD pipeline or 8x8 systolic array"),
    Design("fpga_pcu", "hdl.pcu", "PCU",
           {"lanes": 4, "stages": 4, **FPGA_PCU_OPTIONS},
           "the PCU of the FPGA configuration (hdl.pcu.fpga_pcu): iterating exp / "
           "reciprocal, 4x4 systolic array on the SIMD ALUs (docs/fpga.md)", quick=False),
    Design("pmu", "hdl.pmu", "PMU", {"lanes": 8, "capacity_bytes": 65536},
           "Pattern Memory Unit: 8 banks, 64 KiB"),
    Design("switch", "hdl.switch", "Switch", {"lanes": 8},
           "vector/scalar/control switch with static routes"),
    Design("agcu", "hdl.agcu", "AGCU", {"lanes": 8},
           "address-generator DMA, AXI4 manager"),
    Design("tile_array_2x2", "hdl.array", "TileArray",
           {"rows": 2, "cols": 2, "lanes": 8, "compute_unit": "hdl.pcu:PCU"},
           "minimal (FPGA) tile array: 2x2 PCU/PMU checkerboard", quick=False),
    Design("tile_array_4x4", "hdl.array", "TileArray",
           {"rows": 4, "cols": 4, "lanes": 8, "compute_unit": "hdl.pcu:PCU"},
           "default tile array: 4x4 PCU/PMU checkerboard, 8 lanes", quick=False),
    Design("system_2x2", "hdl.system", "RDUSystem",
           {"rows": 2, "cols": 2, "lanes": 4, "agcus": 2, "compute_unit": None,
            "capacity_bytes": 16384},
           "whole system, minimal: 2x2 PMUs (4 lanes, 16 KiB) and two AGCUs"),
    Design("system_4x4", "hdl.system", "RDUSystem",
           {"rows": 4, "cols": 4, "lanes": 8, "agcus": 2, "compute_unit": "hdl.pcu:PCU"},
           "the default machine: 4x4 tile array (8 PCUs, 8 PMUs, 8 lanes) and two AGCUs "
           "(what `make sim` runs)", quick=False),
    Design("ip_2x2", "hdl.ip", "RDUIP",
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

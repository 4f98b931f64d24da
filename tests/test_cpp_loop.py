"""rdu.sim.cpp_loop: the bare C++ loop around a Verilated build (benchmarks.sim_speed)."""

import pytest
from rdu.sim.cpp_loop import build_loop, loop_source, run_loop, top_inputs

VERILOG = """
module other (input a);
endmodule
module top (clk, rst, i__valid, o__ready, i__payload);
  input clk;
  input rst;
  input i__valid;
  input o__ready;
  input [31:0] i__payload;
  output o__valid;
endmodule
"""


def test_top_inputs_and_source():
    inputs = top_inputs(VERILOG, "top")
    assert inputs == [("clk", 1), ("rst", 1), ("i__valid", 1), ("o__ready", 1),
                      ("i__payload", 32)]
    source = loop_source(inputs)
    # Verilator's escape of "__"; only the ready inputs are tied high
    assert "top->o___05Fready = 1;" in source
    assert "valid = 1" not in source and "payload" not in source
    with pytest.raises(ValueError, match="module nope not found"):
        top_inputs(VERILOG, "nope")


@pytest.mark.verilator
def test_loop_runs_a_build():
    from rdu.sim.verilator import build

    from hdl.stream_fifo import StreamFIFO
    built = build(StreamFIFO, shape=32, depth=4)
    binary, _, _ = build_loop(built)
    result = run_loop(binary, 2000)
    assert result["cycles"] == 2000
    assert result["wall"] > 0 and result["cpu"] >= 0 and result["cycles_per_second"] > 0
    again, seconds, cached = build_loop(built)
    assert again == binary and cached and seconds == 0.0

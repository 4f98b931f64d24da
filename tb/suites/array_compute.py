"""A TileArray with real PCUs: data from memory units through a compute unit and out.

Layout on a 2 x 2 array (PCU where ``row + col`` is even):

* the west edge of row 1 fills the PMU at (1, 0) with A (``lanes x K``, row-major);
  that PMU reads A back column by column (a transpose through its diagonal banks) and
  sends it north to the PCU's ``vector_in0``;
* the east edge of row 0 fills the PMU at (0, 1) with B (``K x lanes``, row-major),
  read back row by row and sent west to the PCU's ``vector_in1``;
* the PCU at (0, 0), in systolic mode, computes the ``lanes x lanes`` tile C = A B and
  sends its rows to the west edge of row 0; its DONE token ends the run (``host.done``);
* a start token enters at the west edge of row 0 and reaches the PCU's ``control_in``.

Every result word is checked against the bit-exact model (:mod:`rdu.models.pcu_reference`), and
the model against numpy float32 matmul of the same BF16 inputs.
"""

import numpy as np
from rdu.bitstream import Geometry, Record, UnitKind, write_bitstream
from rdu.models import pcu_reference as pcu_model

from hdl.interfaces import ControlToken
from hdl.pcu_config import pcu_config_layout
from hdl.pmu import pmu_config_layout
from hdl.switch import Source

from .array import EAST, LOCAL0, NORTH, WEST, load_bitstream, pulse, switch_records
from .common import pack_config, pack_vector, ports_to_json
from .pmu import PMUModel, affine_addresses, pattern, pmu_config

__all__ = ["array_pmu_pcu_matmul"]


def _bf16_matrix(rng, shape):
    return pcu_model.bf16_words(rng.standard_normal(shape))


async def array_pmu_pcu_matmul(bench, *, rows, cols, lanes, k_len, stages=4,
                               in_stall="random", out_stall="random"):
    if rows < 2 or cols < 2:
        raise ValueError("the layout needs at least a 2 x 2 array")
    if k_len < lanes or k_len & (k_len - 1):
        raise ValueError(f"K must be a power of two of at least {lanes}, not {k_len}")
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    a = _bf16_matrix(rng, (lanes, k_len))
    b = _bf16_matrix(rng, (k_len, lanes))

    # The PMUs: A transposed through (1, 0), B straight through (0, 1).
    a_config = pmu_config(lanes, write=pattern("row_major", lanes, lanes, k_len),
                          read=pattern("column_major", lanes, lanes, k_len),
                          buffer_words=lanes * k_len, skew_shift=k_len.bit_length() - 1)
    b_config = pmu_config(lanes, write=pattern("row_major", lanes, k_len, lanes),
                          read=pattern("row_major", lanes, k_len, lanes),
                          buffer_words=k_len * lanes)
    a_beats = [list(a[row, col:col + lanes]) for row in range(lanes)
               for col in range(0, k_len, lanes)]
    b_beats = [list(b[row]) for row in range(k_len)]
    assert len(a_beats) == len(list(affine_addresses(a_config["write"])))
    a_model, b_model = PMUModel(a_config, lanes), PMUModel(b_config, lanes)
    a_model.write_pass(0, a_beats)
    b_model.write_pass(0, b_beats)

    # The PCU: the expected streams into it and its results.
    counters, a_columns, b_rows, _ = pcu_model.matmul_streams(a, b, lanes)
    assert np.array_equal(np.array(a_model.read_pass(0), dtype=np.uint32), a_columns), \
        "the PMU model's transpose differs from the columns the PCU needs"
    assert np.array_equal(np.array(b_model.read_pass(0), dtype=np.uint32), b_rows)
    pcu_config = {"mode": 1, "counters": counters}
    expected = pcu_model.run_systolic(pcu_config, lanes, a_columns, b_rows)["vector_out"]
    result = pcu_model.matmul_from_stream(expected, (lanes, lanes), lanes).view(np.float32)
    reference = a.view(np.float32) @ b.view(np.float32)
    scale = np.abs(a.view(np.float32)) @ np.abs(b.view(np.float32))
    assert np.all(np.abs(result - reference) <= k_len * 2.0 ** -22 * scale + 1e-30), \
        "the PCU model differs from numpy beyond FP32 accumulation error"

    extra = [
        ((1, 0, "vector", LOCAL0), Source.WEST),       # west edge of row 1 -> PMU A
        ((1, 0, "vector", NORTH), Source.LOCAL),       # PMU A -> north
        ((0, 0, "vector", LOCAL0), Source.SOUTH),      # -> PCU vector_in0
        ((0, 1, "vector", LOCAL0), Source.EAST),       # east edge of row 0 -> PMU B
        ((0, 1, "vector", WEST), Source.LOCAL),        # PMU B -> west
        ((0, 0, "vector", LOCAL0 + 1), Source.EAST),   # -> PCU vector_in1
        ((0, 0, "vector", WEST), Source.LOCAL),        # PCU results -> west edge of row 0
        ((0, 0, "control", LOCAL0), Source.WEST),      # start token -> PCU control_in
        ((0, 0, "control", WEST), Source.LOCAL),       # PCU DONE -> west edge of row 0
        ((1, 0, "control", WEST), Source.LOCAL),       # PMU A release tokens -> west
        ((0, 1, "control", EAST), Source.LOCAL),       # PMU B release tokens -> east
    ]
    records = [
        Record(UnitKind.PMU, 1, 0, pack_config(pmu_config_layout(), a_config)),
        Record(UnitKind.PMU, 0, 1, pack_config(pmu_config_layout(), b_config)),
        Record(UnitKind.PCU, 0, 0, pack_config(pcu_config_layout(lanes, stages), pcu_config)),
    ] + switch_records(rows, cols, {}, extra)
    words = write_bitstream(Geometry(rows, cols, lanes), records)
    await load_bitstream(bench, words)

    east0 = rows                                     # edge index of row 0's east side
    # the same run as edge-level items (rdu.models.array runs them: tests/test_funcmodel.py)
    edge_inputs = {("vector", 1): a_beats, ("vector", east0): b_beats,
                   ("control", 0): [ControlToken.STEP]}
    expected_outputs = {("vector", 0): [list(map(int, r)) for r in expected],
                        ("control", 0): [ControlToken.DONE],
                        ("control", 1): [ControlToken.STEP],       # PMU A released
                        ("control", east0): [ControlToken.STEP]}   # PMU B released
    for (network, edge), items in edge_inputs.items():
        source = bench.source(f"agcu_{network}_in.{edge}", in_stall if network == "vector"
                              else "none")
        source.send_all(pack_vector(x) if network == "vector" else x for x in items)
    for (network, edge), items in expected_outputs.items():
        sink = bench.sink(f"agcu_{network}_out.{edge}", out_stall if network == "vector"
                          else "none")
        sink.expect_all(pack_vector(x) if network == "vector" else x for x in items)
    await pulse(bench, "host.start")
    await bench.wait_for("host.done", 1, timeout=200 * k_len + 2000)
    await bench.streams_done(timeout=2000)
    assert await bench.read("host.unit_error") == 0
    cycles = await bench.read("host.cycles")
    return {"cycles": cycles, "bitstream": words,
            "edge_inputs": ports_to_json(edge_inputs),
            "expected_outputs": ports_to_json(expected_outputs)}

"""The item-level functional model (rdu.models) against the RTL and against numpy."""

import random

import numpy as np
import pytest
from rdu.bitstream import BitstreamError, ConfigStatus, Geometry, Record, UnitKind, write_bitstream
from rdu.memory_map import HBM
from rdu.models import pcu_reference
from rdu.models.array import FunctionalArray
from rdu.models.machine import run_program
from rdu.models.pcu import systolic_tiles
from rdu.models.shared import FlatMemory, ModelDeadlock, ModelError, UnitError, agcu_edge
from rdu.program import Program
from rdu.sim.runner import run_amaranth
from rdu.unitconfig import pack_config, unpack_config

from hdl.agcu import agcu_config_layout
from hdl.array import TileArray
from hdl.pcu import PCU
from hdl.pcu_config import pcu_config_layout
from hdl.pmu import pmu_config_layout
from hdl.switch import Source, switch_config_layout
from tb.suites.array import (
    EAST,
    LOCAL0,
    NETWORKS,
    NORTH,
    SOUTH,
    WEST,
    array_mesh_routes,
    random_route_set,
    switch_records,
)
from tb.suites.array_compute import array_pmu_pcu_matmul
from tb.suites.common import ports_from_json
from tb.suites.funcmodel import array_replay
from tb.suites.pmu import PMUModel, affine_addresses, pattern, pmu_config


def _items(outputs):
    """Edge outputs as plain lists (vector beats as lists of ints) for comparisons."""
    return {key: [list(map(int, x)) if np.ndim(x) else int(x) for x in value]
            for key, value in outputs.items()}


# --------------------------------------------------------------------------------------
# unitconfig
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", [pmu_config_layout(), switch_config_layout(),
                                    agcu_config_layout(), pcu_config_layout(4, 4),
                                    pcu_config_layout(8, 6)],
                         ids=["pmu", "switch", "agcu", "pcu4", "pcu8x6"])
def test_unitconfig_roundtrip(layout, seed):
    from amaranth.lib import data
    rng = random.Random(seed)
    bits = data.Layout.cast(layout).size
    for _ in range(20):
        value = rng.getrandbits(bits)
        words = [(value >> (32 * i)) & 0xFFFF_FFFF for i in range(-(-bits // 32))]
        fields = unpack_config(layout, words)
        assert pack_config(layout, fields) == words
        _assert_same_as_const(fields, data.Const(layout, value))
        assert unpack_config(layout, pack_config(layout, fields)) == fields


def _assert_same_as_const(fields, const):
    """The decoded fields equal amaranth's own ``data.Const`` view of the same value."""
    from amaranth.lib import data
    if isinstance(fields, dict):
        for name, value in fields.items():
            _assert_same_as_const(value, getattr(const, name))
    elif isinstance(fields, list):
        for index, value in enumerate(fields):
            _assert_same_as_const(value, const[index])
    else:
        assert not isinstance(const, data.Const) and fields == const


def test_unitconfig_fields():
    words = pack_config(agcu_config_layout(), {"store_enable": 1,
                                               "load": {"base": 96, "stride": [-32, 64, 0]}})
    fields = unpack_config(agcu_config_layout(), words)
    assert fields["store_enable"] == 1 and fields["load_enable"] == 0
    assert fields["load"]["stride"] == [-32, 64, 0] and fields["load"]["base"] == 96
    with pytest.raises(ValueError, match="14 configuration words for a layout of 13 words"):
        unpack_config(agcu_config_layout(), [0] * 14)
    words = pack_config(agcu_config_layout(), {"load_position_stride": -3,
                                               "store_position_stride": 32767})
    fields = unpack_config(agcu_config_layout(), words)
    assert (fields["load_position_stride"], fields["store_position_stride"]) == (-3, 32767)


def test_systolic_tiles_match_pcu_model(seed):
    rng = np.random.default_rng(seed)
    a = pcu_reference.bf16_words(rng.standard_normal((5, 12, 4)))
    b = pcu_reference.bf16_words(rng.standard_normal((5, 12, 4)))
    batched = systolic_tiles(a, b)
    for tile in range(5):
        assert np.array_equal(batched[tile], pcu_reference.systolic_tile(a[tile], b[tile]))


# --------------------------------------------------------------------------------------
# (1) against the RTL: PMUs feed a systolic PCU
# --------------------------------------------------------------------------------------

def test_model_matches_rtl_pmu_pcu_matmul(seed):
    array = TileArray(2, 2, 4, compute_unit=PCU, capacity_bytes=1024, idle_timeout=64)
    stats = run_amaranth(array, array_pmu_pcu_matmul, seed=seed, rows=2, cols=2, lanes=4,
                         k_len=16)
    run = stats.result
    model = FunctionalArray(2, 2, 4, compute=True, capacity_bytes=1024)
    model.load(run["bitstream"])
    result = model.run(edge_inputs=ports_from_json(run["edge_inputs"]))
    # the RTL's scoreboard held exactly these items on these ports
    assert _items(result.edge_outputs) == ports_from_json(run["expected_outputs"])
    assert result.counters["PCU(0,0)"]["macs"] == 4 * 4 * 16      # lanes^2 x K
    assert result.done_tokens == 1


# --------------------------------------------------------------------------------------
# (2) mesh routes on an all-PMU array
# --------------------------------------------------------------------------------------

def _packed(network, items, lanes):
    if network != "vector":
        return [int(x) for x in items]
    return [sum(int(v) << (32 * lane) for lane, v in enumerate(beat)) for beat in items]


def test_model_matches_rtl_mesh_routes(seed):
    array = TileArray(2, 2, 4, capacity_bytes=1024, agcus=1, agcu_config_words=3,
                      idle_timeout=64)
    run = run_amaranth(array, array_mesh_routes, seed=seed, rows=2, cols=2, lanes=4,
                       count=30).result
    model = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024, agcus=1,
                            agcu_config_words=3)
    model.load(run["bitstream"])
    result = model.run(edge_inputs=ports_from_json(run["edge_inputs"]))
    got = {key: _packed(key[0], items, 4) for key, items in result.edge_outputs.items()}
    assert got == ports_from_json(run["expected_outputs"])   # what the RTL's scoreboards held
    assert not result.leftovers


def test_model_mesh_routes_4x4(seed):
    """Random multicast route sets on a 4x4 array against the route trees' expectation."""
    rng = random.Random(seed)
    for _ in range(5):
        settings, routes = {}, {}
        for network in NETWORKS:
            routes[network], settings[network] = random_route_set(rng, 4, 4, 16)
        words = write_bitstream(Geometry(4, 4, 8), switch_records(4, 4, settings))
        model = FunctionalArray(4, 4, 8, compute=False)
        model.load(words)
        inputs, expected = {}, {}
        for network in NETWORKS:
            for source, dests in routes[network]:
                if network == "vector":
                    items = [[rng.getrandbits(32) for _ in range(8)] for _ in range(40)]
                else:
                    items = [rng.getrandbits(32 if network == "scalar" else 1)
                             for _ in range(40)]
                inputs[network, source] = items
                for dest in dests:
                    expected[network, dest] = items
        result = model.run(edge_inputs=inputs)
        assert _items(result.edge_outputs) == expected
        assert result.done_tokens == sum(expected.get(("control", d), []).count(1)
                                         for d in range(8))


# --------------------------------------------------------------------------------------
# (3) a double-buffered PMU transpose (model vs the PMU reference model, and vs the RTL)
# --------------------------------------------------------------------------------------

def _transpose_case(rng, lanes, rows, cols, passes, buffers, gate=False):
    size = rows * cols
    config = pmu_config(lanes, write=pattern("row_major", lanes, rows, cols),
                        read=pattern("column_major", lanes, rows, cols), buffers=buffers,
                        buffer_words=size, skew_shift=cols.bit_length() - 1,
                        read_passes=passes, read_gate=int(gate))
    extra = [((0, 0, "vector", LOCAL0), Source.WEST), ((0, 0, "vector", EAST), Source.LOCAL),
             ((0, 1, "vector", EAST), Source.WEST), ((0, 0, "control", EAST), Source.LOCAL),
             ((0, 1, "control", EAST), Source.WEST)]
    if gate:
        extra.append(((0, 0, "control", LOCAL0), Source.WEST))
    records = [Record(UnitKind.PMU, 0, 0, pack_config(pmu_config_layout(), config))]
    words = write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra))
    reference = PMUModel(config, lanes)
    beats, expected = [], []
    for index in range(passes):
        matrix = [[rng.getrandbits(32) for _ in range(lanes)]
                  for _ in affine_addresses(config["write"])]
        beats += matrix
        reference.write_pass(index % buffers, matrix)
        expected += reference.read_pass(index % buffers)
    inputs = {("vector", 0): beats}
    if gate:
        inputs["control", 0] = [0] * passes
    outputs = {("vector", 2): expected, ("control", 2): [0] * (passes - 1) + [1]}
    return words, inputs, outputs


@pytest.mark.parametrize("buffers,gate", [(2, False), (3, True)])
def test_model_pmu_transpose_double_buffered(buffers, gate, seed):
    rng = random.Random(seed)
    words, inputs, expected = _transpose_case(rng, 4, 8, 8, passes=5, buffers=buffers,
                                              gate=gate)
    model = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024)
    model.load(words)
    result = model.run(edge_inputs=inputs)
    assert _items(result.edge_outputs) == expected
    assert result.counters["PMU(0,0)"]["passes"] == 5
    assert not result.leftovers


def test_rtl_replays_model_pmu_transpose(seed):
    """The model's output of a double-buffered transpose is the RTL's exact expectation."""
    rng = random.Random(seed)
    words, inputs, _ = _transpose_case(rng, 4, 8, 8, passes=3, buffers=2)
    _replay_on_rtl(seed, words, inputs)


def _replay_on_rtl(seed, words, inputs, compute=False):
    """Run ``words`` with ``inputs`` on a 2x2, 4-lane model, then replay it on the RTL
    (Amaranth tier) with the model's outputs as the exact expectation."""
    model = FunctionalArray(2, 2, 4, compute=compute, capacity_bytes=1024, agcus=1,
                            agcu_config_words=3)
    model.load(words)
    outputs = _items(model.run(edge_inputs=inputs).edge_outputs)
    array = TileArray(2, 2, 4, compute_unit=PCU if compute else None, capacity_bytes=1024,
                      agcus=1, agcu_config_words=3, idle_timeout=64)
    run_amaranth(array, array_replay, seed=seed, rows=2, cols=2, lanes=4, bitstream=words,
                 edge_inputs=inputs, expected_outputs=outputs)


# --------------------------------------------------------------------------------------
# SIMD PCU in the array (model vs pcu_reference.run_simd, and vs the RTL)
# --------------------------------------------------------------------------------------

def _simd_case(rng, lanes, rows_count):
    """PCU (0,0): per row of 2 beats, (x * 2 + in1) * s (s: one scalar per row from the
    west edge) on vector_out, and the lane sum on scalar_out; DONE to the west edge."""
    config = {"mode": 0, "vector_out": 1, "reduce": 1, "emit_every": 1, "scalar_in": 1,
              "counters": [{"min": 0, "max": 2, "stride": 1},
                           {"min": 0, "max": rows_count, "stride": 1},
                           {"min": 0, "max": 1, "stride": 1}],
              "stages": [{"op": 3, "src_a": 0, "src_b": 3, "constant": 0x40000000},
                         {"op": 1, "src_a": 0, "src_b": 4},
                         {"op": 3, "src_a": 0, "src_b": 2}, {"op": 0}]}
    extra = [((0, 0, "vector", LOCAL0), Source.WEST), ((0, 0, "vector", LOCAL0 + 1),
                                                       Source.EAST),
             ((0, 1, "vector", WEST), Source.EAST),
             ((0, 0, "vector", SOUTH), Source.LOCAL), ((1, 0, "vector", WEST), Source.NORTH),
             ((0, 0, "scalar", WEST), Source.LOCAL), ((0, 0, "scalar", LOCAL0), Source.WEST),
             ((0, 0, "control", LOCAL0), Source.WEST),
             ((0, 0, "control", SOUTH), Source.LOCAL), ((1, 0, "control", WEST), Source.NORTH)]
    records = [Record(UnitKind.PCU, 0, 0, pack_config(pcu_config_layout(lanes, 4), config))]
    words = write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra))
    beats = 2 * rows_count
    a = pcu_reference.bf16_words(np.array([[rng.gauss(0, 1) for _ in range(lanes)]
                                       for _ in range(beats)]))
    b = pcu_reference.bf16_words(np.array([[rng.gauss(0, 1) for _ in range(lanes)]
                                       for _ in range(beats)]))
    scalars = pcu_reference.bf16_words(np.array([rng.gauss(0, 1) for _ in range(rows_count)]))
    reference = pcu_reference.run_simd(config, lanes, a, b, scalars)
    inputs = {("vector", 0): a.tolist(), ("vector", 2): b.tolist(), ("control", 0): [0],
              ("scalar", 0): scalars.tolist()}
    expected = {("vector", 1): [list(map(int, v)) for v in reference["vector_out"]],
                ("scalar", 0): [int(x) for x in reference["scalar_out"]],
                ("control", 1): [1]}
    return words, inputs, expected


def test_model_pcu_simd(seed):
    words, inputs, expected = _simd_case(random.Random(seed), 4, 6)
    model = FunctionalArray(2, 2, 4, compute=True, capacity_bytes=1024)
    model.load(words)
    result = model.run(edge_inputs=inputs)
    assert _items(result.edge_outputs) == expected
    assert result.done_tokens == 1


def test_rtl_replays_model_pcu_simd(seed):
    words, inputs, _ = _simd_case(random.Random(seed), 4, 4)
    _replay_on_rtl(seed, words, inputs, compute=True)


# --------------------------------------------------------------------------------------
# (4) AGCUs and memory: a transpose from HBM to HBM through a PMU, as a Program
# --------------------------------------------------------------------------------------

def _agcu_pattern(base, beats, beat_bytes):
    return {"base": base, "count": [beats, 1, 1], "stride": [beat_bytes, 0, 0]}


def test_model_agcu_transpose_program(seed):
    lanes, size = 8, 32
    rng = np.random.default_rng(seed)
    matrix = rng.integers(0, 2 ** 32, (size, size), dtype=np.uint64).astype(np.uint32)
    beats = size * size // lanes
    source_address, result_address = HBM.base + 0x1000, HBM.base + 0x8000
    config = pmu_config(lanes, write=pattern("row_major", lanes, size, size),
                        read=pattern("column_major", lanes, size, size),
                        buffer_words=size * size, skew_shift=size.bit_length() - 1,
                        read_passes=1)
    load = {"load_enable": 1, "load": _agcu_pattern(source_address, beats, 4 * lanes)}
    # the PMU sends, per block of `lanes` rows, each column's `lanes` words: they are
    # row c, words [block * lanes, ...) of the transpose
    store = {"store_enable": 1, "wait_done": 1,
             "store": {"base": result_address, "count": [size, size // lanes, 1],
                       "stride": [4 * size, 4 * lanes, 0]}}
    # AGCU 0 at the west of row 0 (edge 0), AGCU 1 at the east of row 1 (edge 3)
    assert agcu_edge(0, 2) == 0 and agcu_edge(1, 2) == 3
    extra = [((0, 0, "vector", LOCAL0), Source.WEST), ((0, 0, "vector", EAST), Source.LOCAL),
             ((0, 1, "vector", SOUTH), Source.WEST), ((1, 1, "vector", EAST), Source.NORTH),
             ((0, 0, "control", EAST), Source.LOCAL), ((0, 1, "control", SOUTH), Source.WEST),
             ((1, 1, "control", EAST), Source.NORTH)]
    records = [Record(UnitKind.PMU, 0, 0, pack_config(pmu_config_layout(), config)),
               Record(UnitKind.AGCU, 0, 0, pack_config(agcu_config_layout(), load)),
               Record(UnitKind.AGCU, 0, 1, pack_config(agcu_config_layout(), store))]
    words = write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra))
    program = Program("transpose", {"rows": 2, "cols": 2, "lanes": lanes, "agcus": 2}, words,
                      HBM.base + 0x10_0000, inputs={"a": (source_address, matrix.reshape(-1))},
                      outputs={"t": (result_address, size * size)}, execute=[0, 1])
    outputs, result = run_program(program, compute=False)
    assert np.array_equal(outputs["t"].reshape(size, size), matrix.T)
    assert result.counters["AGCU 1"]["beats_stored"] == beats
    assert result.done_tokens == 1
    # the launch tokens of both AGCUs are not routed: they stay, harmlessly, at the edges
    assert len(result.leftovers) == 2


def test_flat_memory():
    memory = FlatMemory()
    memory.write(HBM.base + 4090, bytes(range(12)))
    assert memory.read(HBM.base + 4090, 12) == bytes(range(12))
    assert memory.read(HBM.base + 0x5000, 4) == bytes(4)
    with pytest.raises(ValueError, match="outside the mapped regions"):
        memory.read(HBM.end - 4, 8)


# --------------------------------------------------------------------------------------
# (5) switch merge outputs
# --------------------------------------------------------------------------------------

def merge_switch_layout():
    """``switch_config_layout()`` with the merge fields of the merge extension."""
    from amaranth import unsigned
    from amaranth.lib import data
    fields = dict(switch_config_layout().members)
    if "vector_merge" in fields:
        return switch_config_layout()
    for network, outputs in (("vector", 6), ("scalar", 5), ("control", 5)):
        fields[f"{network}_merge"] = data.ArrayLayout(data.ArrayLayout(unsigned(8), 5),
                                                      outputs)
    return data.StructLayout(fields)


def test_model_switch_merge(seed):
    layout = merge_switch_layout()
    rng = random.Random(seed)

    def table():
        return {"vector": [0] * 6, "scalar": [0] * 5, "control": [0] * 5,
                "vector_merge": [[0] * 5 for _ in range(6)],
                "scalar_merge": [[0] * 5 for _ in range(5)],
                "control_merge": [[0] * 5 for _ in range(5)]}
    tables = {(r, c): table() for r in range(2) for c in range(2)}
    # (0,0) east merges 2 from west (source 3) and 3 from south (source 2); the select
    # (set to north) is ignored on a merge output
    tables[0, 0]["vector"][EAST] = Source.NORTH
    tables[0, 0]["vector_merge"][EAST] = [0, 0, 3, 2, 0]
    tables[1, 0]["vector"][NORTH] = Source.WEST
    tables[0, 1]["vector"][EAST] = Source.WEST
    # scalar: (0,0) east merges 1 from west, 2 from south; west is also multicast (plain
    # select) south to (1,0) and out at its west edge
    tables[0, 0]["scalar_merge"][EAST] = [0, 0, 2, 1, 0]
    tables[0, 0]["scalar"][SOUTH] = Source.WEST
    tables[1, 0]["scalar"][WEST] = Source.NORTH
    tables[1, 0]["scalar"][NORTH] = Source.EAST
    tables[1, 1]["scalar"][WEST] = Source.EAST
    tables[0, 1]["scalar"][EAST] = Source.WEST
    records = [Record(UnitKind.SWITCH, r, c, pack_config(layout, t))
               for (r, c), t in tables.items()]
    model = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024, switch_layout=layout)
    model.load(write_bitstream(Geometry(2, 2, 4), records))
    west = [[rng.getrandbits(32) for _ in range(4)] for _ in range(6)]
    south = [[rng.getrandbits(32) for _ in range(4)] for _ in range(9)]
    scalar_west = [rng.getrandbits(32) for _ in range(4)]
    scalar_south = [rng.getrandbits(32) for _ in range(8)]
    result = model.run(edge_inputs={("vector", 0): west, ("vector", 1): south,
                                    ("scalar", 0): scalar_west, ("scalar", 3): scalar_south})
    # south first (the first non-zero count in N, E, S, W, L order): 3, then 2 west, ...
    order = south[0:3] + west[0:2] + south[3:6] + west[2:4] + south[6:9] + west[4:6]
    assert _items(result.edge_outputs)["vector", 2] == order
    scalar_order = (scalar_south[0:2] + scalar_west[0:1] + scalar_south[2:4] +
                    scalar_west[1:2] + scalar_south[4:6] + scalar_west[2:3] +
                    scalar_south[6:8] + scalar_west[3:4])
    assert result.edge_outputs["scalar", 2] == scalar_order
    assert result.edge_outputs["scalar", 1] == scalar_west


def test_model_switch_merge_waits_for_its_source():
    """A merge output whose current source never delivers holds the other sources back."""
    layout = merge_switch_layout()
    tables = {}
    for r in range(2):
        for c in range(2):
            tables[r, c] = {"vector": [0] * 6, "vector_merge": [[0] * 5 for _ in range(6)]}
    tables[0, 0]["vector_merge"][EAST] = [0, 0, 1, 1, 0]     # south, then west
    tables[0, 1]["vector"][EAST] = Source.WEST
    records = [Record(UnitKind.SWITCH, r, c, pack_config(layout, t))
               for (r, c), t in tables.items()]
    model = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024, switch_layout=layout)
    model.load(write_bitstream(Geometry(2, 2, 4), records))
    with pytest.raises(ModelDeadlock, match=r"switch\(0,0\) vector input west holds 2 items, "
                                            r"merge output east waits on south"):
        model.run(edge_inputs={("vector", 0): [[1, 2, 3, 4]] * 5})


# --------------------------------------------------------------------------------------
# (6) deadlocks and unit errors
# --------------------------------------------------------------------------------------

def test_model_deadlock_unrouted_pcu_input():
    lanes = 4
    config = {"mode": 1, "counters": [{"min": 0, "max": 4, "stride": 1},
                                      {"min": 0, "max": 1, "stride": 1},
                                      {"min": 0, "max": 1, "stride": 1}]}
    extra = [((0, 0, "vector", LOCAL0), Source.WEST), ((0, 0, "control", LOCAL0), Source.WEST),
             ((0, 0, "vector", WEST), Source.LOCAL)]
    records = [Record(UnitKind.PCU, 0, 0, pack_config(pcu_config_layout(lanes, 4), config))]
    model = FunctionalArray(2, 2, lanes, capacity_bytes=1024)
    model.load(write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra)))
    with pytest.raises(ModelDeadlock, match=r"^deadlock: PCU\(0,0\) waits on vector_in1 "
                                            r"\(k step 0 of 4\); edge vector_in 0 has 2 items"):
        model.run(edge_inputs={("vector", 0): [[0] * lanes] * 8, ("control", 0): [0]})


def test_model_deadlock_agcu_store_short(seed):
    lanes = 8
    store = {"store_enable": 1, "store": _agcu_pattern(HBM.base, 64, 4 * lanes)}
    extra = [((0, 0, "vector", EAST), Source.WEST), ((0, 1, "vector", SOUTH), Source.WEST),
             ((1, 1, "vector", EAST), Source.NORTH)]      # to AGCU 1, east of row 1
    records = [Record(UnitKind.AGCU, 0, 1, pack_config(agcu_config_layout(), store))]
    model = FunctionalArray(2, 2, lanes, compute=False)
    model.load(write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra)))
    with pytest.raises(ModelDeadlock, match="^deadlock: AGCU 1 store expects 54 more beats$"):
        model.run(edge_inputs={("vector", 0): [[7] * lanes] * 10}, memory=FlatMemory())


def test_model_unit_errors():
    lanes = 4
    bad = {"mode": 1}                      # counters all zero: BAD_COUNTER on start
    extra = [((0, 0, "control", LOCAL0), Source.WEST)]
    records = [Record(UnitKind.PCU, 0, 0, pack_config(pcu_config_layout(lanes, 4), bad))]
    model = FunctionalArray(2, 2, lanes, capacity_bytes=1024)
    model.load(write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra)))
    with pytest.raises(UnitError, match=r"PCU\(0,0\): error BAD_COUNTER"):
        model.run(edge_inputs={("control", 0): [0]})
    # a PMU write beat whose lanes fall outside the buffer: WRITE_RANGE
    config = pmu_config(lanes, write=pattern("row_major", lanes, 4, 8),
                        read=pattern("row_major", lanes, 4, 8), buffer_words=16)
    extra = [((0, 1, "vector", LOCAL0), Source.WEST), ((0, 0, "vector", EAST), Source.WEST)]
    records = [Record(UnitKind.PMU, 0, 1, pack_config(pmu_config_layout(), config))]
    model.load(write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra)))
    with pytest.raises(UnitError, match=r"PMU\(0,1\): error WRITE_RANGE \(write beat 4 "):
        model.run(edge_inputs={("vector", 0): [[1] * lanes] * 8})


# --------------------------------------------------------------------------------------
# (7) bad bitstreams
# --------------------------------------------------------------------------------------

def test_model_rejects_bad_bitstream():
    model = FunctionalArray(2, 2, 4, capacity_bytes=1024)
    records = switch_records(2, 2, {}, [((0, 0, "vector", EAST), Source.WEST)])
    good = write_bitstream(Geometry(2, 2, 4), records)
    corrupted = list(good)
    corrupted[6] ^= 4
    with pytest.raises(BitstreamError, match="CRC-32") as error:
        model.load(corrupted)
    assert error.value.status == ConfigStatus.CRC
    with pytest.raises(BitstreamError) as error:
        model.load(write_bitstream(Geometry(2, 3, 4), records))
    assert error.value.status == ConfigStatus.GEOMETRY
    with pytest.raises(BitstreamError) as error:      # a PMU record where a PCU sits
        model.load(write_bitstream(Geometry(2, 2, 4), [Record(UnitKind.PMU, 0, 0, [1])]))
    assert error.value.status == ConfigStatus.BAD_RECORD
    with pytest.raises(BitstreamError) as error:
        model.load(good[:-1])
    assert error.value.status == ConfigStatus.LENGTH
    with pytest.raises(ModelError, match="No bitstream loaded"):
        model.run()


def _predicate_case(rng, lanes=4, rows=8, cols=8):
    """One matrix multicast to PMUs (0,0) and (1,0), each holding half of it (address
    predicate) and sending its half's columns (a transpose) to its row's east edge."""
    half = rows * cols // 2
    records, references = [], []
    for row, (low, high) in enumerate(((0, half), (half, 2 * half))):
        config = pmu_config(lanes, write=pattern("row_major", lanes, rows, cols),
                            read=pattern("column_major", lanes, rows, cols),
                            buffer_words=half, skew_shift=cols.bit_length() - 1,
                            predicate=(low, high), read_passes=1)
        records.append(Record(UnitKind.PMU, row, 0, pack_config(pmu_config_layout(), config)))
        references.append(PMUModel(config, lanes))
    extra = [((0, 0, "vector", LOCAL0), Source.WEST), ((0, 0, "vector", SOUTH), Source.WEST),
             ((1, 0, "vector", LOCAL0), Source.NORTH)]
    for row in range(2):
        extra += [((row, 0, "vector", EAST), Source.LOCAL),
                  ((row, 1, "vector", EAST), Source.WEST)]
    words = write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra))
    beats = [[rng.getrandbits(32) for _ in range(lanes)] for _ in range(rows * cols // lanes)]
    expected = {}
    for row, reference in enumerate(references):
        reference.write_pass(0, beats)
        expected["vector", 2 + row] = reference.read_pass(0)
    return words, {("vector", 0): beats}, expected


def test_model_pmu_predicate(seed):
    words, inputs, expected = _predicate_case(random.Random(seed))
    model = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024)
    model.load(words)
    result = model.run(edge_inputs=inputs)
    assert _items(result.edge_outputs) == expected
    assert result.counters["PMU(0,0)"]["beats_written"] == 8       # half of 16 beats each
    assert len(result.leftovers) == 2                              # unrouted DONE tokens


def test_rtl_replays_model_pmu_predicate(seed):
    words, inputs, _ = _predicate_case(random.Random(seed))
    _replay_on_rtl(seed, words, inputs)


@pytest.mark.verilator
def test_rtl_replays_model_verilator(sim_dir, seed):
    """Default-width 2x2 PMU array (the build of test_array_2x2_verilator) replays long
    model runs: random multicast route sets, 1500 items per route; double-buffered 32x32
    transposes with a read gate."""
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build

    from tb.suites.funcmodel import write_replay
    built = build(TileArray, rows=2, cols=2, lanes=8)
    rng = random.Random(seed)
    runs = []
    settings, routes = {}, {}
    for network in NETWORKS:
        routes[network], settings[network] = random_route_set(rng, 2, 2, 8)
    words = write_bitstream(Geometry(2, 2, 8), switch_records(2, 2, settings))
    inputs = {}
    for network in NETWORKS:
        for source, _ in routes[network]:
            inputs[network, source] = (
                [[rng.getrandbits(32) for _ in range(8)] for _ in range(1500)]
                if network == "vector" else [rng.getrandbits(32 if network == "scalar" else 1)
                                             for _ in range(1500)])
    # a DONE token would end the host run early: control items are STEP tokens
    inputs = {key: ([0] * len(items) if key[0] == "control" else items)
              for key, items in inputs.items()}
    runs.append((words, inputs))
    words, inputs, _ = _transpose_case(rng, 8, 32, 32, passes=6, buffers=2, gate=True)
    runs.append((words, inputs))
    for index, (words, inputs) in enumerate(runs):
        model = FunctionalArray(2, 2, 8, compute=False)
        model.load(words)
        outputs = _items(model.run(edge_inputs=inputs).edge_outputs)
        sim_dir.mkdir(parents=True, exist_ok=True)
        replay = write_replay(sim_dir / f"replay{index}.json", words, inputs, outputs)
        run_verilator(built, array_replay, sim_dir / f"replay{index}", seed=seed, rows=2,
                      cols=2, lanes=8, replay_file=replay, timeout=200_000)


def test_model_pmu_scalar_lookups(seed):
    """Scalar addresses from the west edge look words up in PMU (0,1) (filled from the
    east edge by a first run, diagonal layout: lookups racing writes depend on timing);
    answers leave at the east edge, in order. The SRAM persists across runs."""
    rng = random.Random(seed)
    lanes = 4
    config = pmu_config(lanes, write=pattern("row_major", lanes, 8, 8),
                        read=pattern("row_major", lanes, 8, 8), buffer_words=64,
                        skew_shift=3, read_enable=0)
    extra = [((0, 1, "vector", LOCAL0), Source.EAST), ((0, 0, "scalar", EAST), Source.WEST),
             ((0, 1, "scalar", LOCAL0), Source.WEST), ((0, 1, "scalar", EAST), Source.LOCAL)]
    records = [Record(UnitKind.PMU, 0, 1, pack_config(pmu_config_layout(), config))]
    model = FunctionalArray(2, 2, lanes, compute=False, capacity_bytes=1024)
    model.load(write_bitstream(Geometry(2, 2, lanes), records + switch_records(2, 2, {}, extra)))
    beats = [[rng.getrandbits(32) for _ in range(lanes)] for _ in range(16)]
    reference = PMUModel(config, lanes)
    reference.write_pass(0, beats)
    addresses = [rng.randrange(64) for _ in range(30)]
    model.run(edge_inputs={("vector", 2): beats})
    assert np.array_equal(model.pmu_memory(0, 1)[:64],
                          [reference.buffers[0][a] for a in range(64)])
    result = model.run(edge_inputs={("scalar", 0): addresses})
    assert result.edge_outputs["scalar", 2] == [reference.buffers[0][a] for a in addresses]
    with pytest.raises(UnitError, match=r"PMU\(0,1\): error SCALAR_RANGE"):
        model.run(edge_inputs={("scalar", 0): [256]})


def test_model_deadlock_token_to_ungated_pmu():
    """A PMU takes control tokens only with read_gate: a token routed to one without it
    stays in the switch, named with the input that never takes it."""
    extra = [((0, 1, "control", LOCAL0), Source.WEST), ((0, 0, "control", EAST), Source.WEST)]
    model = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024)
    model.load(write_bitstream(Geometry(2, 2, 4), switch_records(2, 2, {}, extra)))
    with pytest.raises(ModelDeadlock, match=r"^deadlock: switch\(0,1\) control input west "
                                            r"waits on PMU\(0,1\) control_in$"):
        model.run(edge_inputs={("control", 0): [0]})

"""rdu.funcmodel: the item-level functional model against the RTL and against numpy."""

import random

import numpy as np
import pytest
from rdu import pcu_model
from rdu.bitstream import BitstreamError, ConfigStatus, Geometry, Record, UnitKind, \
    write_bitstream
from rdu.funcmodel import FlatMemory, FunctionalArray, ModelDeadlock, agcu_edge, \
    systolic_tiles
from rdu.memory_map import HBM
from rdu.program import Program
from rdu.unitconfig import pack_config, unpack_config

from hdl.agcu import agcu_config_layout
from hdl.array import TileArray
from hdl.interfaces import ControlToken
from hdl.pcu import PCU, pcu_config_layout
from hdl.pmu import pmu_config_layout
from hdl.switch import Source, switch_config_layout
from tb.runner import run_amaranth
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
        assert unpack_config(layout, pack_config(layout, fields)) == fields


def test_unitconfig_fields():
    words = pack_config(agcu_config_layout(), {"store_enable": 1,
                                               "load": {"base": 96, "stride": [-32, 64, 0]}})
    fields = unpack_config(agcu_config_layout(), words)
    assert fields["store_enable"] == 1 and fields["load_enable"] == 0
    assert fields["load"]["stride"] == [-32, 64, 0] and fields["load"]["base"] == 96
    with pytest.raises(ValueError, match="13 configuration words for a layout of 12 words"):
        unpack_config(agcu_config_layout(), [0] * 13)


def test_systolic_tiles_match_pcu_model(seed):
    rng = np.random.default_rng(seed)
    a = pcu_model.bf16_words(rng.standard_normal((5, 12, 4)))
    b = pcu_model.bf16_words(rng.standard_normal((5, 12, 4)))
    batched = systolic_tiles(a, b)
    for tile in range(5):
        assert np.array_equal(batched[tile], pcu_model.systolic_tile(a[tile], b[tile]))


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
    result = model.run(edge_inputs=run["edge_inputs"])
    # the RTL's scoreboard held exactly these items on these ports
    assert _items(result.edge_outputs) == run["expected_outputs"]
    assert result.counters["PCU(0,0)"]["macs"] == run["macs"]
    assert result.done_tokens == 1

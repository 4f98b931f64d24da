"""Speed of the functional model (rdu.models) on a GEMM-sized systolic workload.

A 4 x 4 array (8 PCUs, 8 PMUs). Every PMU is filled from an edge with a ``K x lanes``
block and reads it ``tiles`` times (``read_repeat``), multicast to two neighbouring
PCUs; every PCU runs ``tiles`` systolic tiles of ``K`` steps (``tiles * K`` beats on
each vector input) and sends its result rows and its DONE token to an edge. With
``lanes = 16, K = 256, tiles = 32`` the 8 PCUs do 8192 beats each: the MACs of a
256 x 256 x 256 GEMM. Every result row is checked against ``rdu.models.pcu_reference``.

    .venv/bin/python -m benchmarks.funcmodel_gemm [--lanes 16] [--k 256] [--tiles 32]
"""

import argparse
import time

import numpy as np
from rdu.bitstream import Geometry, Record, UnitKind, write_bitstream
from rdu.models import pcu_reference
from rdu.models.array import FunctionalArray
from rdu.unitconfig import pack_config

from hdl.array import is_compute_position
from hdl.pcu_config import pcu_config_layout
from hdl.pmu import pmu_config_layout
from hdl.switch import Port, Source, VectorOutput, switch_config_layout

ROWS = COLS = 4
NORTH, EAST, SOUTH, WEST, LOCAL0, LOCAL1 = VectorOutput
N, E, S, W, L = Source.NORTH, Source.EAST, Source.SOUTH, Source.WEST, Source.LOCAL


def gemm_layout(lanes, k_len, tiles):
    """Bitstream words, edge inputs, and per PCU its (in0 PMU, in1 PMU, output edge)."""
    routes = {}

    def route(row, col, network, output, source):
        table = routes.setdefault((row, col), {"vector": [0] * len(VectorOutput),
                                               "scalar": [0] * len(Port),
                                               "control": [0] * len(Port)})
        assert table[network][output] in (0, source), (row, col, network, output)
        table[network][output] = source

    pcus = {}
    pmu_edges = {}
    for r in range(ROWS):
        east = ROWS + r
        if is_compute_position(r, 0):
            pmu_edges[r, 1] = r                        # west edge -> (r,0) -> PMU (r,1)
            route(r, 0, "vector", EAST, W)
            route(r, 1, "vector", LOCAL0, W)
            pmu_edges[r, 3] = east                     # east edge -> PMU (r,3)
            route(r, 3, "vector", LOCAL0, E)
            # PCU (r,0): in0 from PMU (r,1), in1 from PMU (r+1,0), out west
            route(r, 1, "vector", WEST, L)
            route(r, 0, "vector", LOCAL0, E)
            route(r + 1, 0, "vector", NORTH, L)
            route(r, 0, "vector", LOCAL1, S)
            route(r, 0, "vector", WEST, L)
            route(r, 0, "control", Port.LOCAL, W)
            route(r, 0, "control", WEST, L)
            pcus[r, 0] = ((r, 1), (r + 1, 0), r)
            # PCU (r,2): in0 from PMU (r,3), in1 from PMU (r+1,2), out east
            route(r, 3, "vector", WEST, L)
            route(r, 2, "vector", LOCAL0, E)
            route(r + 1, 2, "vector", NORTH, L)
            route(r, 2, "vector", LOCAL1, S)
            route(r, 2, "vector", EAST, L)
            route(r, 3, "vector", EAST, W)
            route(r, 3, "control", WEST, E)
            route(r, 2, "control", Port.LOCAL, E)
            route(r, 2, "control", EAST, L)
            route(r, 3, "control", EAST, W)
            pcus[r, 2] = ((r, 3), (r + 1, 2), east)
        else:
            pmu_edges[r, 0] = r                        # west edge -> PMU (r,0)
            route(r, 0, "vector", LOCAL0, W)
            pmu_edges[r, 2] = east                     # east edge -> (r,3) -> PMU (r,2)
            route(r, 3, "vector", WEST, E)
            route(r, 2, "vector", LOCAL0, E)
            # PCU (r,1): in0 from PMU (r,0), in1 from PMU (r-1,1), out west
            route(r, 0, "vector", EAST, L)
            route(r, 1, "vector", LOCAL0, W)
            route(r - 1, 1, "vector", SOUTH, L)
            route(r, 1, "vector", LOCAL1, N)
            route(r, 1, "vector", WEST, L)
            route(r, 0, "vector", WEST, E)
            route(r, 0, "control", EAST, W)
            route(r, 1, "control", Port.LOCAL, W)
            route(r, 1, "control", WEST, L)
            route(r, 0, "control", WEST, E)
            pcus[r, 1] = ((r, 0), (r - 1, 1), r)
            # PCU (r,3): in0 from PMU (r,2), in1 from PMU (r-1,3), out east
            route(r, 2, "vector", EAST, L)
            route(r, 3, "vector", LOCAL0, W)
            route(r - 1, 3, "vector", SOUTH, L)
            route(r, 3, "vector", LOCAL1, N)
            route(r, 3, "vector", EAST, L)
            route(r, 3, "control", Port.LOCAL, E)
            route(r, 3, "control", EAST, L)
            pcus[r, 3] = ((r, 2), (r - 1, 3), east)
    block = {"start": 0, "stride": [lanes, lanes, 0], "bound": [1, k_len, 1], "lane_stride": 1}
    pmu = {"write_enable": 1, "read_enable": 1, "buffers": 1, "read_repeat": tiles,
           "read_passes": 1, "buffer_words": k_len * lanes, "write": block, "read": block}
    pcu = {"mode": 1, "counters": [{"min": 0, "max": k_len, "stride": 1},
                                   {"min": 0, "max": tiles, "stride": 1},
                                   {"min": 0, "max": 1, "stride": 1}]}
    records = [Record(UnitKind.PMU, r, c, pack_config(pmu_config_layout(), pmu))
               for (r, c) in pmu_edges]
    records += [Record(UnitKind.PCU, r, c, pack_config(pcu_config_layout(lanes, 4), pcu))
                for (r, c) in pcus]
    records += [Record(UnitKind.SWITCH, r, c, pack_config(switch_config_layout(), t))
                for (r, c), t in routes.items()]
    return write_bitstream(Geometry(ROWS, COLS, lanes), records), pmu_edges, pcus


def measure(lanes, k_len, tiles, seed=1):
    words, pmu_edges, pcus = gemm_layout(lanes, k_len, tiles)
    rng = np.random.default_rng(seed)
    blocks = {pos: pcu_reference.bf16_words(rng.standard_normal((k_len, lanes)))
              for pos in pmu_edges}
    inputs = {("vector", edge): blocks[pos] for pos, edge in pmu_edges.items()}
    for _, _, edge in pcus.values():
        inputs["control", edge] = [0]
    model = FunctionalArray(ROWS, COLS, lanes, compute=True)
    model.load(words)
    start = time.perf_counter()
    result = model.run(edge_inputs=inputs)
    seconds = time.perf_counter() - start
    for pos, (a_pmu, b_pmu, edge) in pcus.items():
        tile = pcu_reference.systolic_tile(blocks[a_pmu], blocks[b_pmu])
        rows = result.edge_outputs["vector", edge]
        assert rows.shape == (tiles * lanes, lanes), (pos, rows.shape)
        assert np.array_equal(rows, np.tile(tile, (tiles, 1))), f"PCU {pos} differs"
    assert result.done_tokens == len(pcus)
    macs = sum(c.get("macs", 0) for c in result.counters.values())
    beats = sum(c["items_in"] for name, c in result.counters.items()
                if name.startswith("PCU")) // 2
    return {"seconds": seconds, "items": result.items_moved, "macs": macs,
            "beats_per_pcu": beats // len(pcus)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--tiles", type=int, default=32)
    args = parser.parse_args(argv)
    r = measure(args.lanes, args.k, args.tiles)
    print(f"4x4 array, 8 PCUs, lanes {args.lanes}, K {args.k}, {args.tiles} tiles per PCU: "
          f"{r['beats_per_pcu']} beats per PCU, {r['macs']:,} MACs")
    print(f"model run {r['seconds']:.2f} s, {r['items']:,} item transfers, "
          f"{r['items'] / r['seconds']:,.0f} items/s, "
          f"{r['macs'] / r['seconds'] / 1e6:.1f} M MACs/s; every result row checked")


if __name__ == "__main__":
    main()

"""Speed of the functional model (rdu.models) on long SIMD PCU streams.

A 2 x 2 array (lanes 16 by default): PCU (0,0) takes ``vector_in0`` from west edge 0,
``vector_in1`` from east edge 2, ``scalar_in`` and its start token from west edge 0; its
vector results and DONE token leave at west edge 1 (through PMU (1,0)'s switch), its
reductions at west edge 0. Each workload is one run of ``--beats`` counter-chain
iterations (rows of ``--row`` beats, counter 1 over the rows) of one configuration:

* the five runs of the softmax example of ``docs/pcu.md``: ``max`` (MAX(PREV, REG),
  reduce MAX), ``exp`` (SUB(PREV, SCALAR), tail EXP, emit_every), ``sum`` (ADD(PREV,
  REG), reduce SUM), ``recip`` (PASS(SCALAR), tail RECIPROCAL, one beat per row),
  ``scale`` (MUL(PREV, SCALAR), emit_every);
* ``map`` (MUL(PREV, IN1), ADD(PREV, CONST), MADD(PREV, IN1, CONST), emit_every) and
  ``bf16`` (TO_BF16 of MUL(PREV, IN1), emit_every).

The figure is the model's ``run`` time (edge inputs in, every output out) in beats per
second. ``--per-beat`` runs the reference one-beat path (``pcu_reference.SimdState.step``
per iteration, ``FunctionalArray(simd_batch=False)``) for the before figure; ``--check``
compares the outputs with ``pcu_reference.run_simd`` (slow for large ``--beats``).

    PYTHONPATH=software:. .venv/bin/python -m benchmarks.funcmodel_simd [--beats 65536]
        [--lanes 16] [--row 128] [--workloads exp,sum] [--per-beat] [--check] [--json]
"""

import argparse
import inspect
import json
import time

import numpy as np
from rdu.bitstream import Geometry, Record, UnitKind, write_bitstream
from rdu.models import pcu_reference
from rdu.models.array import FunctionalArray
from rdu.unitconfig import pack_config

from hdl.pcu_config import pcu_config_layout
from hdl.switch import Port, Source, VectorOutput, switch_config_layout

NEG_INF, ZERO = 0xFF800000, 0x00000000
ONE_HALF, TWO = 0x3FC00000, 0x40000000

#: name -> (stages, other configuration fields, beats per row or None for --row)
WORKLOADS = {
    "max": ([{"op": 5, "src_a": 0, "src_b": 1, "constant": NEG_INF}],
            {"reduce": 2}, None),
    "exp": ([{"op": 2, "src_a": 0, "src_b": 2}],
            {"scalar_in": 1, "tail": 1, "emit_every": 1, "vector_out": 1}, None),
    "sum": ([{"op": 1, "src_a": 0, "src_b": 1, "constant": ZERO}],
            {"reduce": 1}, None),
    "recip": ([{"op": 0, "src_a": 2}],
              {"scalar_in": 1, "tail": 2, "vector_out": 1}, 1),
    "scale": ([{"op": 3, "src_a": 0, "src_b": 2}],
              {"scalar_in": 1, "emit_every": 1, "vector_out": 1}, None),
    "map": ([{"op": 3, "src_a": 0, "src_b": 4},
             {"op": 1, "src_a": 0, "src_b": 3, "constant": ONE_HALF},
             {"op": 4, "src_a": 0, "src_b": 4, "src_c": 3, "constant": TWO}],
            {"emit_every": 1, "vector_out": 1}, None),
    "bf16": ([{"op": 3, "src_a": 0, "src_b": 4}, {"op": 11, "src_a": 0}],
             {"emit_every": 1, "vector_out": 1}, None),
}


def _switch_records(routes):
    tables = {}
    for (row, col, network, output), source in routes:
        table = tables.setdefault((row, col), {"vector": [0] * len(VectorOutput),
                                               "scalar": [0] * len(Port),
                                               "control": [0] * len(Port)})
        table[network][output] = source
    return [Record(UnitKind.SWITCH, row, col, pack_config(switch_config_layout(), table))
            for (row, col), table in sorted(tables.items())]


ROUTES = [((0, 0, "vector", VectorOutput.LOCAL0), Source.WEST),
          ((0, 0, "vector", VectorOutput.LOCAL1), Source.EAST),
          ((0, 1, "vector", VectorOutput.WEST), Source.EAST),
          ((0, 0, "vector", VectorOutput.SOUTH), Source.LOCAL),
          ((1, 0, "vector", VectorOutput.WEST), Source.NORTH),
          ((0, 0, "scalar", Port.WEST), Source.LOCAL),
          ((0, 0, "scalar", Port.LOCAL), Source.WEST),
          ((0, 0, "control", Port.LOCAL), Source.WEST),
          ((0, 0, "control", Port.SOUTH), Source.LOCAL),
          ((1, 0, "control", Port.WEST), Source.NORTH)]


def workload(name, beats, lanes, row, seed=1):
    """(config, bitstream words, edge inputs, (in0, in1, scalars)) of one workload."""
    stages, fields, fixed_row = WORKLOADS[name]
    row = fixed_row or row
    rows = max(1, beats // row)
    while rows > 65535:
        row *= 2
        rows = max(1, beats // row)
    stages = stages + [{"op": 0}] * (4 - len(stages))
    config = {"mode": 0, "counters": [{"min": 0, "max": row, "stride": 1},
                                      {"min": 0, "max": rows, "stride": 1},
                                      {"min": 0, "max": 1, "stride": 1}],
              "stages": [{"src_a": 0, "src_b": 0, "src_c": 0, "constant": 0, **s}
                         for s in stages],
              "scalar_in": 0, "emit_every": 0, "vector_out": 0, "reduce": 0, "tail": 0,
              **fields}
    words = write_bitstream(Geometry(2, 2, lanes),
                            [Record(UnitKind.PCU, 0, 0,
                                    pack_config(pcu_config_layout(lanes, 4), config))]
                            + _switch_records(ROUTES))
    rng = np.random.default_rng(seed)
    total = row * rows
    in0 = rng.standard_normal((total, lanes)).astype(np.float32).view(np.uint32)
    in1 = rng.standard_normal((total, lanes)).astype(np.float32).view(np.uint32)
    scalars = (np.abs(rng.standard_normal(rows)) + 0.5).astype(np.float32).view(np.uint32)
    inputs = {("vector", 0): list(in0), ("control", 0): [0]}
    if pcu_reference.uses_in1(config):
        inputs["vector", 2] = list(in1)
    if config["scalar_in"]:
        inputs["scalar", 0] = scalars.tolist()
    return config, words, inputs, (in0, in1, scalars)


def measure(name, beats, lanes, row, per_beat=False, check=False):
    config, words, inputs, (in0, in1, scalars) = workload(name, beats, lanes, row)
    kwargs = {}
    if "simd_batch" in inspect.signature(FunctionalArray).parameters:
        kwargs["simd_batch"] = not per_beat
    elif not per_beat:
        raise SystemExit("this rdu.models has only the one-beat SIMD path: --per-beat")
    model = FunctionalArray(2, 2, lanes, compute=True, **kwargs)
    model.load(words)
    start = time.perf_counter()
    result = model.run(edge_inputs=inputs)
    seconds = time.perf_counter() - start
    counters = result.counters["PCU(0,0)"]
    total = len(in0)
    assert result.done_tokens == 1
    if check:
        reference = pcu_reference.run_simd(config, lanes, in0, in1, scalars)
        got_v = result.edge_outputs.get(("vector", 1), np.zeros((0, lanes), np.uint32))
        assert np.array_equal(got_v, np.array(reference["vector_out"], dtype=np.uint32)
                              .reshape(-1, lanes)), f"{name}: vector_out differs"
        assert list(result.edge_outputs.get(("scalar", 0), [])) == \
            reference["scalar_out"], f"{name}: scalar_out differs"
    return {"workload": name, "beats": total, "lanes": lanes,
            "row": config["counters"][0]["max"], "seconds": seconds,
            "beats_per_s": total / seconds, "ms_per_beat": 1e3 * seconds / total,
            "items_in": counters["items_in"], "items_out": counters["items_out"],
            "path": "per-beat" if per_beat else "batched", "checked": check}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--beats", type=int, default=65536,
                        help="counter-chain iterations per workload (default 65536)")
    parser.add_argument("--lanes", type=int, default=16)
    parser.add_argument("--row", type=int, default=128,
                        help="beats per row: counter 0's trip count (default 128)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS),
                        help=f"comma-separated subset of {','.join(WORKLOADS)}")
    parser.add_argument("--per-beat", action="store_true",
                        help="the reference one-beat SIMD path (the before figure)")
    parser.add_argument("--check", action="store_true",
                        help="compare the outputs with pcu_reference.run_simd")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    results = [measure(name, args.beats, args.lanes, args.row, args.per_beat, args.check)
               for name in args.workloads.split(",")]
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for r in results:
        print(f"{r['workload']:6s} {r['path']:9s} {r['beats']:8d} beats x {r['lanes']} lanes "
              f"(rows of {r['row']}): {r['seconds']:7.2f} s, {r['beats_per_s']:10,.0f} "
              f"beats/s, {r['ms_per_beat']:.4f} ms/beat"
              + (", checked against run_simd" if r["checked"] else ""))


if __name__ == "__main__":
    main()

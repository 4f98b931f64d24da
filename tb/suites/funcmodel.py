"""Replay a functional-model run on the RTL: same bitstream, same edge inputs, and the
model's edge outputs as the exact expectation (``tests/test_funcmodel.py``)."""

import json
from pathlib import Path

from hdl.interfaces import NETWORKS

from .array import load_bitstream, pulse
from .common import pack_vector, ports_from_json, ports_to_json

__all__ = ["array_replay", "write_replay"]


def write_replay(path, bitstream, edge_inputs, expected_outputs):
    """Write a run to a JSON file for ``array_replay(replay_file=...)`` (large runs: the
    Verilator tier passes parameters through the environment, which limits their size)."""
    Path(path).write_text(json.dumps({"bitstream": [int(w) for w in bitstream],
                                      "edge_inputs": ports_to_json(edge_inputs),
                                      "expected_outputs": ports_to_json(expected_outputs)}))
    return str(path)


async def array_replay(bench, *, rows, cols, lanes, bitstream=None, edge_inputs=None,
                       expected_outputs=None, replay_file=None, in_stall="random",
                       out_stall="random", timeout=20_000):
    """Load ``bitstream``, drive ``edge_inputs`` ``{(network, edge): items}`` under
    stalls, start, and expect exactly ``expected_outputs`` on the edge outputs, in order
    (every other edge output must stay silent). Vector items are lane lists. Both dicts
    may also be given as ``[[network, edge, items], ...]`` (JSON, for Verilator)."""
    if replay_file is not None:
        run = json.loads(Path(replay_file).read_text())
        bitstream, edge_inputs = run["bitstream"], run["edge_inputs"]
        expected_outputs = run["expected_outputs"]
    edge_inputs = ports_from_json(edge_inputs)
    expected_outputs = ports_from_json(expected_outputs)
    await load_bitstream(bench, bitstream)

    def pack(network, item):
        return pack_vector(item) if network == "vector" else int(item)

    for (network, edge), items in edge_inputs.items():
        stall = in_stall if network == "vector" else "none"
        bench.source(f"agcu_{network}_in.{edge}", stall).send_all(
            pack(network, item) for item in items)
    for network in NETWORKS:
        for edge in range(2 * rows):
            sink = bench.sink(f"agcu_{network}_out.{edge}",
                              out_stall if network == "vector" else "none")
            sink.expect_all(pack(network, item)
                            for item in expected_outputs.get((network, edge), []))
    await pulse(bench, "host.start")
    await bench.streams_done(timeout=timeout)
    assert await bench.read("host.unit_error") == 0
    return {"items": sum(len(items) for items in expected_outputs.values())}

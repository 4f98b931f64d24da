"""Test bodies of :class:`hdl.switch.Switch`: random static routes with multicast."""

from hdl.switch import NARROW_OUTPUTS, VECTOR_OUTPUTS, Source, switch_config_layout

from .common import load_config, pack_config

VECTOR_INPUT_PATHS = [f"vector_in.{d}" for d in range(4)] + ["local_vector_in"]
VECTOR_OUTPUT_PATHS = [f"vector_out.{d}" for d in range(4)] + [f"local_vector_out.{i}"
                                                                  for i in range(2)]


def _paths(network):
    if network == "vector":
        return VECTOR_INPUT_PATHS, VECTOR_OUTPUT_PATHS
    return ([f"{network}_in.{d}" for d in range(4)] + [f"local_{network}_in"],
            [f"{network}_out.{d}" for d in range(4)] + [f"local_{network}_out"])


def random_routes(rng, outputs, route_probability=0.8):
    """A random route table: each output fed by a random input (or none); an input
    chosen by several outputs is a multicast."""
    return [rng.randrange(Source.NORTH, Source.LOCAL + 1) if rng.random() < route_probability
            else Source.NONE for _ in range(outputs)]


def switch_words(routes):
    return pack_config(switch_config_layout(), routes)


async def switch_random_routes(bench, *, lanes, count, in_stall="random", out_stall="random",
                               rounds=1):
    """``rounds`` random route tables; each carries ``count`` random items per routed input
    on all three networks at once; every output must receive exactly its input's items."""
    widths = {"vector": 32 * lanes, "scalar": 32, "control": 1}
    total = 0
    multicasts = 0
    bench.set("enable", 1)
    for _ in range(rounds):
        routes = {"vector": random_routes(bench.rng, len(VECTOR_OUTPUTS)),
                  "scalar": random_routes(bench.rng, len(NARROW_OUTPUTS)),
                  "control": random_routes(bench.rng, len(NARROW_OUTPUTS))}
        await load_config(bench, switch_words(routes))
        for network, table in routes.items():
            input_paths, output_paths = _paths(network)
            items = {source: [bench.rng.getrandbits(widths[network]) for _ in range(count)]
                     for source in set(table) if source != Source.NONE}
            for source, values in items.items():
                bench.source(input_paths[source - 1], in_stall).send_all(values)
                if table.count(source) > 1:
                    multicasts += 1
            for out_index, source in enumerate(table):
                sink = bench.sink(output_paths[out_index], out_stall)
                if source != Source.NONE:
                    sink.expect_all(items[source])      # an unrouted output expects nothing
                    total += count
        await bench.streams_done(timeout=40 * count + 500)
        bench.agents.sources.clear()
        bench.agents.sinks.clear()
    stalls = [await bench.read(f"{network}_stall_cycles")
              for network in ("vector", "scalar", "control")]
    return {"delivered": total, "multicasts": multicasts, "stall_cycles": stalls}


async def switch_disabled_holds(bench, *, lanes):
    """With ``enable`` low a routed input's items stay in the switch."""
    routes = {"vector": [Source.WEST, Source.WEST, 0, 0, 0, 0], "scalar": [0] * 5,
              "control": [0] * 5}
    await load_config(bench, switch_words(routes))
    bench.set("enable", 0)
    bench.source("vector_in.3").send_all([1, 2, 3])
    for _ in range(40):
        assert await bench.read("vector_out.0.valid") == 0
        await bench.cycles(1)
    bench.set("enable", 1)
    bench.sink("vector_out.0").expect_all([1, 2, 3])
    bench.sink("vector_out.1").expect_all([1, 2, 3])
    await bench.streams_done(timeout=200)
    return {}

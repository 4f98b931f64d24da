"""Test bodies of :class:`hdl.switch.Switch`: random static routes with multicast and merges."""

from hdl.interfaces import NETWORKS
from hdl.switch import (
    MERGE_SOURCES,
    NARROW_OUTPUTS,
    VECTOR_OUTPUTS,
    Direction,
    Source,
    switch_config_layout,
)

from .common import load_config, pack_config

VECTOR_INPUT_PATHS = [f"vector_in.{int(d)}" for d in Direction] + ["local_vector_in"]
VECTOR_OUTPUT_PATHS = [f"vector_out.{int(d)}" for d in Direction] + [f"local_vector_out.{i}"
                                                                       for i in range(2)]


def _paths(network):
    if network == "vector":
        return VECTOR_INPUT_PATHS, VECTOR_OUTPUT_PATHS
    return ([f"{network}_in.{int(d)}" for d in Direction] + [f"local_{network}_in"],
            [f"{network}_out.{int(d)}" for d in Direction] + [f"local_{network}_out"])


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
              for network in NETWORKS]
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


# -- merge outputs ---------------------------------------------------------------------

SOURCES = MERGE_SOURCES         # inputs per network, index = Source - 1 (hdl.switch.Port)


def merge_order(items, counts):
    """Reference of a merge output: the exact sequence it forwards.

    ``items[i]`` are the items arriving on input ``i`` (``Source - 1``), ``counts[i]``
    the merge count of that input. The output takes ``counts[i]`` items from each input
    with a non-zero count, in input order, cyclically, starting at the first; it stops
    (waits forever) at the first input that has no item left.
    """
    order = [index for index, count in enumerate(counts) if count]
    queues = [list(values) for values in items]
    taken = [0] * len(queues)
    sequence = []
    while order:
        for index in order:
            for _ in range(counts[index]):
                if taken[index] == len(queues[index]):
                    return sequence
                sequence.append(queues[index][taken[index]])
                taken[index] += 1
    return sequence


def merge_consumption(counts, rounds, partial):
    """Items per input that a merge output with ``counts`` takes in ``rounds`` full
    rounds and then ``partial`` more items (fewer than one round): ``[items per input]``.
    """
    taken = [rounds * count for count in counts]
    for index, count in enumerate(counts):
        step = min(count, partial)
        taken[index] += step
        partial -= step
    return taken


def random_merge_network(rng, outputs):
    """One network's random configuration with merge outputs.

    One or two merge outputs, each over its own random subset of inputs (2..5 inputs for
    a single merge, 2..3 each for two) with random counts 1..5; every other output is
    plain (random input, possibly a merged one, or idle) and at least one plain output
    reads an input that is also merged. Returns ``(selects, counts)``.
    """
    inputs = list(range(SOURCES))
    rng.shuffle(inputs)
    if rng.random() < 0.5:
        sizes = [rng.randint(2, SOURCES - 1)]          # leave outputs for plain routes
        sizes[0] = rng.choice([sizes[0], SOURCES])
    else:
        first = rng.randint(2, 3)
        sizes = [first, rng.randint(2, SOURCES - first)]
    merge_outputs = rng.sample(range(outputs), len(sizes))
    counts = [[0] * SOURCES for _ in range(outputs)]
    merged = []
    for out, size in zip(merge_outputs, sizes, strict=True):
        chosen, inputs = inputs[:size], inputs[size:]
        for index in chosen:
            counts[out][index] = rng.randint(1, 5)
        merged.extend(chosen)
    selects = [Source.NONE] * outputs
    plain = [out for out in range(outputs) if out not in merge_outputs]
    for out in plain:
        if rng.random() < 0.85:
            selects[out] = rng.randrange(Source.NORTH, Source.LOCAL + 1)
    selects[plain[0]] = rng.choice(merged) + 1        # merged and plain-routed at once
    for out in merge_outputs:                           # ignored on a merge output
        selects[out] = rng.randrange(0, 8)
    return selects, counts


def merge_traffic(rng, selects, counts, width, rounds, count):
    """Random items per input for one network so that every routed item is taken:
    merged inputs carry what their merge output consumes in ``rounds`` (+ a random
    partial round, random per output), plain-only inputs carry ``count`` items.
    Returns ``(items per input, expected sequence per output)``."""
    lengths = [None] * SOURCES
    for out_counts in counts:
        if any(out_counts):
            partial = rng.randrange(sum(out_counts))
            for index, taken in enumerate(merge_consumption(out_counts, rounds, partial)):
                if out_counts[index]:
                    lengths[index] = taken
    for out, select in enumerate(selects):
        if not any(counts[out]) and Source.NORTH <= select <= Source.LOCAL:
            if lengths[select - 1] is None:
                lengths[select - 1] = count
    items = [[rng.getrandbits(width) for _ in range(length or 0)] for length in lengths]
    expected = []
    for out, select in enumerate(selects):
        if any(counts[out]):
            expected.append(merge_order(items, counts[out]))
        elif Source.NORTH <= select <= Source.LOCAL:
            expected.append(items[select - 1])
        else:
            expected.append([])
    return items, expected


def _wrong_merge_order(items, counts):
    """A plausible wrong reference: the merge starting at the second listed input."""
    start = [index for index, count in enumerate(counts) if count][1]
    return merge_order(items[start:] + items[:start], counts[start:] + counts[:start])


async def switch_random_merges(bench, *, lanes, rounds=2, merge_rounds=4, count=40,
                               in_stall="random", out_stall="random", wrong_reference=False):
    """``rounds`` random merge configurations on all three networks at once (plain and
    multicast outputs beside the merges), random traffic under stalls; every output must
    receive exactly the reference sequence (:func:`merge_order` for merge outputs).
    Rewriting the configuration between rounds must restart every merge."""
    widths = {"vector": 32 * lanes, "scalar": 32, "control": 1}
    delivered = merged_items = 0
    bench.set("enable", 1)
    for _ in range(rounds):
        config, traffic = {}, {}
        for network in NETWORKS:
            outputs = len(VECTOR_OUTPUTS if network == "vector" else NARROW_OUTPUTS)
            selects, counts = random_merge_network(bench.rng, outputs)
            config[network], config[f"{network}_merge"] = selects, counts
            traffic[network] = merge_traffic(bench.rng, selects, counts, widths[network],
                                             merge_rounds, count)
        await load_config(bench, switch_words(config))
        for network in NETWORKS:
            input_paths, output_paths = _paths(network)
            items, expected = traffic[network]
            counts = config[f"{network}_merge"]
            for index, values in enumerate(items):
                if values:
                    bench.source(input_paths[index], in_stall).send_all(values)
            for out, sequence in enumerate(expected):
                if wrong_reference and network == "vector" and any(counts[out]):
                    wrong = _wrong_merge_order(items, counts[out])
                    assert wrong != sequence, "the wrong reference must differ"
                    sequence = wrong
                bench.sink(output_paths[out], out_stall).expect_all(sequence)
                delivered += len(sequence)
                if any(counts[out]):
                    merged_items += len(sequence)
        await bench.streams_done(timeout=40 * (merge_rounds * 25 + count) + 500)
        bench.agents.sources.clear()
        bench.agents.sinks.clear()
    return {"delivered": delivered, "merged": merged_items}


async def switch_merge_restart(bench, *, lanes, how):
    """A merge restarts at its first input when the configuration is rewritten
    (``how="config"``) or ``enable`` drops (``how="enable"``): NORTH x2, WEST x1 into
    ``vector_out.1``; after one NORTH item, the restarted merge takes two NORTH items
    before the WEST one (a merge that kept its position would take one)."""
    counts = [[0] * SOURCES for _ in VECTOR_OUTPUTS]
    counts[1][Source.NORTH - 1] = 2
    counts[1][Source.WEST - 1] = 1
    words = switch_words({"vector_merge": counts})
    await load_config(bench, words)
    bench.set("enable", 1)
    bench.source("vector_in.0").send_all([10])
    bench.sink("vector_out.1").expect_all([10])
    await bench.streams_done(timeout=100)
    bench.agents.sources.clear()
    bench.agents.sinks.clear()
    if how == "config":
        await load_config(bench, words)
    else:
        bench.set("enable", 0)
        await bench.cycles(3)
        bench.set("enable", 1)
    bench.source("vector_in.0").send_all([11, 12, 13, 14])
    bench.source("vector_in.3").send_all([30, 31])
    bench.sink("vector_out.1").expect_all(
        merge_order([[11, 12, 13, 14], [], [], [30, 31], []], counts[1]))
    await bench.streams_done(timeout=200)
    return {}


async def switch_merge_rate(bench, *, lanes, counts, rounds):
    """No stalls: one merge output on ``local_vector_out.0`` over ``counts``, every
    other output idle. Returns the cycles between its first and last item."""
    merge = [[0] * SOURCES for _ in VECTOR_OUTPUTS]
    merge[4] = list(counts)
    await load_config(bench, switch_words({"vector_merge": merge}))
    items = [[bench.rng.getrandbits(32 * lanes) for _ in range(rounds * count)]
             for count in counts]
    for index, values in enumerate(items):
        if values:
            bench.source(VECTOR_INPUT_PATHS[index]).send_all(values)
    expected = merge_order(items, counts)
    sink = bench.sink(VECTOR_OUTPUT_PATHS[4])
    sink.expect_all(expected)
    cycles = []
    sink.on_transfer = lambda item, cycle: cycles.append(cycle)
    await bench.cycles(4)                   # let the input FIFOs fill
    bench.set("enable", 1)
    await bench.streams_done(timeout=10 * len(expected) + 100)
    return {"items": len(expected), "span": cycles[-1] - cycles[0] + 1}

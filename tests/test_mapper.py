"""Kernel IR, placement and routing."""

import random

import pytest
from rdu.ir import AccessPattern, IRError, Kernel
from rdu.mapper import DIRECTIONS, OPPOSITE, ArrayGeometry, MappingError, map_kernel


def _pipeline(n_stages, name="pipe"):
    k = Kernel(name)
    x = k.tensor("x", (64, 8), "fp32")
    y = k.tensor("y", (64, 8), "fp32")
    s = k.load(x, AccessPattern.linear(64))
    for i in range(n_stages):
        s = k.buffer(f"buf{i}", 512, [s])
        s = k.compute(f"op{i}", "map", [s], function="add")
    k.store(s, y, AccessPattern.linear(64))
    return k


def _check_routes(mapping):
    """Every route is a tree from the producer's switch reaching every consumer."""
    geometry = mapping.geometry
    taken = {}
    for route in mapping.routes:
        for switch, outs in route.hops.items():
            for out_port in outs:
                key = ((route.network, None, switch, out_port) if "." in out_port
                       or (out_port in OPPOSITE and not _is_mesh_link(geometry, switch,
                                                                      out_port))
                       else (route.network, route.track, switch, out_port))
                assert key not in taken, f"{route.stream} and {taken[key]} share {key}"
                taken[key] = route.stream
        stream = next(s for s in mapping.kernel.streams if s.name == route.stream)
        src = mapping.placement.sites[stream.source.node]
        # walk from the source along the hops and collect the delivered ports
        delivered = set()
        frontier = [(geometry.switch_of(src), geometry.attach_port(src))]
        visited = set()
        while frontier:
            switch, in_port = frontier.pop()
            assert (switch, in_port) not in visited, "route has a loop"
            visited.add((switch, in_port))
            for out_port, from_port in route.hops.get(switch, {}).items():
                if from_port != in_port:
                    continue
                if _is_mesh_link(geometry, switch, out_port):
                    dr, dc = DIRECTIONS[out_port]
                    frontier.append(((switch[0] + dr, switch[1] + dc), OPPOSITE[out_port]))
                else:
                    delivered.add((switch, out_port))
        for sink in stream.sinks:
            site = mapping.placement.sites[sink.node]
            port = (geometry.attach_port(site) if site.unit == "agcu"
                    else f"local.{sink.name}")
            assert (geometry.switch_of(site), port) in delivered, \
                f"{route.stream} does not reach {sink}"


def _is_mesh_link(geometry, switch, port):
    if port not in OPPOSITE:
        return False
    dr, dc = DIRECTIONS[port]
    r, c = switch[0] + dr, switch[1] + dc
    return 0 <= r < geometry.rows and 0 <= c < geometry.cols


def test_pipeline_maps_and_routes():
    mapping = map_kernel(_pipeline(3))
    assert mapping.kernel.units_needed() == {"agcu": 2, "pmu": 3, "pcu": 3}
    _check_routes(mapping)
    sites = set(mapping.placement.sites.values())
    assert len(sites) == len(mapping.placement.sites)
    for name, site in mapping.placement.sites.items():
        assert site.unit == mapping.kernel.nodes[name].unit


def test_multicast_shares_a_tree():
    k = Kernel("mc")
    x = k.tensor("x", (64, 8), "fp32")
    y = k.tensor("y", (64, 8), "fp32")
    a = k.buffer("a", 512, [k.load(x, AccessPattern.linear(64))])
    b = k.buffer("b", 512, [k.load(k.tensor("x2", (64, 8), "fp32"),
                                   AccessPattern.linear(64))])
    outs = [k.compute(f"mm{i}", "matmul", [a, b], k=64) for i in range(3)]
    k.store(k.buffer("c", 512, [outs[0]]), y, AccessPattern.linear(64))
    total = k.compute("sum", "map", [outs[1], outs[2]], function="add")
    k.store(k.buffer("d", 512, [total]), k.tensor("z", (64, 8), "fp32"),
            AccessPattern.linear(64))
    mapping = map_kernel(k)
    _check_routes(mapping)
    a_route = next(r for r in mapping.routes if r.stream == "a.vector_out")
    assert sum(1 for outs in a_route.hops.values() for p in outs if p.startswith("local")) == 3


@pytest.mark.parametrize("seed", range(20))
def test_random_kernels_route_or_explain(seed):
    rng = random.Random(seed)
    geometry = ArrayGeometry(rows=rng.choice([2, 4, 6]), cols=rng.choice([2, 4, 6]),
                             tracks=rng.choice([1, 2, 3]))
    k = _pipeline(rng.randint(1, 6), name=f"k{seed}")
    try:
        mapping = map_kernel(k, geometry)
    except MappingError as error:
        message = str(error)
        assert "\n" not in message
        assert ("short" in message) or ("cannot route" in message)
        return
    _check_routes(mapping)


def test_too_big_says_what_and_how_much():
    with pytest.raises(MappingError, match=r"needs 9 PCUs, the 4x4 array has 8 \(1 short\)"):
        map_kernel(_pipeline(9))
    k = Kernel("big")
    x = k.tensor("x", (64, 8), "fp32")
    s = k.buffer("huge", 20000, [k.load(x, AccessPattern.linear(64))])
    k.store(s, k.tensor("y", (64, 8), "fp32"), AccessPattern.linear(64))
    with pytest.raises(MappingError, match=r"buffer 'huge' needs 20000 words, a PMU holds "
                                           r"16384 \(3616 over\)"):
        map_kernel(k)


def test_ir_errors_are_specific():
    k = Kernel("bad")
    with pytest.raises(IRError, match="dtype 'fp8' is not one of"):
        k.tensor("t", (4,), "fp8")
    x = k.tensor("x", (4, 8), "fp32")
    with pytest.raises(IRError, match="unknown op 'conv'"):
        k.compute("c", "conv", [k.load(x, AccessPattern.linear(4), name="l0")])
    k.compute("m", "matmul", [k.load(x, AccessPattern.linear(4))])
    with pytest.raises(IRError, match="node 'm' has 1 unconnected input"):
        k.validate()
    with pytest.raises(IRError, match="counts must be positive"):
        AccessPattern(0, (0, 1, 1), (1, 0, 0))


def test_access_pattern_addresses():
    p = AccessPattern(5, (2, 3, 2), (1, 10, 100))
    addresses = list(p.addresses())
    assert len(addresses) == p.length == 12
    assert addresses[:4] == [5, 6, 15, 16]
    assert p.span() == (5, 126)


def _simulate_merge(route, mapping, stream, items_per_source):
    """Follow a routed merge through the switches the way hdl.switch merges (counts per
    input, order N, E, S, W, local) and return the source indices in arrival order."""
    geometry = mapping.geometry
    sinks = mapping.placement.sites[stream.sinks[0].node]
    root = geometry.switch_of(sinks)

    def output_of(switch):
        """Items leaving ``switch`` towards the root, as a list of source indices."""
        merges = route.merges.get(switch, {})
        hops = route.hops.get(switch, {})
        if merges:
            (counts,) = merges.values()
        else:
            (in_port,) = hops.values()
            counts = {in_port: None}
        queues = {}
        for in_port in counts:
            if in_port == "local" or (in_port in ("west", "east") and _edge_source(
                    geometry, mapping, stream, switch, in_port) is not None):
                index = _edge_source(geometry, mapping, stream, switch, in_port)
                queues[in_port] = [index] * items_per_source[index]
            else:
                dr, dc = DIRECTIONS[in_port]
                queues[in_port] = output_of((switch[0] + dr, switch[1] + dc))
        if not merges:
            return next(iter(queues.values()))
        order = [p for p in ("north", "east", "south", "west", "local") if p in counts]
        result = []
        while any(queues[p] for p in order):
            for port in order:
                taken, queues[port] = queues[port][:counts[port]], queues[port][counts[port]:]
                result += taken
        return result
    return output_of(root)


def _edge_source(geometry, mapping, stream, switch, in_port):
    for index, part in enumerate(stream.inputs):
        site = mapping.placement.sites[part.source.node]
        if geometry.switch_of(site) == switch and geometry.attach_port(site) == in_port:
            return index
    return None


@pytest.mark.parametrize("sources", [2, 3, 5])
def test_merge_routes_a_tree_with_counts_and_order(sources):
    """Outputs of several compute nodes merged into one store: the route is a tree, each
    merging switch takes (items per source) x (sources behind the input) per turn, and
    simulating those counts gives exactly Route.order, turn after turn."""
    k = Kernel(f"gather{sources}")
    x = k.tensor("x", (64, 8), "fp32")
    y = k.tensor("y", (64, 8), "fp32")
    loaded = k.load(x, AccessPattern.linear(64))
    parts = [k.compute(f"op{i}", "map", [loaded]) for i in range(sources)]
    merged = k.merge("gathered", parts, [4] * sources)
    k.store(merged, y, AccessPattern.linear(64 * sources))
    mapping = map_kernel(k)
    (route,) = [r for r in mapping.routes if r.stream == "gathered"]
    assert sorted(route.order) == list(range(sources))
    for outs in route.merges.values():
        for counts in outs.values():
            assert all(count % 4 == 0 for count in counts.values())
            assert sum(counts.values()) <= 4 * sources
    turns = 3
    arrived = _simulate_merge(route, mapping, merged, [4 * turns] * sources)
    expected = [index for _ in range(turns) for index in route.order for _ in range(4)]
    assert arrived == expected


def test_merge_rejects_bad_input():
    k = Kernel("badmerge")
    x = k.tensor("x", (64, 8), "fp32")
    loaded = k.load(x, AccessPattern.linear(64))
    a = k.compute("a", "map", [loaded])
    with pytest.raises(IRError, match="needs at least 2 streams"):
        k.merge("m", [a], [1])
    b = k.compute("b", "map", [loaded])
    with pytest.raises(IRError, match="counts must be positive integers"):
        k.merge("m", [a, b], [1, 0])


def test_negotiated_router_puts_a_gemm_on_every_pcu_of_an_8x8():
    """On the 8x8 array (32 PCUs, one vector track a link) the greedy router finds no
    placement of a GEMM on more than about 25 PCUs, and searching takes it minutes; the
    negotiated router (``rdu compile --router negotiated``) routes one on all 32 in a
    few tries: no link of a network carries two streams, and the functional model
    computes the reference's words through those routes."""
    import numpy as np
    from rdu.compiler.place import routing
    from rdu.frontend.kernels import get_kernel
    from rdu.machine import Machine
    from rdu.runtime import run_program
    kernel = get_kernel("gemm")
    with pytest.raises(ValueError, match="router must be one of greedy, negotiated"):
        with routing("pathfinder"):
            pass
    state = []
    with routing("negotiated"):
        program = kernel.compile(Machine(rows=8, cols=8), state=state, m=256, n=16, k=16)
    assert program.meta["mapping"].startswith("gemm_256x16x16: 32/32 PCU")
    taken = set()
    for route in state[0].mapping.routes:
        for switch, outs in [*route.hops.items(), *route.merges.items()]:
            for out_port in outs:
                key = (route.network, route.track, switch, out_port)
                assert key not in taken, key
                taken.add(key)
    inputs = kernel.random_inputs(program, 3)
    kernel.pack(program, inputs)
    results = kernel.unpack(program, run_program(program, "model").outputs)
    for name, words in kernel.exact(program).items():
        assert np.array_equal(results[name].view(np.uint32), words), name
    assert kernel.check(program, inputs, results)[0]

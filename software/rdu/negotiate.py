"""Negotiated-congestion routing: the links of every stream chosen together.

The greedy router (:func:`rdu.mapper.route_kernel`) routes the streams one after the
other on free links and, when one finds none, starts again with it first. On a large
array with one vector track per link, the multicasts of a GEMM's A and B and the
merges of its results cross everywhere, and random placements rarely route that way.
PathFinder (McMurchie and Ebeling, FPGA 1995) routes every stream on the cheapest
links whether they are taken or not, then raises the price of each link used by more
than one stream (the *present* share, growing each round, and a *history* that
remembers the links fought over), and routes every stream again, until no link is
shared. Here each stream is a tree, grown as the greedy router grows it: a multicast
from its producer to each consumer in turn, a merge from each producer to the tree
around its consumer; the links it returns are then built into routes by
:func:`rdu.mapper.route_confined`.
"""

import heapq
from collections import Counter, defaultdict

from .ir import Merge
from .mapper import DIRECTIONS, routing_order

__all__ = ["negotiate", "ROUNDS"]

#: Rounds of rip-up and reroute before a placement is given up.
ROUNDS = 24


def _cheapest(starts, is_goal, price, in_mesh):
    """Dijkstra over links from the ``starts`` to the first switch for which ``is_goal``
    holds: ``[(switch, out_port), ...]`` in order, or None."""
    best = {switch: 0.0 for switch in starts}
    previous = {switch: None for switch in starts}
    queue = [(0.0, switch) for switch in sorted(starts)]
    heapq.heapify(queue)
    while queue:
        cost, switch = heapq.heappop(queue)
        if cost > best[switch]:
            continue
        if is_goal(switch):
            path = []
            while previous[switch] is not None:
                prev, port = previous[switch]
                path.append((prev, port))
                switch = prev
            return path[::-1]
        for port, (dr, dc) in DIRECTIONS.items():
            nxt = (switch[0] + dr, switch[1] + dc)
            if not in_mesh(*nxt):
                continue
            step = cost + price((switch, port))
            if step < best.get(nxt, float("inf")):
                best[nxt], previous[nxt] = step, (switch, port)
                heapq.heappush(queue, (step, nxt))
    return None


def _tree(stream, geometry, placement, price, in_mesh):
    """The links of one stream's tree at the current prices, or None."""
    links = set()
    if isinstance(stream, Merge):
        sink = stream.sinks[0]
        tree = {geometry.switch_of(placement.sites[sink.node])}
        for part in stream.inputs:
            start = geometry.switch_of(placement.sites[part.source.node])
            path = _cheapest([start], tree.__contains__, price, in_mesh)
            if path is None:
                return None
            for switch, port in path:        # from ``start`` to the tree
                links.add((switch, port))
                tree.add(switch)
        return links
    tree = {geometry.switch_of(placement.sites[stream.source.node])}
    for sink in stream.sinks:
        target = geometry.switch_of(placement.sites[sink.node])
        path = _cheapest(tree, target.__eq__, price, in_mesh)
        if path is None:
            return None
        for switch, port in path:
            links.add((switch, port))
            dr, dc = DIRECTIONS[port]
            tree.add((switch[0] + dr, switch[1] + dc))
    return links


def negotiate(kernel, geometry, placement, rounds=ROUNDS):
    """``{stream name: {(switch, out_port)}}`` with no link of a network used by two
    streams (one track per link), or None when ``rounds`` rounds leave a link shared."""
    streams = routing_order(kernel)
    in_mesh = lambda r, c: 0 <= r < geometry.rows and 0 <= c < geometry.cols  # noqa: E731
    history, occupancy, trees = defaultdict(float), Counter(), {}
    present = 0.5
    for _ in range(rounds):
        for stream in streams:
            network = stream.network
            for link in trees.get(stream.name, ()):
                occupancy[network, link] -= 1

            def price(link, network=network, present=present):
                key = (network, link)
                return (1.0 + history[key]) * (1.0 + present * occupancy[key])
            tree = _tree(stream, geometry, placement, price, in_mesh)
            if tree is None:
                return None
            trees[stream.name] = tree
            for link in tree:
                occupancy[network, link] += 1
        shared = [key for key, count in occupancy.items() if count > 1]
        if not shared:
            return trees
        for key in shared:
            history[key] += occupancy[key] - 1
        present *= 1.6
    return None

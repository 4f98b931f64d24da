"""Placement and routing of a :class:`rdu.ir.Kernel` on a tile array.

Geometry (:class:`ArrayGeometry`): ``rows`` x ``cols`` unit sites in a checkerboard
(:func:`hdl.array.is_compute_position`: a PCU where ``row + col`` is even, a PMU where
it is odd), one switch per site, and
AGCUs beside the west and east edge switches. Each switch has four neighbour links
(``north``, ``east``, ``south``, ``west``) and a local link to its unit (or, at an
edge, to an AGCU). Every link carries ``tracks`` independent static routes per
network.

Placement puts each node on a free unit of its kind, greedily, in the order that
keeps producers and consumers close (sum of Manhattan distances). Routing finds,
for each stream, a tree of links from the producer's switch to every consumer's
switch (a multicast shares links), breadth-first on free tracks.

A stream that finds no free route is moved to the front and everything is routed
again (at most once per stream); if routing still fails, up to
``placement_attempts`` perturbed placements (seeded by the kernel name, so a kernel
always maps the same way) are tried.

When a kernel does not fit, :class:`MappingError` says which resource ran out and
by how much; mapping never asserts and never loops without bound.
"""

from collections import deque
from dataclasses import dataclass, field

from hdl import defaults
from hdl.array import unit_kind_at
from hdl.switch import Direction, Port

from .ir import IRError, Merge

__all__ = ["MappingError", "ArrayGeometry", "Site", "Placement", "Route", "Mapping",
           "map_kernel", "route_kernel", "route_confined", "routing_order",
           "agcu_site", "default_agcu_rows",
           "DIRECTIONS", "OPPOSITE"]

#: Port name -> (d_row, d_col) of the neighbour, in hdl.switch.Direction order.
DIRECTIONS = {direction.port: direction.offset for direction in Direction}
#: Port name -> the port the neighbour's link arrives on.
OPPOSITE = {direction.port: direction.opposite.port for direction in Direction}


class MappingError(ValueError):
    """A kernel that cannot be placed or routed; the message names the resource."""


@dataclass(frozen=True)
class Site:
    """Where a node sits: a unit kind and its grid position (AGCUs: ``side``, ``row``)."""
    unit: str
    row: int
    col: int
    slot: str = ""          # AGCUs: "load" or "store"

    @property
    def switch(self):
        return (self.row, self.col)

    def __str__(self):
        extra = f".{self.slot}" if self.slot else ""
        return f"{self.unit}({self.row},{self.col}){extra}"


def agcu_site(index, rows):
    """``(side, row)`` of AGCU ``index`` on a ``rows``-row array: the hardware's rule,
    :func:`hdl.system.agcu_position` (mid-edge rows, even indices west, odd east)."""
    from hdl.system import agcu_position
    return agcu_position(index, rows)


def default_agcu_rows(rows, agcus=defaults.AGCUS):
    """Where the AGCUs of a ``rows``-row array sit (:func:`agcu_site`): with two, the
    west edge of row ``(rows - 1) // 2`` and the east edge of row ``rows // 2``.

    Mid-edge rather than corner positions: a corner switch has only two mesh links in
    each direction, and a GEMM's load trees and result merges all meet at the AGCUs'
    switches (on the 4x4 array a corner placement cannot route eight matmuls)."""
    return tuple(agcu_site(index, rows) for index in range(agcus))


@dataclass(frozen=True)
class ArrayGeometry:
    rows: int = defaults.ROWS
    cols: int = defaults.COLS
    lanes: int = defaults.LANES
    tracks: int = 1                             # routes per link and network (hdl.switch: 1)
    pmu_words: int = defaults.PMU_BYTES // 4     # 32-bit words
    #: (side, row) of each AGCU; default :func:`default_agcu_rows` (mid-edge rows)
    agcu_rows: tuple = None

    def __post_init__(self):
        for name in ("rows", "cols", "lanes", "tracks", "pmu_words"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"array {name} must be a positive integer, not {value!r}")
        if self.agcu_rows is None:
            object.__setattr__(self, "agcu_rows", default_agcu_rows(self.rows))
        for side, row in self.agcu_rows:
            if side not in ("west", "east") or not 0 <= row < self.rows:
                raise ValueError(f"AGCU position ({side!r}, {row}) is not on the array edge")

    def unit_at(self, row, col):
        """``"pcu"`` or ``"pmu"``: the lower-case :class:`hdl.config_net.UnitKind` name of
        the unit at ``(row, col)`` (:func:`hdl.array.unit_kind_at`)."""
        return unit_kind_at(row, col).name.lower()

    def sites(self, unit):
        if unit == "agcu":
            result = []
            for side, row in self.agcu_rows:
                col = -1 if side == "west" else self.cols
                result += [Site("agcu", row, col, "load"), Site("agcu", row, col, "store")]
            return result
        return [Site(unit, r, c) for r in range(self.rows) for c in range(self.cols)
                if self.unit_at(r, c) == unit]

    def capacity(self):
        return {"pcu": len(self.sites("pcu")), "pmu": len(self.sites("pmu")),
                "agcu": len(self.agcu_rows)}

    def switch_of(self, site):
        """The switch a site attaches to (an AGCU attaches to its edge switch)."""
        if site.unit == "agcu":
            return (site.row, 0 if site.col < 0 else self.cols - 1)
        return (site.row, site.col)

    def attach_port(self, site):
        """The switch port the site's unit uses: ``local`` or, for AGCUs, the edge."""
        if site.unit == "agcu":
            return "west" if site.col < 0 else "east"
        return "local"


@dataclass
class Route:
    """A routed stream: for each switch, the output ports it drives and from where.

    A merge (:class:`rdu.ir.Merge`) is routed as a tree towards its consumer; where
    branches join, ``merges[switch][out_port]`` gives the items taken from each input
    port per turn, and ``order`` the merged stream's order of one turn as indices into
    the merge's inputs.
    """
    stream: str
    network: str
    track: int
    hops: dict = field(default_factory=dict)   # (row, col) -> {out_port: in_port}
    merges: dict = field(default_factory=dict)  # (row, col) -> {out_port: {in_port: count}}
    order: list = field(default_factory=list)

    @property
    def links(self):
        return sum(len(outs) for outs in self.hops.values()) + sum(
            len(outs) for outs in self.merges.values())


@dataclass
class Placement:
    sites: dict = field(default_factory=dict)   # node name -> Site


@dataclass
class Mapping:
    kernel: object
    geometry: ArrayGeometry
    placement: Placement
    routes: list

    def report(self):
        used = self.kernel.units_needed()
        cap = self.geometry.capacity()
        links = sum(route.links for route in self.routes)
        return (f"{self.kernel.name}: {used['pcu']}/{cap['pcu']} PCU, {used['pmu']}/"
                f"{cap['pmu']} PMU, {len(self.routes)} streams over {links} switch hops")


def _manhattan(a, b):
    return abs(a[0] - b[0]) + abs(a[1] - b[1])


def _place(kernel, geometry, rng=None):
    needed = kernel.units_needed()
    capacity = geometry.capacity()
    loads = sum(1 for n in kernel.nodes.values() if n.unit == "agcu" and n.output_ports())
    stores = sum(1 for n in kernel.nodes.values() if n.unit == "agcu" and n.input_ports())
    shortages = []
    for unit in ("pcu", "pmu"):
        if needed[unit] > capacity[unit]:
            shortages.append(f"needs {needed[unit]} {unit.upper()}s, the {geometry.rows}x"
                             f"{geometry.cols} array has {capacity[unit]} "
                             f"({needed[unit] - capacity[unit]} short)")
    for kind, count in (("load", loads), ("store", stores)):
        if count > capacity["agcu"]:
            shortages.append(f"needs {count} AGCU {kind} channels, the array has "
                             f"{capacity['agcu']} ({count - capacity['agcu']} short)")
    for node in kernel.nodes.values():
        if node.unit == "pmu" and node.words * max(1, node.buffers) > geometry.pmu_words:
            shortages.append(f"buffer {node.name!r} needs {node.words * node.buffers} words, "
                             f"a PMU holds {geometry.pmu_words} "
                             f"({node.words * node.buffers - geometry.pmu_words} over)")
    if shortages:
        raise MappingError(f"kernel {kernel.name!r} does not fit: " + "; ".join(shortages))

    free = {unit: geometry.sites(unit) for unit in ("pcu", "pmu", "agcu")}
    placement = Placement()
    neighbours = {name: set() for name in kernel.nodes}
    for stream in kernel.streams:
        for source in stream.sources:
            for sink in stream.sinks:
                neighbours[source.node].add(sink.node)
                neighbours[sink.node].add(source.node)

    # AGCU nodes first (their sites are fixed at the edges), then the rest breadth-first
    # from them so each node lands next to what it talks to.
    order = [name for name, node in kernel.nodes.items() if node.unit == "agcu"]
    seen = set(order)
    queue = deque(order)
    while queue:
        for other in sorted(neighbours[queue.popleft()]):
            if other not in seen:
                seen.add(other)
                order.append(other)
                queue.append(other)
    order += [name for name in kernel.nodes if name not in seen]

    for name in order:
        node = kernel.nodes[name]
        candidates = free[node.unit]
        if node.unit == "agcu":
            slot = "load" if node.output_ports() else "store"
            candidates = [site for site in candidates if site.slot == slot]
        placed = [placement.sites[o] for o in neighbours[name] if o in placement.sites]

        def cost(site, placed=placed):
            here = geometry.switch_of(site)
            return (sum(_manhattan(here, geometry.switch_of(p)) for p in placed),
                    site.row, site.col)
        ranked = sorted(candidates, key=cost)
        best = ranked[0] if rng is None else rng.choice(ranked[:3])
        free[node.unit].remove(best)
        placement.sites[name] = best
    return placement


class _Unroutable(Exception):
    def __init__(self, stream, message):
        super().__init__(message)
        self.stream = stream


def routing_order(kernel):
    """The streams with consumers, in the order routers take them first: the widest
    multicasts first, then by name."""
    return sorted((s for s in kernel.streams if s.sinks), key=lambda s: (-len(s.sinks), s.name))


def _route(kernel, geometry, placement, attempts=None):
    """Route all streams; when one fails, retry with it first (rip up everything),
    at most ``attempts`` times (default: the number of streams)."""
    order = routing_order(kernel)
    attempts = attempts or max(1, len(order))
    for _ in range(attempts):
        try:
            return _route_in_order(kernel, geometry, placement, order)
        except _Unroutable as failure:
            last = failure
            order.remove(failure.stream)
            order.insert(0, failure.stream)
    raise MappingError(str(last))


class _Confined:
    """The taken links as one stream sees them when its links were chosen beforehand
    (:func:`route_confined`): every link outside ``allowed`` is taken too."""

    def __init__(self, used, allowed):
        self.used, self.allowed = used, allowed

    def __contains__(self, key):
        _, track, switch, port = key
        return (track is not None and (switch, port) not in self.allowed) or key in self.used

    def add(self, key):
        self.used.add(key)

    def discard(self, key):
        self.used.discard(key)


def route_confined(kernel, geometry, placement, allowed):
    """Route ``kernel`` with each stream on the links chosen for it beforehand
    (``allowed``: ``{stream name: {(switch, out_port)}}``, e.g. by
    :func:`rdu.negotiate.negotiate`), on track 0; a :class:`Mapping`, or
    :class:`MappingError`."""
    order = routing_order(kernel)
    try:
        routes = _route_in_order(kernel, geometry, placement, order, allowed)
    except _Unroutable as failure:
        raise MappingError(str(failure)) from None
    return Mapping(kernel, geometry, placement, routes)


def _route_in_order(kernel, geometry, placement, streams, allowed=None):
    used = set()       # (network, track, (row, col), out_port)
    routes = []
    in_mesh = lambda r, c: 0 <= r < geometry.rows and 0 <= c < geometry.cols  # noqa: E731
    everything = used
    for stream in streams:
        if not stream.sinks:
            continue
        used = everything if allowed is None else _Confined(everything,
                                                            allowed[stream.name])
        if isinstance(stream, Merge):
            routes.append(_route_merge(kernel, geometry, placement, stream, used, in_mesh))
            continue
        src_site = placement.sites[stream.source.node]
        src_switch = geometry.switch_of(src_site)
        src_port = geometry.attach_port(src_site)
        failure = None
        for track in range(geometry.tracks if allowed is None else 1):
            route = Route(stream.name, stream.network, track)
            tree = {src_switch: src_port}          # switch -> input port it arrives on
            ok = True
            for sink in stream.sinks:
                dst_site = placement.sites[sink.node]
                dst_switch = geometry.switch_of(dst_site)
                dst_port = _sink_port(geometry, dst_site, sink)
                # a unit's input port is one wire whatever the track
                key = (stream.network, None, dst_switch, dst_port)
                if key in used:
                    ok, failure = False, f"port {dst_port} of switch {dst_switch} is taken"
                    break
                path = _bfs(tree, dst_switch, geometry, used, stream.network, track, in_mesh)
                if path is None:
                    ok, failure = False, f"no free {stream.network} track to {dst_switch}"
                    break
                for (switch, out_port), next_switch in path:
                    route.hops.setdefault(switch, {})[out_port] = tree[switch]
                    used.add((stream.network, track, switch, out_port))
                    tree[next_switch] = OPPOSITE[out_port]
                route.hops.setdefault(dst_switch, {})[dst_port] = tree[dst_switch]
                used.add(key)
            if ok:
                routes.append(route)
                break
            for switch, outs in route.hops.items():        # undo this track's attempt
                for out_port in outs:
                    used.discard((stream.network, track, switch, out_port))
                    used.discard((stream.network, None, switch, out_port))
        else:
            raise _Unroutable(stream, f"kernel {kernel.name!r}: cannot route stream "
                              f"{stream.name!r} on any of the {geometry.tracks} "
                              f"{stream.network} tracks ({failure})")
    return routes


#: Order in which a merging switch output visits its inputs (hdl.switch.Port order).
MERGE_ORDER = tuple(port.name.lower() for port in Port)


def _route_merge(kernel, geometry, placement, stream, used, in_mesh):
    """Route a merge as a tree of links towards its single consumer (track 0)."""
    network, track = stream.network, 0
    if len(stream.sinks) != 1:
        raise _Unroutable(stream, f"kernel {kernel.name!r}: merge {stream.name!r} must "
                          f"have exactly one consumer, has {len(stream.sinks)}")
    sink = stream.sinks[0]
    dst_site = placement.sites[sink.node]
    root = geometry.switch_of(dst_site)
    root_port = _sink_port(geometry, dst_site, sink)
    if (network, None, root, root_port) in used:
        raise _Unroutable(stream, f"kernel {kernel.name!r}: cannot route merge "
                          f"{stream.name!r} (port {root_port} of switch {root} is taken)")
    toward = {root: root_port}          # switch -> its output towards the consumer
    feeds = {}                          # switch -> {in_port: [input indices]}
    taken = []
    for index, part in enumerate(stream.inputs):
        site = placement.sites[part.source.node]
        start, start_port = geometry.switch_of(site), geometry.attach_port(site)
        path = _bfs_to_tree(start, toward, used, network, track, in_mesh)
        if path is None:
            for key in taken:
                used.discard(key)
            raise _Unroutable(stream, f"kernel {kernel.name!r}: cannot route merge "
                              f"{stream.name!r} from {site} (no free {network} track)")
        in_port, switch = start_port, start
        for out_port, nxt in path:
            toward[switch] = out_port
            key = (network, track, switch, out_port)
            used.add(key)
            taken.append(key)
            feeds.setdefault(switch, {}).setdefault(in_port, []).append(index)
            in_port, switch = OPPOSITE[out_port], nxt
        # joined the tree at ``switch``: this input now flows down to the root
        while True:
            feeds.setdefault(switch, {}).setdefault(in_port, []).append(index)
            if switch == root:
                break
            out_port = toward[switch]
            dr, dc = DIRECTIONS[out_port]
            in_port, switch = OPPOSITE[out_port], (switch[0] + dr, switch[1] + dc)
    used.add((network, None, root, root_port))
    route = Route(stream.name, network, track)
    for switch, inputs in feeds.items():
        out_port = toward[switch]
        if len(inputs) == 1:
            route.hops.setdefault(switch, {})[out_port] = next(iter(inputs))
        else:
            route.merges.setdefault(switch, {})[out_port] = {
                in_port: sum(stream.counts[i] for i in members)
                for in_port, members in inputs.items()}

    def order(switch):
        result = []
        for in_port in sorted(feeds[switch], key=MERGE_ORDER.index):
            members = feeds[switch][in_port]
            if in_port == "local" or len(members) == 1 and _starts_at(
                    geometry, placement, stream.inputs[members[0]], switch, in_port):
                result += members
            else:
                dr, dc = DIRECTIONS[in_port]
                result += order((switch[0] + dr, switch[1] + dc))
        return result
    route.order = order(root)
    return route


def _starts_at(geometry, placement, part, switch, in_port):
    site = placement.sites[part.source.node]
    return geometry.switch_of(site) == switch and geometry.attach_port(site) == in_port


def _bfs_to_tree(start, tree, used, network, track, in_mesh):
    """Shortest path of free links from ``start`` to any switch of ``tree``:
    ``[(out_port, next_switch), ...]`` (empty when ``start`` is in the tree), or None."""
    if start in tree:
        return []
    path = _shortest_path([start], tree.__contains__, used, network, track, in_mesh)
    return None if path is None else [(out_port, nxt) for (_, out_port), nxt in path]


def _sink_port(geometry, site, sink):
    """Switch output port that delivers to ``sink`` (a unit's input port)."""
    if site.unit == "agcu":
        return geometry.attach_port(site)
    return f"local.{sink.name}"


def _bfs(tree, target, geometry, used, network, track, in_mesh):
    """Shortest path from any switch already in ``tree`` to ``target`` on free links.

    Returns ``[((switch, out_port), next_switch), ...]`` or None.
    """
    if target in tree:
        return []
    return _shortest_path(sorted(tree), target.__eq__, used, network, track, in_mesh)


def _shortest_path(starts, is_goal, used, network, track, in_mesh):
    """Breadth-first over free links from the ``starts`` to the first switch for which
    ``is_goal`` holds: ``[((switch, out_port), next_switch), ...]`` or None."""
    previous = {switch: None for switch in starts}
    queue = deque(starts)
    while queue:
        switch = queue.popleft()
        for direction, (dr, dc) in DIRECTIONS.items():
            nxt = (switch[0] + dr, switch[1] + dc)
            if not in_mesh(*nxt) or nxt in previous:
                continue
            if (network, track, switch, direction) in used:
                continue
            previous[nxt] = (switch, direction)
            if is_goal(nxt):
                path = []
                node = nxt
                while previous[node] is not None:
                    prev_switch, out_port = previous[node]
                    path.append(((prev_switch, out_port), node))
                    node = prev_switch
                return path[::-1]
            queue.append(nxt)
    return None


def route_kernel(kernel, geometry, placement, attempts=None):
    """Route ``kernel`` on a given placement; return a :class:`Mapping` or raise
    :class:`MappingError` (for compilers that search placements themselves)."""
    return Mapping(kernel, geometry, placement,
                   _route(kernel, geometry, placement, attempts))


def map_kernel(kernel, geometry=None, placement_attempts=50):
    """Place and route ``kernel``; return a :class:`Mapping` or raise :class:`MappingError`."""
    geometry = geometry or ArrayGeometry()
    try:
        kernel.validate()
    except IRError as error:
        raise MappingError(str(error)) from None
    import random
    placement = _place(kernel, geometry)
    try:
        routes = _route(kernel, geometry, placement)
    except MappingError as first_failure:
        # the greedy placement congested some switch: try perturbed placements
        # (seeded, so the same kernel always maps the same way)
        rng = random.Random(kernel.name)
        for _ in range(placement_attempts):
            placement = _place(kernel, geometry, rng)
            try:
                routes = _route(kernel, geometry, placement)
                break
            except MappingError:
                continue
        else:
            raise MappingError(f"{first_failure} (and in {placement_attempts} other "
                               f"placements)") from None
    return Mapping(kernel, geometry, placement, routes)

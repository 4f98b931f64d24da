"""Pass ``place``: put every IR node on a unit and route every stream.

A generic randomised search (seeded by the kernel's structure, so a kernel always maps
the same way): each *pair* (a PMU buffer whose stream feeds one PCU only, e.g. an A
panel and its matmul) goes on a random PCU and a random free PMU next to it; other
compute nodes take the remaining PCUs, other buffers random free PMUs; loads and stores
random AGCU slots. A placement is kept when :func:`rdu.mapper.route_kernel` routes every
stream with one route per link and network. Routing depends only on the graph's
structure, so placements are cached by it.

When no placement routes, :class:`PlacementError` says so; the driver
(:func:`rdu.compiler.compile_graph`) then tiles again with one systolic PCU fewer.
"""

import random

from ..ir import Buffer, Compute, Load, Store
from ..mapper import DIRECTIONS, MappingError, Placement, Site, route_kernel
from .core import CompileError, register

__all__ = ["PlacementError", "search_placement", "PLACEMENT_TRIES", "pairs"]

#: Random placements tried before giving up on a structure.
PLACEMENT_TRIES = 1500
#: Routing attempts (rip-up and retry) per placement.
ROUTE_ATTEMPTS = 40


class PlacementError(CompileError):
    """No placement of this kernel routes on the array."""


def pairs(kernel):
    """``[(compute name, buffer name)]``: buffers whose output feeds one PCU only."""
    result = []
    for node in kernel.nodes.values():
        if not isinstance(node, Compute):
            continue
        for stream in node.inputs:
            source = kernel.nodes.get(stream.source.node)
            if isinstance(source, Buffer) and len(stream.sinks) == 1 and \
                    not hasattr(stream, "inputs"):
                result.append((node.name, source.name))
    return result


def _random_placement(geometry, kernel, paired, rng):
    placement = Placement()
    sites = geometry.sites("pcu")
    rng.shuffle(sites)
    free_pmus = {(site.row, site.col) for site in geometry.sites("pmu")}
    chosen = []
    for site in sites:
        if len(chosen) == len(paired):
            break
        near = [(site.row + dr, site.col + dc) for dr, dc in DIRECTIONS.values()]
        near = [pos for pos in near if pos in free_pmus]
        if near:
            pos = rng.choice(near)
            free_pmus.discard(pos)
            chosen.append((site, Site("pmu", *pos)))
    if len(chosen) < len(paired):
        return None
    for (compute, buffer), (pcu_site, pmu_site) in zip(paired, chosen, strict=True):
        placement.sites[compute] = pcu_site
        placement.sites[buffer] = pmu_site
    used = {site for site, _ in chosen}
    spare_pcus = [site for site in sites if site not in used]
    for node in kernel.nodes.values():
        if node.name in placement.sites:
            continue
        if isinstance(node, Compute):
            if not spare_pcus:
                return None
            placement.sites[node.name] = spare_pcus.pop(0)
        elif isinstance(node, Buffer):
            if not free_pmus:
                return None
            pos = rng.choice(sorted(free_pmus))
            free_pmus.discard(pos)
            placement.sites[node.name] = Site("pmu", *pos)
    for slot, kind in (("load", Load), ("store", Store)):
        names = [n.name for n in kernel.nodes.values() if isinstance(n, kind)]
        slots = [site for site in geometry.sites("agcu") if site.slot == slot]
        if len(names) > len(slots):
            return None
        rng.shuffle(slots)
        for name, site in zip(names, slots, strict=False):
            placement.sites[name] = site
    return placement


def _structure(kernel):
    """What routing depends on: nodes, units and the streams between ports."""
    streams = tuple((s.name, s.network, s.source.node, s.source.name,
                     tuple((p.node, p.name) for p in s.sinks),
                     tuple(i.source.node for i in getattr(s, "inputs", ())))
                    for s in kernel.streams)
    return tuple((n.name, n.unit) for n in kernel.nodes.values()), streams


_CACHE = {}


def search_placement(kernel, geometry, family):
    """A routable placement of ``kernel`` (seeded by ``family``, the geometry and the
    number of pairs), or None."""
    key = (geometry, family, _structure(kernel))
    if key not in _CACHE:
        paired = pairs(kernel)
        rng = random.Random(f"{family}-{geometry.rows}x{geometry.cols}-{len(paired)}")
        found = None
        for _ in range(PLACEMENT_TRIES):
            placement = _random_placement(geometry, kernel, paired, rng)
            if placement is None:
                continue
            try:
                route_kernel(kernel, geometry, placement, attempts=ROUTE_ATTEMPTS)
            except MappingError:
                continue
            found = placement
            break
        _CACHE[key] = found
    return _CACHE[key]


@register("place", "place the IR on units and route its streams (generic search)")
def place(state):
    kernel, geometry = state.kernel, state.geometry
    needed, capacity = kernel.units_needed(), geometry.capacity()
    short = [f"{needed[u]} {u.upper()}s (the array has {capacity[u]}, "
             f"{needed[u] - capacity[u]} short)" for u in ("pcu", "pmu")
             if needed[u] > capacity[u]]
    if short:
        raise PlacementError(f"{kernel.name} needs " + " and ".join(short))
    family = "gemm" if hasattr(state.groups[0], "epilogue") else "rows"
    placement = search_placement(kernel, geometry, family)
    if placement is None:
        raise PlacementError(f"{kernel.name}: no routable placement on the "
                             f"{geometry.rows}x{geometry.cols} array in {PLACEMENT_TRIES} "
                             f"tries")
    state.mapping = route_kernel(kernel, geometry, placement, attempts=ROUTE_ATTEMPTS)
    return "\n".join([state.mapping.report()] + [
        f"  {name} -> {site}" for name, site in placement.sites.items()])

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

Two routers (:data:`ROUTERS`, chosen for a block of compilations with :func:`routing`,
``rdu compile --router``): ``greedy`` (the default; :func:`rdu.mapper.route_kernel`,
streams one after the other with rip-up) and ``negotiated`` (:func:`rdu.negotiate.
negotiate`, every stream's links chosen together; it routes placements of large arrays
that the greedy router does not, docs/compiler.md).
"""

import contextlib
import contextvars
import math
import random

from ..ir import Buffer, Compute, Load, Store
from ..mapper import (
    DIRECTIONS,
    MappingError,
    Placement,
    Site,
    route_confined,
    route_kernel,
)
from ..negotiate import negotiate
from .core import CompileError, register

__all__ = ["PlacementError", "search_placement", "PLACEMENT_TRIES", "pairs", "ROUTERS",
           "routing", "route_placement"]

#: The routers a placement search can use.
ROUTERS = ("greedy", "negotiated")
_ROUTER = contextvars.ContextVar("rdu_router", default="greedy")


@contextlib.contextmanager
def routing(router):
    """Within the block, the ``place`` pass routes with ``router`` (:data:`ROUTERS`)."""
    if router not in ROUTERS:
        raise ValueError(f"router must be one of {', '.join(ROUTERS)}, not {router!r}")
    token = _ROUTER.set(router)
    try:
        yield
    finally:
        _ROUTER.reset(token)


def route_placement(kernel, geometry, placement, router="greedy"):
    """The :class:`rdu.mapper.Mapping` of ``placement`` routed by ``router``, or
    :class:`MappingError`."""
    if router == "greedy":
        return route_kernel(kernel, geometry, placement, attempts=ROUTE_ATTEMPTS)
    links = negotiate(kernel, geometry, placement)
    if links is None:
        raise MappingError(f"kernel {kernel.name!r}: negotiation left links shared")
    return route_confined(kernel, geometry, placement, links)

#: Random placements tried before giving up on a structure.
PLACEMENT_TRIES = 1500
#: Routing attempts (rip-up and retry) per placement.
ROUTE_ATTEMPTS = 40
#: Annealed placements tried for an attention chain.
ATTENTION_TRIES = 60


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
    # a compute node fed by several buffers gets them all next to its PCU
    wanted = {}
    for compute, buffer in paired:
        wanted.setdefault(compute, []).append(buffer)
    chosen = []
    computes = list(wanted)
    for site in sites:
        if len(chosen) == len(computes):
            break
        near = [(site.row + dr, site.col + dc) for dr, dc in DIRECTIONS.values()]
        near = [pos for pos in near if pos in free_pmus]
        count = len(wanted[computes[len(chosen)]])
        if len(near) >= count:
            picked = rng.sample(near, count)
            free_pmus.difference_update(picked)
            chosen.append((site, [Site("pmu", *pos) for pos in picked]))
    if len(chosen) < len(computes):
        return None
    for compute, (pcu_site, pmu_sites) in zip(computes, chosen, strict=True):
        placement.sites[compute] = pcu_site
        for buffer, pmu_site in zip(wanted[compute], pmu_sites, strict=True):
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
#: Annealing steps per start of :func:`_annealed_placement`.
ANNEAL_STEPS = 4000


def _links(kernel):
    """``[(source node, sink node)]`` of every stream (merged streams by their parts)."""
    out = []
    for stream in kernel.streams:
        for part in getattr(stream, "inputs", None) or [stream]:
            out += [(part.source.node, sink.node) for sink in stream.sinks]
    return out


def _wire_length(links, sites):
    total = 0
    for source, sink in links:
        a, b = sites[source], sites[sink]
        total += abs(a.row - b.row) + abs(a.col - b.col)
    return total


def _slot_kind(site):
    return site.unit if site.unit != "agcu" else f"agcu.{site.slot}"


def _annealed_placement(geometry, kernel, paired, rng):
    """A random placement improved by simulated annealing of the total Manhattan length
    of the streams (moves and swaps among sites of the same kind): long chains of
    units (attention) rarely route when placed at random."""
    placement = _random_placement(geometry, kernel, paired, rng)
    if placement is None:
        return None
    sites = placement.sites
    links = _links(kernel)
    kinds = {}
    for unit in ("pcu", "pmu", "agcu"):
        for site in geometry.sites(unit):
            kinds.setdefault(_slot_kind(site), []).append(site)
    names = sorted(sites)
    cost = _wire_length(links, sites)
    temperature = 2.0
    for step in range(ANNEAL_STEPS):
        name = rng.choice(names)
        target = rng.choice(kinds[_slot_kind(sites[name])])
        other = next((n for n, site in sites.items() if site == target), None)
        old = sites[name]
        sites[name] = target
        if other is not None:
            sites[other] = old
        new_cost = _wire_length(links, sites)
        if new_cost <= cost or rng.random() < math.exp((cost - new_cost) / temperature):
            cost = new_cost
        else:
            sites[name] = old
            if other is not None:
                sites[other] = target
        temperature = max(0.05, 2.0 * (1 - step / ANNEAL_STEPS))
    return placement


def search_placement(kernel, geometry, seed, anneal=False, router="greedy"):
    """A placement of ``kernel`` that ``router`` routes (seeded by ``seed``, its
    families' placement seed, the geometry and the number of pairs), or None. With
    ``anneal`` (families of long chains: attention, mlp) each random placement is
    annealed (:func:`_annealed_placement`) before it is routed."""
    key = (geometry, seed, anneal, router, _structure(kernel))
    if key not in _CACHE:
        paired = pairs(kernel)
        rng = random.Random(f"{seed}-{geometry.rows}x{geometry.cols}-{len(paired)}")
        found = None
        make = _annealed_placement if anneal else _random_placement
        for _ in range(ATTENTION_TRIES if anneal else PLACEMENT_TRIES):
            placement = make(geometry, kernel, paired, rng)
            if placement is None:
                continue
            try:
                route_placement(kernel, geometry, placement, router)
            except MappingError:
                continue
            found = placement
            break
        _CACHE[key] = found
    return _CACHE[key]


@register("place", "place the IR on units and route its streams (generic search)",
          reads=("kernel", "geometry", "groups"), writes=("mapping",))
def place(state):
    kernel, geometry = state.kernel, state.geometry
    needed, capacity = kernel.units_needed(), geometry.capacity()
    short = [f"{needed[u]} {u.upper()}s (the array has {capacity[u]}, "
             f"{needed[u] - capacity[u]} short)" for u in ("pcu", "pmu")
             if needed[u] > capacity[u]]
    if short:
        raise PlacementError(f"{kernel.name} needs " + " and ".join(short))
    seed = "+".join(group.family.placement_seed for group in state.groups)
    anneal = any(group.family.anneal for group in state.groups)
    router = _ROUTER.get()
    placement = search_placement(kernel, geometry, seed, anneal, router)
    if placement is None:
        raise PlacementError(f"{kernel.name}: no routable placement on the "
                             f"{geometry.rows}x{geometry.cols} array in "
                             f"{ATTENTION_TRIES if anneal else PLACEMENT_TRIES} tries"
                             + ("" if router == "greedy" else f" ({router} router)"))
    state.mapping = route_placement(kernel, geometry, placement, router)
    return "\n".join([state.mapping.report()] + [
        f"  {name} -> {site}" for name, site in placement.sites.items()])

"""Pass ``check``: refuse a routed kernel that would deadlock, before anything runs.

Two checks over the IR and its unit configurations:

* **balance**: every stream's producer emits exactly as many items as each of its
  consumers takes (counted from the access patterns and counter chains the units will
  run; a merge takes ``counts[i]`` items from input ``i`` per turn, so its inputs must
  give the same number of turns). A shortfall is a hang (a consumer waits for ever), an
  excess a hang of the producer or items left in the network;
* **acyclic**: the streams form no cycle (a cycle of units, each waiting for the next,
  cannot start with the empty FIFOs of a fresh configuration).
"""

import math

from ..affine import addresses
from ..ir import Buffer, Compute, Load, Store
from .core import CompileError, register

__all__ = ["produced", "consumed", "check_kernel"]

_EXACT_LIMIT = 1 << 22


def _beats(pattern):
    return math.prod(pattern.counts)


def _buffer_reads(config):
    read = config["read"]
    per_pass = _beats(read)
    if config.get("predicate") is not None:
        low, high = config["predicate"]        # on each beat's base address
        first, last = read.span()
        if low <= first and last < high:
            pass
        elif last < low or first >= high:
            per_pass = 0
        elif per_pass <= _EXACT_LIMIT:
            where = addresses(read.start, read.counts, read.strides)
            per_pass = int(((where >= low) & (where < high)).sum())
    return per_pass * max(1, config.get("read_repeat", 1)) * config["read_passes"]


def produced(kernel, stream, lanes):
    """Items ``stream`` carries over a run, counted from its producer's configuration."""
    if hasattr(stream, "inputs"):
        return sum(produced(kernel, part, lanes) for part in stream.inputs)
    node, port = kernel.nodes[stream.source.node], stream.source.name
    if port == "control_out":
        return 1 if isinstance(node, Load) else None
    if isinstance(node, Load):
        return _beats(node.pattern) * (2 if node.config.get("bf16") else 1)
    if isinstance(node, Buffer):
        return _buffer_reads(node.config)
    if isinstance(node, Compute):
        trips = node.config["trips"]
        if node.config["mode"] == "systolic":
            # a tile of ``group`` column (or row) blocks drains group * lanes rows
            group = node.config.get("group", 1)
            return trips[1] * trips[2] * lanes * group if port == "vector_out" else None
        # SIMD: one emit per iteration (emit_every), per iteration of counter 0 in the
        # last iteration of counter 1 (emit_outer), or per inner loop
        if node.config.get("emit_every"):
            return math.prod(trips)
        if node.config.get("emit_outer"):
            return trips[0] * trips[2]
        return trips[1] * trips[2]
    return None


def consumed(kernel, port):
    """Items the unit at ``port`` takes over a run."""
    node = kernel.nodes[port.node]
    if port.name == "control_in":
        return 1 if isinstance(node, Compute) else None
    if port.name == "scalar_in":
        trips = node.config["trips"]
        return trips[1] * trips[2]              # one word per inner loop
    if isinstance(node, Store):
        return _beats(node.pattern) * (2 if node.config.get("bf16") else 1)
    if isinstance(node, Buffer):
        return _beats(node.config["write"]) * node.config["read_passes"]
    if isinstance(node, Compute):
        if node.config["mode"] == "systolic":
            # ``group`` beats of B per k step (hdl.fp_latency.systolic_group), of A with
            # ``group_rows``
            grouped = "vector_in0" if node.config.get("group_rows") else "vector_in1"
            if port.name == grouped:
                return math.prod(node.config["trips"]) * node.config.get("group", 1)
        return math.prod(node.config["trips"])
    return None


def _turns(kernel, merge, lanes):
    turns = set()
    for part, count in zip(merge.inputs, merge.counts, strict=True):
        items = produced(kernel, part, lanes)
        if items is None:
            continue
        if items % count:
            raise CompileError(f"{kernel.name}: merge {merge.name} takes {count} items per "
                               f"turn from {part.source.node}, which emits {items}")
        turns.add(items // count)
    if len(turns) > 1:
        raise CompileError(f"{kernel.name}: merge {merge.name}: its inputs give "
                           f"{sorted(turns)} turns (they must all give the same)")


def _cycle(kernel):
    after = {name: set() for name in kernel.nodes}
    for stream in kernel.streams:
        for source in stream.sources:
            for sink in stream.sinks:
                after[source.node].add(sink.node)
    state = {}

    def visit(name, path):
        state[name] = 1
        for nxt in sorted(after[name]):
            if state.get(nxt) == 1:
                return path + [name, nxt]
            if nxt not in state:
                found = visit(nxt, path + [name])
                if found:
                    return found
        state[name] = 2
        return None
    for name in kernel.nodes:
        if name not in state:
            found = visit(name, [])
            if found:
                return found[found.index(found[-1]):]
    return None


def check_kernel(kernel, lanes):
    """Raise :class:`CompileError` on an unbalanced stream or a cycle; return the number
    of items each stream carries."""
    cycle = _cycle(kernel)
    if cycle:
        raise CompileError(f"{kernel.name}: the streams form a cycle "
                           f"{' -> '.join(cycle)}: it cannot start")
    carried = {}
    for stream in kernel.streams:
        if hasattr(stream, "inputs"):
            _turns(kernel, stream, lanes)
        items = produced(kernel, stream, lanes)
        carried[stream.name] = items
        if items is None:
            continue
        for sink in stream.sinks:
            wanted = consumed(kernel, sink)
            if wanted is not None and wanted != items:
                effect = "waits for ever" if wanted > items else "leaves items behind"
                raise CompileError(f"{kernel.name}: stream {stream.name} carries {items} "
                                   f"items but {sink.node}.{sink.name} takes {wanted}: the "
                                   f"kernel would hang ({sink.node} {effect})")
    return carried


@register("check", "refuse unbalanced streams and cycles (a deadlock check)",
          reads=("kernel", "geometry", "blocks"), writes=())
def check(state):
    carried = check_kernel(state.kernel, state.geometry.lanes)
    return "\n".join(f"  {name}: {items} items" for name, items in carried.items())

"""Pass ``bind``: fix the values that depend on the routing (row blocks).

A store writes the results of several PCUs merged by the switches; the merged stream's
order of producers (:attr:`rdu.mapper.Route.order`, decided by where the routes join)
is the order of their row blocks in the output. This pass numbers the row blocks store
by store in that order and resolves every :class:`rdu.ir.BlockOffset` in the node
configurations and patterns: a node's ``block_of`` names the producer (or the merge,
meaning its first producer) whose block it uses.
"""

from dataclasses import replace

from ..ir import AccessPattern, BlockOffset
from .core import CompileError, register

__all__ = ["row_blocks", "resolve"]


def row_blocks(kernel, mapping):
    """``({producer: block}, {merge stream name: first producer})``."""
    route_by_stream = {route.stream: route for route in mapping.routes}
    blocks, first = {}, {}
    for group in kernel.row_groups:
        merge = next((s for s in kernel.streams if hasattr(s, "inputs") and
                      [i.source.node for i in s.inputs] == group), None)
        if merge is not None:
            order = [merge.inputs[i].source.node for i in route_by_stream[merge.name].order]
            first[merge.name] = order[0]
        else:
            order = list(group)
        for producer in order:
            blocks[producer] = len(blocks)
    return blocks, first


def resolve(value, block):
    """``value`` with every :class:`BlockOffset` in it resolved for ``block``."""
    if isinstance(value, BlockOffset):
        return value.resolve(block)
    if isinstance(value, AccessPattern):
        return replace(value, start=resolve(value.start, block))
    if isinstance(value, dict):
        return {key: resolve(item, block) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(resolve(item, block) for item in value)
    return value


def _has_offset(value):
    if isinstance(value, BlockOffset):
        return True
    if isinstance(value, AccessPattern):
        return isinstance(value.start, BlockOffset)
    if isinstance(value, dict):
        return any(_has_offset(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_offset(item) for item in value)
    return False


@register("bind", "number the row blocks in merge order and resolve block offsets",
          reads=("kernel", "mapping"), writes=("blocks",))
def bind(state):
    kernel = state.kernel
    blocks, first = row_blocks(kernel, state.mapping)
    for node in kernel.nodes.values():
        if node.block_of is None:
            if _has_offset(node.config) or _has_offset(getattr(node, "pattern", None)):
                raise CompileError(f"{kernel.name}: node {node.name} has block offsets but "
                                   f"no block_of")
            continue
        producer = first.get(node.block_of, node.block_of)
        if producer not in blocks:
            raise CompileError(f"{kernel.name}: node {node.name} takes the row block of "
                               f"{node.block_of}, which no store writes")
        block = blocks[producer]
        node.config = resolve(node.config, block)
        if getattr(node, "pattern", None) is not None:
            node.pattern = resolve(node.pattern, block)
    state.blocks = blocks
    return "\n".join(f"  {producer}: row block {block}" for producer, block in blocks.items())

"""Pass ``fuse``: group the front-end graph into the work of configurations.

Two steps, as in ``docs/compiler.md``: (1) decide what is materialised (the graph's
inputs and outputs: tensors in HBM or DDR; nothing else leaves the array), (2) match the
operators between them against the fusion rules of the kernel families
(:data:`rdu.compiler.families.FAMILIES`, tried in order: the first family that claims
an output's graph fuses it into a group, or refuses it with the user's line). A graph of
several outputs fuses each output's operators on their own: one group per output.
"""

from .core import CompileError, register
from .families import FAMILIES

__all__ = ["fuse", "family_for"]


def family_for(graph):
    """The first registered family that claims ``graph``."""
    return next(family for family in FAMILIES if family.claims(graph))


@register("fuse", "group the operators between inputs and outputs into configurations",
          reads=("graph",), writes=("groups",))
def fuse(state):
    graph = state.graph
    if not graph.outputs:
        raise CompileError(f"kernel {graph.name!r} has no outputs (Graph.output)")
    if len(graph.outputs) == 1:
        parts = [(graph, *next(iter(graph.outputs.items())))]
    else:
        parts = []
        for name, out in graph.outputs.items():
            part = graph.extract(graph.name, {}, {name: out})
            parts.append((part, name, part.outputs[name]))
    groups = [family_for(part).fuse(part, name, out) for part, name, out in parts]
    if any(memory != "hbm" for memory in graph.memory.values()):
        raise CompileError(f"kernel {graph.name!r}: fused kernels stream from and to HBM; "
                           f"stage DDR tensors into HBM first (AGCU copy)")
    state.groups = groups
    return "\n".join(group.describe() for group in state.groups)

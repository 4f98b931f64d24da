"""Pass ``tile``: choose the tiles of each group for the array and the PMU size, by
the group's family (:meth:`rdu.compiler.families.base.Family.tile`; the matmul tiling
is described in :mod:`rdu.compiler.families.matmul`).

A shape that cannot fit raises :class:`~rdu.compiler.core.CompileError` naming the
resource and by how much.
"""

from .core import register

__all__ = ["tile"]


@register("tile", "choose tiles for the array and the PMU size",
          reads=("geometry", "machine", "max_pcus", "groups"), writes=("tilings",))
def tile(state):
    state.tilings = [group.family.tile(group, state) for group in state.groups]
    return "\n".join(tiling.describe() for tiling in state.tilings)

"""The kernel families, one module each (:mod:`rdu.compiler.families.base` is their
interface). :data:`FAMILIES` is the registry: ``fuse`` gives an output's graph to the
first family that claims it, so a family whose rule is more specific comes before a
more general one (``rows`` is last: it takes what no other family claims).
"""

from .attention import ATTENTION
from .base import Family
from .matmul import MATMUL
from .mlp import MLP
from .rows import ROWS
from .scale_shift import SCALE_SHIFT

__all__ = ["FAMILIES", "Family", "family_named", "program_work"]

#: Every kernel family, in the order their fusion rules are tried.
FAMILIES: tuple[Family, ...] = (
    ATTENTION,
    MLP,
    MATMUL,
    SCALE_SHIFT,
    ROWS,
)


def family_named(name):
    """The registered family ``name`` (what a program's ``meta["group"]`` records)."""
    for family in FAMILIES:
        if family.name == name:
            return family
    raise KeyError(f"no kernel family {name!r} (families: "
                   f"{', '.join(f.name for f in FAMILIES)})")


def program_work(program):
    """The :class:`~rdu.roofline.Work` of ``program``: its family's
    (:meth:`Family.work`, the family ``meta["group"]`` names)."""
    return family_named(program.meta["group"]).work(program)

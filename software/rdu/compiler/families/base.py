"""The interface of a kernel family: one object per family owns its fusion rule, its
tiling, its lowering, its placement hints, the program metadata it records and its
reference (``docs/compiler.md``, "Adding a kernel family").

The passes dispatch on a group's family (:attr:`rdu.compiler.group.Group.family`),
never on a name: ``fuse`` asks each registered family
(:data:`rdu.compiler.families.FAMILIES`, in order) whether it :meth:`~Family.claims` an
output's graph and lets the first that does :meth:`~Family.fuse` it into a group;
``tile``, ``lower``, ``place`` and ``emit`` call the group's family.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ...frontend.graph import DTYPE_BYTES
from ...ir import Kernel
from ...roofline import Work
from ..core import Compilation, CompileError
from ..group import Group, Lowered, Tiling

if TYPE_CHECKING:
    from ...frontend.graph import Graph, Node
    from ...program import Program

__all__ = ["Family", "pcu_programs", "unsupported", "is_bf16_input", "tensor_shape",
           "moved_work"]


class Family:
    """A kernel family. Subclasses set :attr:`name` (what the program's ``meta["group"]``
    records), the placement hints, and implement the methods below."""
    #: The family's name (program metadata; ``docs/compiler.md``).
    name: ClassVar[str] = ""
    #: What seeds the placement search (one mapping per kernel structure and seed).
    placement_seed: ClassVar[str] = ""
    #: Long chains of units: anneal each random placement before routing it.
    anneal: ClassVar[bool] = False
    #: A registered kernel (:data:`rdu.frontend.kernels.KERNELS`) of this family and a shape of
    #: it: its example (``tests/test_families.py`` compiles each into this family; None:
    #: no kernel registered).
    benchmark: ClassVar[tuple[str, dict] | None] = None

    def claims(self, graph: Graph) -> bool:
        """Whether this family's fusion rule is the one for ``graph`` (one output)."""
        raise NotImplementedError

    def fuse(self, graph: Graph, name: str, out: Node) -> Group:
        """The group of output ``name`` (node ``out``), or a one-line
        :class:`~rdu.compiler.core.CompileError` at the user's line."""
        raise NotImplementedError

    def tile(self, group: Group, state: Compilation) -> Tiling:
        """The tiling of ``group`` for the state's machine (``state.max_pcus``)."""
        raise NotImplementedError

    def fewer_pcus(self, tiling: Tiling) -> int | None:
        """The ``max_pcus`` to tile again with when no placement routes, or None when
        this family cannot use fewer PCUs."""
        return None

    def kernel_name(self, graph_name: str, group: Group, tiling: Tiling) -> str:
        """The IR kernel's (and the program's) name."""
        raise NotImplementedError

    def lower(self, name: str, group: Group, tiling: Tiling,
              state: Compilation) -> Lowered:
        """The IR of ``group`` with its images placed in HBM."""
        raise NotImplementedError

    def meta(self, group: Group, tiling: Tiling, kernel: Kernel) -> dict:
        """The family's facts in the program's manifest (``meta``)."""
        raise NotImplementedError

    def exact(self, program: Program, graph: Graph) -> dict[str, np.ndarray]:
        """``{output: uint32 words}``: the hardware's arithmetic on the program's
        packed inputs, bit for bit (:mod:`rdu.models.reference`)."""
        raise NotImplementedError

    def work(self, program: Program) -> Work:
        """What ``program`` (of this family) must do at least, from its manifest: the
        MACs of its operators as written and the HBM bytes of reading each input and
        writing each output once in its stored dtype (:mod:`rdu.roofline`;
        :func:`moved_work` counts the bytes)."""
        raise NotImplementedError


def pcu_programs(kernel: Kernel) -> dict:
    """``{node: config}`` of the kernel's PCUs (the manifest's ``pcu_programs``)."""
    return {name: node.config for name, node in kernel.nodes.items() if node.unit == "pcu"}


def unsupported(node: Node, why: str) -> CompileError:
    """A fusion rule's refusal at the user's line of ``node``."""
    return CompileError(f"{node.where}: {why}")


def is_bf16_input(node: Node) -> bool:
    """Whether ``node`` is a graph input in BF16 (what the loads stream)."""
    return node.op == "input" and node.dtype == "bf16"


def tensor_shape(program: Program, name: str) -> tuple:
    """The shape of tensor ``name`` in ``program``'s manifest (the user's, unpadded)."""
    return tuple(program.tensors[name]["shape"])


def moved_work(program: Program, inputs, macs: int = 0) -> Work:
    """:class:`~rdu.roofline.Work` of ``macs`` and the HBM bytes of reading each tensor of
    ``inputs`` once and writing each of the program's outputs once, at their manifest
    shapes in their stored dtype (:data:`rdu.frontend.graph.DTYPE_BYTES`)."""
    names = [name for name in inputs if name is not None] + list(program.outputs)
    moved = sum(math.prod(tensor_shape(program, name))
                * DTYPE_BYTES[program.tensors[name]["dtype"]] for name in names)
    return Work(macs=macs, hbm_bytes=moved)

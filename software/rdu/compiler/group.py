"""What a kernel family's passes hand each other: a fused :class:`Group`, its
:class:`Tiling`, its :class:`Lowered` IR (the families' interface:
:mod:`rdu.compiler.families.base`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Protocol

from ..ir import Kernel
from ..layout import Image

__all__ = ["Group", "Tiling", "Lowered"]


class Tiling(Protocol):
    """What a family's ``tile`` returns: its choice of tiles (any frozen dataclass with
    a one-line description)."""

    def describe(self) -> str: ...


class Group:
    """One fused configuration's work, built by its family's fusion rule; ``output``
    names the graph output it computes, ``family`` (a class attribute each family
    module sets) is its :class:`~rdu.compiler.families.base.Family`, what the passes
    dispatch on."""
    family: ClassVar
    output: str

    def describe(self) -> str:
        raise NotImplementedError


@dataclass
class Lowered:
    """What a family's lowering produces: the IR and where its images go."""
    kernel: Kernel
    images: dict[str, Image]
    addresses: dict[str, int]
    bitstream_address: int

"""The pass manager: passes register here with what they read and write; a pipeline
runs a selection of them over one compilation.

A pass is a function of the :class:`Compilation` state, registered with a name, a
one-line description and the :class:`Compilation` fields it reads and writes
(:func:`register`). It fills its part of the state and may return a text dump of what
it produced (``rdu compile --dump-after PASS``). Passes run in pipeline order
(:data:`rdu.compiler.PIPELINE`); each is timed. :func:`select_passes` checks a
selection (``rdu compile --passes/--skip``): every field a pass reads is given by the
caller (:data:`GIVEN`) or written by a pass before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .group import Group, Tiling

if TYPE_CHECKING:
    from ..frontend.graph import Graph
    from ..ir import Kernel
    from ..layout import Image
    from ..machine import Machine
    from ..mapper import ArrayGeometry, Mapping
    from ..program import Program

__all__ = ["CompileError", "PassSelectionError", "Pass", "PASSES", "register",
           "Compilation", "ImagePlan", "GIVEN", "select_passes"]


class CompileError(ValueError):
    """A kernel the compiler cannot compile for this machine: one line that says what
    and where (a user line, or the resource that ran out and by how much)."""


class PassSelectionError(CompileError):
    """A selection of passes that cannot run (an unknown pass, or a pass that reads what
    no pass before it writes)."""


@dataclass(frozen=True)
class Pass:
    """A registered pass: ``run(state)`` reads the :class:`Compilation` fields ``reads``
    and fills ``writes``."""
    name: str
    description: str
    run: Callable[[Compilation], str | None]
    reads: tuple[str, ...]
    writes: tuple[str, ...]


#: Every registered pass by name.
PASSES: dict[str, Pass] = {}


def register(name, description, *, reads, writes):
    """Decorator: register ``function(state)`` as the pass ``name``, reading and writing
    the named :class:`Compilation` fields."""
    def wrap(function):
        for what in (*reads, *writes):
            if what not in Compilation.__dataclass_fields__:
                raise TypeError(f"pass {name}: {what!r} is not a Compilation field")
        PASSES[name] = Pass(name, description, function, tuple(reads), tuple(writes))
        return function
    return wrap


@dataclass(frozen=True)
class ImagePlan:
    """What a caller fixes about a program's memory images (a kernel of a sequence whose
    intermediates pass through HBM, :mod:`rdu.apps.unfused`).

    ``start``: the first byte the program's own images and bitstream may use (default
    the HBM base); ``addresses``: ``{image: byte address}`` of images another program
    of the sequence writes or reads; ``layouts``: ``{image: rdu.layout.Image}`` whose
    geometry (shape, tiling, format) the image must have, so that the program reads
    what its producer wrote, or writes what its consumer reads.

    ``positions``: ``{image: (stride, entries)}`` of *positioned* images: the image is
    entry ``position`` of a table of ``entries`` images ``stride`` bytes apart (a
    positive multiple of the AXI beat; under the image's size, entries overlap: a table
    of rows read ``rows`` at a time from row ``position``) from its address, which
    ``addresses`` must fix (the caller reserves the table). Every load and store of it
    moves by the launch's position (``docs/agcu.md``, **Positioned patterns**), e.g. the
    row of a KV cache a decode step appends or the rotary table's row of its token."""
    start: int = None
    addresses: dict = field(default_factory=dict)
    layouts: dict = field(default_factory=dict)
    positions: dict = field(default_factory=dict)

    def layout(self, image):
        return self.layouts.get(image)


#: The :class:`Compilation` fields the caller gives (no pass writes them).
GIVEN = ("graph", "machine", "geometry", "kernel_name", "params", "max_pcus", "plan")


@dataclass
class Compilation:
    """What the passes know about one kernel being compiled (each pass's reads and
    writes: :data:`PASSES`)."""
    graph: Graph
    machine: Machine
    geometry: ArrayGeometry
    kernel_name: str = ""           # the registered kernel (rdu.frontend.kernels) it came from
    params: dict = field(default_factory=dict)      # its shape parameters
    max_pcus: int | None = None     # the tile pass uses at most this many matmul PCUs
    plan: ImagePlan | None = None   # where images go and the layouts asked for
    groups: list[Group] | None = None           # fuse: one per fused configuration
    tilings: list[Tiling] | None = None         # tile: one per group
    kernel: Kernel | None = None                # lower: the IR of the configuration
    layouts: dict[str, Image] | None = None     # lower: image name -> its layout
    addresses: dict[str, int] | None = None     # lower: image name -> HBM byte address
    bitstream_address: int | None = None        # lower
    mapping: Mapping | None = None              # place
    blocks: dict[str, int] | None = None        # bind: producer node -> row block
    bitstream: list[int] | None = None          # encode
    program: Program | None = None              # emit
    dumps: dict[str, str] = field(default_factory=dict)         # pass -> text
    seconds: dict[str, float] = field(default_factory=dict)     # pass -> wall seconds

    def run(self, name):
        start = time.perf_counter()
        dump = PASSES[name].run(self)
        self.seconds[name] = time.perf_counter() - start
        if dump:
            self.dumps[name] = dump
        return self


def select_passes(pipeline, passes=None, skip=()):
    """The passes of ``pipeline`` to run: ``passes`` (names, in pipeline order; default
    all) without those in ``skip``. Raises :class:`PassSelectionError` (one line) for an
    unknown pass, passes out of order, or a pass that reads a field no pass before it
    in the selection writes."""
    for name in (*(passes or ()), *skip):
        if name not in pipeline:
            raise PassSelectionError(f"unknown pass {name!r} (passes: "
                                     f"{', '.join(pipeline)})")
    chosen = list(passes) if passes else list(pipeline)
    order = [pipeline.index(name) for name in chosen]
    if order != sorted(set(order)):
        raise PassSelectionError(f"passes run once each in pipeline order: "
                                 f"{', '.join(pipeline)} (got {', '.join(chosen)})")
    chosen = [name for name in chosen if name not in skip]
    written = set(GIVEN)
    for name in chosen:
        missing = [what for what in PASSES[name].reads if what not in written]
        if missing:
            writers = [other for other in pipeline[:pipeline.index(name)]
                       if set(PASSES[other].writes) & set(missing)]
            raise PassSelectionError(
                f"pass {name!r} reads {', '.join(missing)}, written by "
                f"{', '.join(writers)}, which {'does' if len(writers) == 1 else 'do'} "
                f"not run before it")
        written.update(PASSES[name].writes)
    return tuple(chosen)

"""The pass manager: passes register here; a pipeline runs them over one compilation.

A pass is a function of the :class:`Compilation` state, registered with a name and a
one-line description (:func:`register`). It fills its part of the state and may return
a text dump of what it produced (``rdu compile --dump-after PASS``). Passes run in
:data:`PIPELINE` order; each is timed.
"""

import time
from dataclasses import dataclass, field

__all__ = ["CompileError", "Pass", "PASSES", "register", "Compilation", "ImagePlan"]


class CompileError(ValueError):
    """A kernel the compiler cannot compile for this machine: one line that says what
    and where (a user line, or the resource that ran out and by how much)."""


@dataclass(frozen=True)
class Pass:
    name: str
    description: str
    run: object


#: Every registered pass by name.
PASSES = {}


def register(name, description):
    """Decorator: register ``function(state)`` as the pass ``name``."""
    def wrap(function):
        PASSES[name] = Pass(name, description, function)
        return function
    return wrap


@dataclass(frozen=True)
class ImagePlan:
    """What a caller fixes about a program's memory images (a kernel of a sequence whose
    intermediates pass through HBM, :mod:`rdu.unfused`).

    ``start``: the first byte the program's own images and bitstream may use (default
    the HBM base); ``addresses``: ``{image: byte address}`` of images another program
    of the sequence writes or reads; ``layouts``: ``{image: rdu.layout.Image}`` whose
    geometry (shape, tiling, format) the image must have, so that the program reads
    what its producer wrote, or writes what its consumer reads."""
    start: int = None
    addresses: dict = field(default_factory=dict)
    layouts: dict = field(default_factory=dict)

    def layout(self, image):
        return self.layouts.get(image)


@dataclass
class Compilation:
    """What the passes know about one kernel being compiled."""
    graph: object                   # rdu.frontend.Graph
    machine: object                 # rdu.machine.Machine
    geometry: object                # rdu.mapper.ArrayGeometry
    kernel_name: str = ""           # the registered kernel (rdu.kernels) it came from
    params: dict = field(default_factory=dict)      # its shape parameters
    max_pcus: int = None            # the tile pass uses at most this many matmul PCUs
    plan: object = None             # ImagePlan: where images go and the layouts asked for
    groups: list = None             # fuse
    tiling: object = None           # tile
    kernel: object = None           # lower: rdu.ir.Kernel
    layouts: dict = None            # lower: tensor name -> rdu.layout.Image
    addresses: dict = None          # lower: image name -> HBM byte address
    bitstream_address: int = None   # lower
    mapping: object = None          # place: rdu.mapper.Mapping
    blocks: dict = None             # bind: producer node -> row block
    bitstream: list = None          # encode
    program: object = None          # emit
    dumps: dict = field(default_factory=dict)       # pass -> text
    seconds: dict = field(default_factory=dict)     # pass -> wall seconds

    def run(self, name):
        start = time.perf_counter()
        dump = PASSES[name].run(self)
        self.seconds[name] = time.perf_counter() - start
        if dump:
            self.dumps[name] = dump
        return self

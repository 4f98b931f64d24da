"""The pass manager: passes register here; a pipeline runs them over one compilation.

A pass is a function of the :class:`Compilation` state, registered with a name and a
one-line description (:func:`register`). It fills its part of the state and may return
a text dump of what it produced (``rdu compile --dump-after PASS``). Passes run in
:data:`PIPELINE` order; each is timed.
"""

import time
from dataclasses import dataclass, field

__all__ = ["CompileError", "Pass", "PASSES", "register", "Compilation"]


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


@dataclass
class Compilation:
    """What the passes know about one kernel being compiled."""
    graph: object                   # rdu.frontend.Graph
    machine: object                 # rdu.machine.Machine
    geometry: object                # rdu.mapper.ArrayGeometry
    kernel_name: str = ""           # the registered kernel (rdu.kernels) it came from
    params: dict = field(default_factory=dict)      # its shape parameters
    max_pcus: int = None            # the tile pass uses at most this many matmul PCUs
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

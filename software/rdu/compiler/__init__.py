"""The compiler: a front-end graph (:mod:`rdu.frontend`) -> a :class:`rdu.program.Program`.

Passes, one per module, registered by name (:mod:`rdu.compiler.core`), run in
:data:`PIPELINE` order (``docs/compiler.md`` walks one kernel through all of them):

========  ===========================================================================
fuse      group the operators between inputs and outputs into configurations
tile      choose tiles for the array and the PMU size
lower     tiled operators -> IR nodes, streams and unit configurations
place     place the IR on units and route its streams (generic search)
bind      number the row blocks in merge order and resolve block offsets
check     refuse unbalanced streams and cycles (a deadlock check)
encode    unit configurations -> configuration words -> bitstream
emit      bitstream, tensor images and manifest -> Program
========  ===========================================================================

When no placement routes, ``tile``, ``lower`` and ``place`` run again with one
systolic PCU fewer.
"""

from ..machine import Machine
from ..mapper import ArrayGeometry, MappingError
from . import bind, check, emit, encode, fuse, lower, place, tile  # noqa: F401 (register)
from .core import PASSES, Compilation, CompileError
from .place import PlacementError

__all__ = ["compile_graph", "CompileError", "PIPELINE", "PASSES", "machine_geometry"]

PIPELINE = ("fuse", "tile", "lower", "place", "bind", "check", "encode", "emit")
WORD = 4


def machine_geometry(machine=None, geometry=None, *, stages=4, agcus=2):
    """``(machine, geometry)``: the mapper's :class:`ArrayGeometry` of a
    :class:`Machine`, or a Machine for a geometry (with ``stages`` and ``agcus``)."""
    if machine is None:
        geometry = geometry or ArrayGeometry()
        machine = Machine(geometry.rows, geometry.cols, geometry.lanes, stages=stages,
                          pmu_bytes=geometry.pmu_words * WORD, agcus=agcus,
                          agcu_positions=tuple(tuple(p) for p in geometry.agcu_rows[:agcus]))
    elif geometry is None:
        geometry = ArrayGeometry(machine.rows, machine.cols, machine.lanes,
                                 pmu_words=machine.pmu_bytes // WORD,
                                 agcu_rows=tuple(machine.positions()))
    return machine, geometry


def compile_graph(graph, machine=None, *, geometry=None, kernel="", params=None,
                  state=None, plan=None):
    """Compile ``graph`` for ``machine``; return the :class:`~rdu.program.Program`.

    ``kernel`` and ``params`` name the registered kernel and its shape (recorded in the
    program so ``rdu run FILE`` can rebuild its reference). Pass a ``state`` list to get
    the :class:`Compilation` (its ``dumps`` and ``seconds`` per pass); ``plan``: an
    :class:`~rdu.compiler.core.ImagePlan` (addresses and layouts fixed by the caller).
    """
    machine, geometry = machine_geometry(machine, geometry)
    if not machine.compute:
        raise CompileError(f"kernel {graph.name!r} needs PCUs: this machine has PMUs only")
    compilation = Compilation(graph, machine, geometry, kernel_name=kernel or graph.name,
                              params=dict(params or {}), plan=plan)
    if state is not None:
        state.append(compilation)
    try:
        compilation.run("fuse")
        while True:
            compilation.run("tile").run("lower")
            try:
                compilation.run("place")
                break
            except PlacementError:
                if getattr(compilation.tiling, "pcus", 1) == 1:
                    raise
                compilation.max_pcus = compilation.tiling.pcus - 1
        for name in PIPELINE[PIPELINE.index("bind"):]:
            compilation.run(name)
    except MappingError as error:
        raise CompileError(str(error)) from None
    return compilation.program

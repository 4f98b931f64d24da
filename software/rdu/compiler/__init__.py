"""The compiler: a front-end graph (:mod:`rdu.frontend`) -> a :class:`rdu.program.Program`.

Passes, one per module, registered by name with the :class:`Compilation` fields they
read and write (:mod:`rdu.compiler.core`), run in :data:`PIPELINE` order
(``docs/compiler.md`` walks one kernel through all of them). Each group of the graph is
tiled and lowered by its kernel family (:mod:`rdu.compiler.families`). This table is
:func:`pass_table` (a test checks it)::

    fuse    group the operators between inputs and outputs into configurations
            (reads graph; writes groups)
    tile    choose tiles for the array and the PMU size
            (reads geometry, machine, max_pcus, groups; writes tilings)
    lower   tiled operators -> IR nodes, streams and unit configurations
            (reads graph, machine, plan, groups, tilings; writes kernel, layouts, addresses,
             bitstream_address)
    place   place the IR on units and route its streams (generic search)
            (reads kernel, geometry, groups; writes mapping)
    bind    number the row blocks in merge order and resolve block offsets
            (reads kernel, mapping; writes blocks)
    check   refuse unbalanced streams and cycles (a deadlock check)
            (reads kernel, geometry, blocks; writes nothing)
    encode  unit configurations -> configuration words -> bitstream
            (reads kernel, mapping, machine, blocks; writes bitstream)
    emit    bitstream, tensor images and manifest -> Program
            (reads graph, machine, geometry, kernel_name, params, groups, tilings, kernel,
             layouts, addresses, bitstream_address, mapping, blocks, bitstream; writes
             program)

When no placement routes, the passes from the first that reads ``max_pcus`` (``tile``)
run again with one systolic PCU fewer (:meth:`~rdu.compiler.families.base.Family.
fewer_pcus`).
"""

import contextlib
import contextvars
import textwrap
import time

from hdl import defaults

from ..machine import Machine
from ..mapper import ArrayGeometry, MappingError
from . import bind, check, emit, encode, fuse, lower, place, tile  # noqa: F401 (register)
from .core import PASSES, Compilation, CompileError, PassSelectionError, select_passes
from .lower import WORD
from .place import PlacementError

__all__ = ["compile_graph", "reporting_progress", "CompileError", "PassSelectionError",
           "PIPELINE", "PASSES", "machine_geometry", "pass_table", "run_passes"]

#: The passes in the order they run.
PIPELINE = ("fuse", "tile", "lower", "place", "bind", "check", "encode", "emit")


def pass_table():
    """The passes of :data:`PIPELINE`, what each does, reads and writes, as text (the
    module docstring's table)."""
    lines = []
    for name in PIPELINE:
        step = PASSES[name]
        lines.append(f"{name:<8}{step.description}")
        lines += textwrap.wrap(f"(reads {', '.join(step.reads)}; writes "
                               f"{', '.join(step.writes) or 'nothing'})", 88,
                               initial_indent=" " * 8, subsequent_indent=" " * 9)
    return "\n".join(lines)


def machine_geometry(machine=None, geometry=None, *, stages=defaults.STAGES,
                     agcus=defaults.AGCUS):
    """``(machine, geometry)``: the mapper's :class:`ArrayGeometry` of a
    :class:`Machine` (:meth:`Machine.array_geometry`), or a Machine for a geometry (with
    ``stages`` and ``agcus``)."""
    if machine is None:
        geometry = geometry or ArrayGeometry()
        machine = Machine(geometry.rows, geometry.cols, geometry.lanes, stages=stages,
                          pmu_bytes=geometry.pmu_words * WORD, agcus=agcus,
                          agcu_positions=tuple(tuple(p) for p in geometry.agcu_rows[:agcus]))
    elif geometry is None:
        geometry = machine.array_geometry()
    return machine, geometry


#: Where the compiler says what takes long (a callable of one line), or None.
_PROGRESS = contextvars.ContextVar("rdu_compiler_progress", default=None)


@contextlib.contextmanager
def reporting_progress(say):
    """Within the block, compilations report what takes long to ``say`` (a callable of
    one line: each PCU count of a matmul for which ``place`` found no routable
    placement, with the time it took). ``say`` None: silence."""
    token = _PROGRESS.set(say)
    try:
        yield
    finally:
        _PROGRESS.reset(token)


def run_passes(compilation, names):
    """Run the passes ``names`` (a :func:`~rdu.compiler.core.select_passes` selection)
    in order. When ``place`` finds no routable placement and a group's family can use
    fewer PCUs, the passes from the first that reads ``max_pcus`` run again."""
    retry = next((i for i, name in enumerate(names) if "max_pcus" in PASSES[name].reads),
                 None)
    index = 0
    while index < len(names):
        start = time.perf_counter()
        try:
            compilation.run(names[index])
        except PlacementError as error:
            fewer = [pcus for group, tiling in zip(compilation.groups, compilation.tilings,
                                                   strict=True)
                     if (pcus := group.family.fewer_pcus(tiling)) is not None]
            if retry is None or retry > index or not fewer:
                raise
            if (say := _PROGRESS.get()) is not None:
                say(f"{error} ({time.perf_counter() - start:.1f} s); tiling again with at "
                    f"most {max(fewer)} systolic PCUs")
            compilation.max_pcus = max(fewer)
            index = retry
            continue
        index += 1
    return compilation


def compile_graph(graph, machine=None, *, geometry=None, kernel="", params=None,
                  state=None, plan=None, passes=None, skip=(), max_pcus=None):
    """Compile ``graph`` for ``machine``; return the :class:`~rdu.program.Program`.

    ``kernel`` and ``params`` name the registered kernel and its shape (recorded in the
    program so ``rdu run FILE`` can rebuild its reference). Pass a ``state`` list to get
    the :class:`Compilation` (its ``dumps`` and ``seconds`` per pass); ``plan``: an
    :class:`~rdu.compiler.core.ImagePlan` (addresses and layouts fixed by the caller).
    ``passes`` (names in pipeline order) and ``skip`` select the passes to run
    (:func:`~rdu.compiler.core.select_passes`); a selection without ``emit`` returns
    None (the state has what ran). ``max_pcus``: a matmul uses at most this many
    systolic PCUs (a producer whose result must be whole tiles of ``lanes`` rows).
    """
    names = select_passes(PIPELINE, passes, skip)
    machine, geometry = machine_geometry(machine, geometry)
    if not machine.compute:
        raise CompileError(f"kernel {graph.name!r} needs PCUs: this machine has PMUs only")
    compilation = Compilation(graph, machine, geometry, kernel_name=kernel or graph.name,
                              params=dict(params or {}), plan=plan, max_pcus=max_pcus)
    if state is not None:
        state.append(compilation)
    try:
        run_passes(compilation, names)
    except MappingError as error:
        raise CompileError(str(error)) from None
    return compilation.program

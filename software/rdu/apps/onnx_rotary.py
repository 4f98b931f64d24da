"""Rotary's second product read from the first (``docs/onnx.md``, "Rotary embeddings").

The importer writes rotary as two products of the same ``x``, ``p1 = x @ W`` and ``p2 = x
@ (W R)``, ``R`` the signed permutation of ``rotate_half`` on every head
(:mod:`rdu.onnx.rotary`: the rotated weight's input carries ``rotation_of`` and
``rotation_block``). ``p2`` is ``p1`` with the halves of each head swapped and the
first half negated, so it need not stream ``W R`` from HBM a second time: one row group
(a ``PASS``) reads ``p1`` with its halves in the other order, a *strided* image
(:class:`rdu.layout.Image`: a negative stride between the halves), and writes them where
the second product wrote them, leaving the rows past the head's dimensions (a mask's
constants, multiplied by a table of zeros) as the memory holds them: zeros. The sign
goes into the second table (:func:`half_signs`), so ``p2 * t2`` keeps its words
(``(-a) b = a (-b)``, and the product of the negated weight is the negated product).

The views read are rows of ``2 lanes`` FP32 values: ``outer`` blocks of ``pitch`` rows,
the first ``2 half`` of each the head's dimensions (Q and K kept transposed: a block a
head, a row two dimensions; K of a decode step: a block a key, a row ``2 lanes``
dimensions).
"""

import numpy as np

from ..compiler import compile_graph
from ..compiler.core import CompileError, ImagePlan
from ..frontend.graph import Graph
from ..layout import Image
from ..onnx import KERNEL_NAME
from .unfused import Stage

__all__ = ["reads_rotated", "half_signs", "rotated_copy", "result_of"]


def reads_rotated(parts, block, row=2, pitch=None):
    """Whether ``p2`` is read from ``p1`` (:func:`rotated_copy`): the second of rotary's
    ``parts`` (``[(x, w1, t1), (x, w2, t2)]``) is the first's weight with
    ``rotate_half`` on every head of ``block`` columns, and the copy's view, rows of
    ``row`` dimensions (2: Q and K transposed; ``2 lanes``: K of a decode step, a block
    ``pitch`` dimensions), holds each half and each block in whole rows. Otherwise the
    second product streams ``W R``."""
    if len(parts) != 2:
        return False
    (_, w1, _), (_, w2, _) = parts
    whole = block % 2 == 0 and (block // 2) % row == 0 and \
        (pitch is None or pitch % row == 0)
    return w2.attrs.get("rotation_of") == w1.name and whole and \
        w2.attrs.get("rotation_block") == block


def half_signs(block):
    """The signs of ``rotate_half`` over a head of ``block`` dimensions: ``-1`` on the
    first half (``-x2``), ``+1`` on the second (``x1``)."""
    return np.repeat(np.float32([-1.0, 1.0]), block // 2)


def rotated_copy(built, tag, first, outer, pitch, half):
    """The stage index of the row group that writes ``p2`` from ``p1`` (stage
    ``first``'s FP32 result, a view of ``outer * pitch`` rows of ``2 lanes``): each
    block's halves (``half`` rows each) swapped, the rows past them not written."""
    lanes = built.machine.lanes
    beat = 2 * lanes
    source = built.stages[first - built.first].program
    p1 = Image.from_json(source.meta["images"]["out"])
    if p1.stored != outer * pitch * beat or 2 * half > pitch:
        raise CompileError(f"rotary {tag}: {p1.describe()} is not {outer} blocks of {pitch} "
                         f"rows of {beat} with halves of {half} rows")
    count = outer * 2 * half
    read = Image((count, beat), (), (outer, 2, half, beat), None, "fp32",
                 strides=(pitch * beat, -half * beat, beat, 1), origin=half * beat,
                 extent=p1.stored)
    write = Image((count, beat), (), (outer, 2 * half, beat), None, "fp32",
                  strides=(pitch * beat, beat, 1), extent=p1.stored)
    graph = Graph(built.name(f"{tag}_rotated"))
    graph.output("out", graph.input("p", (count, beat), "fp32").astype("fp32"))
    program = compile_graph(graph, built.machine, kernel=KERNEL_NAME, params=built.params,
                            plan=ImagePlan(start=built.start, addresses={
                                "p": source.meta["images"]["out"]["address"]},
                                layouts={"p": read, "out": write}))
    read, write = (Image.from_json(program.meta["images"][name]) for name in ("p", "out"))

    def rows(produced):         # p1's words as the copy reads them
        return read.unpack_matrix(p1.pack({"out": produced[first]["out"]}))
    index = built.add(Stage(graph.name, graph, program, {}, {"p": (first, "out", rows)}))

    def result(produced):       # the copy's rows where it wrote them, zeros past them
        return p1.unpack(write.pack({"out": produced[index]["out"]}), "out")
    built.results[index] = result
    return index


def result_of(built, index):
    """``function(produced)``: stage ``index``'s result as a product's (a rotated copy's
    as the second product's would be), for the row group of the tables."""
    return built.results.get(index, lambda produced: produced[index]["out"])

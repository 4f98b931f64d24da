"""Lowering of a row group (:class:`rdu.compiler.fuse.RowGroup`) to a chain of SIMD PCUs.

The input streams from HBM row by row (``L / lanes`` beats a row); every value of the
group is either a *row* stream (one beat per input beat) or a per-row *scalar* (one word a
row on the scalar network). Operators become PCUs, walking the graph in order:

* an element-wise operator of a row joins the PCU that produces its row operand as one
  more SIMD stage when it can (that row has no other user, the PCU has a stage free, no
  tail and no reduction yet, and at most one per-row scalar, its ``scalar_in``); else it
  starts a new PCU. Operands: the row is ``PREV``, a second row ``IN1``, a per-row scalar
  ``SCALAR``, a constant ``CONST``;
* ``exp`` and ``reciprocal`` of a row are the PCU's *tail* (after its stages: nothing
  joins the PCU after them);
* ``sum`` / ``max`` of a row is a PCU whose stage accumulates lane-wise over the row
  (``ADD`` / ``MAX`` with ``REG``, starting from ``0`` / ``-inf``) and whose reduction
  sends the row's value to ``scalar_out`` at the end of each row; its ``vector_out`` (one
  beat a row) is the *row clock* of scalar operators that follow;
* an operator of per-row scalars is a PCU clocked by its operand's producer (one beat a
  row on ``vector_in0``), the scalar on ``scalar_in``, a ``PASS(SCALAR)`` stage (or the
  operator with a constant), the tail for ``exp`` / ``reciprocal``, and a ``MAX``
  reduction of its equal lanes to ``scalar_out``.

A row stream read by a PCU that also needs a scalar computed from that very row (``x -
max(x)``) must wait for the whole row: the compiler puts a PMU row buffer on that edge
(``buffers`` rows, so the next rows load while one is read). All PCUs start on the
load's launch token.
"""

from dataclasses import dataclass, field

import numpy as np

from .. import affine
from ..frontend import ELEMENTWISE
from ..ir import AccessPattern, Kernel
from ..layout import Image, Piece
from ..models.fp import NEG_INF
from .core import CompileError
from .lower import WORD, place_images
from .tile import COUNT_LIMIT

__all__ = ["lower_rows", "RowPCU"]

_NEG_INF = int(NEG_INF)


def _f32_word(value):
    return int(np.array([value], np.float32).view(np.uint32)[0])


def _ceil(a, b):
    return -(-a // b)


@dataclass(eq=False)
class RowPCU:
    """One SIMD PCU of the chain being formed."""
    name: str
    in0: object = None              # frontend Node whose stream feeds vector_in0
    in0_clock: bool = False         # in0 is a row clock (a producer's vector_out)
    in1: object = None
    scalar: object = None           # frontend Node (a per-row scalar) on scalar_in
    stages: list = field(default_factory=list)
    tail: str = "NONE"
    reduce: str = "NONE"
    row_value: object = None        # the node its vector_out carries (row PCUs)
    scalar_value: object = None     # the node its scalar_out carries
    per_row: bool = False           # one iteration a row (scalar PCUs)
    clock_users: int = 0

    @property
    def closed(self):
        return self.tail != "NONE" or self.reduce != "NONE"


def _ancestors(node):
    seen, stack = set(), [node]
    while stack:
        item = stack.pop()
        for parent in item.inputs:
            if id(parent) not in seen:
                seen.add(id(parent))
                stack.append(parent)
    return seen


class _Builder:
    def __init__(self, group, stages):
        self.group, self.stages = group, stages
        self.pcus = []
        self.row_of = {}            # node -> RowPCU producing it as a row stream
        self.scalar_of = {}         # node -> RowPCU producing it as a scalar
        self.users = {}
        for node in group.nodes:
            for parent in node.inputs:
                self.users.setdefault(id(parent), []).append(node)

    def new(self, **fields):
        pcu = RowPCU(f"row{len(self.pcus)}", **fields)
        self.pcus.append(pcu)
        return pcu

    def operand(self, pcu, node, where):
        """The stage source of ``node`` in ``pcu`` (adding it as in1 / scalar)."""
        kind = self.group.kind(node)
        if kind == "const":
            return "CONST", _f32_word(node.attrs["value"])
        if kind == "scalar":
            if pcu.scalar is not None and pcu.scalar is not node:
                raise CompileError(f"{where.where}: two per-row scalars in one PCU stage "
                                   f"chain (a PCU takes one scalar_in)")
            pcu.scalar = node
            return "SCALAR", 0
        if node is pcu.row_value or node is pcu.in0 and not pcu.stages:
            return "PREV", 0
        if pcu.in1 is not None and pcu.in1 is not node:
            raise CompileError(f"{where.where}: three row operands in one PCU")
        pcu.in1 = node
        return "IN1", 0

    def stage(self, pcu, fn, operands, where):
        """Append the SIMD stage ``fn`` of ``operands`` to ``pcu``."""
        sources = [self.operand(pcu, i, where) for i in operands]
        constant = next((c for s, c in sources if s == "CONST"), 0)
        names = [s for s, _ in sources] + ["PREV"] * (3 - len(sources))
        pcu.stages.append((fn, *names[:3], constant))

    def fusable(self, pcu, row, node):
        """Can ``node`` (using ``row``) join ``pcu`` as one more stage?"""
        if pcu is None or pcu.closed or pcu.per_row or len(pcu.stages) >= self.stages:
            return False
        if len(self.users.get(id(row), [])) != 1 or row is self.group.out_node:
            return False
        scalars = [i for i in node.inputs if self.group.kind(i) == "scalar"]
        return not scalars or pcu.scalar in (None, scalars[0])

    def row_pcu_for(self, node, row):
        pcu = self.row_of.get(id(row))
        if self.fusable(pcu, row, node):
            return pcu
        return self.new(in0=row)

    def elementwise(self, node):
        where = node
        kind = self.group.kind(node)
        if node.op == "binary":
            fn = ELEMENTWISE[node.attrs["fn"]]
            operands = list(node.inputs)
        elif node.attrs["fn"] == "cast":
            fn = "TO_BF16" if node.dtype == "bf16" else "PASS"
            operands = list(node.inputs)
        else:
            fn = None                   # exp / reciprocal: the tail
            operands = list(node.inputs)
        if kind == "row":
            rows = [i for i in operands if self.group.kind(i) == "row"]
            pcu = self.row_pcu_for(node, rows[0])
            if fn is None:
                if pcu.closed or pcu.in0 is not rows[0] and pcu.row_value is not rows[0]:
                    pcu = self.new(in0=rows[0])
                pcu.tail = node.attrs["fn"].upper()
            else:
                self.stage(pcu, fn, operands, where)
            pcu.row_value = node
            self.row_of[id(node)] = pcu
            return
        # a per-row scalar operator: clocked by its operand's producer
        scalars = [i for i in operands if self.group.kind(i) == "scalar"]
        if len(scalars) != 1:
            raise CompileError(f"{node.where}: an operator of {len(scalars)} per-row "
                               f"scalars (one is supported)")
        source = self.scalar_of[id(scalars[0])]
        source.clock_users += 1
        pcu = self.new(in0=scalars[0], in0_clock=True, per_row=True, scalar=scalars[0],
                       reduce="MAX")
        if fn is None:
            pcu.stages.append(("PASS", "SCALAR", "PREV", "PREV", 0))
            pcu.tail = node.attrs["fn"].upper()
        else:
            self.stage(pcu, fn, operands, where)
        pcu.scalar_value = node
        self.scalar_of[id(node)] = pcu
        pcu.clock_source = source

    def reduction(self, node):
        row, = node.inputs
        fn = node.attrs["fn"]
        op, start = ("ADD", 0) if fn == "sum" else ("MAX", _NEG_INF)
        pcu = self.row_of.get(id(row))
        if not (pcu is not None and not pcu.closed and not pcu.per_row and
                len(pcu.stages) < self.stages and
                len(self.users.get(id(row), [])) == 1 and row is not self.group.out_node):
            pcu = self.new(in0=row)
        pcu.stages.append((op, "PREV", "REG", "PREV", start))
        pcu.reduce = "SUM" if fn == "sum" else "MAX"
        pcu.scalar_value = node
        pcu.row_value = None
        self.scalar_of[id(node)] = pcu

    def build(self):
        for node in self.group.nodes:
            if node.op == "reduce":
                self.reduction(node)
            else:
                self.elementwise(node)
        return self.pcus


def _walk(name, image_name, image, address, rows, length, beat):
    size = 2 if image.format == "bf16" else 4
    per_beat = beat // size
    offsets = image.byte_offsets()
    if rows > offsets.shape[0] or length > offsets.shape[1] or length % per_beat:
        raise CompileError(f"{name}: {image_name!r} ({image.describe()}) cannot be walked as "
                           f"{rows} rows of {length} in beats of {per_beat}")
    offsets = offsets[:rows, :length]
    starts = offsets[:, ::per_beat]
    whole = np.all(offsets.reshape(rows, -1, per_beat) - starts[:, :, None] ==
                   size * np.arange(per_beat))
    found = affine.fit(starts.reshape(-1) + address, COUNT_LIMIT) if whole else None
    if found is None:
        raise CompileError(f"{name}: no three-level AGCU pattern walks {image_name!r} "
                           f"({image.describe()}) row by row")
    start, counts, strides = found
    return AccessPattern(start, counts, strides)


def lower_rows(name, group, tiling, hbm_size, stages, plan=None):
    """``(kernel, images, addresses, bitstream_address)`` of a row group; ``plan``
    (:class:`ImagePlan`) may give the input and output images another geometry (the
    producer's or the consumer's in a sequence of kernels): the AGCUs walk it row by
    row."""
    builder = _Builder(group, stages)
    pcus = builder.build()
    lanes, beats, rows = tiling.lanes, tiling.beats, tiling.rows
    beat = lanes * WORD
    x, out = group.x, group.output
    fmt = "bf16" if x.dtype == "bf16" else "fp32"
    out_fmt = "bf16" if group.out_node.dtype == "bf16" else "fp32"
    images = {x.name: Image((rows, group.length), (Piece(x.name, (0, 0), (rows,
                                                                          group.length)),),
                            None, None, fmt),
              out: Image((rows, group.length), (Piece(out, (0, 0), (rows, group.length)),),
                         None, None, out_fmt)}
    for image_name, image in list(images.items()):
        wanted = plan.layout(image_name) if plan else None
        if wanted is not None:
            if wanted.format != image.format:
                raise CompileError(f"{name}: {image_name!r} is {image.format} here, its "
                                   f"other kernel has it as {wanted.format}")
            images[image_name] = Image(wanted.shape, image.pieces, wanted.split,
                                       wanted.perm, wanted.format)
    addresses, bitstream_address = place_images(name, images, hbm_size, plan)
    kernel = Kernel(name)
    tensors = {n: kernel.tensor(n, image.shape, image.format) for n, image in images.items()}
    pattern = _walk(name, x.name, images[x.name], addresses[x.name], rows, group.length,
                    beat)
    streams = {id(x): kernel.load(tensors[x.name], pattern, name=f"load_{x.name}",
                                  config={"bf16": fmt == "bf16"})}
    launch = kernel.output(kernel.nodes[f"load_{x.name}"], "control_out")
    scalar_streams = {}
    delayed = {}

    def row_stream(value, consumer):
        """The stream of row ``value`` for PCU ``consumer`` (through a row buffer when the
        consumer needs a scalar computed from that row)."""
        needs_delay = consumer.scalar is not None and \
            id(value) in _ancestors(consumer.scalar) | {id(consumer.scalar)}
        if not needs_delay:
            return streams[id(value)]
        if id(value) not in delayed:
            words = _ceil(group.length, lanes) * lanes
            linear = AccessPattern(0, (beats, 1, 1), (lanes, 0, 0))
            delayed[id(value)] = kernel.buffer(
                f"rowbuf{len(delayed)}", words, [streams[id(value)]], buffers=tiling.buffers,
                config={
                    "write": linear, "write_lanes": 1, "read": linear, "read_lanes": 1,
                    "buffers": tiling.buffers, "buffer_words": words, "read_repeat": 1,
                    "read_passes": rows})
        return delayed[id(value)]

    for pcu in pcus:
        if pcu.in0_clock:
            in0 = kernel.output(kernel.nodes[pcu.clock_source.name], "vector_out")
        else:
            in0 = row_stream(pcu.in0, pcu)
        inputs = [in0]
        if pcu.in1 is not None:
            inputs.append(row_stream(pcu.in1, pcu))
        trips = (1, rows, 1) if pcu.per_row else (beats, rows, 1)
        row_out = pcu.row_value is not None
        result = kernel.compute(pcu.name, "map", inputs, config={
            "mode": "simd", "trips": trips, "stages": list(pcu.stages),
            "scalar_in": pcu.scalar is not None, "tail": pcu.tail, "reduce": pcu.reduce,
            "emit_every": row_out, "vector_out": row_out or pcu.clock_users > 0})
        node = kernel.nodes[pcu.name]
        kernel.connect(launch, node, "control_in")
        if pcu.scalar is not None:
            kernel.connect(scalar_streams[id(pcu.scalar)], node, "scalar_in")
        if row_out:
            streams[id(pcu.row_value)] = result
        if pcu.scalar_value is not None:
            scalar_streams[id(pcu.scalar_value)] = kernel.output(node, "scalar_out")
    final = streams.get(id(group.out_node))
    if final is None:
        raise CompileError(f"{group.out_node.where}: output {out!r} is not a row stream")
    store = _walk(name, out, images[out], addresses[out], rows, group.length, beat)
    kernel.store(final, tensors[out], store, name=f"store_{out}",
                 config={"bf16": group.out_node.dtype == "bf16"})
    # a PCU's vector_out nobody reads (a reduction's, when no scalar operator is clocked
    # by it) is switched off in its configuration: drop the stream
    kernel.streams = [s for s in kernel.streams if s.sinks or s.network == "control"]
    return kernel, images, addresses, bitstream_address

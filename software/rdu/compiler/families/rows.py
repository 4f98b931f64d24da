"""The rows family: a graph with no matmul whose operators all work row by row on one
input of shape ``(R, L)`` (element-wise operators of rows, of per-row scalars ``(R, 1)``
and of constants; ``sum`` and ``max`` reductions; ``exp``, ``reciprocal``, ``rsqrt``,
casts) is a :class:`RowGroup`, streamed row by row through a chain of SIMD PCUs
(:mod:`rdu.compiler.row_chain`): the input streams from HBM row by row, each row
``L / lanes`` beats; row buffers of up to four rows in the PMUs. Inputs of shape
``(L,)`` are per-column *vectors* (a normalisation's weight): each is loaded once (an
AGCU load of its own) into a PMU that streams it again for every row, a row operand like
the input's rows (RMSNorm ``x * rsqrt(mean(x * x) + eps) * w``). Further input matrices of
the input's shape (a residual ``x + y``, a gate ``silu(g) * u``) are *row operands*: each
streams from HBM row by row as the input does (an AGCU load of its own, the same walk)
into the PCU stage that reads it as its second row operand (``IN1``).
"""

from dataclasses import dataclass, field, replace

import numpy as np

from ... import affine
from ...frontend.graph import Node
from ...ir import AccessPattern, Kernel
from ...layout import Image, Piece, padded_row
from ...models import reference
from ..core import CompileError
from ..group import Group, Lowered
from ..lower import COUNT_LIMIT, WORD, place_images
from ..row_chain import RowChainBuilder, ancestors
from .base import Family, moved_work, pcu_programs, unsupported

__all__ = ["RowGroup", "RowTiling", "RowsFamily", "ROWS", "tile_rows", "lower_rows",
           "walk_rows"]


@dataclass
class RowGroup(Group):
    """``out = f(x)`` row by row: ``nodes`` in order, each a row ``(R, L)`` or a per-row
    scalar ``(R, 1)`` value; ``vectors`` the inputs of shape ``(L,)`` (read again for
    every row); ``others`` the further input matrices of ``x``'s shape (row operands,
    each streamed row by row as ``x``)."""
    x: Node
    nodes: list
    output: str
    out_node: Node | None = None
    kinds: dict = field(default_factory=dict, repr=False, compare=False)
    vectors: list = field(default_factory=list)
    others: list = field(default_factory=list)

    @property
    def rows(self):
        return self.x.shape[0]

    @property
    def length(self):
        return self.x.shape[1]

    def kind(self, node):
        """``"const"``, ``"row"`` (the input, or an operator of a row) or ``"scalar"`` (a
        reduction, or an operator of per-row scalars and constants only): by what the
        node is made of, since a row of one value has a per-row scalar's shape."""
        if node.op == "const":
            return "const"
        if node is self.x or node.op == "input":
            return "row"
        if node.op == "reduce":
            return "scalar"
        known = self.kinds.get(id(node))
        if known is None:
            kinds = {self.kind(parent) for parent in node.inputs}
            known = self.kinds[id(node)] = "row" if "row" in kinds else "scalar"
        return known

    def describe(self):
        ops = ", ".join(f"{node.attrs.get('fn', node.op)}" for node in self.nodes)
        return (f"group {self.output}: rows of {self.x.name}{list(self.x.shape)} through "
                f"{ops}")


_ROW_OPS = ("binary", "unary", "reduce", "const")


def _match_rows(graph, name, out):
    nodes = [node for node in graph.live_nodes() if node.op not in ("input", "const")]
    inputs = [node for node in graph.live_nodes() if node.op == "input"]
    matrices = [node for node in inputs if len(node.shape) == 2]
    if not matrices:
        raise unsupported(out, f"output {name!r}: a row-wise kernel takes an input "
                           f"matrix (got {', '.join(i.name for i in inputs) or 'none'})")
    x = matrices[0]
    rows, length = x.shape
    others = [node for node in matrices[1:] if node.shape == x.shape]
    vectors = [node for node in inputs
               if node is not x and all(node is not other for other in others)]
    for vector in vectors:
        if vector.shape != (length,):
            user = next((node for node in nodes if any(i is vector for i in node.inputs)),
                        vector)     # the operator that reads it: the user's line
            raise unsupported(user, f"output {name!r}: input {vector.name!r} of shape "
                              f"{vector.shape}: a row-wise kernel's other inputs are "
                              f"matrices of {x.name!r}'s shape {x.shape} or vectors of a "
                              f"row's {length} values")
    for node in nodes:
        if node.op not in _ROW_OPS:
            raise unsupported(node, f"output {name!r}: {node.op} is not a row-wise "
                               f"operator (row-wise kernels use element-wise operators, "
                               f"sum, max, exp, reciprocal and casts)")
        if node.shape not in ((rows, length), (rows, 1)):
            raise unsupported(node, f"output {name!r}: shape {node.shape} is neither a "
                               f"row ({rows}, {length}) nor a per-row scalar ({rows}, 1)")
        if node.op == "reduce" and node.inputs[0].shape != (rows, length):
            raise unsupported(node, f"output {name!r}: a reduction of a per-row scalar")
    if out.shape != (rows, length):
        raise unsupported(out, f"output {name!r}: a row-wise kernel's output must be "
                           f"rows {(rows, length)}, not {out.shape}")
    return RowGroup(x, nodes, name, out, vectors=vectors, others=others)


@dataclass(frozen=True)
class RowTiling:
    """A row group streamed row by row: ``rows`` rows of ``length`` values, stored and
    streamed padded to ``padded`` values (whole AXI beats: :func:`rdu.layout.padded_row`),
    each row ``beats`` vector beats; row buffers of ``buffers`` rows in the PMUs."""
    rows: int
    length: int
    lanes: int
    buffers: int

    @property
    def padded(self):
        return padded_row(self.length, self.lanes)

    @property
    def pad(self):
        """Padding words at the end of each row."""
        return self.padded - self.length

    @property
    def beats(self):
        return self.padded // self.lanes

    def describe(self):
        padding = f", padded to {self.padded}" if self.pad else ""
        return (f"rows: {self.rows} rows of {self.length}{padding} ({self.beats} beats "
                f"each), row buffers of {self.buffers} rows")


def tile_rows(group, geometry):
    """The tiling of a :class:`RowGroup`: rows of any length, padded to whole beats."""
    lanes = geometry.lanes
    rows, length = group.rows, group.length
    padded = padded_row(length, lanes)
    if padded > geometry.pmu_words:
        raise CompileError(f"{group.x.where}: a row of {length} values (padded to {padded}) "
                           f"does not fit a PMU ({geometry.pmu_words} words, "
                           f"{padded - geometry.pmu_words} over)")
    if rows > COUNT_LIMIT or padded // lanes > COUNT_LIMIT:
        raise CompileError(f"{group.x.where}: {rows} rows of {padded // lanes} beats exceed "
                           f"the 16-bit loop counters")
    buffers = max(1, min(4, geometry.pmu_words // padded))
    return RowTiling(rows, length, lanes, buffers)


def walk_rows(name, image_name, image, address, rows, length, beat):
    """The AGCU pattern that walks ``image`` row by row in beats of ``beat`` bytes."""
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


def _row_images(name, group, tiling, plan):
    """``{tensor: Image}`` of a row group: the input and output matrices padded to whole
    beats, each vector one padded row; ``plan`` may give them another geometry."""
    x, out = group.x, group.output
    fmt = "bf16" if x.dtype == "bf16" else "fp32"
    out_fmt = "bf16" if group.out_node.dtype == "bf16" else "fp32"
    shape, size = (tiling.rows, tiling.padded), (tiling.rows, group.length)
    images = {x.name: Image(shape, (Piece(x.name, (0, 0), size),), None, None, fmt),
              out: Image(shape, (Piece(out, (0, 0), size),), None, None, out_fmt)}
    for other in group.others:
        images[other.name] = Image(shape, (Piece(other.name, (0, 0), size),), None, None,
                                   "bf16" if other.dtype == "bf16" else "fp32")
    for vector in group.vectors:
        images[vector.name] = Image(
            (1, tiling.padded), (Piece(vector.name, (0, 0), (1, group.length)),), None, None,
            "bf16" if vector.dtype == "bf16" else "fp32")
    for image_name, image in list(images.items()):
        wanted = plan.layout(image_name) if plan else None
        if wanted is not None:
            if wanted.format != image.format:
                raise CompileError(f"{name}: {image_name!r} is {image.format} here, its "
                                   f"other kernel has it as {wanted.format}")
            images[image_name] = replace(wanted, pieces=image.pieces)
    return images


def _vector_streams(kernel, name, group, tiling, images, addresses, tensors):
    """``{id(vector): stream}``: each vector loaded once into a PMU, which streams it
    again for every row (its read pattern's second level, of stride 0)."""
    lanes, beats = tiling.lanes, tiling.beats
    streams = {}
    for index, vector in enumerate(group.vectors):
        load = kernel.load(tensors[vector.name], walk_rows(
            name, vector.name, images[vector.name], addresses[vector.name], 1,
            tiling.padded, lanes * WORD), name=f"load_{vector.name}",
            config={"bf16": images[vector.name].format == "bf16"})
        streams[id(vector)] = kernel.buffer(
            f"vector{index}", tiling.padded, [load], buffers=1, config={
                "write": AccessPattern(0, (beats, 1, 1), (lanes, 0, 0)), "write_lanes": 1,
                "read": AccessPattern(0, (beats, tiling.rows, 1), (lanes, 0, 0)),
                "read_lanes": 1, "buffers": 1, "buffer_words": tiling.padded,
                "read_repeat": 1, "read_passes": 1})
    return streams


def lower_rows(name, group, tiling, hbm_size, stages, plan=None):
    """``(kernel, images, addresses, bitstream_address)`` of a row group; ``plan``
    (:class:`ImagePlan`) may give the input and output images another geometry (the
    producer's or the consumer's in a sequence of kernels): the AGCUs walk it row by
    row."""
    builder = RowChainBuilder(group, stages, padded=tiling.pad > 0)
    pcus = builder.build()
    lanes, beats, rows = tiling.lanes, tiling.beats, tiling.rows
    beat = lanes * WORD
    x, out = group.x, group.output
    images = _row_images(name, group, tiling, plan)
    addresses, bitstream_address = place_images(name, images, hbm_size, plan)
    kernel = Kernel(name)
    tensors = {n: kernel.tensor(n, image.shape, image.format) for n, image in images.items()}
    pattern = walk_rows(name, x.name, images[x.name], addresses[x.name], rows,
                        tiling.padded, beat)
    streams = {id(x): kernel.load(tensors[x.name], pattern, name=f"load_{x.name}",
                                  config={"bf16": images[x.name].format == "bf16"})}
    launch = kernel.output(kernel.nodes[f"load_{x.name}"], "control_out")
    for other in group.others:          # further row operands: streamed as x is
        streams[id(other)] = kernel.load(
            tensors[other.name], walk_rows(name, other.name, images[other.name],
                                           addresses[other.name], rows, tiling.padded, beat),
            name=f"load_{other.name}",
            config={"bf16": images[other.name].format == "bf16"})
    streams.update(_vector_streams(kernel, name, group, tiling, images, addresses, tensors))
    scalar_streams = {}
    delayed = {}
    readers = {}
    for pcu in pcus:
        for value in (None if pcu.in0_clock else pcu.in0, pcu.in1):
            if value is not None:
                readers.setdefault(id(value), []).append(pcu)
    # a relay's buffer: the largest divisor of a row's beats up to one tile of beats
    relay = max(size for size in range(1, min(lanes, beats) + 1) if beats % size == 0)

    def row_stream(value, consumer):
        """The stream of row ``value`` for PCU ``consumer`` (through a row buffer when the
        consumer needs a scalar computed from that row; through a relay when an earlier
        PCU of the chain reads the value too)."""
        needs_delay = consumer.scalar is not None and \
            id(value) in ancestors(consumer.scalar) | {id(consumer.scalar)}
        if not needs_delay:
            if readers.get(id(value), [consumer])[0] is consumer or \
                    rows * beats // relay > COUNT_LIMIT:
                return streams[id(value)]
            if ("relay", id(value)) not in delayed:
                # the later reader waits for the earlier one's results down the chain;
                # the multicast would hold each beat until it takes it (about one beat
                # per trip through the chain): four small buffers take the beats
                # meanwhile (no larger than the chain's FIFOs, or they deadlock)
                pattern = AccessPattern(0, (relay, 1, 1), (lanes, 0, 0))
                delayed[("relay", id(value))] = kernel.buffer(
                    f"relay{len(delayed)}", 4 * relay * lanes, [streams[id(value)]],
                    buffers=4, config={
                        "write": pattern, "write_lanes": 1, "read": pattern,
                        "read_lanes": 1, "buffers": 4, "buffer_words": relay * lanes,
                        "read_repeat": 1, "read_passes": rows * beats // relay})
            return delayed[("relay", id(value))]
        if id(value) not in delayed:
            words = tiling.padded
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
            "emit_every": row_out, "vector_out": row_out or pcu.clock_users > 0,
            # a reduction of a padded row: the padding enters as stage 0's identity
            "row_pad": tiling.pad if pcu.reduce != "NONE" and not pcu.per_row else 0})
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
    store = walk_rows(name, out, images[out], addresses[out], rows, tiling.padded, beat)
    kernel.store(final, tensors[out], store, name=f"store_{out}",
                 config={"bf16": group.out_node.dtype == "bf16"})
    # a PCU's vector_out nobody reads (a reduction's, when no scalar operator is clocked
    # by it) is switched off in its configuration: drop the stream
    kernel.streams = [s for s in kernel.streams if s.sinks or s.network == "control"]
    return kernel, images, addresses, bitstream_address


class RowsFamily(Family):
    """Row-wise operators over an input matrix (softmax, RMSNorm, x + y, ...)."""
    name = "rows"
    placement_seed = "rows"
    benchmark = ("softmax", {"m": 8, "n": 64})

    def claims(self, graph):
        return True                 # the last rule: what no other family claims

    def fuse(self, graph, name, out):
        return _match_rows(graph, name, out)

    def tile(self, group, state):
        return tile_rows(group, state.geometry)

    def kernel_name(self, graph_name, group, tiling):
        return f"{graph_name}_{tiling.rows}x{tiling.length}"

    def lower(self, name, group, tiling, state):
        return Lowered(*lower_rows(name, group, tiling, state.machine.region("hbm").size,
                                   state.machine.stages, state.plan))

    def meta(self, group, t, kernel):
        return {"group": self.name, "rows": t.rows, "length": t.length, "padded": t.padded,
                "pcus": kernel.units_needed()["pcu"], "buffers": t.buffers, "macs": 0,
                "pcu_programs": pcu_programs(kernel)}

    def exact(self, program, graph):
        return reference.exact_rows_program(program, graph)

    def work(self, program):
        """No MACs (SIMD arithmetic only); the input read, the output written."""
        return moved_work(program, [name for name, spec in program.tensors.items()
                                    if spec["role"] == "input"])


#: The rows family (registered last: it takes what no other family claims).
ROWS = RowsFamily()
RowGroup.family = ROWS

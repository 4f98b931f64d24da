"""The scale-and-shift family: ``y = x * g + b`` with ``x`` a BF16 matrix ``(R, L)`` and
``g``, ``b`` BF16 vectors of ``L`` values (shape ``(L,)`` or ``(1, L)``): every row
scaled and shifted column by column, the affine step of a normalisation layer. The
worked example of ``docs/compiler.md`` ("Adding a kernel family"): this module and one
line in :data:`rdu.compiler.families.FAMILIES`.

Fusion rule: the output is ``x * g + b`` (either operand order) of three BF16 inputs
(claimed: element-wise graphs of several inputs, one a vector, without reductions or
special functions; with those, the rows family takes per-column vectors).
Tiling: rows of whole AXI beats of BF16 (``L`` a multiple of ``2 * lanes``), three
loads (three AGCUs). Lowering, two SIMD PCUs fed row by row::

    load_x (row by row) --------> scale (MUL PREV IN1) --> shift (ADD PREV IN1) --> store_y
    load_g (g again for every row) --^                       ^
    load_b (b again for every row) --------------------------'

The AGCUs read ``g`` and ``b`` once per row (stride 0 between rows), so no PMU is
needed; the arithmetic is the FP32 multiply, then the FP32 add, each rounded to nearest
even, which :func:`rdu.models.reference.exact_rows` computes bit for bit.
"""

from dataclasses import dataclass

from ...frontend.graph import Node
from ...ir import AccessPattern, Kernel
from ...layout import Image, Piece
from ...models import reference
from ..core import CompileError
from ..group import Group, Lowered
from ..lower import BF16, COUNT_LIMIT, WORD, check_layout, place_images
from .base import Family, is_bf16_input, moved_work, pcu_programs, unsupported

__all__ = ["ScaleShiftGroup", "ScaleShiftTiling", "ScaleShiftFamily", "SCALE_SHIFT"]


@dataclass
class ScaleShiftGroup(Group):
    """``output = x * g + b`` row by row."""
    x: Node
    g: Node
    b: Node
    output: str

    def describe(self):
        return (f"group {self.output}: rows of {self.x.name}{list(self.x.shape)} * "
                f"{self.g.name}{list(self.g.shape)} + {self.b.name}{list(self.b.shape)}")


@dataclass(frozen=True)
class ScaleShiftTiling:
    """``rows`` rows of ``length`` values, ``length / lanes`` FP32 beats each."""
    rows: int
    length: int
    lanes: int

    @property
    def beats(self):
        return self.length // self.lanes

    def describe(self):
        return f"scale_shift: {self.rows} rows of {self.length} ({self.beats} beats each)"


def _is_vector(node, length):
    return node.shape in ((length,), (1, length))


def _operands(node, fn):
    """``(inputs of node)`` when ``node`` is the binary operator ``fn``, else None."""
    if node.op == "binary" and node.attrs["fn"] == fn:
        return node.inputs
    return None


class ScaleShiftFamily(Family):
    """``x * g + b`` with per-column vectors ``g`` and ``b``."""
    name = "scale_shift"
    placement_seed = "scale_shift"

    def claims(self, graph):
        """Element-wise graphs of several BF16 inputs, one of them a vector; one with a
        reduction or a special function (RMSNorm's ``x * rsqrt(mean(x * x) + eps) * w``)
        or an FP32 input (a bias ``h + b`` on a matmul's FP32 result, a configuration of
        a model cut in several) is the rows family's."""
        nodes = graph.live_nodes()
        inputs = [node for node in nodes if node.op == "input"]
        return (not any(node.op in ("matmul", "attention", "reduce") or
                        node.op == "unary" and node.attrs["fn"] != "cast" for node in nodes)
                and len(inputs) > 1 and any(len(node.shape) == 1 for node in inputs)
                and all(node.dtype == "bf16" for node in inputs))

    def fuse(self, graph, name, out):
        why = (f"output {name!r}: a scale-and-shift kernel is x * g + b of a BF16 input "
               f"x (R, L) and BF16 inputs g, b of L values")
        added = _operands(out, "add")
        if added is None:
            raise unsupported(out, why)
        for product, b in (added, added[::-1]):
            factors = _operands(product, "mul")
            if factors is None:
                continue
            for x, g in (factors, factors[::-1]):
                if len(x.shape) == 2 and all(is_bf16_input(n) for n in (x, g, b)) and \
                        _is_vector(g, x.shape[1]) and _is_vector(b, x.shape[1]):
                    return ScaleShiftGroup(x, g, b, name)
        raise unsupported(out, why)

    def tile(self, group, state):
        lanes = state.geometry.lanes
        rows, length = group.x.shape
        where = group.x.where
        if state.machine.agcus < 3:
            raise CompileError(f"{where}: scale-and-shift loads x, g and b at once: it needs "
                               f"3 AGCUs, the machine has {state.machine.agcus} (--agcus)")
        if length % (2 * lanes):
            raise CompileError(f"{where}: rows of {length} values: rows must be a multiple "
                               f"of {2 * lanes} values (whole AXI beats)")
        if rows > COUNT_LIMIT or length // lanes > COUNT_LIMIT:
            raise CompileError(f"{where}: {rows} rows of {length // lanes} beats exceed the "
                               f"16-bit loop counters")
        return ScaleShiftTiling(rows, length, lanes)

    def kernel_name(self, graph_name, group, tiling):
        return f"{graph_name}_{tiling.rows}x{tiling.length}"

    def lower(self, name, group, t, state):
        beat = t.lanes * WORD                   # bytes of one AXI beat
        x, g, b, out = group.x.name, group.g.name, group.b.name, group.output
        images = {x: Image((t.rows, t.length), (Piece(x, (0, 0), (t.rows, t.length)),),
                           None, None, "bf16")}
        for vector in (g, b):
            images[vector] = Image((1, t.length), (Piece(vector, (0, 0), (1, t.length)),),
                                   None, None, "bf16")
        images[out] = Image((t.rows, t.length), (Piece(out, (0, 0), (t.rows, t.length)),),
                            None, None, "fp32")
        for image_name, image in images.items():
            check_layout(name, state.plan, image_name, image)
        addresses, bitstream_address = place_images(name, images,
                                                    state.machine.region("hbm").size,
                                                    state.plan)
        kernel = Kernel(name)
        tensors = {n: kernel.tensor(n, image.shape, image.format) for n, image in images.items()}
        row_beats = t.length * BF16 // beat     # AXI beats of a BF16 row
        loads = {}
        for tensor, row_stride in ((x, t.length * BF16), (g, 0), (b, 0)):
            loads[tensor] = kernel.load(tensors[tensor], AccessPattern(
                addresses[tensor], (row_beats, t.rows, 1), (beat, row_stride, 0)),
                name=f"load_{tensor}", config={"bf16": True})
        launch = kernel.output(kernel.nodes[f"load_{x}"], "control_out")
        stream = loads[x]
        for label, op, vector in (("scale", "MUL", g), ("shift", "ADD", b)):
            stream = kernel.compute(label, "map", [stream, loads[vector]], config={
                "mode": "simd", "trips": (t.beats, t.rows, 1),
                "stages": [(op, "PREV", "IN1", "PREV", 0)], "scalar_in": False,
                "tail": "NONE", "reduce": "NONE", "emit_every": True, "vector_out": True})
            kernel.connect(launch, kernel.nodes[label], "control_in")
        kernel.store(stream, tensors[out], AccessPattern(
            addresses[out], (t.beats, t.rows, 1), (beat, t.length * WORD, 0)),
            name=f"store_{out}", config={"bf16": False})
        kernel.row_groups = []
        return Lowered(kernel, images, addresses, bitstream_address)

    def meta(self, group, t, kernel):
        return {"group": self.name, "rows": t.rows, "length": t.length,
                "pcus": kernel.units_needed()["pcu"], "macs": 0,
                "operands": [group.x.name, group.g.name, group.b.name],
                "pcu_programs": pcu_programs(kernel)}

    def exact(self, program, graph):
        inputs = {}
        for tensor, spec in program.tensors.items():
            if spec["role"] == "input":
                image = Image.from_json(program.meta["images"][spec["image"]])
                inputs[tensor] = image.unpack(program.inputs[spec["image"]][1], tensor)
        return reference.exact_rows(graph, inputs, program.meta["lanes"])

    def work(self, program):
        """No MACs (SIMD arithmetic only); X, the scale and the shift read, the output
        written."""
        return moved_work(program, program.meta["operands"])


#: The scale-and-shift family.
SCALE_SHIFT = ScaleShiftFamily()
ScaleShiftGroup.family = SCALE_SHIFT

"""The mlp family: ``out = act(a @ w1).astype(bf16) @ w2``, two matmuls and the
element-wise operators between them (an activation: SiLU, GELU, ...) in one
configuration (``docs/fusion.md``)::

    load_x --> x_panel (PMU) --> matmul1 (systolic) <-- load_w1
    matmul1 --> act0 .. actN (SIMD PCUs: the element-wise chain, then the BF16 cast)
            --> h_panel (PMU: the activated rows, column tile by column tile)
    h_panel --> matmul2 (systolic) <-- load_w2
    matmul2 --> store_y

Both matmuls are one row block (``lanes`` rows) on one systolic PCU; the activated rows
never leave the array: they fill the second matmul's A panel, which it reads once its
buffer is full (the PMU's buffer handshake) while W2 streams in. The activation chain is
built by :class:`rdu.compiler.row_chain.RowChainBuilder`, as a row kernel's.
"""

from dataclasses import dataclass, replace

import numpy as np

from ...ir import AccessPattern, Kernel
from ...models import reference
from ..core import CompileError
from ..group import Group, Lowered
from ..lower import BF16, WORD, check_layout, place_images
from ..row_chain import RowChainBuilder
from .base import Family, is_bf16_input, moved_work, pcu_programs, tensor_shape, unsupported
from .matmul import MatmulGroup, MatmulTiling, matmul_group, matmul_images, tile_matmul
from .rows import RowGroup

__all__ = ["MlpGroup", "MlpTiling", "MlpFamily", "MLP", "tile_mlp", "lower_mlp"]


@dataclass
class MlpGroup(Group):
    """``out = act(a @ w1).astype(bf16) @ w2``: two matmuls and the element-wise
    operators between them (an activation: SiLU, GELU, ...) in one configuration; the
    activated rows wait in a PMU as the second matmul's A panel."""
    first: MatmulGroup          # a @ w1 (output: the hidden rows)
    chain: RowGroup             # the element-wise operators on them, ending in the cast
    second: MatmulGroup         # (the cast rows) @ w2
    output: str

    def describe(self):
        ops = ", ".join(node.attrs.get("fn", node.op) for node in self.chain.nodes)
        return (f"group {self.output}: matmul {self.first.a.name}{list(self.first.a.shape)} "
                f"@ {self.first.b.name}{list(self.first.b.shape)} -> {ops} -> matmul @ "
                f"{self.second.b.name}{list(self.second.b.shape)}")


def _match_mlp(graph, name, out):
    """Two matmuls: ``out = cast_bf16(f(a @ w1)) @ w2`` with ``f`` element-wise."""
    if out.op != "matmul":
        raise unsupported(out, f"output {name!r}: a kernel of two matmuls must end in the "
                           f"second (operators after it are not fused yet)")
    cast, w2 = out.inputs
    if not is_bf16_input(w2):
        raise unsupported(out, f"output {name!r}: the second matmul's B must be a BF16 "
                           f"input (got {w2.op} {w2.dtype})")
    if not (cast.op == "unary" and cast.attrs["fn"] == "cast" and cast.dtype == "bf16"):
        raise unsupported(cast, f"output {name!r}: round the first matmul's activated "
                           f"rows to BF16 (.astype('bf16')) before the second matmul")
    chain, stack, first = [], [cast], None
    while stack:
        node = stack.pop()
        if node.op == "matmul":
            if first is not None and node is not first:
                raise unsupported(node, f"output {name!r}: more than two matmuls")
            first = node
            continue
        if node.op == "const" or any(node is c for c in chain):
            continue
        if node.op not in ("binary", "unary") or node.shape != cast.shape:
            raise unsupported(node, f"output {name!r}: between two matmuls only "
                               f"element-wise operators of the rows are fused (got "
                               f"{node.op} {node.attrs.get('fn', '')} of shape {node.shape})")
        chain.append(node)
        stack.extend(node.inputs)
    if first is None:
        raise unsupported(out, f"output {name!r}: the second matmul's A does not come from "
                           f"a matmul")
    order = {id(node): index for index, node in enumerate(graph.nodes)}
    chain.sort(key=lambda node: order[id(node)])
    group1 = matmul_group(first, "%hidden")
    second = MatmulGroup(cast, w2, output=name, nodes=[out])
    return MlpGroup(group1, RowGroup(first, chain, "%activated", cast), second, name)


@dataclass(frozen=True)
class MlpTiling:
    """Two matmuls on one systolic PCU each (one row block of ``lanes`` rows), the
    activation chain between them."""
    first: MatmulTiling
    second: MatmulTiling

    @property
    def macs(self):
        return self.first.macs + self.second.macs

    def describe(self):
        return f"mlp: {self.first.describe()}; then {self.second.describe()}"


def tile_mlp(group, geometry, machine, graph):
    """The :class:`MlpTiling` of a :class:`MlpGroup` of ``graph``: both matmuls keep
    their whole K in a PMU panel, the hidden rows are one row block."""
    lanes = geometry.lanes
    where = f"output {group.output!r}"
    if machine.agcus < 3:
        raise CompileError(f"{where}: a fused MLP loads A, W1 and W2 at once: it needs 3 "
                           f"AGCUs, the machine has {machine.agcus} (--agcus)")
    m, f = group.first.m, group.first.n
    if m > lanes:
        raise CompileError(f"{where}: a fused MLP keeps its {m} rows in one block of "
                           f"{lanes} (one systolic PCU per matmul): at most {lanes} rows")
    first = tile_matmul(group.first, geometry, 1, machine.agcus)
    second = tile_matmul(group.second, geometry, 1, machine.agcus)
    # the hidden rows fill the second matmul's panel in whole BF16 beats: the first
    # matmul computes the hidden size padded to the second's K (W1's zero columns; the
    # activation of them meets W2's zero rows)
    first = replace(first, col_tiles=second.k_pad // lanes)
    if first.n_pad > f:
        _check_padding_activation(graph, group, where, lanes)
    for name, t in (("first", first), ("second", second)):
        if t.chunks > 1:
            raise CompileError(f"{where}: the {name} matmul's K ({t.k}) does not fit one "
                               f"PMU panel ({geometry.pmu_words} words for {lanes} rows)")
    return MlpTiling(first, second)


def _check_padding_activation(graph, group, where, lanes):
    """Raise unless the activation of a hidden padding column (the first matmul's sum of
    zero products: +0 or -0) is finite, so that its products with W2's zero rows are
    zeros."""
    chain = group.chain
    outputs = {}
    for zero in (0, 0x80000000):
        rows = np.full(chain.x.shape, zero, np.uint32)
        part = graph.extract("padding", {chain.x: "h"}, {"s": chain.out_node})
        outputs[zero] = reference.exact_rows(part, {"h": rows}, lanes)["s"]
    values = np.concatenate(list(outputs.values())).view(np.float32)
    if not np.all(np.isfinite(values)):
        raise CompileError(f"{where}: the hidden size {group.first.n} is padded to whole "
                           f"beats of {2 * lanes}, and the activation of a padding column "
                           f"(0) is not finite: choose a hidden size that is a multiple "
                           f"of {2 * lanes}")


def _panel(kernel, name, t, stream, write, *, block_of):
    """The A panel PMU of tiling ``t`` fed by ``stream`` with ``write`` (one block)."""
    read = AccessPattern(0, (t.k_pad, t.col_tiles, 1), (1, 0, 0))
    return kernel.buffer(name, t.panel_words, [stream], buffers=t.buffers,
                         block_of=block_of, config={
                             "write": write, "write_lanes": 1, "read": read,
                             "read_lanes": t.k_pitch, "buffers": t.buffers,
                             "buffer_words": t.panel_words, "read_repeat": 1,
                             "read_passes": t.passes,
                             "skew_shift": t.k_pitch.bit_length() - 1,
                             "predicate": (0, t.panel_words)})


def lower_mlp(name, group, tiling, hbm_size, stages, plan=None):
    """``(kernel, images, addresses, bitstream_address)`` of an MLP group."""
    t1, t2 = tiling.first, tiling.second
    lanes = t1.lanes
    beat = lanes * WORD
    first, second = group.first, group.second
    images1, images2 = matmul_images(first, t1), matmul_images(second, t2)
    images = {first.a.name: images1[first.a.name], first.b.name: images1[first.b.name],
              second.b.name: images2[second.b.name], group.output: images2[group.output]}
    for image_name, image in images.items():
        check_layout(name, plan, image_name, image)
    addresses, bitstream_address = place_images(name, images, hbm_size, plan)
    kernel = Kernel(name)
    tensors = {n: kernel.tensor(n, image.shape, image.format) for n, image in images.items()}
    rows = t1.rows_per_pass
    x = kernel.load(tensors[first.a.name], AccessPattern(
        addresses[first.a.name], (t1.k_pad // (2 * lanes), rows, 1),
        (beat, t1.k_pad * BF16, 0)), name="load_x", config={"bf16": True})
    w1 = kernel.load(tensors[first.b.name], AccessPattern(
        addresses[first.b.name], (t1.k_pad // 2, t1.col_tiles, 1),
        (beat, t1.k_pad * lanes * BF16, 0)), name="load_w1", config={"bf16": True})
    w2 = kernel.load(tensors[second.b.name], AccessPattern(
        addresses[second.b.name], (t2.k_pad // 2, t2.col_tiles, 1),
        (beat, t2.k_pad * lanes * BF16, 0)), name="load_w2", config={"bf16": True})
    launch1 = kernel.output(kernel.nodes["load_w1"], "control_out")
    launch2 = kernel.output(kernel.nodes["load_w2"], "control_out")
    x_panel = _panel(kernel, "x_panel", t1, x, AccessPattern(
        0, (t1.k_pad // lanes, rows, 1), (lanes, t1.k_pitch, 0)), block_of=None)
    hidden = kernel.compute("matmul1", "matmul", [x_panel, w1], config={
        "mode": "systolic", "trips": (t1.k_pad, t1.col_tiles, 1)})
    kernel.connect(launch1, kernel.nodes["matmul1"], "control_in")
    # the activation, beat by beat: rows of a column tile, tile after tile
    builder = RowChainBuilder(group.chain, stages)
    pcus = builder.build()
    streams = {id(group.chain.x): hidden}
    for index, pcu in enumerate(pcus):
        if pcu.scalar is not None or pcu.reduce != "NONE" or pcu.per_row:
            raise CompileError(f"{name}: the operators between the matmuls must be "
                               f"element-wise (no reductions, no per-row scalars)")
        pcu.name = f"act{index}"
        inputs = [streams[id(pcu.in0)]]
        if pcu.in1 is not None:
            inputs.append(streams[id(pcu.in1)])
        streams[id(pcu.row_value)] = kernel.compute(pcu.name, "map", inputs, config={
            "mode": "simd", "trips": (rows, t1.col_tiles, 1), "stages": list(pcu.stages),
            "scalar_in": False, "tail": pcu.tail, "reduce": "NONE", "emit_every": True,
            "vector_out": True})
        kernel.connect(launch1, kernel.nodes[pcu.name], "control_in")
    activated = streams.get(id(group.chain.out_node))
    if activated is None:
        raise CompileError(f"{name}: the activation's result is not a row stream")
    # beat (tile j, row r) holds hidden columns 8j .. 8j + 7 of row r
    h_panel = _panel(kernel, "h_panel", t2, activated, AccessPattern(
        0, (rows, t1.col_tiles, 1), (t2.k_pitch, lanes, 0)), block_of=None)
    result = kernel.compute("matmul2", "matmul", [h_panel, w2], config={
        "mode": "systolic", "trips": (t2.k_pad, t2.col_tiles, 1)})
    kernel.connect(launch2, kernel.nodes["matmul2"], "control_in")
    out = group.output
    kernel.store(result, tensors[out], AccessPattern(
        addresses[out], (rows, t2.col_tiles, 1), (beat, t2.m_pad * beat, 0)),
        name=f"store_{out}", config={"bf16": False})
    kernel.row_groups = []
    kernel.streams = [s for s in kernel.streams if s.sinks or s.network == "control"]
    return kernel, images, addresses, bitstream_address


class MlpFamily(Family):
    """Two matmuls with an element-wise activation between them (a decoder's MLP)."""
    name = "mlp"
    placement_seed = "mlp"
    anneal = True                   # a long chain of units: anneal before routing
    benchmark = ("mlp", {"m": 8, "d": 32, "f": 64})

    def claims(self, graph):
        return sum(node.op == "matmul" for node in graph.live_nodes()) == 2

    def fuse(self, graph, name, out):
        return _match_mlp(graph, name, out)

    def tile(self, group, state):
        return tile_mlp(group, state.geometry, state.machine, state.graph)

    def kernel_name(self, graph_name, group, t):
        return f"{graph_name}_{t.first.m}x{t.first.k}x{t.first.n}"

    def lower(self, name, group, tiling, state):
        return Lowered(*lower_mlp(name, group, tiling, state.machine.region("hbm").size,
                                  state.machine.stages, state.plan))

    def meta(self, group, t, kernel):
        t1, t2 = t.first, t.second
        return {
            "group": self.name, "m": t1.m, "d": t1.k, "f": t1.n, "pcus":
            kernel.units_needed()["pcu"], "k_pad": [t1.k_pad, t2.k_pad], "macs": t.macs,
            "operands": [group.first.a.name, group.first.b.name, group.second.b.name],
            "chain": [node.describe() for node in group.chain.nodes],
            "pcu_programs": pcu_programs(kernel)}

    def exact(self, program, graph):
        return reference.exact_mlp(program, graph)

    def work(self, program):
        """``2 M D F`` MACs (X ``M x D`` times W1 ``D x F``, the hidden rows times W2
        ``F x D``); X, W1 and W2 read, the output written (the hidden rows stay in the
        array)."""
        x, w1, _ = program.meta["operands"]
        (m, d), f = tensor_shape(program, x), tensor_shape(program, w1)[1]
        return moved_work(program, program.meta["operands"], 2 * m * d * f)


#: The mlp family.
MLP = MlpFamily()
MlpGroup.family = MLP

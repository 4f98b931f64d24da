"""The mlp family: ``out = act(a @ w1).astype(bf16) @ w2``, two matmuls and the
element-wise operators between them (an activation: SiLU, GELU, ...) in one
configuration (``docs/fusion.md``)::

    load_x --> x_panel(s) (PMU) --> matmul1_p (systolic) <-- load_w1_p
    matmul1_* --merge--> hidden (PMU) --> act0 .. actN (SIMD PCUs: the element-wise
            chain, then the BF16 cast; a value read twice reaches its later reader
            through a PMU, ``late``)
            --> h_panel(s) (PMU: the activated rows, column tile by column tile)
    h_panel(s) --> matmul2_p (systolic) <-- load_w2_p
    matmul2_* --merge--> store_y

One row block (``lanes`` rows): each matmul's column tiles spread over up to
``hbm_bytes_per_cycle / (2 lanes)`` systolic PCUs sharing its A panel, each with a B
stream (an AGCU) of its own, so the weights stream at the HBM peak (one BF16 stream is
what one systolic PCU takes, half the peak). More rows: passes of row blocks, one PCU per
block and matmul, B multicast, A panels kept by the PMUs' address predicate. The
activated rows never leave the array: they fill the second matmul's A panels, which it
reads once a buffer is full (the PMU's buffer handshake) while W2 streams in. The
activation chain is built by :class:`rdu.compiler.row_chain.RowChainBuilder`, as a row
kernel's.
"""

from dataclasses import dataclass, replace

import numpy as np

from hdl.fp_latency import systolic_group

from ...ir import AccessPattern, BlockOffset, Kernel
from ...models import reference
from ..core import CompileError
from ..group import Group, Lowered
from ..lower import BF16, COUNT_LIMIT, WORD, ceil_div, check_layout, place_images
from ..row_chain import RowChainBuilder
from .base import (
    Family,
    is_bf16_input,
    moved_work,
    pcu_programs,
    tensor_shape,
    unsupported,
)
from .matmul import (
    MatmulGroup,
    MatmulTiling,
    hbm_loads,
    matmul_group,
    matmul_images,
    tile_matmul,
)
from .rows import RowGroup

__all__ = ["MlpGroup", "MlpTiling", "MlpFamily", "MLP", "MAX_ROW_BLOCKS", "tile_mlp",
           "lower_mlp", "weight_splits"]


@dataclass
class MlpGroup(Group):
    """``out = act(a @ w1).astype(bf16) @ w2``: two matmuls and the element-wise
    operators between them (an activation: SiLU, GELU, ...) in one configuration; the
    activated rows wait in a PMU as the second matmul's A panel."""
    first: MatmulGroup          # a @ w1 (output: the hidden rows)
    chain: RowGroup             # the element-wise operators on them, ending in the cast
    second: MatmulGroup         # (the cast rows) @ w2
    output: str
    up: MatmulGroup | None = None   # gated (SwiGLU): a @ w_up, the chain's second row operand

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
    chain, stack, firsts = [], [cast], []
    while stack:
        node = stack.pop()
        if node.op == "matmul":
            if all(node is not f for f in firsts):
                firsts.append(node)
            continue
        if node.op == "const" or any(node is c for c in chain):
            continue
        if node.op not in ("binary", "unary") or node.shape != cast.shape:
            raise unsupported(node, f"output {name!r}: between two matmuls only "
                               f"element-wise operators of the rows are fused (got "
                               f"{node.op} {node.attrs.get('fn', '')} of shape {node.shape})")
        chain.append(node)
        stack.extend(node.inputs)
    if not firsts:
        raise unsupported(out, f"output {name!r}: the second matmul's A does not come from "
                           f"a matmul")
    order = {id(node): index for index, node in enumerate(graph.nodes)}
    firsts.sort(key=lambda node: order[id(node)])
    if len(firsts) > 2 or len(firsts) == 2 and firsts[0].inputs[0] is not firsts[1].inputs[0]:
        raise unsupported(firsts[-1], f"output {name!r}: the operators before the second "
                          f"matmul read {len(firsts)} matmuls; fused: one, or two of the "
                          f"same A (gated: act(a @ w_gate) * (a @ w_up))")
    chain.sort(key=lambda node: order[id(node)])
    first = firsts[0]
    group1 = matmul_group(first, "%hidden")
    up = matmul_group(firsts[1], "%up") if len(firsts) == 2 else None
    second = MatmulGroup(cast, w2, output=name, nodes=[out])
    others = [firsts[1]] if up is not None else []
    return MlpGroup(group1, RowGroup(first, chain, "%activated", cast, others=others),
                    second, name, up)


#: Row blocks a pass at most: merges of more result streams rarely route (on the 8x8
#: array, 9 to 14 blocks found no placement in 60 annealed tries each, 8 did).
MAX_ROW_BLOCKS = 8


@dataclass(frozen=True)
class MlpTiling:
    """Two matmuls and the activation chain between them. A pass covers ``blocks`` row
    blocks of ``lanes`` rows, one systolic PCU per row block and matmul (the B stream
    multicast to them, as a GEMM's); with one row block, a matmul's column tiles may
    instead spread over ``splits[i]`` PCUs that share its A panel (PCU ``p`` of ``s``
    computes tiles ``p, p + s, ...``, its B stream from an AGCU of its own)."""
    first: MatmulTiling
    second: MatmulTiling
    splits: tuple = (1, 1)

    @property
    def blocks(self):
        return self.first.pcus

    @property
    def macs(self):
        return self.first.macs + self.second.macs

    def describe(self):
        return (f"mlp: {self.first.describe()}; then {self.second.describe()}; column "
                f"tiles over {self.splits[0]} and {self.splits[1]} systolic PCUs")


def weight_splits(machine, lanes, free, limit=None):
    """``(s1, s2)``: the systolic PCUs of each matmul of one row block, each with a B
    stream (an AGCU) of its own. A BF16 B stream brings ``lanes`` values (``2 lanes``
    HBM bytes) a cycle, as much as one systolic PCU takes (``docs/agcu.md``,
    ``docs/pcu.md``), so a matmul needs ``hbm_bytes_per_cycle / (2 lanes)`` of them (2 on
    the default machine) to stream its weights at the HBM peak. X takes one AGCU; every
    other AGCU streams weights; the matmuls run one after the other, so each gets half
    of them (the first the odd one); ``free``: the PCUs the activation leaves."""
    peak = hbm_loads(machine)
    if limit is not None:
        peak = min(peak, limit)
    streams = machine.agcus - 1
    s1 = s2 = 1
    while s1 + s2 < min(streams, free) and min(s1, s2) < peak:
        if s1 <= s2:
            s1 += 1
        else:
            s2 += 1
    return s1, s2


def tile_mlp(group, geometry, machine, graph, stages, max_pcus=None):
    """The :class:`MlpTiling` of a :class:`MlpGroup` of ``graph``: both matmuls keep
    their whole K in a PMU panel. One row block: each matmul's column tiles spread over
    the PCUs :func:`weight_splits` gives it; more rows: as many row blocks a pass as
    the PCUs the activation leaves hold two at a time (one per matmul), at most
    ``max_pcus``, each weight read once a pass."""
    lanes = geometry.lanes
    tile_group = systolic_group(machine.latency_table)
    where = f"output {group.output!r}"
    loads = 3 if group.up is None else 4
    if machine.agcus < loads:
        raise CompileError(f"{where}: a fused MLP loads A, W1{', W_up' if loads > 3 else ''} "
                           f"and W2 at once: it needs {loads} AGCUs, the machine has "
                           f"{machine.agcus} (--agcus)")
    m, f = group.first.m, group.first.n
    chain_pcus = len(RowChainBuilder(group.chain, stages).build())
    capacity = geometry.capacity()
    free = capacity["pcu"] - chain_pcus - (group.up is not None)
    if group.up is not None and m > lanes:
        raise CompileError(f"{where}: a gated MLP is fused for one row block ({lanes} "
                           f"rows) yet, not {m}")
    if free < 2:
        raise CompileError(f"{where}: two matmuls and an activation of {chain_pcus} PCUs "
                           f"need {chain_pcus + 2} PCUs, the array has {capacity['pcu']}")
    # PMUs: an A panel per row block and matmul, the hidden tiles, the delayed h; the
    # activation takes one beat a cycle, and a pass's first matmul makes `lanes` beats
    # per block every K steps
    k_beats = ceil_div(group.first.k, 2 * lanes) * 2
    blocks = min(free // 2, (capacity["pmu"] - 2) // 2, ceil_div(m, lanes), k_beats,
                 MAX_ROW_BLOCKS, max_pcus or free)
    splits = (1, 1) if blocks > 1 or group.up is not None else \
        weight_splits(machine, lanes, free, max_pcus)
    first = tile_matmul(group.first, geometry, max(1, blocks), machine.agcus, tile_group,
                        own_loads=False)
    second = tile_matmul(group.second, geometry, max(1, blocks), machine.agcus, tile_group,
                         own_loads=False, k_multiple=lanes * tile_group)
    # the hidden rows fill the second matmul's panel in whole BF16 beats: the first
    # matmul computes the hidden size padded to the second's K (W1's zero columns; the
    # activation of them meets W2's zero rows), in whole systolic tiles of `tile_group`
    # column tiles (fp_latency: the second's K a multiple of them); each matmul's
    # systolic tiles are padded to a multiple of its PCUs (zero columns of W1 / W2)
    s1, s2 = splits
    hidden_groups = second.k_pad // (lanes * tile_group)
    while hidden_groups % s1:
        s1 -= 1
    s2 = min(s2, second.col_groups)         # no PCU of only padding
    first = replace(first, col_tiles=hidden_groups * tile_group)
    second = replace(second, col_tiles=ceil_div(second.col_groups, s2) * s2 * tile_group)
    if first.n_pad > f:
        _check_padding_activation(graph, group, where, lanes)
    for name, t in (("first", first), ("second", second)):
        if t.chunks > 1:
            raise CompileError(f"{where}: the {name} matmul's K ({t.k}) does not fit one "
                               f"PMU panel ({geometry.pmu_words} words for {lanes} rows)")
    if first.col_tiles * first.passes * first.pcus > COUNT_LIMIT:
        raise CompileError(f"{where}: {first.passes} passes of {first.pcus} row blocks of "
                           f"{first.col_tiles} hidden column tiles exceed the 16-bit pass "
                           f"counter of a PMU ({COUNT_LIMIT})")
    return MlpTiling(first, second, (s1, s2))


def _check_padding_activation(graph, group, where, lanes):
    """Raise unless the activation of a hidden padding column (the first matmul's sum of
    zero products: +0 or -0) is finite, so that its products with W2's zero rows are
    zeros."""
    chain = group.chain
    outputs = {}
    for zero in (0, 0x80000000):
        rows = np.full(chain.x.shape, zero, np.uint32)
        sources = {chain.x: "h", **{other: f"u{i}" for i, other in enumerate(chain.others)}}
        part = graph.extract("padding", sources, {"s": chain.out_node})
        outputs[zero] = reference.exact_rows(part, {name: rows for name in sources.values()},
                                             lanes)["s"]
    values = np.concatenate(list(outputs.values())).view(np.float32)
    if not np.all(np.isfinite(values)):
        raise CompileError(f"{where}: the hidden size {group.first.n} is padded to whole "
                           f"beats of {2 * lanes}, and the activation of a padding column "
                           f"(0) is not finite: choose a hidden size that is a multiple "
                           f"of {2 * lanes}")


def _panels(kernel, name, t, stream, write, tiles, matmul, first_block):
    """The A panel PMUs of tiling ``t``, one per row block, fed by ``stream`` (multicast)
    with ``write``; panel ``p`` keeps the row block of ``{matmul}_p`` (its place in the
    merge order less ``first_block``, :mod:`rdu.compiler.bind`), read once for each of
    ``tiles`` systolic tiles."""
    words = t.panel_words
    panels = []
    for p in range(t.pcus):
        low = BlockOffset(-first_block * words, words) if t.pcus > 1 else 0
        high = BlockOffset((1 - first_block) * words, words) if t.pcus > 1 else words
        panels.append(kernel.buffer(
            f"{name}{p}" if t.pcus > 1 else name, words, [stream], buffers=t.buffers,
            block_of=f"{matmul}_{p}" if t.pcus > 1 else None, config={
                "write": write, "write_lanes": 1,
                "read": AccessPattern(low, (t.k_pad, tiles, 1), (1, 0, 0)),
                "read_lanes": t.k_pitch, "buffers": t.buffers, "buffer_words": words,
                "read_repeat": 1, "read_passes": t.passes,
                "skew_shift": t.k_pitch.bit_length() - 1, "predicate": (low, high)}))
    return panels


def _matmul(kernel, prefix, t, split, panels, tensor, address, first_block):
    """The systolic PCUs ``{prefix}_p`` of tiling ``t``: one per row block, reading its
    panel, the B stream multicast to them; or, with one row block, ``split`` of them
    reading the one panel (multicast), each with a B stream of its own: the PCU that is
    row block ``b`` of the merge (:mod:`rdu.compiler.bind`; ``first_block`` for the
    first) computes systolic tile ``b - first_block`` (``t.group`` column tiles), then
    every ``split``-th. Returns the result stream (merged systolic tile by tile) and the
    first B load's launch token."""
    lanes = t.lanes
    beat = lanes * WORD
    group_bytes = t.k_pad * t.group * lanes * BF16  # one systolic tile of B, packed BF16
    tiles = t.col_groups // split
    count = max(split, len(panels))
    results, launch, stream = [], None, None
    for p in range(count):
        load = f"load_{tensor.name}_{p}"
        if split > 1 or p == 0:
            start = (BlockOffset(address - first_block * group_bytes, group_bytes)
                     if split > 1 else address)
            stream = kernel.load(tensor, AccessPattern(
                start, (t.k_pad * t.group // 2, tiles, t.passes),
                (beat, split * group_bytes, 0)),
                name=load, config={"bf16": True})
            if split > 1:
                kernel.nodes[load].block_of = f"{prefix}_{p}"
        if launch is None:
            launch = kernel.output(kernel.nodes[load], "control_out")
        results.append(kernel.compute(
            f"{prefix}_{p}", "matmul", [panels[p % len(panels)], stream], config={
                "mode": "systolic", "trips": (t.k_pad, tiles, t.passes),
                **({"group": t.group} if t.group > 1 else {})}))
        kernel.connect(launch, kernel.nodes[f"{prefix}_{p}"], "control_in")
    kernel.row_groups.append([f"{prefix}_{p}" for p in range(count)])
    if count == 1:
        return results[0], launch
    # row blocks: a column tile's rows from each in turn; split: a systolic tile's
    return kernel.merge(f"{prefix}_tiles", results,
                        [lanes * (t.group if split > 1 else 1)] * count), launch


def _relay(kernel, name, stream, lanes, t):
    """A PMU passing ``stream`` on through four buffers of ``lanes`` beats (one row
    block's column tile): a buffer is read once it is full, so a small one adds little
    latency, and four of them take up to four tiles while the reader is held."""
    tile = AccessPattern(0, (lanes, 1, 1), (lanes, 0, 0))
    return kernel.buffer(name, 4 * lanes * lanes, [stream], buffers=4, config={
        "write": tile, "write_lanes": 1, "read": tile, "read_lanes": 1, "buffers": 4,
        "buffer_words": lanes * lanes, "read_repeat": 1,
        "read_passes": t.col_tiles * t.passes * t.pcus})


def _late(kernel, streams, readers, value, pcu, lanes, t):
    """The stream of ``value`` for activation PCU ``pcu``: a value that an earlier PCU of
    the chain reads too (SiLU's ``h``, read by the first PCU and by the last, ``h * r``)
    reaches the later readers through a :func:`_relay`, which takes the beats while the
    earlier reader's results travel down the chain; without it the multicast holds the
    value until the last reader takes it, one beat per trip through the chain. (A
    buffer larger than what the chain's FIFOs hold would deadlock: the later reader
    waits for a full buffer while the chain waits for it.)"""
    if readers[id(value)][0] is pcu:
        return streams[id(value)]
    key = ("late", id(value))
    if key not in streams:
        streams[key] = _relay(kernel, f"late{sum(isinstance(k, tuple) for k in streams)}",
                              streams[id(value)], lanes, t)
    return streams[key]


def lower_mlp(name, group, tiling, hbm_size, stages, plan=None):
    """``(kernel, images, addresses, bitstream_address)`` of an MLP group."""
    t1, t2 = tiling.first, tiling.second
    s1, s2 = tiling.splits
    lanes = t1.lanes
    beat = lanes * WORD
    first, second = group.first, group.second
    images1, images2 = matmul_images(first, t1), matmul_images(second, t2)
    images = {first.a.name: images1[first.a.name], first.b.name: images1[first.b.name],
              second.b.name: images2[second.b.name], group.output: images2[group.output]}
    if group.up is not None:
        images[group.up.b.name] = matmul_images(group.up, t1)[group.up.b.name]
    for image_name, image in images.items():
        check_layout(name, plan, image_name, image)
    addresses, bitstream_address = place_images(name, images, hbm_size, plan)
    kernel = Kernel(name)
    kernel.row_groups = []
    tensors = {n: kernel.tensor(n, image.shape, image.format) for n, image in images.items()}
    rows = t1.rows_per_pass
    x = kernel.load(tensors[first.a.name], AccessPattern(
        addresses[first.a.name], (t1.k_pad // (2 * lanes), rows, t1.passes),
        (beat, t1.k_pad * BF16, rows * t1.k_pad * BF16)), name="load_x",
        config={"bf16": True})
    x_panels = _panels(kernel, "x_panel", t1, x, AccessPattern(
        0, (t1.k_pad // lanes, rows, 1), (lanes, t1.k_pitch, 0)), t1.col_groups // s1,
        "matmul1", 0)
    hidden, launch1 = _matmul(kernel, "matmul1", t1, s1, x_panels, tensors[first.b.name],
                              addresses[first.b.name], 0)
    producers = max(s1, t1.pcus)
    if producers > 1:
        # a merged stream has one consumer; the activation may read the hidden rows
        # twice (SiLU: h * r(h)): a PMU passes the tiles on
        hidden = _relay(kernel, "hidden", hidden, lanes, t1)
    # the activation, beat by beat: rows of a column tile, tile after tile
    pcus = RowChainBuilder(group.chain, stages).build()
    streams = {id(group.chain.x): hidden}
    if group.up is not None:
        # gated: the up product on a systolic PCU of its own, reading the same X panel
        # in lockstep; its tiles wait in a relay while the gate's go down the chain
        up, _ = _matmul(kernel, "matmul1u", t1, 1, x_panels, tensors[group.up.b.name],
                        addresses[group.up.b.name], producers)
        streams[id(group.chain.others[0])] = _relay(kernel, "up_tiles", up, lanes, t1)
        producers += 1
    readers = {}
    for pcu in pcus:
        for value in (pcu.in0, pcu.in1):
            if value is not None:
                readers.setdefault(id(value), []).append(pcu)
    for index, pcu in enumerate(pcus):
        if pcu.scalar is not None or pcu.reduce != "NONE" or pcu.per_row:
            raise CompileError(f"{name}: the operators between the matmuls must be "
                               f"element-wise (no reductions, no per-row scalars)")
        pcu.name = f"act{index}"
        inputs = [streams[id(value)] if value in group.chain.others else
                  _late(kernel, streams, readers, value, pcu, lanes, t1)
                  for value in (pcu.in0, pcu.in1) if value is not None]
        streams[id(pcu.row_value)] = kernel.compute(pcu.name, "map", inputs, config={
            "mode": "simd", "trips": (rows, t1.col_tiles, t1.passes),
            "stages": list(pcu.stages), "scalar_in": False, "tail": pcu.tail,
            "reduce": "NONE", "emit_every": True, "vector_out": True})
        kernel.connect(launch1, kernel.nodes[pcu.name], "control_in")
    activated = streams.get(id(group.chain.out_node))
    if activated is None:
        raise CompileError(f"{name}: the activation's result is not a row stream")
    # beat (tile j, row block b, row r) holds hidden columns 8j .. 8j + 7 of row r of
    # block b: row block b's panel holds it at row r, column 8j
    h_panels = _panels(kernel, "h_panel", t2, activated, AccessPattern(
        0, (lanes, t2.pcus, t1.col_tiles), (t2.k_pitch, t2.panel_words, lanes)),
        t2.col_groups // s2, "matmul2", producers)
    result, _ = _matmul(kernel, "matmul2", t2, s2, h_panels, tensors[second.b.name],
                        addresses[second.b.name], producers)
    out = group.output
    kernel.store(result, tensors[out], AccessPattern(
        addresses[out], (rows, t2.col_tiles, t2.passes),
        (beat, t2.m_pad * beat, rows * beat)),
        name=f"store_{out}", config={"bf16": False})
    kernel.streams = [s for s in kernel.streams if s.sinks or s.network == "control"]
    return kernel, images, addresses, bitstream_address


class MlpFamily(Family):
    """Two matmuls with an element-wise activation between them (a decoder's MLP)."""
    name = "mlp"
    placement_seed = "mlp"
    anneal = True                   # a long chain of units: anneal before routing
    benchmark = ("mlp", {"m": 8, "d": 32, "f": 64})

    def claims(self, graph):
        """Two matmuls, or three (gated: two first products of one A)."""
        return sum(node.op == "matmul" for node in graph.live_nodes()) in (2, 3)

    def fuse(self, graph, name, out):
        return _match_mlp(graph, name, out)

    def tile(self, group, state):
        return tile_mlp(group, state.geometry, state.machine, state.graph,
                        state.machine.stages, state.max_pcus)

    def fewer_pcus(self, tiling):
        most = max(tiling.blocks, *tiling.splits)
        return most - 1 if most > 1 else None

    def kernel_name(self, graph_name, group, t):
        return f"{graph_name}_{t.first.m}x{t.first.k}x{t.first.n}"

    def lower(self, name, group, tiling, state):
        return Lowered(*lower_mlp(name, group, tiling, state.machine.region("hbm").size,
                                  state.machine.stages, state.plan))

    def meta(self, group, t, kernel):
        t1, t2 = t.first, t.second
        return {
            "group": self.name, "m": t1.m, "d": t1.k, "f": t1.n, "pcus":
            kernel.units_needed()["pcu"], "k_pad": [t1.k_pad, t2.k_pad],
            "macs": t.macs + (t1.macs if group.up is not None else 0),
            "splits": list(t.splits), "blocks": t.blocks, "passes": t1.passes,
            "tile_group": t1.group,
            "operands": [group.first.a.name, group.first.b.name, group.second.b.name,
                         *([group.up.b.name] if group.up is not None else [])],
            "chain": [node.describe() for node in group.chain.nodes],
            "pcu_programs": pcu_programs(kernel)}

    def exact(self, program, graph):
        return reference.exact_mlp(program, graph)

    def work(self, program):
        """``2 M D F`` MACs (X ``M x D`` times W1 ``D x F``, the hidden rows times W2
        ``F x D``); X, W1 and W2 read, the output written (the hidden rows stay in the
        array)."""
        x, w1, *_ = program.meta["operands"]
        (m, d), f = tensor_shape(program, x), tensor_shape(program, w1)[1]
        products = len(program.meta["operands"]) - 1      # gated: three
        return moved_work(program, program.meta["operands"], products * m * d * f)


#: The mlp family.
MLP = MlpFamily()
MlpGroup.family = MLP

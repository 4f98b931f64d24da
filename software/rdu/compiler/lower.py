"""Pass ``lower``: the tiled matmul group -> IR nodes with their unit configurations.

The IR (:mod:`rdu.ir`) of a matmul group on ``P`` systolic PCUs::

    load_a --multicast--> a_panel0..P-1 (PMU: keep my rows, transpose through the banks)
    a_panel_p ----------> matmul_p.vector_in0              (systolic PCU)
    load_b --multicast--> matmul_0..P-1.vector_in1         (all PCUs in lockstep)
    load_b.control_out -> every PCU's control_in           (the launch token)
    matmul_p --merge----> [epilogue_g (SIMD PCU) ->] store_g   (even / odd p)

Every node carries its unit's configuration as IR data (:attr:`rdu.ir.Node.config`),
derived here from the tiling's access patterns: the A panel's write pattern is the A
stream's order, its read pattern the columns of each tile, the loads' and stores'
patterns walk the tensor images this pass chooses (:class:`rdu.layout.Image`). Values
that depend on which row block a PCU computes (decided by the merge order, after
routing) are :class:`rdu.ir.BlockOffset` until :mod:`rdu.compiler.bind`.

Memory: each image on its own 4 KiB page from the HBM base, then the bitstream.
"""

from ..ir import AccessPattern, BlockOffset, Kernel
from ..layout import Image, Piece
from ..memory_map import HBM
from .core import CompileError, register

__all__ = ["lower_matmul", "place_images", "check_layout", "same_geometry", "PAGE", "WORD",
           "BF16"]

PAGE = 4096
WORD = 4
BF16 = 2


def _ceil(a, b):
    return -(-a // b)


def _images(group, t):
    """The tensor images of the group: A (+ the ones column of a folded bias), B (+ the
    bias row), the output."""
    a_pieces = [Piece(group.a.name, (0, 0), (t.m, t.k))]
    b_pieces = [Piece(group.b.name, (0, 0), (t.k, t.n))]
    if group.bias is not None:
        a_pieces.append(Piece(None, (0, t.k), (t.m, 1), 1.0))
        b_pieces.append(Piece(group.bias.name, (t.k, 0), (1, t.n)))
    if t.chunks > 1:
        a_split = ((t.passes, t.rows_per_pass, t.chunks, t.chunk), (0, 2, 1, 3))
    else:
        a_split = (None, None)
    return {
        group.a.name: Image((t.m_pad, t.k_pad), tuple(a_pieces), *a_split, "bf16"),
        group.b.name: Image((t.k_pad, t.n_pad), tuple(b_pieces),
                            (t.k_pad, t.col_tiles, t.lanes), (1, 0, 2), "bf16"),
        group.output: Image((t.m_pad, t.n_pad), (Piece(group.output, (0, 0), (t.m, t.n)),),
                            (t.m_pad, t.col_tiles, t.lanes), (1, 0, 2),
                            "bf16" if group.out_dtype == "bf16" else "fp32"),
    }


def place_images(name, images, hbm_size, plan=None):
    """``(addresses, bitstream_address)``: each image on its own 4 KiB pages from the HBM
    base (or ``plan.start``), then the bitstream; images ``plan.addresses`` names stay
    where the plan puts them. A one-line error when HBM is too small."""
    fixed = dict(plan.addresses) if plan else {}
    start = plan.start if plan and plan.start is not None else HBM.base
    if start % PAGE:
        raise CompileError(f"{name}: images start at 0x{start:x}, not on a {PAGE}-byte page")
    addresses, address = {}, start
    for image_name, image in images.items():
        if image_name in fixed:
            addresses[image_name] = fixed[image_name]
            continue
        addresses[image_name] = address
        address += _ceil(image.nbytes, PAGE) * PAGE
    spans = sorted((addresses[n], addresses[n] + images[n].nbytes, n) for n in images)
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise CompileError(f"{name}: images {first!r} and {second!r} overlap in HBM")
    needed = address + 4 * PAGE - HBM.base
    if needed > hbm_size:
        raise CompileError(f"{name}: the tensors and the bitstream need {needed} bytes of "
                           f"HBM, the machine has {hbm_size} ({needed - hbm_size} short): "
                           f"raise --hbm-mib to at least {_ceil(needed, 1 << 20)}")
    return addresses, address


def check_layout(name, plan, image_name, image):
    """Refuse (one line) an image whose geometry is not the one ``plan`` asks for."""
    wanted = plan.layout(image_name) if plan else None
    if wanted is not None and not same_geometry(wanted, image):
        raise CompileError(f"{name}: {image_name!r} is {image.describe()} here, its other "
                           f"kernel has it as {wanted.describe()}")


def same_geometry(a, b):
    """Images of the same bytes per element (shape, tiling, format; any pieces)."""
    return (tuple(a.shape), a.split and tuple(a.split), a.perm and tuple(a.perm),
            a.format) == (tuple(b.shape), b.split and tuple(b.split),
                          b.perm and tuple(b.perm), b.format)


def lower_matmul(name, group, t, hbm_size, plan=None):
    """``(kernel, images, addresses, bitstream_address)`` of tiling ``t``; ``plan``
    (:class:`ImagePlan`) may ask for the output row-major (FP32: a consumer that reads
    rows), else every image must be the one this lowering chooses."""
    lanes, pcus = t.lanes, t.pcus
    beat = lanes * WORD                       # bytes of one vector beat (one AXI beat)
    images = _images(group, t)
    c_image = images[group.output]
    wanted = plan.layout(group.output) if plan else None
    row_major = wanted is not None and wanted.split is None
    if row_major:
        if group.out_dtype == "bf16":
            raise CompileError(f"{name}: a BF16 matmul result is written by column tiles "
                               f"(two rows per beat), not row-major")
        images[group.output] = c_image = Image(c_image.shape, c_image.pieces, None, None,
                                               c_image.format)
    for image_name, image in images.items():
        if not (row_major and image_name == group.output):
            check_layout(name, plan, image_name, image)
    addresses, bitstream_address = place_images(name, images, hbm_size, plan)
    a_name, b_name, c_name = group.a.name, group.b.name, group.output
    kernel = Kernel(name)
    tensors = {image_name: kernel.tensor(image_name, image.shape, image.format)
               for image_name, image in images.items()}
    rows = t.rows_per_pass
    row_bytes = t.k_pad * BF16
    if t.chunks == 1:
        # the pass's rows once; each PMU keeps its panel for every column tile
        a_pattern = AccessPattern(addresses[a_name], (t.k_pad // (2 * lanes), rows, t.passes),
                                  (beat, row_bytes, rows * row_bytes))
        write = AccessPattern(0, (t.k_pad // lanes, rows, 1), (lanes, t.k_pitch, 0))
        read = AccessPattern(BlockOffset(0, t.panel_words), (t.k_pad, t.col_tiles, 1),
                             (1, 0, 0))
        read_passes = t.passes
    else:
        # chunk-major A: the pass's chunks again for every column tile
        a_pattern = AccessPattern(addresses[a_name],
                                  (rows * t.k_pad // (2 * lanes), t.col_tiles, t.passes),
                                  (beat, 0, rows * row_bytes))
        write = AccessPattern(0, (t.chunk // lanes, rows, 1), (lanes, t.k_pitch, 0))
        read = AccessPattern(BlockOffset(0, t.panel_words), (t.chunk, 1, 1), (1, 0, 0))
        read_passes = t.passes * t.col_tiles * t.chunks
    a_stream = kernel.load(tensors[a_name], a_pattern, name="load_a", config={"bf16": True})
    b_pattern = AccessPattern(addresses[b_name], (t.k_pad // 2, t.col_tiles, t.passes),
                              (beat, t.k_pad * lanes * BF16, 0))
    b_stream = kernel.load(tensors[b_name], b_pattern, name="load_b", config={"bf16": True})
    launch = kernel.output(kernel.nodes["load_b"], "control_out")
    results = []
    for p in range(pcus):
        panel = kernel.buffer(
            f"a_panel{p}", t.panel_words, [a_stream], buffers=t.buffers,
            block_of=f"matmul{p}", config={
                "write": write, "write_lanes": 1, "read": read, "read_lanes": t.k_pitch,
                "buffers": t.buffers, "buffer_words": t.panel_words, "read_repeat": 1,
                "read_passes": read_passes, "skew_shift": t.k_pitch.bit_length() - 1,
                "predicate": (BlockOffset(0, t.panel_words),
                              BlockOffset(t.panel_words, t.panel_words))})
        result = kernel.compute(f"matmul{p}", "matmul", [panel, b_stream], config={
            "mode": "systolic", "trips": (t.k_pad, t.col_tiles, t.passes)})
        kernel.connect(launch, kernel.nodes[f"matmul{p}"], "control_in")
        results.append(result)
    kernel.row_groups = []
    bf16_out = group.out_dtype == "bf16"
    for g in range(t.stores):
        members = results[g::t.stores]
        stream = members[0] if len(members) == 1 else kernel.merge(
            f"c_rows{g}", members, [lanes] * len(members))
        if t.epilogue_pcus:
            stream = kernel.compute(f"epilogue{g}", "map", [stream], config={
                "mode": "simd", "trips": (len(members) * lanes, t.col_tiles, t.passes),
                "stages": list(group.epilogue), "emit_every": True, "vector_out": True})
            kernel.connect(launch, kernel.nodes[f"epilogue{g}"], "control_in")
        # C by column tile: a row of a tile is a vector beat (FP32) or half a beat (BF16,
        # the AGCU packs two rows into one AXI beat)
        row = lanes * (BF16 if bf16_out else WORD)
        if row_major:
            # a tile's row is one beat of C's row: rows t.n_pad * 4 bytes apart
            pitch = t.n_pad * WORD
            store = AccessPattern(BlockOffset(addresses[c_name], lanes * pitch),
                                  (len(members) * lanes, t.col_tiles, t.passes),
                                  (pitch, beat, rows * pitch))
        else:
            store = AccessPattern(BlockOffset(addresses[c_name], lanes * row),
                                  (len(members) * lanes * row // beat, t.col_tiles,
                                   t.passes), (beat, t.m_pad * row, rows * row))
        kernel.store(stream, tensors[c_name], store, name=f"store_c{g}",
                     block_of=f"c_rows{g}" if len(members) > 1 else members[0].source.node,
                     config={"bf16": bf16_out})
        kernel.row_groups.append([s.source.node for s in members])
    return kernel, images, addresses, bitstream_address


@register("lower", "tiled operators -> IR nodes, streams and unit configurations")
def lower(state):
    from .lower_attention import lower_attention
    from .lower_rows import lower_rows
    group, = state.groups
    t = state.tiling
    hbm = state.machine.region("hbm")
    if group.pattern == "attention":
        name = (f"{state.graph.name}_{t.mode}_h{t.heads}g{t.kv_heads}_l{t.seq}"
                f"d{t.dim}")
        lowered = lower_attention(name, group, t, hbm.size)
        for image_name, image in lowered[1].items():
            check_layout(name, state.plan, image_name, image)
    elif group.pattern == "matmul":
        name = f"{state.graph.name}_{t.m}x{t.n}x{t.k}"
        lowered = lower_matmul(name, group, t, hbm.size, state.plan)
    elif group.pattern == "mlp":
        from .lower_mlp import lower_mlp
        name = f"{state.graph.name}_{t.first.m}x{t.first.k}x{t.first.n}"
        lowered = lower_mlp(name, group, t, hbm.size, state.machine.stages, state.plan)
    else:
        name = f"{state.graph.name}_{t.rows}x{t.length}"
        lowered = lower_rows(name, group, t, hbm.size, state.machine.stages, state.plan)
    state.kernel, state.layouts, state.addresses, state.bitstream_address = lowered
    return dump_kernel(state.kernel)


def dump_kernel(kernel):
    """The IR as text: one line per node with its configuration, one per stream."""
    lines = [f"kernel {kernel.name}"]
    for node in kernel.nodes.values():
        config = ", ".join(f"{key}={value}" for key, value in node.config.items())
        extra = f" block_of={node.block_of}" if node.block_of else ""
        op = f" {node.op}" if hasattr(node, "op") else ""
        lines.append(f"  {node.unit} {node.name}{op}{extra}: {config}")
        if getattr(node, "pattern", None) is not None:
            lines.append(f"    pattern {node.pattern}")
    for stream in kernel.streams:
        sinks = ", ".join(f"{p.node}.{p.name}" for p in stream.sinks)
        sources = ", ".join(f"{p.node}.{p.name}" for p in stream.sources)
        lines.append(f"  {stream.network} {stream.name}: {sources} -> {sinks}")
    return "\n".join(lines)

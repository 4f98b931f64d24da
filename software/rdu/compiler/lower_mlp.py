"""Pass ``lower`` for an MLP group: two matmuls and the activation between them, one
configuration (``docs/fusion.md``)::

    load_x --> x_panel (PMU) --> matmul1 (systolic) <-- load_w1
    matmul1 --> act0 .. actN (SIMD PCUs: the element-wise chain, then the BF16 cast)
            --> h_panel (PMU: the activated rows, column tile by column tile)
    h_panel --> matmul2 (systolic) <-- load_w2
    matmul2 --> store_y

Both matmuls are one row block (``lanes`` rows) on one systolic PCU; the activated rows
never leave the array: they fill the second matmul's A panel, which it reads once its
buffer is full (the PMU's buffer handshake) while W2 streams in. The activation chain is
built by :class:`rdu.compiler.lower_rows._Builder`, as a row kernel's.
"""

from ..ir import AccessPattern, Kernel
from .core import CompileError
from .lower import BF16, WORD, _images, check_layout, place_images
from .lower_rows import _Builder

__all__ = ["lower_mlp"]


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
    images1, images2 = _images(first, t1), _images(second, t2)
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
    builder = _Builder(group.chain, stages)
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

"""Pass ``emit``: the :class:`rdu.program.Program`: bitstream, images, manifest.

The manifest records what a runtime needs (each tensor's image, address and layout, the
outputs, the AGCUs to start) and the compiler's decisions (tiling, placement, row
blocks, the time of each pass) so that a build can be inspected and replayed.
"""

from ..program import Program
from .core import register
from .encode import agcu_index

__all__ = []


@register("emit", "bitstream, tensor images and manifest -> Program")
def emit(state):
    group, = state.groups
    t, kernel, mapping = state.tiling, state.kernel, state.mapping
    geometry, machine = state.geometry, state.machine
    sites = mapping.placement.sites
    images, addresses = state.layouts, state.addresses
    inputs = {name: (addresses[name], None) for name in images if name != group.output}
    outputs = {group.output: (addresses[group.output], images[group.output].words)}
    execute = sorted({agcu_index(geometry, site) for site in sites.values()
                      if site.unit == "agcu"})
    tensors = {}
    for image_name, image in images.items():
        for piece in image.pieces:
            if piece.tensor is None:
                continue
            node = state.graph.inputs.get(piece.tensor) or state.graph.outputs[piece.tensor]
            tensors[piece.tensor] = {
                "role": "output" if piece.tensor in state.graph.outputs else "input",
                "dtype": node.dtype, "shape": list(node.shape), "image": image_name,
                "address": addresses[image_name], "words": image.words,
                "layout": image.describe()}
    meta = {
        "kernel": state.graph.name, "lanes": geometry.lanes, "tiling": t.describe(),
        "peak_macs_per_cycle": geometry.capacity()["pcu"] * geometry.lanes ** 2,
        "placement": {name: str(site) for name, site in sites.items()},
        "row_blocks": dict(state.blocks), "mapping": mapping.report(),
        "addresses": dict(addresses),
        "images": {name: dict(image.to_json(), address=addresses[name])
                   for name, image in images.items()},
        "compile_seconds": {name: round(s, 4) for name, s in state.seconds.items()},
    }
    if group.pattern == "attention":
        meta.update({
            "group": "attention", "mode": t.mode, "seq": t.seq, "dim": t.dim,
            "heads": t.heads, "kv_heads": t.kv_heads, "chunk": t.chunk,
            "scale": t.scale, "causal": t.causal, "passes": len(t.passes()),
            "pcus": kernel.units_needed()["pcu"], "macs": t.macs,
            "operands": [group.q.name, group.k.name, group.v.name],
            "pcu_programs": {name: node.config for name, node in kernel.nodes.items()
                             if node.unit == "pcu"}})
    elif group.pattern == "matmul":
        meta.update({
            "group": "matmul", "m": t.m, "n": t.n, "k": t.k, "pcus": t.pcus,
            "epilogue_pcus": t.epilogue_pcus, "k_pad": t.k_pad, "m_pad": t.m_pad,
            "n_pad": t.n_pad, "k_pitch": t.k_pitch, "chunks": t.chunks, "chunk": t.chunk,
            "passes": t.passes, "col_tiles": t.col_tiles, "buffers": t.buffers,
            "operands": [group.a.name, group.b.name],
            "bias": group.bias.name if group.bias is not None else None,
            "epilogue": [list(step) for step in group.epilogue], "macs": t.macs})
    elif group.pattern == "mlp":
        t1, t2 = t.first, t.second
        meta.update({
            "group": "mlp", "m": t1.m, "d": t1.k, "f": t1.n, "pcus":
            kernel.units_needed()["pcu"], "k_pad": [t1.k_pad, t2.k_pad], "macs": t.macs,
            "operands": [group.first.a.name, group.first.b.name, group.second.b.name],
            "chain": [node.describe() for node in group.chain.nodes],
            "pcu_programs": {name: node.config for name, node in kernel.nodes.items()
                             if node.unit == "pcu"}})
    else:
        meta.update({"group": "rows", "rows": t.rows, "length": t.length,
                     "pcus": kernel.units_needed()["pcu"], "buffers": t.buffers, "macs": 0,
                     "pcu_programs": {name: node.config for name, node in kernel.nodes.items()
                                      if node.unit == "pcu"}})
    state.program = Program(kernel.name, machine, state.bitstream, state.bitstream_address,
                            inputs=inputs, outputs=outputs, execute=execute, meta=meta,
                            tensors=tensors, kernel=state.kernel_name,
                            params=dict(state.params))
    return f"  program {kernel.name}: {len(state.bitstream)} words, AGCUs {execute}"

"""Pass ``emit``: the :class:`rdu.program.Program`: bitstream, images, manifest.

The manifest records what a runtime needs (each tensor's image, address and layout, the
outputs, the AGCUs to start) and the compiler's decisions (tiling, placement, row
blocks, the time of each pass) so that a build can be inspected and replayed; each
group's family adds its own facts (:meth:`rdu.compiler.families.base.Family.meta`).
"""

from ..program import Program
from ..units.registry import busiest_unit
from .core import register
from .encode import agcu_index

__all__ = ["emit"]


def _tensors(state):
    """The manifest entry of every tensor in an image."""
    tensors = {}
    for image_name, image in state.layouts.items():
        for piece in image.pieces:
            if piece.tensor is None:
                continue
            node = state.graph.inputs.get(piece.tensor) or state.graph.outputs[piece.tensor]
            tensors[piece.tensor] = {
                "role": "output" if piece.tensor in state.graph.outputs else "input",
                "dtype": node.dtype, "shape": list(node.shape), "image": image_name,
                "address": state.addresses[image_name], "words": image.words,
                "layout": image.describe()}
    return tensors


@register("emit", "bitstream, tensor images and manifest -> Program",
          reads=("graph", "machine", "geometry", "kernel_name", "params", "groups",
                 "tilings", "kernel", "layouts", "addresses", "bitstream_address",
                 "mapping", "blocks", "bitstream"),
          writes=("program",))
def emit(state):
    kernel, mapping = state.kernel, state.mapping
    geometry, machine = state.geometry, state.machine
    sites = mapping.placement.sites
    images, addresses = state.layouts, state.addresses
    produced = {group.output for group in state.groups}
    inputs = {name: (addresses[name], None) for name in images if name not in produced}
    outputs = {name: (addresses[name], images[name].words) for name in produced}
    execute = sorted({agcu_index(geometry, site) for site in sites.values()
                      if site.unit == "agcu"})
    meta = {
        "kernel": state.graph.name, "lanes": geometry.lanes,
        "tiling": "; ".join(tiling.describe() for tiling in state.tilings),
        "peak_macs_per_cycle": machine.macs_per_cycle,
        # the beats of the busiest unit: at least as many cycles (the watchdog's estimate)
        "busiest_beats": busiest_unit(state.bitstream, machine.stages)[0],
        "placement": {name: str(site) for name, site in sites.items()},
        "row_blocks": dict(state.blocks), "mapping": mapping.report(),
        "addresses": dict(addresses),
        "images": {name: dict(image.to_json(), address=addresses[name])
                   for name, image in images.items()},
        "compile_seconds": {name: round(s, 4) for name, s in state.seconds.items()},
    }
    if state.plan and state.plan.positions:
        meta["positions"] = {name: {"stride": stride, "entries": entries}
                             for name, (stride, entries) in state.plan.positions.items()}
    for group, tiling in zip(state.groups, state.tilings, strict=True):
        meta.update(group.family.meta(group, tiling, kernel))
    state.program = Program(kernel.name, machine, state.bitstream, state.bitstream_address,
                            inputs=inputs, outputs=outputs, execute=execute, meta=meta,
                            tensors=_tensors(state), kernel=state.kernel_name,
                            params=dict(state.params))
    return f"  program {kernel.name}: {len(state.bitstream)} words, AGCUs {execute}"

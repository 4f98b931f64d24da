"""Pass ``lower``: each tiled group -> IR nodes with their unit configurations, by its
family (:meth:`rdu.compiler.families.base.Family.lower`); and the helpers every
family's lowering shares (images on HBM pages, layout checks, sizes).

Every node carries its unit's configuration as IR data (:attr:`rdu.ir.Node.config`),
derived from the tiling's access patterns: the loads' and stores' patterns walk the
tensor images the family chooses (:class:`rdu.layout.Image`). Values that depend on
which row block a PCU computes (decided by the merge order, after routing) are
:class:`rdu.ir.BlockOffset` until :mod:`rdu.compiler.bind`.

Memory: each image on its own 4 KiB page from the HBM base, then the bitstream.

One configuration holds one group: a graph that fuses into several groups is lowered
group by group, then refused (one line) since placement cannot combine them yet.
"""

import numpy as np

from ..memory_map import HBM
from .core import CompileError, register

__all__ = ["place_images", "check_layout", "same_geometry", "dump_kernel", "ceil_div",
           "f32_word", "PAGE", "WORD", "BF16", "COUNT_LIMIT"]

PAGE = 4096
WORD = 4
BF16 = 2
#: The units' loop counters are 16 bits.
COUNT_LIMIT = (1 << 16) - 1


def ceil_div(a, b):
    """``ceil(a / b)`` of positive integers."""
    return -(-a // b)


def f32_word(value):
    """``value`` rounded to FP32, as its uint32 word (a stage's constant)."""
    return int(np.array([value], np.float32).view(np.uint32)[0])


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
        address += ceil_div(image.nbytes, PAGE) * PAGE
    spans = sorted((addresses[n], addresses[n] + images[n].nbytes, n) for n in images)
    for (_, end, first), (begin, _, second) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise CompileError(f"{name}: images {first!r} and {second!r} overlap in HBM")
    needed = address + 4 * PAGE - HBM.base
    if needed > hbm_size:
        raise CompileError(f"{name}: the tensors and the bitstream need {needed} bytes of "
                           f"HBM, the machine has {hbm_size} ({needed - hbm_size} short): "
                           f"raise --hbm-mib to at least {ceil_div(needed, 1 << 20)}")
    return addresses, address


def check_layout(name, plan, image_name, image):
    """Refuse (one line) an image whose geometry is not the one ``plan`` asks for."""
    wanted = plan.layout(image_name) if plan else None
    if wanted is not None and not same_geometry(wanted, image):
        raise CompileError(f"{name}: {image_name!r} is {image.describe()} here, its other "
                           f"kernel has it as {wanted.describe()}")


def same_geometry(a, b):
    """Images of the same bytes per element (shape, tiling, format; any pieces)."""
    def geometry(image):
        return (tuple(image.shape), image.split and tuple(image.split),
                image.perm and tuple(image.perm), image.format,
                image.strides and (tuple(image.strides), image.origin, image.stored))
    return geometry(a) == geometry(b)


@register("lower", "tiled operators -> IR nodes, streams and unit configurations",
          reads=("graph", "machine", "plan", "groups", "tilings"),
          writes=("kernel", "layouts", "addresses", "bitstream_address"))
def lower(state):
    lowered = []
    for group, tiling in zip(state.groups, state.tilings, strict=True):
        name = group.family.kernel_name(state.graph.name, group, tiling)
        lowered.append(group.family.lower(name, group, tiling, state))
    if len(lowered) > 1:
        described = ", ".join(f"{group.family.name} {group.output!r}"
                              for group in state.groups)
        raise CompileError(f"kernel {state.graph.name!r} fuses into {len(lowered)} groups "
                           f"({described}): one configuration holds one group yet; "
                           f"compile each output as its own kernel")
    result = lowered[0]
    state.kernel, state.layouts = result.kernel, result.images
    state.addresses, state.bitstream_address = result.addresses, result.bitstream_address
    if state.plan and state.plan.positions:
        position_patterns(state.kernel, state.plan, result.images, state.machine.beat_bytes)
    return dump_kernel(state.kernel)


def position_patterns(kernel, plan, images, beat):
    """Move every load and store of ``plan.positions``' images by the launch position
    (their AGCU patterns' ``position_stride``); a one-line :class:`CompileError` for a
    table that is not an image of ``kernel``, not fixed by ``plan.addresses``, or whose
    stride is not a positive number of beats. Entries may overlap (a stride under the
    image's size): entry ``p`` of a table of rows is then its rows ``p ..``."""
    for name, (stride, entries) in plan.positions.items():
        where = f"{kernel.name}: positioned image {name!r}"
        if name not in images:
            raise CompileError(f"{where} is not an image of the kernel "
                               f"({', '.join(images)})")
        if name not in plan.addresses:
            raise CompileError(f"{where} has no fixed address: its table of {entries} "
                               f"entries is the caller's to place")
        if stride <= 0 or stride % beat or entries < 1:
            raise CompileError(f"{where}: stride {stride} bytes and {entries} entries: the "
                               f"stride must be whole {beat}-byte beats, entries at least 1")
    for node in kernel.nodes.values():
        tensor = getattr(node, "tensor", None)
        if node.unit == "agcu" and tensor is not None and tensor.name in plan.positions:
            node.config["position_stride"] = plan.positions[tensor.name][0]


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

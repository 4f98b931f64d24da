"""Move one input image of a compiled program to another address, without recompiling.

A compiled :class:`rdu.program.Program` reads each input image with AGCU load patterns
whose base is the image's address (``docs/agcu.md``: ``load.base``). To run the same
kernel on weights held elsewhere (an HBM cache slot of a Composition of Experts,
``docs/coe.md``), :func:`relocate_image` rewrites the AGCU records of the bitstream:
every load pattern whose base lies inside the image is shifted by the move, the
bitstream is rewritten with its new CRC, and the manifest (``inputs``, ``tensors``,
``meta["images"]``, ``meta["addresses"]``) follows. The new address must keep the
image beat aligned, inside one memory region of the machine, and clear of the
program's other images and bitstream.

>>> # program_in_slot = relocate_image(program, "b", 0x0004_0000)
"""

import copy

from hdl.agcu import agcu_config_layout

from .bitstream import Record, UnitKind, read_bitstream, write_bitstream
from .unitconfig import pack_config, unpack_config

__all__ = ["relocate_image", "RelocationError", "image_span"]


class RelocationError(ValueError):
    """An image that cannot be moved there (one line: which image, why)."""


def image_span(program, image):
    """``(address, bytes)`` of input image ``image`` of ``program``."""
    images = program.meta.get("images", {})
    if image not in images or image not in program.inputs:
        raise RelocationError(f"program {program.name!r} has no input image {image!r} "
                              f"(inputs: {', '.join(sorted(program.inputs))})")
    layout = images[image]
    from .layout import Image
    return layout["address"], Image.from_json(layout).nbytes


def relocate_image(program, image, address):
    """A copy of ``program`` that reads input image ``image`` at byte ``address``.

    The image's words in the copy's ``inputs`` are ``None`` (the image is expected to
    be in memory already: copied there by an earlier step); pack them again if the
    runtime should write them. Raises :class:`RelocationError`."""
    old, nbytes = image_span(program, image)
    machine = program.machine
    beat = machine.beat_bytes
    if address % beat:
        raise RelocationError(f"{image!r} at 0x{address:08x}: not a multiple of {beat} "
                              f"bytes (the AGCU's beat)")
    region = next((r for r in machine.regions() if r.base <= address and
                   address + nbytes <= r.end), None)
    if region is None:
        raise RelocationError(f"{image!r} ({nbytes} bytes) at 0x{address:08x} is not inside "
                              f"one memory region of the machine")
    others = [(name, layout["address"], _nbytes(layout))
              for name, layout in program.meta["images"].items() if name != image]
    others.append(("bitstream", program.bitstream_address, 4 * len(program.bitstream)))
    for name, start, size in others:
        if address < start + size and start < address + nbytes:
            raise RelocationError(f"{image!r} at 0x{address:08x} ({nbytes} bytes) overlaps "
                                  f"{name} at 0x{start:08x} ({size} bytes)")
    delta = address - old
    layout = agcu_config_layout()
    header, records = read_bitstream(program.bitstream)
    moved = 0
    patched = []
    for record in records:
        if record.kind == UnitKind.AGCU:
            fields = unpack_config(layout, record.words)
            base = fields["load"]["base"] % (1 << 32)
            if fields["load_enable"] and old <= base < old + nbytes:
                fields["load"]["base"] = base + delta
                record = Record(record.kind, record.row, record.col,
                                pack_config(layout, fields))
                moved += 1
        patched.append(record)
    if not moved:
        raise RelocationError(f"program {program.name!r}: no AGCU loads image {image!r}")
    result = copy.deepcopy(program)
    result.bitstream = write_bitstream(header.geometry, patched, flags=header.flags)
    result.inputs[image] = (address, None)
    result.meta["images"][image]["address"] = address
    if image in result.meta.get("addresses", {}):
        result.meta["addresses"][image] = address
    for spec in result.tensors.values():
        if spec.get("image") == image:
            spec["address"] = address
    return result


def _nbytes(layout):
    from .layout import Image
    return Image.from_json(layout).nbytes

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

from .bitstream import Record, UnitKind, cleared, read_bitstream, write_bitstream
from .layout import Image
from .unitconfig import pack_config, unpack_config

__all__ = ["relocate_image", "relocate_output", "RelocationError", "image_span"]


class RelocationError(ValueError):
    """An image that cannot be moved there (one line: which image, why)."""


def image_span(program, image, role="input"):
    """``(address, bytes)`` of input (``role`` ``"output"``: output) image ``image`` of
    ``program``."""
    images = program.meta.get("images", {})
    known = program.inputs if role == "input" else program.outputs
    if image not in images or image not in known:
        raise RelocationError(f"program {program.name!r} has no {role} image {image!r} "
                              f"({role}s: {', '.join(sorted(known))})")
    layout = images[image]
    return layout["address"], Image.from_json(layout).nbytes


def relocate_image(program, image, address):
    """A copy of ``program`` that reads input image ``image`` at byte ``address``.

    The image's words in the copy's ``inputs`` are ``None`` (the image is expected to
    be in memory already: copied there by an earlier step); pack them again if the
    runtime should write them. Raises :class:`RelocationError`."""
    return _relocate(program, image, address, "input")


def relocate_output(program, image, address):
    """A copy of ``program`` that stores output image ``image`` at byte ``address``:
    every AGCU store pattern whose base lies inside the image is shifted (as
    :func:`relocate_image` does for loads), ``outputs`` and the manifest follow. Lets
    several launches of one kernel keep their results apart (an orchestrated schedule
    reads every output after its end). Raises :class:`RelocationError`."""
    return _relocate(program, image, address, "output")


def _relocate(program, image, address, role):
    old, nbytes = image_span(program, image, role)
    pattern, enable = ("load", "load_enable") if role == "input" else \
        ("store", "store_enable")
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
            base = fields[pattern]["base"] % (1 << 32)
            if fields[enable] and old <= base < old + nbytes:
                fields[pattern]["base"] = base + delta
                words = pack_config(layout, fields)
                record = (cleared(record.kind, record.row, record.col, words) if record.clear
                          else Record(record.kind, record.row, record.col, words))
                moved += 1
        patched.append(record)
    if not moved:
        raise RelocationError(f"program {program.name!r}: no AGCU "
                              f"{'loads' if role == 'input' else 'stores'} image {image!r}")
    result = copy.deepcopy(program)
    result.bitstream = write_bitstream(header.geometry, patched, flags=header.flags)
    if role == "input":
        result.inputs[image] = (address, None)
    else:
        result.outputs[image] = (address, result.outputs[image][1])
    result.meta["images"][image]["address"] = address
    if image in result.meta.get("addresses", {}):
        result.meta["addresses"][image] = address
    for spec in result.tensors.values():
        if spec.get("image") == image:
            spec["address"] = address
    return result


def _nbytes(layout):
    return Image.from_json(layout).nbytes

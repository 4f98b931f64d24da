"""Helpers shared by the unit suites: configuration packing and loading, vector packing."""

from rdu.unitconfig import pack_config  # noqa: F401  (one encoder: the compiler's)

from hdl.interfaces import WORD_BITS

MASK32 = (1 << WORD_BITS) - 1


async def load_config(bench, words, prefix="cfg"):
    """Write ``words`` through the configuration port at ``prefix``, one per cycle."""
    for index, word in enumerate(words):
        bench.set(f"{prefix}.write", 1)
        bench.set(f"{prefix}.index", index)
        bench.set(f"{prefix}.data", word)
        await bench.cycles(1)
    bench.set(f"{prefix}.write", 0)
    await bench.cycles(1)


async def read_config(bench, count, prefix="cfg"):
    """Read ``count`` words back through the configuration port at ``prefix``."""
    words = []
    for index in range(count):
        bench.set(f"{prefix}.index", index)
        await bench.cycles(1)
        words.append(await bench.read(f"{prefix}.read_data"))
        await bench.cycles(1)      # no set() after read() in the same cycle
    return words


async def configure(bench, layout, fields, prefix="cfg"):
    """Write ``fields`` packed by ``layout`` through the port at ``prefix``, read every
    word back and fail if any differs."""
    words = pack_config(layout, fields)
    await load_config(bench, words, prefix)
    back = await read_config(bench, len(words), prefix)
    for index, (wrote, read) in enumerate(zip(words, back, strict=True)):
        if wrote != read:
            raise AssertionError(f"{prefix}: configuration word {index} reads back "
                                 f"{read:#x}, wrote {wrote:#x}")


def pack_vector(values):
    """One vector beat (lane 0 in the LSBs) as an integer."""
    result = 0
    for lane, value in enumerate(values):
        result |= (int(value) & MASK32) << (WORD_BITS * lane)
    return result


def unpack_vector(value, lanes):
    return [(value >> (WORD_BITS * lane)) & MASK32 for lane in range(lanes)]


def ports_to_json(ports):
    """``{(network, edge): items}`` as ``[[network, edge, items]]`` of plain ints (a
    vector item stays a lane list, or a packed int): what a test body may return, since
    the Verilator tier sends results back as JSON."""
    def plain(item):
        return [int(v) for v in item] if isinstance(item, (list, tuple)) or hasattr(
            item, "tolist") else int(item)
    return [[network, int(edge), [plain(item) for item in items]]
            for (network, edge), items in ports.items()]


def ports_from_json(ports):
    """Inverse of :func:`ports_to_json` (a dict is returned unchanged)."""
    if isinstance(ports, dict):
        return ports
    return {(network, edge): items for network, edge, items in ports}

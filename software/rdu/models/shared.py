"""Pieces every unit model of the functional model shares (``docs/funcmodel.md``).

The errors a run raises, the bounded :class:`Queue` that stands for a hardware FIFO,
the lazy items of the batched PCU arithmetic (:class:`LazyRow`, :class:`LazyVector`,
:class:`LazyWord`: a value computed on first use), the :class:`FlatMemory` the AGCUs
read and write, and :class:`Unit`, the interface of every unit model (``step``,
``busy``, ``waits``, ``leftovers``).
"""

from collections import deque

import numpy as np

from hdl.agcu import AGCUError
from hdl.interfaces import ControlToken

from ..bitstream import BitstreamError
from ..mapper import agcu_site
from ..memory_map import REGIONS, region_of

__all__ = ["ModelError", "ModelDeadlock", "UnitError", "CommandError", "LoaderError",
           "agcu_edge", "Queue", "Lazy", "LazyRow", "LazyVector", "LazyWord", "item_vector",
           "item_word", "item_vectors", "FlatMemory", "Unit", "EdgeSource", "STEP", "DONE",
           "UNBOUNDED"]

# Control tokens as plain ints (hdl.interfaces.ControlToken).
STEP, DONE = int(ControlToken.STEP), int(ControlToken.DONE)
#: The capacity of a queue that never fills (an edge output a test collects).
UNBOUNDED = 1 << 62


class ModelError(RuntimeError):
    """The configured array cannot run to completion (base class)."""


class ModelDeadlock(ModelError):
    """Nothing can move and work remains; the message names who waits on what."""


class UnitError(ModelError):
    """A unit raised its error status (the hardware would set its sticky error code)."""


class CommandError(UnitError):
    """An AGCU command ended with an :class:`hdl.agcu.AGCUError` code other than ``NONE``.

    ``agcu`` is the AGCU's index, ``error`` the code, ``op`` the command's
    :class:`hdl.agcu.AGCUOp` (``EXECUTE`` for errors of a kernel execute)."""

    def __init__(self, agcu, error, message, op=None):
        super().__init__(message)
        self.agcu, self.error, self.op = agcu, AGCUError(error), op


class LoaderError(ModelError, BitstreamError):
    """The configuration loader's verdict is not ``LOADED``: ``status`` is the
    :class:`rdu.bitstream.ConfigStatus` (``host.error``) of the rejected bitstream,
    ``state`` the loader state name. Also a :class:`rdu.bitstream.BitstreamError`, so
    callers of the earlier ``run_program`` that caught that still catch it."""

    def __init__(self, status, message, state=None):
        BitstreamError.__init__(self, status, message)
        self.state = state


def agcu_edge(index, rows):
    """Edge port index of AGCU ``index`` (``rdu.mapper.agcu_site``: even indices on the
    west edge, odd ones on the east edge, from the middle rows)."""
    side, row = agcu_site(index, rows)
    return row if side == "west" else rows + row


class Queue:
    """A bounded FIFO of items (``capacity`` may change, e.g. an AGCU store's demand)."""
    __slots__ = ("items", "capacity", "name")

    def __init__(self, capacity, name):
        self.items = deque()
        self.capacity = capacity
        self.name = name

    def full(self):
        return len(self.items) >= self.capacity


class Lazy:
    """An item whose value is computed on first use (``value()``), in batches."""
    __slots__ = ()


class LazyRow(Lazy):
    """A systolic result row whose value is computed on first use (tiles in batches)."""
    __slots__ = ("tile", "row")

    def __init__(self, tile, row):
        self.tile, self.row = tile, row

    def value(self):
        if self.tile.value is None:
            self.tile.pcu.compute_pending()
        return self.tile.value[self.row]


class LazyVector(Lazy):
    """A SIMD result vector (emitted iteration ``index`` of its batch)."""
    __slots__ = ("batch", "index")

    def __init__(self, batch, index):
        self.batch, self.index = batch, index

    def computed(self):
        """The batch, computed on first use."""
        if self.batch.in0 is not None:
            self.batch.run.compute()
        return self.batch

    def value(self):
        return self.computed().vectors[self.index]


class LazyWord(LazyVector):
    """A SIMD cross-lane reduction (emitted iteration ``index`` of its batch)."""
    __slots__ = ()

    def value(self):
        return int(self.computed().reductions[self.index])


def item_vector(item):
    return item.value() if isinstance(item, Lazy) else item


def item_word(item):
    """A scalar item's value (a SIMD reduction is computed on first use)."""
    return item.value() if isinstance(item, Lazy) else item


def item_vectors(items, lanes):
    if not items:
        return np.zeros((0, lanes), dtype=np.uint32)
    return np.array([item_vector(item) for item in items], dtype=np.uint32).reshape(-1, lanes)


class FlatMemory:
    """Byte-addressed memory of the :mod:`rdu.memory_map` regions (4 KiB pages allocated
    on first touch). An address outside every region raises ``ValueError`` (the AXI
    ``DECERR``). ``traffic`` counts the bytes read and written in each region (every
    access: AGCU streams and the host's alike)."""

    PAGE = 4096

    def __init__(self, regions=REGIONS):
        self.regions = tuple(regions)
        self.pages = {}
        self.traffic = {region.name: {"read_bytes": 0, "write_bytes": 0}
                        for region in self.regions}

    def _check(self, address, nbytes):
        region = region_of(address, self.regions)
        if region is None or address + nbytes > region.end:
            raise ValueError(f"Memory access of {nbytes} bytes at 0x{address:08x} is outside "
                             f"the mapped regions (DECERR)")
        return region

    def read(self, address, nbytes):
        self.traffic[self._check(address, nbytes).name]["read_bytes"] += nbytes
        out = bytearray()
        while nbytes:
            page, offset = divmod(address, self.PAGE)
            chunk = min(nbytes, self.PAGE - offset)
            data = self.pages.get(page)
            out += data[offset:offset + chunk] if data is not None else bytes(chunk)
            address += chunk
            nbytes -= chunk
        return bytes(out)

    def write(self, address, raw):
        raw = bytes(raw)
        self.traffic[self._check(address, len(raw)).name]["write_bytes"] += len(raw)
        position = 0
        while position < len(raw):
            page, offset = divmod(address + position, self.PAGE)
            chunk = min(len(raw) - position, self.PAGE - offset)
            data = self.pages.setdefault(page, bytearray(self.PAGE))
            data[offset:offset + chunk] = raw[position:position + chunk]
            position += chunk

    def read_words(self, address, count):
        return np.frombuffer(self.read(address, 4 * count), dtype="<u4").astype(np.uint32)

    def write_words(self, address, words):
        self.write(address, np.asarray(words, dtype="<u4").tobytes())


class Unit:
    """The interface of every unit model: the array steps each until nothing moves."""
    name = "unit"

    def step(self):
        return 0

    def busy(self):
        """Work remains that the run cannot finish without (a deadlock if nothing moves)."""
        return False

    def waits(self):
        """One-line descriptions of what the unit waits on."""
        return []

    def leftovers(self):
        """Items left behind that nothing waits for (unrouted tokens, for example)."""
        return []


class EdgeSource(Unit):
    """Items a test drives into an edge input."""

    def __init__(self, network, edge, items, queue):
        self.name = f"edge {network}_in {edge}"
        self.items = deque(items)
        self.queue = queue

    def step(self):
        moved = 0
        items, queue = self.items, self.queue
        while items and len(queue.items) < queue.capacity:
            queue.items.append(items.popleft())
            moved += 1
        return moved

    def busy(self):
        return bool(self.items)

    def waits(self):
        return [f"{self.name} has {len(self.items)} items left"] if self.items else []



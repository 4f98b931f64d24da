"""Off-chip memory timing models (HBM, DDR, host link) with sparse backing storage.

A :class:`MemoryModel` is one address region: a sparse byte store plus a timing
model of channels, banks and row buffers. It is transaction level: when a burst
arrives, the model computes at which cycle each beat's data is available (reads) or
committed (writes); the AXI front end (:mod:`rdu.sim.memory_system`) hands beats
over no earlier than that. Nothing is evaluated per cycle except the front end's
queue heads, so the models cost little simulation time (see ``docs/memory.md``).

Timing, per burst arriving at cycle ``t``
-----------------------------------------
The burst is cut into pieces at ``interleave`` boundaries; piece ``p`` lives in
channel ``(address // interleave) % channels`` and bank
``(address // (interleave * channels)) % banks``; its row is
``address // (row_bytes * channels * banks)``.

* access latency ``L`` = ``hit_latency`` if the bank's open row is the piece's row,
  else ``miss_latency`` (the row is then opened);
* the piece starts at ``start = max(t + L, channel_free)`` and occupies its channel
  for ``beat_bytes / bytes_per_cycle`` cycles per beat; beat ``k`` of the piece is
  available at ``start + k * beat_bytes / bytes_per_cycle``;
* writes start once their last data beat has arrived, at ``max(t_last, channel_free)``
  (no access latency on the data path: the write buffer absorbs it); the write
  response is sent ``write_latency`` cycles after the last piece is committed, plus
  ``miss_latency - hit_latency`` if a piece opened a new row.

An unloaded single-beat read therefore returns exactly ``hit_latency`` (open row) or
``miss_latency`` (closed row) cycles after its address handshake.
"""

from dataclasses import dataclass

import numpy as np
from rdu.memory_map import DDR, HBM, HBM_CHANNEL_BYTES_PER_CYCLE, HBM_CHANNELS, HOST

__all__ = ["SparseMemory", "MemoryTiming", "MemoryModel",
           "hbm_model", "ddr_model", "host_link_model", "HOST_LINK_LATENCY",
           "HOST_LAUNCH_LATENCY"]

#: Cycles of one crossing of the host link (PCIe-like), each way.
HOST_LINK_LATENCY = 1000
#: Cycles a host needs to issue one launch (or copy) and learn that the previous one
#: ended: the completion's interrupt or status read crossing the link to the host, the
#: driver and runtime deciding the next command (about one more link time), the
#: doorbell's MMIO write crossing the link to the device (``docs/memory.md``).
HOST_LAUNCH_LATENCY = 3 * HOST_LINK_LATENCY


class SparseMemory:
    """Byte store of ``size`` bytes in lazily allocated numpy pages (zero when unwritten).

    Parameters
    ----------
    size : int
        Capacity in bytes.
    page_bytes : int
        Allocation granule (a power of two).
    """

    def __init__(self, size, page_bytes=1 << 20):
        if page_bytes & (page_bytes - 1):
            raise ValueError(f"Page size must be a power of two, not {page_bytes}")
        self.size = size
        self.page_bytes = page_bytes
        self.pages = {}

    def _check(self, offset, count):
        if offset < 0 or count < 0 or offset + count > self.size:
            raise ValueError(f"Access of {count} bytes at offset {offset:#x} is outside "
                             f"the {self.size:#x} bytes of this memory")

    def _spans(self, offset, count):
        while count:
            page, start = divmod(offset, self.page_bytes)
            length = min(count, self.page_bytes - start)
            yield page, start, length
            offset += length
            count -= length

    def write(self, offset, payload):
        """Write ``payload`` (bytes-like or uint8 array) at ``offset``."""
        payload = np.frombuffer(memoryview(payload).cast("B"), dtype=np.uint8)
        self._check(offset, payload.size)
        done = 0
        for page, start, length in self._spans(offset, payload.size):
            store = self.pages.get(page)
            if store is None:
                store = self.pages[page] = np.zeros(self.page_bytes, dtype=np.uint8)
            store[start:start + length] = payload[done:done + length]
            done += length

    def write_masked(self, offset, payload, strobe):
        """Write the bytes of ``payload`` whose bit is set in ``strobe``."""
        full = (1 << len(payload)) - 1
        if strobe & full == full:
            self.write(offset, payload)
            return
        current = bytearray(self.read(offset, len(payload)))
        for index, byte in enumerate(payload):
            if strobe >> index & 1:
                current[index] = byte
        self.write(offset, bytes(current))

    def read(self, offset, count):
        """Return ``count`` bytes at ``offset`` as ``bytes``."""
        self._check(offset, count)
        out = np.zeros(count, dtype=np.uint8)
        done = 0
        for page, start, length in self._spans(offset, count):
            store = self.pages.get(page)
            if store is not None:
                out[done:done + length] = store[start:start + length]
            done += length
        return out.tobytes()


@dataclass(frozen=True)
class MemoryTiming:
    """Timing parameters of one memory (see the module docstring for their use).

    Attributes
    ----------
    channels : int
        Independent channels; consecutive ``interleave``-byte blocks rotate over them.
    banks : int
        Banks per channel, each with one open row.
    row_bytes : int
        Bytes per row of one bank.
    hit_latency, miss_latency : int
        Cycles from the read address handshake to the first data beat, open row / new row.
    bytes_per_cycle : float
        Data bandwidth of one channel in bytes per cycle.
    interleave : int
        Channel interleaving granule in bytes.
    write_latency : int
        Cycles from committing the last written beat to the write response.
    """
    channels: int
    banks: int
    row_bytes: int
    hit_latency: int
    miss_latency: int
    bytes_per_cycle: float
    interleave: int
    write_latency: int

    def __post_init__(self):
        for name in ("channels", "banks", "row_bytes", "interleave"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a positive power of two, not {value!r}")
        if not 2 <= self.hit_latency <= self.miss_latency:
            raise ValueError(f"Latencies need 2 <= hit_latency <= miss_latency, not "
                             f"{self.hit_latency} and {self.miss_latency}")
        if not self.bytes_per_cycle > 0:
            raise ValueError(f"bytes_per_cycle must be positive, not {self.bytes_per_cycle}")
        if self.write_latency < 1:
            raise ValueError(f"write_latency must be at least 1, not {self.write_latency}")

    @property
    def peak_bytes_per_cycle(self):
        """Aggregate bandwidth of all channels."""
        return self.channels * self.bytes_per_cycle


class MemoryModel:
    """One memory region: sparse storage plus the channel/bank timing model.

    Parameters
    ----------
    name : str
    base : int
        First byte address of the region.
    size : int
        Capacity in bytes.
    timing : MemoryTiming
    beat_bytes : int
        Width of the AXI data bus in bytes.
    """

    def __init__(self, name, base, size, timing, beat_bytes=32):
        if size % beat_bytes or base % beat_bytes:
            raise ValueError(f"Region {name} base {base:#x} and size {size:#x} must be "
                             f"multiples of the {beat_bytes}-byte beat")
        self.name = name
        self.base = base
        self.size = size
        self.timing = timing
        self.beat_bytes = beat_bytes
        self.storage = SparseMemory(size)
        self.beat_cycles = beat_bytes / timing.bytes_per_cycle
        self.channel_free = [0.0] * timing.channels
        self.open_rows = {}
        self.stats = {"read_beats": 0, "write_beats": 0, "row_hits": 0, "row_misses": 0}

    def __contains__(self, address):
        return self.base <= address < self.base + self.size

    @property
    def end(self):
        return self.base + self.size

    # -- timing ------------------------------------------------------------------------

    def _pieces(self, address, beats):
        """Split a burst at interleave boundaries: ``(channel, bank, row, first, count)``."""
        timing = self.timing
        beat = self.beat_bytes
        index = 0
        while index < beats:
            offset = address - self.base + index * beat
            block = offset // timing.interleave
            left = (timing.interleave - offset % timing.interleave + beat - 1) // beat
            count = min(beats - index, max(1, left))
            channel = block % timing.channels
            bank = (block // timing.channels) % timing.banks
            row = offset // (timing.row_bytes * timing.channels * timing.banks)
            yield channel, bank, row, index, count
            index += count

    def _open(self, channel, bank, row):
        key = (channel, bank)
        if self.open_rows.get(key) == row:
            self.stats["row_hits"] += 1
            return True
        self.open_rows[key] = row
        self.stats["row_misses"] += 1
        return False

    def schedule_read(self, address, beats, cycle):
        """Return the cycle at which each beat of a read burst is available."""
        timing = self.timing
        ready = [0.0] * beats
        for channel, bank, row, first, count in self._pieces(address, beats):
            latency = timing.hit_latency if self._open(channel, bank, row) \
                else timing.miss_latency
            start = max(cycle + latency, self.channel_free[channel])
            for k in range(count):
                ready[first + k] = start + k * self.beat_cycles
            self.channel_free[channel] = start + count * self.beat_cycles
        self.stats["read_beats"] += beats
        return ready

    def schedule_write(self, address, beats, cycle):
        """Return the cycle at which the write response of a complete burst is due."""
        timing = self.timing
        done = cycle
        missed = False
        for channel, bank, row, _first, count in self._pieces(address, beats):
            missed |= not self._open(channel, bank, row)
            start = max(cycle, self.channel_free[channel])
            self.channel_free[channel] = start + count * self.beat_cycles
            done = max(done, self.channel_free[channel])
        self.stats["write_beats"] += beats
        extra = timing.miss_latency - timing.hit_latency if missed else 0
        return done + timing.write_latency + extra

    # -- data --------------------------------------------------------------------------

    def read_bytes(self, address, count):
        return self.storage.read(address - self.base, count)

    def write_bytes(self, address, payload, strobe=None):
        if strobe is None:
            self.storage.write(address - self.base, payload)
        else:
            self.storage.write_masked(address - self.base, payload, strobe)


# HBM:DDR peak bandwidth 32 : 3.5 = 9.1 (SN40L: ~1.8 TB/s : ~200 GB/s). The HBM peak is
# one 256-bit beat per cycle, what one AGCU port can carry; host link: PCIe-like,
# ~56x below HBM (SN40L HBM 1.8 TB/s vs PCIe Gen4 x16 ~32 GB/s) with a long latency.

def hbm_model(*, base=HBM.base, size=HBM.size, channels=HBM_CHANNELS, banks=16,
              row_bytes=1024, hit_latency=100, miss_latency=120,
              bytes_per_cycle=HBM_CHANNEL_BYTES_PER_CYCLE, interleave=256,
              write_latency=20, beat_bytes=32):
    """The HBM model with the project's scaled defaults (:data:`rdu.memory_map.
    HBM_CHANNELS` channels x :data:`rdu.memory_map.HBM_CHANNEL_BYTES_PER_CYCLE`: 4 x
    8 B/cycle)."""
    return MemoryModel("hbm", base, size, MemoryTiming(
        channels, banks, row_bytes, hit_latency, miss_latency, bytes_per_cycle, interleave,
        write_latency), beat_bytes)


def ddr_model(*, base=DDR.base, size=DDR.size, channels=1, banks=8, row_bytes=2048,
              hit_latency=200, miss_latency=240, bytes_per_cycle=3.5, interleave=256,
              write_latency=40, beat_bytes=32):
    """The DDR model with the project's scaled defaults (1 channel x 3.5 B/cycle)."""
    return MemoryModel("ddr", base, size, MemoryTiming(
        channels, banks, row_bytes, hit_latency, miss_latency, bytes_per_cycle, interleave,
        write_latency), beat_bytes)


def host_link_model(*, base=HOST.base, size=HOST.size, latency=HOST_LINK_LATENCY,
                    bytes_per_cycle=0.57, beat_bytes=32):
    """The host link (PCIe-like): one lane group, long fixed latency, low bandwidth."""
    return MemoryModel("host", base, size, MemoryTiming(
        1, 1, 1 << 30, latency, latency, bytes_per_cycle, 1 << 30, latency), beat_bytes)

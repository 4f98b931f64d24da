"""The AGCU's functional model (``hdl/agcu.py``) running a kernel execute.

:class:`AGCUModel` sends the launch token, streams its load pattern from memory into
the array and its store pattern back, with the hardware's checks and error codes
(:class:`rdu.models.shared.CommandError`). The other AGCU commands (``COPY``,
``PROGRAM_LOAD``, ``ARGUMENT_LOAD``) are :class:`rdu.models.machine.FunctionalMachine`'s.
"""

import numpy as np

from hdl.agcu import AGCUError, AGCUOp

from .. import affine
from ..dma_windows import first_refused
from .shared import STEP, CommandError, Unit, item_vector

__all__ = ["AGCUModel", "execute_error", "moved_patterns"]


def execute_error(agcu, code, detail):
    """The :class:`CommandError` of a kernel execute of AGCU ``agcu``."""
    return CommandError(agcu, code, f"AGCU {agcu}: error {AGCUError(code).name} ({detail})",
                        AGCUOp.EXECUTE)


def moved_patterns(agcu, cfg, position, beat):
    """``cfg`` with each enabled pattern's base moved by ``position *
    <side>_position_stride`` beats (``hdl.agcu``: checked after the alignment and the
    counts; a moved base outside the 32-bit address space is ``ADDRESS_WRAP``)."""
    moved = dict(cfg)
    for side in ("load", "store"):
        stride = cfg.get(f"{side}_position_stride", 0)
        if not cfg[f"{side}_enable"] or not stride:
            continue
        base = cfg[side]["base"] + position * stride * beat
        if not 0 <= base < 1 << 32:
            raise execute_error(agcu, AGCUError.ADDRESS_WRAP,
                                f"{side} base moved by position {position} x {stride} beats "
                                f"leaves the address space")
        moved[side] = dict(cfg[side], base=base)
    return moved


class AGCUModel(Unit):
    """An AGCU running kernel execute: launch token, load and store patterns."""

    def __init__(self, index, cfg, lanes, memory, edge_in, edge_out, execute, windows=None,
                 position=0):
        self.name = f"AGCU {index}"
        self.windows = windows          # rdu.dma_windows: None (off) or [(base, size, r, w)]
        self.index, self.cfg, self.lanes, self.memory = index, cfg, lanes, memory
        self.beat = 4 * lanes
        self.edge_in, self.edge_out = edge_in, edge_out    # {network: queue}
        self.execute = execute
        self.launch = execute
        self.done_seen = False
        self.scalars = []
        self.pending_stores = []
        self.load_total = self.store_total = 0
        self.loaded = self.stored = 0
        if execute:
            # hdl.agcu checks alignment of both patterns before their counts
            for side in ("load", "store"):
                pattern = cfg[side]
                if cfg[f"{side}_enable"] and (pattern["base"] % self.beat or
                                              any(s % self.beat for s in pattern["stride"])):
                    raise execute_error(index, AGCUError.MISALIGNED,
                                      f"{side} base or stride is not a multiple of "
                                      f"{self.beat} bytes")
            for side in ("load", "store"):
                if cfg[f"{side}_enable"] and not all(cfg[side]["count"]):
                    raise execute_error(index, AGCUError.BAD_CONFIG,
                                      f"{side} pattern has a zero count")
            self.cfg = cfg = moved_patterns(index, cfg, position, self.beat)
            if cfg["load_enable"]:
                self.load_total = affine.beats(cfg["load"]["count"])
                if cfg.get("load_bf16"):
                    self.load_total *= 2       # each AXI beat: two expanded vector beats
            if cfg["store_enable"]:
                self.store_total = affine.beats(cfg["store"]["count"])
                if cfg.get("store_bf16"):
                    self.store_total *= 2      # two vector beats packed per AXI beat
        edge_out["vector"].capacity = self.store_total

    def _addresses(self, side, start, count):
        pattern = self.cfg[side]
        address = affine.addresses(pattern["base"], pattern["count"], pattern["stride"],
                                   start, count)
        bad = (address < 0) | (address >= 1 << 32)
        if bad.any():
            raise execute_error(self.index, AGCUError.ADDRESS_WRAP,
                              f"{side} beat {start + int(np.argmax(bad))} leaves the "
                              f"address space")
        if self.windows is None:
            return address
        write = side == "store"
        for offset, beat_address in enumerate(address.tolist()):
            refused = first_refused(self.windows, beat_address, self.beat, self.beat, write)
            if refused is not None:
                raise execute_error(self.index, AGCUError.WINDOW,
                                    f"{side} beat {start + offset} at 0x{refused:08x} is "
                                    f"outside its windows")
        return address

    def flush(self):
        half = self.cfg.get("store_bf16")
        for address, item in self.pending_stores:
            value = item_vector(item)
            if half:            # store_bf16: the high halves, packed (hdl.agcu)
                self.memory_write(address, (np.asarray(value, np.uint32) >> 16)
                                  .astype("<u2").tobytes())
            else:
                self._write(address, value)
        self.pending_stores = []

    def memory_write(self, address, raw):
        try:
            self.memory.write(int(address), raw)
        except ValueError as error:
            raise execute_error(self.index, AGCUError.WRITE_DECERR, error) from None

    def _write(self, address, value):
        try:
            self.memory.write(int(address), np.asarray(value, dtype="<u4").tobytes())
        except ValueError as error:
            raise execute_error(self.index, AGCUError.WRITE_DECERR, error) from None

    def step(self):
        moved = 0
        control_in = self.edge_in["control"]
        if self.launch and not control_in.full():
            control_in.items.append(STEP)
            self.launch = False
            moved += 1
        vin = self.edge_in["vector"]
        space = min(vin.capacity - len(vin.items), self.load_total - self.loaded)
        if space > 0 and self.cfg.get("load_bf16"):
            moved += self._load_bf16(vin, space)
        elif space > 0:
            addresses = self._addresses("load", self.loaded, space)
            if self.pending_stores:
                low = min(a for a, _ in self.pending_stores)
                high = max(a for a, _ in self.pending_stores) + self.beat
                if (addresses + self.beat > low).any() and (addresses < high).any():
                    self.flush()
            for address in addresses:
                try:
                    raw = self.memory.read(int(address), self.beat)
                except ValueError as error:
                    raise execute_error(self.index, AGCUError.READ_DECERR, error) from None
                vin.items.append(np.frombuffer(raw, dtype="<u4").astype(np.uint32))
            self.loaded += space
            moved += space
        out = self.edge_out["vector"]
        if out.items:
            count = len(out.items)
            if self.cfg.get("store_bf16"):
                # vector beat j is half j % 2 of AXI beat j // 2
                first = self.stored // 2
                beats = (self.stored + count - 1) // 2 - first + 1
                bases = self._addresses("store", first, beats)
                addresses = [int(bases[(self.stored + i) // 2 - first]) +
                             ((self.stored + i) % 2) * 2 * self.lanes for i in range(count)]
            else:
                addresses = self._addresses("store", self.stored, count).tolist()
            self.pending_stores.extend(zip(addresses, out.items, strict=True))
            out.items.clear()
            self.stored += count
            out.capacity = self.store_total - self.stored
            moved += count
        return moved

    def _load_bf16(self, vin, space):
        """``load_bf16``: AXI beat ``i`` (``2 * lanes`` packed BF16 values) becomes vector
        beats ``2i`` (values ``0..lanes-1``) and ``2i + 1`` (the rest), ``value << 16``."""
        first = self.loaded // 2
        last = (self.loaded + space - 1) // 2
        addresses = self._addresses("load", first, last - first + 1)
        self.flush()
        for index, address in enumerate(addresses):
            try:
                raw = self.memory.read(int(address), self.beat)
            except ValueError as error:
                raise execute_error(self.index, AGCUError.READ_DECERR, error) from None
            values = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            for half in (0, 1):
                beat = 2 * (first + index) + half
                if self.loaded <= beat < self.loaded + space:
                    vin.items.append(values[half * self.lanes:(half + 1) * self.lanes])
        self.loaded += space
        return space

    def finished(self):
        return (not self.launch and self.loaded == self.load_total and
                self.stored == self.store_total and
                (not self.cfg["wait_done"] or not self.execute or self.done_seen))

    def busy(self):
        return self.execute and not self.finished()

    def waits(self):
        found = []
        if self.launch:
            found.append(f"{self.name} launch token not taken")
        if self.loaded < self.load_total:
            found.append(f"{self.name} load has {self.load_total - self.loaded} beats "
                         f"not taken")
        if self.stored < self.store_total:
            found.append(f"{self.name} store expects {self.store_total - self.stored} more "
                         f"beats")
        if self.execute and self.cfg["wait_done"] and not self.done_seen:
            found.append(f"{self.name} waits for a DONE token")
        return found



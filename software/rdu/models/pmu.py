"""The PMU's functional model (``hdl/pmu.py``) at item level.

:class:`PMUModel` writes and reads its SRAM along its address generators (per-beat
tables of :mod:`rdu.affine`, computed block by block), with N buffers, read passes,
the predicate, the read gate, scalar lookups and the hardware's error checks.
"""

import numpy as np

from hdl.pmu import ADDRESS_BITS, MAX_BUFFERS
from hdl.pmu import READ_GATE_CREDITS as GATE_CREDITS

from .. import affine
from .shared import DONE, STEP, Lazy, Unit, UnitError, item_vectors, item_word

__all__ = ["PMUModel", "GATE_CREDITS", "ADDRESS_MASK", "BLOCK"]

#: The PMU's word addresses wrap at ADDRESS_BITS.
ADDRESS_MASK = (1 << ADDRESS_BITS) - 1
#: Beats of the address-generator tables computed at once.
BLOCK = 4096


class _AffineTable:
    """Per-beat tables of one PMU address generator for one buffer, block by block."""

    def __init__(self, pmu, ag, buffer_base):
        self.pmu, self.ag, self.base = pmu, ag, buffer_base
        self.beats = affine.beats(ag["bound"])
        self.blocks = {}

    def block(self, index):
        cached = self.blocks.get(index)
        if cached is not None:
            return cached
        pmu, ag, cfg = self.pmu, self.ag, self.pmu.cfg
        first = index * BLOCK
        address = affine.addresses(ag["start"], ag["bound"], ag["stride"], first,
                                   min(self.beats, first + BLOCK) - first, mask=ADDRESS_MASK)
        if cfg["predicate_enable"]:
            pred = (address >= cfg["predicate_low"]) & (address < cfg["predicate_high"])
            offset = (address - cfg["predicate_low"]) & ADDRESS_MASK
        else:
            pred = np.ones(len(address), dtype=bool)
            offset = address
        lanes = np.arange(pmu.lanes, dtype=np.int64)
        lane_offset = (offset[:, None] + ag["lane_stride"] * lanes[None, :]) & ADDRESS_MASK
        out_of_range = (lane_offset >= cfg["buffer_words"]).any(axis=1)
        physical = (self.base + lane_offset) & ADDRESS_MASK
        skew = cfg["skew_shift"]
        bank = (physical + (physical >> skew if skew else 0)) % pmu.lanes
        ordered = np.sort(bank, axis=1)
        conflict = (ordered[:, 1:] == ordered[:, :-1]).any(axis=1)
        # physical words beyond the SRAM wrap in the 20-bit address like the hardware's
        # row index (only reachable with an out-of-range lane, which is an error)
        physical = physical % pmu.capacity_words
        any_bad = bool(((conflict | out_of_range) & pred).any())
        cached = self.blocks[index] = (pred, out_of_range, conflict, physical, any_bad,
                                       bool(pred.all()))
        return cached


class PMUModel(Unit):
    """Pattern Memory Unit (``hdl/pmu.py``) at item level."""

    def __init__(self, row, col, lanes, capacity_words, cfg, memory, queues):
        self.name = f"PMU({row},{col})"
        self.lanes = lanes
        self.capacity_words = capacity_words
        self.cfg = cfg
        self.memory = memory
        self.vin, self.vout = queues["vector_in"], queues["vector_out"]
        self.sin, self.sout = queues["scalar_in"], queues["scalar_out"]
        self.cin, self.cout = queues["control_in"], queues["control_out"]
        self.cin.capacity = GATE_CREDITS if cfg["read_gate"] else 0
        self.full = 0
        self.write_buffer = 0
        self.read_buffer = 0
        self.write_beat = 0
        self.read_beat = 0
        self.armed = False
        self.repeat = 0
        self.passes = 0
        self.done = False
        self.step_tokens = 0
        self.done_token = False
        self.beats_written = 0
        self.beats_read = 0
        self.items_in = 0
        self.tables = {}
        #: writes of lazy SIMD results (word addresses, items), in order: applied by
        #: flush() before the SRAM is read, so a SIMD producer computes in buffer-sized
        #: batches
        self.pending_writes = []
        common = (1 <= cfg["buffers"] <= MAX_BUFFERS and
                  cfg["buffer_words"] * cfg["buffers"] <= capacity_words and
                  cfg["buffer_words"] != 0 and
                  (cfg["skew_shift"] == 0 or
                   lanes.bit_length() - 1 <= cfg["skew_shift"] < ADDRESS_BITS))
        self.write_ok = common and all(cfg["write"]["bound"])
        self.read_ok = common and all(cfg["read"]["bound"])

    def _error(self, code, detail):
        raise UnitError(f"{self.name}: error {code} ({detail})")

    def _table(self, side, buffer):
        key = (side, buffer)
        table = self.tables.get(key)
        if table is None:
            table = self.tables[key] = _AffineTable(self, self.cfg[side],
                                                    buffer * self.cfg["buffer_words"])
        return table

    def _write(self):
        cfg, vin = self.cfg, self.vin.items
        if not cfg["write_enable"] or not vin:
            return 0
        if not self.write_ok:
            self._error("BAD_CONFIG", "write side: a loop bound of 0, bad buffers, "
                                      "buffer_words or skew_shift")
        moved = 0
        while vin and self.full < cfg["buffers"]:
            table = self._table("write", self.write_buffer)
            block, start = divmod(self.write_beat, BLOCK)
            pred, bad_range, conflict, physical, any_bad, all_pred = table.block(block)
            count = min(len(vin), len(pred) - start)
            items = [vin.popleft() for _ in range(count)]
            sel = slice(start, start + count)
            chosen = pred[sel]
            if any_bad and (conflict[sel] & chosen).any():
                beat = self.write_beat + int(np.argmax(conflict[sel] & chosen))
                self._error("WRITE_CONFLICT", f"write beat {beat} maps two lanes to one bank")
            if any_bad and (bad_range[sel] & chosen).any():
                beat = self.write_beat + int(np.argmax(bad_range[sel] & chosen))
                self._error("WRITE_RANGE", f"write beat {beat} falls outside its buffer")
            if all_pred:
                self._store(physical[sel], items)
                self.beats_written += count
            elif chosen.any():
                picked = np.flatnonzero(chosen)
                self._store(physical[sel][picked], [items[i] for i in picked])
                self.beats_written += len(picked)
            moved += count
            self.items_in += count
            self.write_beat += count
            if self.write_beat == table.beats:
                self.write_beat = 0
                self.full += 1
                self.write_buffer = (self.write_buffer + 1) % cfg["buffers"]
        return moved

    def _store(self, addresses, items):
        if self.pending_writes or any(isinstance(item, Lazy) for item in items):
            self.pending_writes.append((addresses, items))
        else:
            self.memory[addresses] = item_vectors(items, self.lanes)

    def flush(self):
        """Apply the pending writes (their lazy values are computed now)."""
        writes, self.pending_writes = self.pending_writes, []
        for addresses, items in writes:
            self.memory[addresses] = item_vectors(items, self.lanes)

    def _read(self):
        cfg = self.cfg
        if not cfg["read_enable"] or self.done:
            return 0
        progress = 0
        vout = self.vout
        while not self.done:
            if not self.armed:
                if self.full == 0 or (cfg["read_gate"] and not self.cin.items):
                    break
                if not self.read_ok:
                    self._error("BAD_CONFIG", "read side: a loop bound of 0, bad buffers, "
                                              "buffer_words or skew_shift")
                if cfg["read_gate"]:
                    self.cin.items.popleft()
                self.armed = True
                progress += 1
            table = self._table("read", self.read_buffer)
            block, start = divmod(self.read_beat, BLOCK)
            pred, bad_range, conflict, physical, any_bad, all_pred = table.block(block)
            space = max(0, vout.capacity - len(vout.items))
            left = len(pred) - start
            if all_pred:
                steps = min(space, left)
            else:
                window = pred[start:start + min(left, 64 + 8 * space)]
                produced = np.cumsum(window)
                steps = int(np.searchsorted(produced, space + 1))
            # the beat the reader stops at is checked too (the hardware checks it while
            # it waits for room)
            check = slice(start, start + min(left, steps + 1))
            chosen = pred[check]
            if any_bad and (conflict[check] & chosen).any():
                beat = self.read_beat + int(np.argmax(conflict[check] & chosen))
                self._error("READ_CONFLICT", f"read beat {beat} maps two lanes to one bank")
            if any_bad and (bad_range[check] & chosen).any():
                beat = self.read_beat + int(np.argmax(bad_range[check] & chosen))
                self._error("READ_RANGE", f"read beat {beat} falls outside its buffer")
            if steps == 0:
                break
            sel = slice(start, start + steps)
            if self.pending_writes:
                self.flush()
            rows = self.memory[physical[sel] if all_pred else physical[sel][pred[sel]]]
            vout.items.extend(rows)
            self.beats_read += len(rows)
            progress += steps
            self.read_beat += steps
            if self.read_beat == table.beats:
                self.read_beat = 0
                self.armed = False
                self.repeat += 1
                if self.repeat >= max(1, cfg["read_repeat"]):
                    self.repeat = 0
                    self.full -= 1
                    self.passes += 1
                    self.read_buffer = (self.read_buffer + 1) % cfg["buffers"]
                    if cfg["read_passes"] and self.passes == cfg["read_passes"]:
                        self.done = True
                        self.done_token = True
                    else:
                        self.step_tokens += 1
        return progress

    def _tokens(self):
        moved = 0
        cout = self.cout
        while (self.step_tokens or self.done_token) and len(cout.items) < cout.capacity:
            if self.step_tokens:
                self.step_tokens -= 1
                cout.items.append(STEP)
            else:
                self.done_token = False
                cout.items.append(DONE)
            moved += 1
        return moved

    def _scalar(self):
        moved = 0
        sin, sout = self.sin.items, self.sout
        while sin and len(sout.items) < sout.capacity:
            address = sin[0] = item_word(sin[0])
            if address >= self.capacity_words:
                self._error("SCALAR_RANGE", f"scalar lookup of word {address}")
            sin.popleft()
            if self.pending_writes:
                self.flush()
            sout.items.append(int(self.memory[address]))
            moved += 1
        return moved

    def step(self):
        total = 0
        while True:
            moved = self._write() + self._read() + self._tokens() + self._scalar()
            if not moved:
                return total
            total += moved

    def busy(self):
        return bool(self.write_beat or self.vin.items or self.sin.items or self.armed)

    def leftovers(self):
        tokens = self.step_tokens + self.done_token
        return [f"{self.name}: {tokens} control tokens not sent"] if tokens else []

    def waits(self):
        found = []
        cfg = self.cfg
        if self.write_beat and not self.vin.items:
            beats = self._table("write", self.write_buffer).beats
            found.append(f"{self.name} waits on vector_in ({beats - self.write_beat} more "
                         f"beats of a write pass)")
        if self.vin.items and self.full >= cfg["buffers"]:
            found.append(f"{self.name} write waits for a free buffer "
                         f"({cfg['buffers']} full)")
        if self.vin.items and not cfg["write_enable"]:
            found.append(f"{self.name} holds vector_in beats with write_enable off")
        if self.armed:
            found.append(f"{self.name} read waits on vector_out")
        elif cfg["read_enable"] and not self.done and self.full and cfg["read_gate"]:
            found.append(f"{self.name} waits on control_in (read gate)")
        if self.sin.items:
            found.append(f"{self.name} scalar lookups wait on scalar_out")
        return found

    def counters(self):
        return {"items_in": self.items_in, "items_out": self.beats_read,
                "beats_written": self.beats_written, "beats_read": self.beats_read,
                "passes": self.passes}


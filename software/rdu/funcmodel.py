"""Functional model of a configured tile array: runs a bitstream item by item in Python.

The model decodes every unit's configuration from the bitstream with the hardware's own
``lib.data`` layouts (:mod:`rdu.unitconfig`) and moves items (vector beats, scalars,
control tokens) through bounded queues whose capacities are the hardware FIFO depths:
switches route by their tables (multicast, merge), PMUs write and read along their
address generators with N buffers, read passes, predicates and gates, PCUs run their
systolic or SIMD body (bit-exact, :mod:`rdu.pcu_model` / :mod:`rdu.fpmodel`), AGCUs
stream memory in and out. It is item-exact, not cycle-exact: the RTL must produce the
same items on every port, in the same order. ``docs/funcmodel.md`` documents it.

>>> array = FunctionalArray(2, 2, 4, compute=False, capacity_bytes=1024)
>>> array.load(bitstream_words)                                    # doctest: +SKIP
>>> result = array.run(edge_inputs={("vector", 0): beats})         # doctest: +SKIP
>>> result.edge_outputs["vector", 2]                               # doctest: +SKIP
"""

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from hdl.agcu import AGCUError, agcu_config_layout
from hdl.array import unit_kind_at
from hdl.fp import Op
from hdl.interfaces import NETWORKS, ControlToken, config_words
from hdl.pcu import FIFO_DEPTH as PCU_FIFO_DEPTH
from hdl.pcu_config import Mode, Reduce, Tail, pcu_config_layout
from hdl.pmu import ADDRESS_BITS, MAX_BUFFERS, OUTPUT_FIFO_DEPTH, pmu_config_layout
from hdl.pmu import FIFO_DEPTH as PMU_INPUT_DEPTH
from hdl.pmu import READ_GATE_CREDITS as GATE_CREDITS
from hdl.pmu import SCALAR_OUT_FIFO_DEPTH as PMU_SCALAR_OUT_DEPTH
from hdl.switch import FIFO_DEPTH as SWITCH_FIFO_DEPTH
from hdl.switch import NARROW_OUTPUTS, VECTOR_OUTPUTS, Direction, Port, switch_config_layout

from . import affine, pcu_model
from .bitstream import BitstreamError, Geometry, UnitKind, read_bitstream
from .memory_map import REGIONS, region_of
from .unitconfig import unpack_config

__all__ = ["ModelError", "ModelDeadlock", "UnitError", "CommandError", "LoaderError",
           "FlatMemory", "RunResult", "FunctionalArray", "run_program", "systolic_tiles",
           "agcu_edge"]

# Switch input indices (hdl.switch.Port: the four directions, then the unit's output).
NORTH, EAST, SOUTH, WEST, LOCAL = Port
DIRECTION_NAMES = NARROW_OUTPUTS
OPPOSITE = {direction: direction.opposite for direction in Direction}
# Control tokens as plain ints (hdl.interfaces.ControlToken).
STEP, DONE = int(ControlToken.STEP), int(ControlToken.DONE)
ADDRESS_MASK = (1 << ADDRESS_BITS) - 1
UNBOUNDED = 1 << 62
# The queues follow the hardware FIFO depths, imported above: SWITCH_FIFO_DEPTH
# (hdl.switch.FIFO_DEPTH), PMU_INPUT_DEPTH, PMU_SCALAR_OUT_DEPTH, OUTPUT_FIFO_DEPTH and
# GATE_CREDITS (hdl.pmu), PCU_FIFO_DEPTH (hdl.pcu.FIFO_DEPTH).
#: Beats of the address-generator tables computed at once.
BLOCK = 4096


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


def _agcu_error(agcu, code, detail):
    """The :class:`CommandError` of a kernel execute of AGCU ``agcu``."""
    from hdl.agcu import AGCUOp
    return CommandError(agcu, code, f"AGCU {agcu}: error {AGCUError(code).name} ({detail})",
                        AGCUOp.EXECUTE)


def agcu_edge(index, rows):
    """Edge port index of AGCU ``index`` (``rdu.mapper.agcu_site``: even indices on the
    west edge, odd ones on the east edge, from the middle rows)."""
    from .mapper import agcu_site
    side, row = agcu_site(index, rows)
    return row if side == "west" else rows + row


# --------------------------------------------------------------------------------------
# Queues and items
# --------------------------------------------------------------------------------------

class Queue:
    """A bounded FIFO of items (``capacity`` may change, e.g. an AGCU store's demand)."""
    __slots__ = ("items", "capacity", "name")

    def __init__(self, capacity, name):
        self.items = deque()
        self.capacity = capacity
        self.name = name

    def full(self):
        return len(self.items) >= self.capacity


class _TileResult:
    """The result of one systolic tile, computed together with the other pending tiles
    of its PCU when the first of its rows is needed."""
    __slots__ = ("pcu", "a", "b", "value")

    def __init__(self, pcu, a, b):
        self.pcu, self.a, self.b, self.value = pcu, a, b, None


class _Lazy:
    """An item whose value is computed on first use (``value()``), in batches."""
    __slots__ = ()


class LazyRow(_Lazy):
    """A systolic result row whose value is computed on first use (tiles in batches)."""
    __slots__ = ("tile", "row")

    def __init__(self, tile, row):
        self.tile, self.row = tile, row

    def value(self):
        if self.tile.value is None:
            self.tile.pcu.compute_pending()
        return self.tile.value[self.row]


class _SimdBatch:
    """Consecutive iterations of one SIMD run taken but not computed yet: their input
    items (possibly lazy themselves) and, once computed, what they emitted."""
    __slots__ = ("run", "start", "count", "emitted", "in0", "in1", "scalars", "vectors",
                 "reductions")

    def __init__(self, run, start):
        self.run, self.start, self.count, self.emitted = run, start, 0, 0
        self.in0, self.in1, self.scalars = [], [], []
        self.vectors = self.reductions = None


class _SimdRun:
    """One SIMD run computed in batches (``pcu_model.SimdState.block``): the PCU takes
    beats and emits :class:`LazyVector` / :class:`LazyWord` placeholders at item level;
    the arithmetic of the open batch runs when one of its values is needed."""
    __slots__ = ("state", "lanes", "inner", "outer", "counter_min", "counter_stride",
                 "batch")

    def __init__(self, cfg, lanes):
        self.state = pcu_model.SimdState(cfg, lanes)
        self.lanes = lanes
        counter = cfg["counters"][0]
        self.inner = pcu_model.trip_count(counter)
        self.counter_min, self.counter_stride = counter["min"], counter["stride"]
        self.outer = pcu_model.trip_count(cfg["counters"][1])
        self.batch = None

    def flags(self, iteration):
        """``(position in counter 0, first_outer, last_outer)`` of ``iteration``(s)."""
        position = iteration % self.inner
        outer = (iteration // self.inner) % self.outer
        return position, outer == 0, outer == self.outer - 1

    def compute(self):
        batch, self.batch = self.batch, None
        if batch is None or batch.in0 is None:
            return
        lanes, state = self.lanes, self.state
        position, first_outer, last_outer = self.flags(
            batch.start + np.arange(batch.count, dtype=np.int64))
        counter0 = self.counter_min + position * self.counter_stride
        vecs = _vectors(batch.in0, lanes)
        others = _vectors(batch.in1, lanes) if state.uses_in1 else None
        scalars = np.array([int(_word(item)) for item in batch.scalars], dtype=np.uint64
                           ).astype(np.uint32)
        vectors, reductions = state.block(counter0, position == 0, position == self.inner - 1,
                                          vecs, others, scalars, first_outer, last_outer)
        batch.in0 = batch.in1 = batch.scalars = None
        batch.vectors, batch.reductions = vectors, reductions


class LazyVector(_Lazy):
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


def _vector(item):
    return item.value() if isinstance(item, _Lazy) else item


def _word(item):
    """A scalar item's value (a SIMD reduction is computed on first use)."""
    return item.value() if isinstance(item, _Lazy) else item


def _vectors(items, lanes):
    if not items:
        return np.zeros((0, lanes), dtype=np.uint32)
    return np.array([_vector(item) for item in items], dtype=np.uint32).reshape(-1, lanes)


def systolic_tiles(a_columns, b_rows):
    """Many systolic tiles at once: ``a_columns``, ``b_rows`` are (tiles, K, lanes);
    returns (tiles, lanes, lanes) (:func:`rdu.pcu_model.systolic_accumulate`)."""
    return pcu_model.systolic_accumulate(a_columns, b_rows)


# --------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------
# Units
# --------------------------------------------------------------------------------------

class _Unit:
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


class _EdgeSource(_Unit):
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


def _output_names(outputs):
    return VECTOR_OUTPUTS if len(outputs) == len(VECTOR_OUTPUTS) else NARROW_OUTPUTS


class _SwitchNetwork(_Unit):
    """One network of one switch: routes the heads of its input FIFOs to its outputs."""

    def __init__(self, name, inputs, outputs, selects, merges):
        self.name = name
        self.inputs = inputs            # 5 queues: north, east, south, west, local
        self.outputs = outputs          # destination queue per output (None: unconnected)
        self.merge = [any(counts) for counts in merges]
        self.counts = merges
        self.members = [[] for _ in inputs]
        for out, select in enumerate(selects):
            if self.merge[out]:
                for source, count in enumerate(merges[out]):
                    if count:
                        self.members[source].append(out)
            elif 1 <= select <= len(inputs):
                self.members[select - 1].append(out)
        self.full_mask = [sum(1 << out for out in members) for members in self.members]
        self.taken = [0] * len(inputs)
        self.current = [None] * len(outputs)
        self.remaining = [0] * len(outputs)
        for out in range(len(outputs)):
            if self.merge[out]:
                first = next(s for s, count in enumerate(merges[out]) if count)
                self.current[out], self.remaining[out] = first, merges[out][first]
        self.routed = [s for s in range(len(inputs)) if self.members[s]]
        self.forwarded = 0

    def active(self):
        """Whether any input is routed (a network without routes never moves items)."""
        return bool(self.routed)

    def _advance(self, out):
        counts = self.counts[out]
        source = self.current[out]
        for offset in range(1, len(counts) + 1):
            candidate = (source + offset) % len(counts)
            if counts[candidate]:
                self.current[out], self.remaining[out] = candidate, counts[candidate]
                return

    def step(self):
        moved = 0
        progress = True
        inputs, outputs, members = self.inputs, self.outputs, self.members
        while progress:
            progress = False
            for source in self.routed:
                queue = inputs[source].items
                while queue:
                    item = queue[0]
                    taken = self.taken[source]
                    for out in members[source]:
                        if taken >> out & 1:
                            continue
                        dest = outputs[out]
                        if dest is None or len(dest.items) >= dest.capacity:
                            continue
                        if self.merge[out]:
                            if self.current[out] != source:
                                continue
                            self.remaining[out] -= 1
                            if self.remaining[out] == 0:
                                self._advance(out)
                        dest.items.append(item)
                        taken |= 1 << out
                        moved += 1
                        progress = True
                    if taken == self.full_mask[source]:
                        queue.popleft()
                        self.taken[source] = 0
                    else:
                        self.taken[source] = taken
                        break
        self.forwarded += moved
        return moved

    def busy(self):
        return any(queue.items for source, queue in enumerate(self.inputs)
                   if self.members[source])

    def blocked(self):
        """Routed inputs held up by full destinations (explained by their consumers)."""
        found = []
        for source, queue in enumerate(self.inputs):
            if queue.items and self.members[source]:
                full = [self.outputs[out].name for out in self.members[source]
                        if not self.taken[source] >> out & 1 and
                        self.outputs[out] is not None and self.outputs[out].full()]
                if full:
                    found.append(f"{self.name} input {DIRECTION_NAMES[source]} waits on "
                                 f"{', '.join(full)}")
        return found

    def leftovers(self):
        return [f"{self.name} input {DIRECTION_NAMES[source]}: {len(queue.items)} unrouted "
                f"items" for source, queue in enumerate(self.inputs)
                if queue.items and not self.members[source]]

    def waits(self):
        found = []
        for source, queue in enumerate(self.inputs):
            if not queue.items:
                continue
            where = f"{self.name} input {DIRECTION_NAMES[source]} holds {len(queue.items)}"
            if not self.members[source]:
                continue
            for out in self.members[source]:
                if self.taken[source] >> out & 1:
                    continue
                if self.outputs[out] is None:
                    names = _output_names(self.outputs)
                    found.append(f"{where} items for the unconnected output {names[out]}")
                elif self.merge[out] and self.current[out] != source and \
                        not self.outputs[out].full():
                    names = _output_names(self.outputs)
                    found.append(f"{where} items, merge output {names[out]} waits on "
                                 f"{DIRECTION_NAMES[self.current[out]]}")
        return found


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


class _PMU(_Unit):
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
        if self.pending_writes or any(isinstance(item, _Lazy) for item in items):
            self.pending_writes.append((addresses, items))
        else:
            self.memory[addresses] = _vectors(items, self.lanes)

    def flush(self):
        """Apply the pending writes (their lazy values are computed now)."""
        writes, self.pending_writes = self.pending_writes, []
        for addresses, items in writes:
            self.memory[addresses] = _vectors(items, self.lanes)

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
            address = sin[0] = _word(sin[0])
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


class _Iterations:
    """:func:`rdu.pcu_model.iterations` computed per index instead of as a list: a
    counter chain of three 16-bit counters runs up to 2**48 iterations (a damaged
    configuration must not exhaust memory before ``max_items`` stops the run)."""

    def __init__(self, counters):
        self.ranges = [range(c["min"], c["max"], c["stride"]) for c in counters]
        self.counts = [len(r) for r in self.ranges]
        self.total = self.counts[0] * self.counts[1] * self.counts[2]

    def __len__(self):
        return self.total

    def __getitem__(self, index):
        if not -self.total <= index < self.total:
            raise IndexError(index)
        index %= self.total
        n0, n1, _ = self.counts
        i0, i1, i2 = index % n0, (index // n0) % n1, index // (n0 * n1)
        r0, r1, r2 = self.ranges
        return (r0[i0], r1[i1], r2[i2]), i0 == 0, i0 == n0 - 1, index == self.total - 1


def _codes(shape):
    """The valid codes of a hardware enum (``hdl``): a value outside them is an error."""
    return shape._value2member_map_


class _PCU(_Unit):
    """Pattern Compute Unit (``hdl/pcu.py``) at item level."""

    def __init__(self, row, col, lanes, stages, cfg, queues, batch=True):
        self.name = f"PCU({row},{col})"
        #: SIMD runs computed in batches (_SimdRun); False: SimdState.step per beat
        self.batch = batch
        self.lanes, self.stages_count, self.cfg = lanes, stages, cfg
        self.in0, self.in1 = queues["vector_in0"], queues["vector_in1"]
        self.sin, self.cin = queues["scalar_in"], queues["control_in"]
        self.vout, self.sout, self.cout = (queues["vector_out"], queues["scalar_out"],
                                           queues["control_out"])
        self.state = "idle"
        self.runs = 0
        self.macs = 0
        self.items_in = 0
        self.items_out = 0
        self.pending = []          # systolic tiles whose value is not computed yet

    # -- configuration check (hdl.pcu: the start token is checked) --------------------
    def _check(self):
        cfg = self.cfg
        if cfg["mode"] not in _codes(Mode):
            return "BAD_MODE"
        for counter in cfg["counters"]:
            if counter["stride"] == 0 or counter["max"] <= counter["min"]:
                return "BAD_COUNTER"
        if cfg["mode"] == Mode.SIMD:
            stages = cfg["stages"]
            if any(stage["op"] not in _codes(Op) for stage in stages):
                return "BAD_OP"
            if cfg.get("acc_stage", 0) > len(stages):
                return "BAD_ACC_STAGE"
            if cfg["reduce"] not in _codes(Reduce):
                return "BAD_REDUCE"
            if cfg["tail"] not in _codes(Tail):
                return "BAD_TAIL"
        return None

    def _start(self):
        error = self._check()
        if error:
            raise UnitError(f"{self.name}: error {error} on the start token")
        cfg = self.cfg
        self.runs += 1
        self.iteration = 0
        if cfg["mode"] == Mode.SYSTOLIC:
            self.state = "systolic"
            self.k_len = pcu_model.trip_count(cfg["counters"][0])
            self.total = self.k_len
            for counter in cfg["counters"][1:]:
                self.total *= pcu_model.trip_count(counter)
            self.a_beats, self.b_beats = [], []
            self.owed = deque()
        else:
            self.state = "simd"
            self.steps = _Iterations(cfg["counters"])
            self.pipeline = deque()
            self.mac_beat = self.lanes * sum(stage["op"] in (Op.MUL, Op.MADD)
                                             for stage in cfg["stages"])
            if self.batch:
                self.simd_run = _SimdRun(cfg, self.lanes)
                self.simd = self.simd_run.state
            else:
                self.simd = pcu_model.SimdState(cfg, self.lanes)

    def compute_pending(self):
        tiles, self.pending = self.pending, []
        if not tiles:
            return
        a = np.stack([tile.a for tile in tiles])
        b = np.stack([tile.b for tile in tiles])
        results = systolic_tiles(a, b)
        for tile, value in zip(tiles, results, strict=True):
            tile.value = value
            tile.a = tile.b = None

    def _systolic(self):
        moved = 0
        in0, in1, vout = self.in0.items, self.in1.items, self.vout
        k_len, lanes = self.k_len, self.lanes
        while self.iteration < self.total:
            if self.owed and len(vout.items) < vout.capacity:
                vout.items.append(self.owed.popleft())
                self.items_out += 1
                moved += 1
                continue
            if not (in0 and in1):
                break
            last_k = self.iteration % k_len == k_len - 1
            if last_k and self.owed:
                break
            self.a_beats.append(in0.popleft())
            self.b_beats.append(in1.popleft())
            self.items_in += 2
            moved += 2
            self.iteration += 1
            if last_k:
                tile = _TileResult(self, _vectors(self.a_beats, lanes),
                                   _vectors(self.b_beats, lanes))
                self.a_beats, self.b_beats = [], []
                self.pending.append(tile)
                self.owed.extend(LazyRow(tile, row) for row in range(lanes))
                self.macs += k_len * lanes * lanes
        while self.owed and len(vout.items) < vout.capacity:
            vout.items.append(self.owed.popleft())
            self.items_out += 1
            moved += 1
        if self.iteration == self.total and not self.owed and not self.cout.full():
            self.cout.items.append(DONE)
            self.items_out += 1
            self.state = "idle"
            moved += 1
        return moved

    def _simd_batched(self):
        """``_simd_run`` with the arithmetic deferred: the same item moves, the results
        are :class:`LazyVector` / :class:`LazyWord` of the run's open batch."""
        moved = 0
        cfg, run = self.cfg, self.simd_run
        in0, in1, sin = self.in0.items, self.in1.items, self.sin.items
        vout, sout, cout = self.vout, self.sout, self.cout
        vitems, sitems = vout.items, sout.items
        pipeline = self.pipeline
        depth = self.stages_count + 2
        uses_in1, scalar_in = run.state.uses_in1, cfg["scalar_in"]
        vector_out, reduce = cfg["vector_out"], cfg["reduce"] != Reduce.NONE
        inner, total = run.inner, len(self.steps)
        while True:
            progress = False
            # the oldest iteration leaves when all three outputs have room (the RTL)
            while pipeline and len(vitems) < vout.capacity and \
                    len(sitems) < sout.capacity and len(cout.items) < cout.capacity:
                vector, reduction, last = pipeline.popleft()
                if vector is not None:
                    vitems.append(vector)
                    moved += 1
                if reduction is not None:
                    sitems.append(reduction)
                    moved += 1
                self.items_out += (vector is not None) + (reduction is not None)
                if last:
                    cout.items.append(DONE)
                    self.items_out += 1
                    self.state = "idle"
                    return moved + 1
                progress = True
            while self.iteration < total and len(pipeline) < depth and in0 and \
                    (not uses_in1 or in1):
                position, _, last_outer = run.flags(self.iteration)
                first = position == 0
                need_scalar = scalar_in and first
                if need_scalar and not sin:
                    break
                batch = run.batch
                if batch is None:
                    batch = run.batch = _SimdBatch(run, self.iteration)
                batch.in0.append(in0.popleft())
                taken = 1
                if uses_in1:
                    batch.in1.append(in1.popleft())
                    taken += 1
                if need_scalar:
                    batch.scalars.append(sin.popleft())
                    taken += 1
                self.items_in += taken
                batch.count += 1
                vector = reduction = None
                if pcu_model.emits(cfg, position == inner - 1, last_outer):
                    if vector_out:
                        vector = LazyVector(batch, batch.emitted)
                    if reduce:
                        reduction = LazyWord(batch, batch.emitted)
                    batch.emitted += 1
                self.iteration += 1
                pipeline.append((vector, reduction, self.iteration == total))
                self.macs += self.mac_beat
                moved += 1
                progress = True
            if not progress:
                return moved

    def _simd_run(self):
        moved = 0
        cfg, simd = self.cfg, self.simd
        in0, in1, sin = self.in0.items, self.in1.items, self.sin.items
        depth = self.stages_count + 2          # pipeline, special-function, reduction registers
        while True:
            progress = False
            if self.pipeline:
                vector, reduction, last = self.pipeline[0]
                if not (self.vout.full() or self.sout.full() or self.cout.full()):
                    self.pipeline.popleft()
                    for item, queue in ((vector, self.vout), (reduction, self.sout)):
                        if item is not None:
                            queue.items.append(item)
                            self.items_out += 1
                            moved += 1
                    if last:
                        self.cout.items.append(DONE)
                        self.items_out += 1
                        self.state = "idle"
                        return moved + 1
                    progress = True
            if self.iteration < len(self.steps) and len(self.pipeline) < depth:
                (v0, v1, _), first, last_inner, last = self.steps[self.iteration]
                need_scalar = cfg["scalar_in"] and first
                if in0 and (not simd.uses_in1 or in1) and (not need_scalar or sin):
                    vec = _vector(in0.popleft())
                    other = _vector(in1.popleft()) if simd.uses_in1 else None
                    scalar = _word(sin.popleft()) if need_scalar else None
                    self.items_in += 1 + (other is not None) + (scalar is not None)
                    vector, reduction = simd.step(v0, first, last_inner, vec, other, scalar,
                                                  *pcu_model.outer_flags(cfg, v1))
                    self.pipeline.append((vector, reduction, last))
                    self.iteration += 1
                    self.macs += self.mac_beat
                    moved += 1
                    progress = True
            if not progress:
                return moved

    def step(self):
        moved = 0
        while True:
            if self.state == "idle":
                if not self.cin.items:
                    return moved
                self.cin.items.popleft()
                self.items_in += 1
                moved += 1
                self._start()
            if self.state == "systolic":
                progress = self._systolic()
            else:
                progress = self._simd_batched() if self.batch else self._simd_run()
            moved += progress
            if self.state != "idle" and not progress:
                return moved

    def busy(self):
        return self.state != "idle" or bool(self.in0.items or self.in1.items or
                                            self.sin.items)

    def waits(self):
        if self.state == "idle":
            held = [name for name, queue in (("vector_in0", self.in0), ("vector_in1", self.in1),
                                             ("scalar_in", self.sin)) if queue.items]
            return [f"{self.name} waits on control_in (a start token; {', '.join(held)} "
                    f"hold data)"] if held else []
        if self.state == "systolic":
            if self.iteration == self.total:
                return [f"{self.name} waits on vector_out" if self.owed
                        else f"{self.name} waits on control_out"]
            if self.owed and self.iteration % self.k_len == self.k_len - 1 and \
                    self.in0.items and self.in1.items:
                return [f"{self.name} waits on vector_out"]
            empty = [name for name, queue in (("vector_in0", self.in0),
                                              ("vector_in1", self.in1)) if not queue.items]
            return [f"{self.name} waits on {' and '.join(empty)} "
                    f"(k step {self.iteration} of {self.total})"]
        if self.pipeline and len(self.pipeline) >= self.stages_count + 2:
            full = [q.name for q in (self.vout, self.sout, self.cout) if q.full()]
            return [f"{self.name} waits on {' and '.join(full) or 'its outputs'}"]
        (_, _, _), first, _, _ = self.steps[min(self.iteration, len(self.steps) - 1)]
        empty = ["vector_in0"] if not self.in0.items else []
        if self.simd.uses_in1 and not self.in1.items:
            empty.append("vector_in1")
        if self.cfg["scalar_in"] and first and not self.sin.items:
            empty.append("scalar_in")
        return [f"{self.name} waits on {' and '.join(empty) or 'its outputs'} "
                f"(iteration {self.iteration} of {len(self.steps)})"]

    def counters(self):
        return {"items_in": self.items_in, "items_out": self.items_out, "macs": self.macs,
                "runs": self.runs}


def _per_beat_on_cycles(switches, units):
    """A SIMD batch computes its inputs' values first: a PCU whose results can come back
    to its own inputs through switches and PCUs (items that stay lazy on the way) would
    wait on itself, so such PCUs step one beat at a time (``SimdState.step``)."""
    following = {}                       # queue id -> queues its items can move to
    for net in switches:
        for source in net.routed:
            following.setdefault(id(net.inputs[source]), []).extend(
                net.outputs[out] for out in net.members[source]
                if net.outputs[out] is not None)
    pcus = [unit for unit in units if isinstance(unit, _PCU)]
    for pcu in pcus:
        for queue in (pcu.in0, pcu.in1, pcu.sin):
            following.setdefault(id(queue), []).extend((pcu.vout, pcu.sout))
    for pcu in pcus:
        if not pcu.batch:
            continue
        inputs = {id(pcu.in0), id(pcu.in1), id(pcu.sin)}
        seen, todo = set(), [pcu.vout, pcu.sout]
        while todo:
            queue = todo.pop()
            if id(queue) in inputs:
                pcu.batch = False
                break
            if id(queue) not in seen:
                seen.add(id(queue))
                todo.extend(following.get(id(queue), ()))


class _AGCU(_Unit):
    """An AGCU running kernel execute: launch token, load and store patterns."""

    def __init__(self, index, cfg, lanes, memory, edge_in, edge_out, execute):
        self.name = f"AGCU {index}"
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
                    raise _agcu_error(index, AGCUError.MISALIGNED,
                                      f"{side} base or stride is not a multiple of "
                                      f"{self.beat} bytes")
            for side in ("load", "store"):
                if cfg[f"{side}_enable"] and not all(cfg[side]["count"]):
                    raise _agcu_error(index, AGCUError.BAD_CONFIG,
                                      f"{side} pattern has a zero count")
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
            raise _agcu_error(self.index, AGCUError.ADDRESS_WRAP,
                              f"{side} beat {start + int(np.argmax(bad))} leaves the "
                              f"address space")
        return address

    def flush(self):
        half = self.cfg.get("store_bf16")
        for address, item in self.pending_stores:
            value = _vector(item)
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
            raise _agcu_error(self.index, AGCUError.WRITE_DECERR, error) from None

    def _write(self, address, value):
        try:
            self.memory.write(int(address), np.asarray(value, dtype="<u4").tobytes())
        except ValueError as error:
            raise _agcu_error(self.index, AGCUError.WRITE_DECERR, error) from None

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
                    raise _agcu_error(self.index, AGCUError.READ_DECERR, error) from None
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
                raise _agcu_error(self.index, AGCUError.READ_DECERR, error) from None
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


# --------------------------------------------------------------------------------------
# The array
# --------------------------------------------------------------------------------------

@dataclass
class RunResult:
    """What a run produced.

    ``edge_outputs``: ``{(network, edge): items}`` (vector: a (beats, lanes) uint32
    array; scalar and control: lists of ints); ``counters``: per unit name a dict
    (``items_in``, ``items_out``, PCU ``macs``, PMU ``beats_written``...);
    ``done_tokens``: DONE tokens that left the array at edge control outputs;
    ``items_moved``: item transfers the model made; ``scalar_results``: per AGCU, the
    words its ``scalar_in`` received; ``leftovers``: items that nothing waited for and
    that stayed in the array (e.g. unrouted launch or release tokens).
    """
    edge_outputs: dict
    counters: dict
    done_tokens: int
    items_moved: int
    scalar_results: dict = field(default_factory=dict)
    leftovers: list = field(default_factory=list)


class FunctionalArray:
    """Item-level model of a ``rows x cols`` :class:`hdl.array.TileArray` and its AGCUs.

    Parameters
    ----------
    rows, cols, lanes : int
    compute : bool
        PCUs on the checkerboard's compute positions (:func:`hdl.array.is_compute_position`),
        else PMUs everywhere (as ``TileArray(compute_unit=PCU)`` / ``compute_unit=None``).
    stages : int
        SIMD stages of the PCUs.
    capacity_bytes : int
        PMU capacity.
    agcus : int
        AGCUs; AGCU ``k`` sits at edge :func:`agcu_edge` ``(k, rows)``.
    agcu_config_words : int
        Configuration words an AGCU record may carry (``TileArray`` default 16).
    fifo_depth : int
        Depth of the switches' input FIFOs.
    switch_layout : data.Layout, optional
        The switches' configuration layout (default ``hdl.switch.switch_config_layout()``);
        merge fields (``vector_merge`` ...) are used when the layout has them.
    agcu_positions : sequence of (side, row), optional
        Where each AGCU sits (``hdl.system.RDUSystem``'s parameter); default
        :func:`agcu_edge`'s rule. ``agcu_edges[k]`` is AGCU ``k``'s edge port.
    """

    def __init__(self, rows, cols, lanes, *, compute=True, stages=4, capacity_bytes=65536,
                 agcus=2, agcu_config_words=16, fifo_depth=SWITCH_FIFO_DEPTH,
                 switch_layout=None, agcu_positions=None, simd_batch=True):
        self.geometry = Geometry(rows, cols, lanes)
        #: SIMD PCUs compute in batches (False: pcu_model.SimdState.step per beat)
        self.simd_batch = simd_batch
        self.rows, self.cols, self.lanes = rows, cols, lanes
        self.compute, self.stages = compute, stages
        if capacity_bytes % (4 * lanes) or capacity_bytes < 8 * lanes:
            raise ValueError(f"PMU capacity must be a multiple of {4 * lanes} bytes, "
                             f"not {capacity_bytes}")
        self.capacity_words = capacity_bytes // 4
        self.agcus = agcus
        self.fifo_depth = fifo_depth
        if agcus > 2 * rows:
            raise ValueError(f"{agcus} AGCUs do not fit the {2 * rows} edge ports")
        if agcu_positions is None:
            self.agcu_edges = [agcu_edge(index, rows) for index in range(agcus)]
        else:
            from hdl.system import position_edge
            self.agcu_edges = [position_edge(side, row, rows)
                               for side, row in agcu_positions]
            if len(self.agcu_edges) != agcus or len(set(self.agcu_edges)) != agcus:
                raise ValueError(f"AGCU positions must be {agcus} distinct (side, row) "
                                 f"pairs, not {agcu_positions!r}")
        self.layouts = {UnitKind.PCU: pcu_config_layout(lanes, stages),
                        UnitKind.PMU: pmu_config_layout(),
                        UnitKind.SWITCH: (switch_config_layout() if switch_layout is None
                                          else switch_layout),
                        UnitKind.AGCU: agcu_config_layout()}
        self.units = {}
        for row in range(rows):
            for col in range(cols):
                kind = self.unit_kind(row, col)
                self.units[kind, row, col] = config_words(self.layouts[kind])
                self.units[UnitKind.SWITCH, row, col] = config_words(self.layouts[
                    UnitKind.SWITCH])
        for index in range(agcus):
            self.units[UnitKind.AGCU, 0, index] = agcu_config_words
        self.words = {key: [0] * count for key, count in self.units.items()}
        self.sram = {(row, col): np.zeros(self.capacity_words, dtype=np.uint32)
                     for row in range(rows) for col in range(cols)
                     if self.unit_kind(row, col) == UnitKind.PMU}
        self.loaded = False

    def unit_kind(self, row, col):
        return unit_kind_at(row, col, self.compute)

    def load(self, bitstream_words):
        """Check and apply a bitstream (raises :class:`rdu.bitstream.BitstreamError`
        exactly where the hardware loader would stop)."""
        _, records = read_bitstream(bitstream_words, self.geometry, self.units)
        for record in records:
            target = self.words[record.kind, record.row, record.col]
            target[:len(record.words)] = record.words
        self.loaded = True

    def config(self, kind, row, col):
        """The decoded configuration of one unit (nested dicts of ints)."""
        layout = self.layouts[kind]
        words = self.words[kind, row, col][:config_words(layout)]
        return unpack_config(layout, words)

    def pmu_memory(self, row, col):
        """The SRAM words of the PMU at (row, col), indexed by physical word address."""
        return self.sram[row, col]

    # -- building the queues and units for a run ----------------------------------------
    def _build(self, memory, execute):
        rows, cols, lanes = self.rows, self.cols, self.lanes
        depth = self.fifo_depth
        switch_inputs = {}
        for row in range(rows):
            for col in range(cols):
                for network in NETWORKS:
                    compute = self.unit_kind(row, col) == UnitKind.PCU
                    unit_depth = {"vector": OUTPUT_FIFO_DEPTH, "scalar": PMU_SCALAR_OUT_DEPTH,
                                  "control": 0}[network] if not compute else PCU_FIFO_DEPTH
                    unit = f"{'PCU' if compute else 'PMU'}({row},{col})"
                    switch_inputs[row, col, network] = [
                        Queue(depth, f"switch({row},{col}) {network} input "
                                     f"{DIRECTION_NAMES[d]}") for d in Direction
                    ] + [Queue(depth + unit_depth, f"{unit} {network}_out")]
        unit_inputs = {}
        for row in range(rows):
            for col in range(cols):
                if self.unit_kind(row, col) == UnitKind.PCU:
                    unit_inputs[row, col] = {name: Queue(PCU_FIFO_DEPTH,
                                                         f"PCU({row},{col}) {name}")
                                             for name in ("vector_in0", "vector_in1",
                                                          "scalar_in", "control_in")}
                else:
                    unit = f"PMU({row},{col})"
                    unit_inputs[row, col] = {
                        "vector_in": Queue(PMU_INPUT_DEPTH, f"{unit} vector_in"),
                        "scalar_in": Queue(PMU_INPUT_DEPTH, f"{unit} scalar_in"),
                        "control_in": Queue(0, f"{unit} control_in")}
        # with memory (an RDUSystem) an edge without an AGCU takes nothing: its outputs'
        # ready is low (a TileArray test without memory collects every edge output)
        def edge_capacity(edge):
            return 0 if memory is not None and edge not in self.agcu_edges else UNBOUNDED
        edge_out = {(network, edge): Queue(edge_capacity(edge), f"edge {network}_out {edge}")
                    for network in NETWORKS for edge in range(2 * rows)}
        switches = []
        for row in range(rows):
            for col in range(cols):
                cfg = self.config(UnitKind.SWITCH, row, col)
                local = unit_inputs[row, col]
                for network in NETWORKS:
                    outputs = []
                    for direction in Direction:
                        d_row, d_col = row + direction.offset[0], col + direction.offset[1]
                        if 0 <= d_row < rows and 0 <= d_col < cols:
                            outputs.append(switch_inputs[d_row, d_col, network][
                                OPPOSITE[direction]])
                        elif direction == WEST and col == 0:
                            outputs.append(edge_out[network, row])
                        elif direction == EAST and col == cols - 1:
                            outputs.append(edge_out[network, rows + row])
                        else:
                            outputs.append(None)
                    if network == "vector":
                        if "vector_in0" in local:
                            outputs += [local["vector_in0"], local["vector_in1"]]
                        else:
                            outputs += [local["vector_in"], None]
                    else:
                        outputs.append(local[f"{network}_in"])
                    merges = cfg.get(f"{network}_merge")
                    if merges is None:
                        merges = [[0] * len(Port) for _ in outputs]
                    net = _SwitchNetwork(f"switch({row},{col}) {network}",
                                         switch_inputs[row, col, network], outputs,
                                         cfg[network], merges)
                    switches.append(net)
        units = []
        for row in range(rows):
            for col in range(cols):
                queues = dict(unit_inputs[row, col])
                for network in NETWORKS:
                    queues[f"{network}_out"] = switch_inputs[row, col, network][LOCAL]
                if self.unit_kind(row, col) == UnitKind.PCU:
                    units.append(_PCU(row, col, lanes, self.stages,
                                      self.config(UnitKind.PCU, row, col), queues,
                                      batch=self.simd_batch))
                else:
                    units.append(_PMU(row, col, lanes, self.capacity_words,
                                      self.config(UnitKind.PMU, row, col),
                                      self.sram[row, col], queues))
        agcus = []
        if memory is not None:
            for index in range(self.agcus):
                edge = self.agcu_edges[index]
                ins = {network: self._edge_input(switch_inputs, network, edge)
                       for network in NETWORKS}
                outs = {network: edge_out[network, edge] for network in NETWORKS}
                agcus.append(_AGCU(index, self.config(UnitKind.AGCU, 0, index), lanes,
                                   memory, ins, outs, index in execute))
        _per_beat_on_cycles(switches, units)
        return switch_inputs, edge_out, switches, units, agcus

    def _edge_input(self, switch_inputs, network, edge):
        rows = self.rows
        if not 0 <= edge < 2 * rows:
            raise ValueError(f"Edge index {edge} is not in 0..{2 * rows - 1}")
        if edge < rows:
            return switch_inputs[edge, 0, network][WEST]
        return switch_inputs[edge - rows, self.cols - 1, network][EAST]

    # -- running -------------------------------------------------------------------------
    def run(self, edge_inputs=None, memory=None, *, execute=None, max_items=50_000_000):
        """Run the loaded configuration until nothing moves.

        Parameters
        ----------
        edge_inputs : dict, optional
            ``{(network, edge): items}``; vector items are sequences of ``lanes`` words
            or packed integers (lane 0 in the LSBs), scalar items words, control items
            0 (STEP) or 1 (DONE).
        memory : object with ``read(address, nbytes)`` and ``write(address, raw)``, optional
            Attaches the AGCUs; those in ``execute`` (default: every AGCU with a load or
            store pattern enabled) run kernel execute.
        max_items : int
            Item transfers after which the run is stopped (:class:`ModelError`).

        Raises
        ------
        ModelDeadlock
            Nothing can move and work remains.
        UnitError
            A unit raised an error (the message names it and the code).
        """
        if not self.loaded:
            raise ModelError("No bitstream loaded")
        if memory is not None and execute is None:
            execute = []
            for index in range(self.agcus):
                cfg = self.config(UnitKind.AGCU, 0, index)
                if cfg["load_enable"] or cfg["store_enable"]:
                    execute.append(index)
        switch_inputs, edge_out, switches, units, agcus = self._build(memory, execute or [])
        sources = []
        for (network, edge), items in (edge_inputs or {}).items():
            if network not in NETWORKS:
                raise ValueError(f"Unknown network {network!r}")
            queue = self._edge_input(switch_inputs, network, edge)
            if any(self.agcu_edges[agcu.index] == edge and
                   (network == "control" and agcu.execute or
                    network == "vector" and agcu.load_total) for agcu in agcus):
                raise ValueError(f"Edge {network} input {edge} is driven by an AGCU")
            if network == "vector":
                items = [self._beat(item) for item in items]
            else:
                items = [int(item) for item in items]
            sources.append(_EdgeSource(network, edge, items, queue))
        collected = {key: [] for key in edge_out}
        agcu_edges = {self.agcu_edges[agcu.index] for agcu in agcus}
        components = sources + agcus + [net for net in switches if net.active()] + units
        moved_total = 0
        done_tokens = 0
        scalar_results = {agcu.index: [] for agcu in agcus}
        try:
            while True:
                moved = 0
                for component in components:
                    moved += component.step()
                for (network, edge), queue in edge_out.items():
                    if not queue.items or (network == "vector" and edge in agcu_edges):
                        continue
                    if network == "control":
                        done_tokens += sum(queue.items)
                        for agcu in agcus:
                            if self.agcu_edges[agcu.index] == edge and DONE in queue.items:
                                agcu.done_seen = True
                    elif network == "scalar":
                        for agcu in agcus:
                            if self.agcu_edges[agcu.index] == edge:
                                scalar_results[agcu.index] += queue.items
                    collected[network, edge].extend(queue.items)
                    moved += len(queue.items)
                    queue.items.clear()
                if not moved:
                    break
                moved_total += moved
                if moved_total > max_items:
                    raise ModelError(f"run stopped after {moved_total} item transfers "
                                     f"(max_items={max_items})")
        finally:
            # SRAM writes of lazy SIMD results land even when the run stops early
            for unit in units:
                if isinstance(unit, _PMU):
                    unit.flush()
        for agcu in agcus:
            agcu.flush()
        waiting = []
        for component in units + agcus + switches + sources:
            if component.busy():
                # a switch held up by a full destination is explained by its consumer
                default = [] if isinstance(component, _SwitchNetwork) else [
                    f"{component.name} is busy"]
                waiting += component.waits() or default
        if not waiting:
            # only switches wait, on destinations that never take anything (a PMU
            # control_in without read_gate, for example)
            waiting = [text for net in switches for text in net.blocked()]
        if waiting:
            raise ModelDeadlock("deadlock: " + "; ".join(waiting))
        edge_outputs = {}
        for (network, edge), items in collected.items():
            if network == "vector":
                if items:
                    edge_outputs[network, edge] = _vectors(items, self.lanes)
            elif items:
                edge_outputs[network, edge] = [_word(item) for item in items]
        scalar_results = {index: [_word(item) for item in items]
                          for index, items in scalar_results.items()}
        counters = {}
        for unit in units:
            counters[unit.name] = unit.counters()
        for net in switches:
            counters[net.name] = {"items_out": net.forwarded}
        for agcu in agcus:
            counters[agcu.name] = {"beats_loaded": agcu.loaded, "beats_stored": agcu.stored}
        leftovers = [text for component in switches + units for text in component.leftovers()]
        return RunResult(edge_outputs, counters, done_tokens, moved_total, scalar_results,
                         leftovers)

    def _beat(self, item):
        if isinstance(item, (int, np.integer)):
            value = int(item)
            return np.array([(value >> (32 * lane)) & 0xFFFF_FFFF for lane in range(self.lanes)],
                            dtype=np.uint32)
        beat = np.asarray(item, dtype=np.uint64)
        if beat.shape != (self.lanes,):
            raise ValueError(f"Vector item of shape {beat.shape}, expected ({self.lanes},)")
        return beat.astype(np.uint32)

    def run_program(self, program, *, max_items=50_000_000):
        """Run an :class:`rdu.program.Program`: inputs into a :class:`FlatMemory`, the
        bitstream loaded from ``bitstream_address`` (as AGCU 0's program load reads it),
        the AGCUs of ``program.execute`` run. Returns ``(outputs, result)``: ``{name:
        uint32 array}`` for ``program.outputs`` and the :class:`RunResult`."""
        memory = FlatMemory()
        for _, (address, words) in program.inputs.items():
            memory.write_words(address, words)
        memory.write_words(program.bitstream_address, program.bitstream)
        header = memory.read_words(program.bitstream_address, 5)
        length = (int(header[1]) >> 16) + int(header[3]) if len(program.bitstream) >= 5 else 0
        words = memory.read_words(program.bitstream_address,
                                  min(max(length, 1), len(program.bitstream)))
        self.load([int(word) for word in words])
        result = self.run(memory=memory, execute=list(program.execute), max_items=max_items)
        outputs = {name: memory.read_words(address, count)
                   for name, (address, count) in program.outputs.items()}
        return outputs, result


def run_program(program, *, compute=True, stages=4, capacity_bytes=65536,
                max_items=50_000_000):
    """Run ``program`` on a fresh :class:`rdu.machine_model.FunctionalMachine` of
    ``program.geometry`` (rows, cols, lanes, agcus, agcu_positions) with these
    parameters: the program is loaded through AGCU 0's ``PROGRAM_LOAD`` as the
    hardware does. Returns ``({name: uint32 array}, RunResult)``; a rejected bitstream
    raises :class:`LoaderError` (also a ``BitstreamError``)."""
    from .machine import Machine
    from .machine_model import FunctionalMachine
    geometry = program.geometry
    machine = Machine(rows=geometry["rows"], cols=geometry["cols"], lanes=geometry["lanes"],
                      stages=stages, pmu_bytes=capacity_bytes, agcus=geometry.get("agcus", 2),
                      agcu_positions=geometry.get("agcu_positions"), compute=compute)
    return FunctionalMachine(machine, max_items=max_items).run_program(program)

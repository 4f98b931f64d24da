"""The PCU's functional model (``hdl/pcu.py``) at item level.

:class:`PCUModel` checks the start token's configuration like the hardware, then runs
its systolic tiles or its SIMD program bit-exactly (:mod:`rdu.models.pcu_reference`):
systolic tiles and SIMD iterations are computed in batches when their values are first
needed (:class:`rdu.models.shared.LazyRow`, :class:`rdu.models.shared.LazyVector`),
or beat by beat where a PCU's results can come back to its own inputs
(:func:`per_beat_on_cycles`).
"""

from collections import deque

import numpy as np

from hdl.fp import Op
from hdl.fp_latency import latency_table, simd_in_flight, systolic_group
from hdl.pcu_config import Mode, Reduce, Tail

from . import pcu_reference
from .shared import (
    DONE,
    LazyRow,
    LazyVector,
    LazyWord,
    Unit,
    UnitError,
    item_vector,
    item_vectors,
    item_word,
)

__all__ = ["PCUModel", "systolic_tiles", "per_beat_on_cycles"]


class TileResult:
    """The result of one systolic tile, computed together with the other pending tiles
    of its PCU when the first of its rows is needed."""
    __slots__ = ("pcu", "a", "b", "value")

    def __init__(self, pcu, a, b):
        self.pcu, self.a, self.b, self.value = pcu, a, b, None


class SimdBatch:
    """Consecutive iterations of one SIMD run taken but not computed yet: their input
    items (possibly lazy themselves) and, once computed, what they emitted."""
    __slots__ = ("run", "start", "count", "emitted", "in0", "in1", "scalars", "vectors",
                 "reductions")

    def __init__(self, run, start):
        self.run, self.start, self.count, self.emitted = run, start, 0, 0
        self.in0, self.in1, self.scalars = [], [], []
        self.vectors = self.reductions = None


class SimdRun:
    """One SIMD run computed in batches (``pcu_reference.SimdState.block``): the PCU takes
    beats and emits :class:`LazyVector` / :class:`LazyWord` placeholders at item level;
    the arithmetic of the open batch runs when one of its values is needed."""
    __slots__ = ("state", "lanes", "inner", "outer", "counter_min", "counter_stride",
                 "batch")

    def __init__(self, cfg, lanes):
        self.state = pcu_reference.SimdState(cfg, lanes)
        self.lanes = lanes
        counter = cfg["counters"][0]
        self.inner = pcu_reference.trip_count(counter)
        self.counter_min, self.counter_stride = counter["min"], counter["stride"]
        self.outer = pcu_reference.trip_count(cfg["counters"][1])
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
        vecs = item_vectors(batch.in0, lanes)
        others = item_vectors(batch.in1, lanes) if state.uses_in1 else None
        scalars = np.array([int(item_word(item)) for item in batch.scalars], dtype=np.uint64
                           ).astype(np.uint32)
        vectors, reductions = state.block(counter0, position == 0, position == self.inner - 1,
                                          vecs, others, scalars, first_outer, last_outer)
        batch.in0 = batch.in1 = batch.scalars = None
        batch.vectors, batch.reductions = vectors, reductions


def systolic_tiles(a_columns, b_rows):
    """Many systolic tiles at once: ``a_columns``, ``b_rows`` are (tiles, K, lanes);
    returns (tiles, lanes, lanes) (:func:`rdu.models.pcu_reference.systolic_accumulate`)."""
    return pcu_reference.systolic_accumulate(a_columns, b_rows)


class Iterations:
    """:func:`rdu.models.pcu_reference.iterations` computed per index instead of as a list: a
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


def enum_codes(shape):
    """The valid codes of a hardware enum (``hdl``): a value outside them is an error."""
    return shape._value2member_map_


class PCUModel(Unit):
    """Pattern Compute Unit (``hdl/pcu.py``) at item level.

    A SIMD run holds at most :func:`hdl.fp_latency.simd_in_flight` beats between its
    inputs and its outputs (the hardware's stage, special-function and reduction
    registers: ``stages + 2``, more with ``fp_latency``); the model keeps no cycles.
    With ``fp_latency`` a systolic tile is ``lanes x group * lanes``
    (:func:`hdl.fp_latency.systolic_group`): each k step takes one beat of
    ``vector_in0`` and ``group`` of ``vector_in1``, or with ``Mode.SYSTOLIC_ROWS``
    ``group`` of ``vector_in0`` and one of ``vector_in1``
    (:func:`rdu.models.pcu_reference.run_systolic`).
    """

    def __init__(self, row, col, lanes, stages, cfg, queues, batch=True, fp_latency="off"):
        self.name = f"PCU({row},{col})"
        #: SIMD runs computed in batches (SimdRun); False: SimdState.step per beat
        self.batch = batch
        self.lanes, self.stages_count, self.cfg = lanes, stages, cfg
        self.latency_table = latency_table(fp_latency)
        self.group = systolic_group(self.latency_table)
        self.depth = stages + 2
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
        if cfg["mode"] not in enum_codes(Mode):
            return "BAD_MODE"
        for counter in cfg["counters"]:
            if counter["stride"] == 0 or counter["max"] <= counter["min"]:
                return "BAD_COUNTER"
        if cfg["mode"] == Mode.SIMD:
            stages = cfg["stages"]
            if any(stage["op"] not in enum_codes(Op) for stage in stages):
                return "BAD_OP"
            if cfg.get("acc_stage", 0) > len(stages):
                return "BAD_ACC_STAGE"
            if cfg["reduce"] not in enum_codes(Reduce):
                return "BAD_REDUCE"
            if cfg["tail"] not in enum_codes(Tail):
                return "BAD_TAIL"
        return None

    def _start(self):
        error = self._check()
        if error:
            raise UnitError(f"{self.name}: error {error} on the start token")
        cfg = self.cfg
        self.runs += 1
        self.iteration = 0
        if cfg["mode"] in (Mode.SYSTOLIC, Mode.SYSTOLIC_ROWS):
            self.state = "systolic"
            self.k_len = pcu_reference.trip_count(cfg["counters"][0])
            self.total = self.k_len
            for counter in cfg["counters"][1:]:
                self.total *= pcu_reference.trip_count(counter)
            self.a_beats, self.b_beats = [], []
            self.slot = 0                  # the block of the grouped stream's next beat
            # Mode.SYSTOLIC_ROWS: vector_in0 grouped (row blocks of A), vector_in1 held
            self.group_rows = cfg["mode"] == Mode.SYSTOLIC_ROWS
            self.owed = deque()
        else:
            self.state = "simd"
            self.steps = Iterations(cfg["counters"])
            self.pipeline = deque()
            self.depth = simd_in_flight([Op(stage["op"]) for stage in cfg["stages"]],
                                        Reduce(cfg["reduce"]), self.lanes, self.latency_table)
            self.mac_beat = self.lanes * sum(stage["op"] in (Op.MUL, Op.MADD)
                                             for stage in cfg["stages"])
            if self.batch:
                self.simd_run = SimdRun(cfg, self.lanes)
                self.simd = self.simd_run.state
            else:
                self.simd = pcu_reference.SimdState(cfg, self.lanes)

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
        k_len, group = self.k_len, self.group
        while self.iteration < self.total:
            if self.owed and len(vout.items) < vout.capacity:
                vout.items.append(self.owed.popleft())
                self.items_out += 1
                moved += 1
                continue
            take_a, take_b = self.group_rows or not self.slot, not self.group_rows or not self.slot
            if (take_a and not in0) or (take_b and not in1):
                break
            last_k = self.iteration % k_len == k_len - 1
            if last_k and self.owed and not self.slot:
                break
            if take_a:
                self.a_beats.append(in0.popleft())
            if take_b:
                self.b_beats.append(in1.popleft())
            self.items_in += take_a + take_b
            moved += take_a + take_b
            self.slot = (self.slot + 1) % group
            if self.slot:
                continue
            self.iteration += 1
            if last_k:
                self._tile_done()
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

    def _tile_done(self):
        """A tile's last k step is taken: its ``group`` blocks of ``lanes`` rows owed."""
        lanes, group = self.lanes, self.group
        a = item_vectors(self.a_beats, lanes).reshape(self.k_len, -1, lanes)
        b = item_vectors(self.b_beats, lanes).reshape(self.k_len, -1, lanes)
        self.a_beats, self.b_beats = [], []
        for block in range(group):
            tile = TileResult(self, np.ascontiguousarray(a[:, block % a.shape[1]]),
                              np.ascontiguousarray(b[:, block % b.shape[1]]))
            self.pending.append(tile)
            self.owed.extend(LazyRow(tile, row) for row in range(lanes))
        self.macs += self.k_len * lanes * lanes * group

    def _simd_batched(self):
        """``_simd_run`` with the arithmetic deferred: the same item moves, the results
        are :class:`LazyVector` / :class:`LazyWord` of the run's open batch."""
        moved = 0
        cfg, run = self.cfg, self.simd_run
        in0, in1, sin = self.in0.items, self.in1.items, self.sin.items
        vout, sout, cout = self.vout, self.sout, self.cout
        vitems, sitems = vout.items, sout.items
        pipeline = self.pipeline
        depth = self.depth
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
                    batch = run.batch = SimdBatch(run, self.iteration)
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
                if pcu_reference.emits(cfg, position == inner - 1, last_outer):
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
        depth = self.depth          # pipeline, special-function, reduction registers
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
                    vec = item_vector(in0.popleft())
                    other = item_vector(in1.popleft()) if simd.uses_in1 else None
                    scalar = item_word(sin.popleft()) if need_scalar else None
                    self.items_in += 1 + (other is not None) + (scalar is not None)
                    vector, reduction = simd.step(v0, first, last_inner, vec, other, scalar,
                                                  *pcu_reference.outer_flags(cfg, v1))
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
                    not self.slot and self.in0.items and self.in1.items:
                return [f"{self.name} waits on vector_out"]
            empty = [name for name, queue in (("vector_in0", self.in0),
                                              ("vector_in1", self.in1))
                     if not queue.items and (name == "vector_in1" or not self.slot)]
            return [f"{self.name} waits on {' and '.join(empty)} "
                    f"(k step {self.iteration} of {self.total})"]
        if self.pipeline and len(self.pipeline) >= self.depth:
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


def per_beat_on_cycles(switches, units):
    """A SIMD batch computes its inputs' values first: a PCU whose results can come back
    to its own inputs through switches and PCUs (items that stay lazy on the way) would
    wait on itself, so such PCUs step one beat at a time (``SimdState.step``)."""
    following = {}                       # queue id -> queues its items can move to
    for net in switches:
        for source in net.routed:
            following.setdefault(id(net.inputs[source]), []).extend(
                net.outputs[out] for out in net.members[source]
                if net.outputs[out] is not None)
    pcus = [unit for unit in units if isinstance(unit, PCUModel)]
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



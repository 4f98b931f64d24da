"""Bit-exact reference model of a configured PCU (:mod:`hdl.pcu`) on streams of vectors.

Configuration is a plain dict with the fields of ``hdl.pcu_config.pcu_config_layout``
(missing fields are zero)::

    {"mode": 0, "counters": [{"min": 0, "max": 4, "stride": 1}, ...],
     "scalar_in": 0, "emit_every": 0, "vector_out": 1, "reduce": 1, "tail": 0,
     "stages": [{"op": 1, "src_a": 0, "src_b": 1, "src_c": 0, "constant": 0}, ...]}

:func:`run_simd` and :func:`run_systolic` take the input streams as uint32 arrays and
return the output streams. :func:`matmul_streams` tiles a matrix product for the
systolic mode and :func:`matmul_from_stream` puts the drained rows back together.
"""

import numpy as np

from hdl.fp import Op
from hdl.pcu_config import ACC_DEPTH, Mode, Reduce, Source, Tail

from . import fp

__all__ = ["MODE_SIMD", "MODE_SYSTOLIC", "SOURCES", "REDUCE_NONE", "REDUCE_SUM",
           "REDUCE_MAX", "TAIL_NONE", "TAIL_EXP", "TAIL_RECIPROCAL", "TAIL_RSQRT",
           "trip_count",
           "iterations", "outer_flags", "emits", "reduce_lanes", "uses_in1", "SimdState",
           "run_simd",
           "systolic_accumulate", "systolic_tile", "run_systolic", "matmul_streams",
           "matmul_from_stream", "bf16_words"]

# The codes are the hardware's (hdl.pcu); these names are aliases.
MODE_SIMD, MODE_SYSTOLIC = Mode.SIMD, Mode.SYSTOLIC
#: Operand source codes by lower-case name (``hdl.pcu_config.Source``).
SOURCES = {source.name.lower(): source for source in Source}
REDUCE_NONE, REDUCE_SUM, REDUCE_MAX = Reduce.NONE, Reduce.SUM, Reduce.MAX
TAIL_NONE, TAIL_EXP, TAIL_RECIPROCAL, TAIL_RSQRT = Tail.NONE, Tail.EXP, Tail.RECIPROCAL, \
    Tail.RSQRT


def trip_count(counter):
    """Iterations of one counter ``{"min", "max", "stride"}``."""
    lo, hi, stride = counter["min"], counter["max"], counter["stride"]
    if stride <= 0 or hi <= lo:
        raise ValueError(f"Counter needs stride > 0 and max > min, not {counter}")
    return -(-(hi - lo) // stride)


def iterations(config):
    """The counter chain's iterations as ``(values, first_inner, last_inner, last)``
    tuples, counter 0 innermost."""
    counters = config["counters"]
    ranges = [list(range(c["min"], c["max"], c["stride"])) for c in counters]
    for c in counters:
        trip_count(c)
    out = []
    for v2 in ranges[2]:
        for v1 in ranges[1]:
            for index, v0 in enumerate(ranges[0]):
                out.append(((v0, v1, v2), index == 0, index == len(ranges[0]) - 1))
    return [(v, first, last, n == len(out) - 1) for n, (v, first, last) in enumerate(out)]


def outer_flags(config, counter1):
    """``(first_outer, last_outer)``: counter 1 (value ``counter1``, scalar or array) at
    its first value (the accumulator stage's reset) and at its last (``emit_outer``)."""
    counter = config["counters"][1]
    counter1 = np.asarray(counter1)
    return counter1 == counter["min"], counter1 + counter["stride"] >= counter["max"]


def emits(config, last_inner, last_outer):
    """Whether an iteration emits (its vector and its reduction): every one with
    ``emit_every``; else every iteration of counter 0 in the last iteration of counter 1
    with ``emit_outer``; else the last iteration of counter 0. Scalars or arrays."""
    if config.get("emit_every"):
        return last_inner | True
    return last_outer if config.get("emit_outer") else last_inner


def reduce_lanes(words, kind):
    """Cross-lane reduction tree of one vector: pairs (0,1), (2,3), ... level by level."""
    level = np.asarray(words, dtype=np.uint32)
    while level.size > 1:
        left, right = level[0::2], level[1::2]
        level = fp.fmax(left, right) if kind == REDUCE_MAX else fp.add(left, right)
    return int(level[0])


def uses_in1(config):
    """Whether some SIMD stage reads ``vector_in1`` (then one beat is taken per iteration)."""
    return any(stage.get(src, 0) == SOURCES["in1"] for stage in config["stages"]
               for src in ("src_a", "src_b", "src_c"))


def apply_tail(config, vec):
    """The PCU's tail on ``vec``: exp, the reciprocal or the reciprocal square root
    (``tail``), then the optional rounding to BF16 (``tail_bf16``)."""
    tail = config.get("tail", 0)
    if tail == TAIL_EXP:
        vec = fp.exp(vec)
    elif tail == TAIL_RECIPROCAL:
        vec = fp.reciprocal(vec)
    elif tail == TAIL_RSQRT:
        vec = fp.rsqrt(vec)
    if config.get("tail_bf16"):
        vec = fp.to_bf16(vec)
    return vec


def pad_row(config, counter0, vecs, lanes):
    """``vecs`` (vector_in0 beats at counter-0 values ``counter0``) with the row's
    padding replaced by stage 0's constant, as :class:`hdl.pcu_simd.SIMDPipeline`'s head
    does: the last ``row_pad`` words of every run of counter 0 (its last iteration and,
    beyond ``lanes`` words, the one before)."""
    pad = config.get("row_pad", 0)
    if not pad:
        return vecs
    counter = config["counters"][0]
    value = np.asarray(counter0, np.int64)[..., None]
    last = value + counter["stride"] >= counter["max"]
    second = ~last & (value + 2 * counter["stride"] >= counter["max"])
    lane = np.arange(lanes)
    mask = (last & (lane + pad >= lanes)) | (second & (lane + pad >= 2 * lanes))
    constant = np.uint32(config["stages"][0].get("constant", 0))
    return np.where(mask, constant, np.asarray(vecs, np.uint32)).astype(np.uint32)


class SimdState:
    """The registers of one SIMD-mode run; :meth:`step` is one counter-chain iteration.

    :func:`run_simd` runs a whole stream through it; the functional model
    (:mod:`rdu.models.array`) steps it one beat at a time as beats arrive.
    """

    def __init__(self, config, lanes):
        self.config = config
        self.lanes = lanes
        self.uses_in1 = uses_in1(config)
        self.registers = [np.zeros(lanes, dtype=np.uint32) for _ in config["stages"]]
        # each stage's PREV input of the last iteration (the LAST source)
        self.lasts = [np.zeros(lanes, dtype=np.uint32) for _ in config["stages"]]
        self.scalar = np.uint32(0)
        #: the stage whose REG is the accumulator memory (None: no stage)
        self.acc_stage = config.get("acc_stage", 0) - 1 if config.get("acc_stage") else None
        self.acc = np.zeros((ACC_DEPTH, lanes), dtype=np.uint32)

    def step(self, counter0, first, last_inner, vec, other=None, scalar=None,
             first_outer=True, last_outer=True):
        """One iteration: ``vec`` from vector_in0, ``other`` from vector_in1 (when used),
        ``scalar`` the word taken at the first inner iteration (when ``scalar_in``);
        ``first_outer``, ``last_outer``: counter 1 at its first and last value
        (:func:`outer_flags`). Returns ``(vector or None, reduction or None)``: what the
        iteration emits."""
        config, lanes = self.config, self.lanes
        vec = pad_row(config, counter0, np.asarray(vec, dtype=np.uint32), lanes)
        other = (np.asarray(other, dtype=np.uint32) if self.uses_in1
                 else np.zeros(lanes, dtype=np.uint32))
        if config.get("scalar_in") and first:
            self.scalar = np.uint32(scalar)
        slot = int(counter0) % ACC_DEPTH
        for index, stage in enumerate(config["stages"]):
            constant = np.full(lanes, stage.get("constant", 0), dtype=np.uint32)
            if index == self.acc_stage:
                register = constant if first_outer else self.acc[slot]
            else:
                register = constant if first else self.registers[index]
            operand_values = {
                Source.PREV: vec,
                Source.REG: register,
                Source.SCALAR: np.full(lanes, self.scalar, dtype=np.uint32),
                Source.CONST: constant,
                Source.IN1: other,
                Source.COUNTER: np.full(lanes, counter0, dtype=np.uint32),
                Source.LANE: np.arange(lanes, dtype=np.uint32),
                Source.LAST: constant if first else self.lasts[index],
            }
            self.lasts[index] = vec
            a, b, c = (operand_values[stage.get(src, 0)] for src in ("src_a", "src_b", "src_c"))
            vec = fp.apply(stage.get("op", 0), a, b, c)
            self.registers[index] = vec
            if index == self.acc_stage:
                self.acc[slot] = vec
        vec = apply_tail(config, vec)
        vector = reduction = None
        if emits(config, last_inner, last_outer):
            if config.get("vector_out"):
                vector = vec.copy()
            if config.get("reduce", 0) != REDUCE_NONE:
                reduction = reduce_lanes(vec, config["reduce"])
        return vector, reduction

    def block(self, counter0, first, last_inner, vecs, others=None, scalars=None,
              first_outer=None, last_outer=None):
        """Many consecutive iterations at once, bit for bit the results and the final
        registers of :meth:`step` called on each in order (:func:`simd_block`).

        ``counter0``, ``first``, ``last_inner``: (n,) arrays (counter 0's value, first
        and last iteration of counter 0); ``vecs``: (n, lanes) ``vector_in0`` beats;
        ``others``: (n, lanes) ``vector_in1`` beats (when a stage reads IN1);
        ``scalars``: the words taken at the iterations where ``first`` is set (when
        ``scalar_in``), in order. Returns ``(vectors, reductions)``: (e, lanes) uint32 of
        the emitted vectors (None without ``vector_out``) and (e,) uint32 of the emitted
        reductions (None without ``reduce``), e the emitting iterations.
        ``first_outer``, ``last_outer``: (n,) flags of counter 1 (:func:`outer_flags`),
        needed with ``emit_outer`` or ``acc_stage``."""
        if first_outer is None:
            first_outer = last_outer = np.ones(len(first), dtype=bool)
        if self.acc_stage is not None and not _acc_slots_distinct(self.config):
            return _step_block(self, counter0, first, last_inner, vecs, others, scalars,
                               first_outer, last_outer)
        vecs = pad_row(self.config, counter0, vecs, self.lanes)
        return simd_block(self, counter0, first, last_inner, vecs, others, scalars,
                          first_outer, last_outer)


def _acc_slots_distinct(config):
    """Whether counter 0's values fall in distinct accumulator slots (then an
    accumulator stage is vectorised over each counter-0 loop)."""
    counter = config["counters"][0]
    values = range(counter["min"], counter["max"], counter["stride"])
    return len({value % ACC_DEPTH for value in values}) == len(values)


def _step_block(state, counter0, first, last_inner, vecs, others, scalars, first_outer,
                last_outer):
    """:meth:`SimdState.block` one :meth:`SimdState.step` at a time (the accumulator
    memory's recurrence runs across counter 1: not vectorised)."""
    lanes, config = state.lanes, state.config
    vecs = np.asarray(vecs, dtype=np.uint32).reshape(-1, lanes)
    others = np.asarray(others, dtype=np.uint32).reshape(-1, lanes) if state.uses_in1 \
        else None
    scalars = iter(np.asarray(scalars, dtype=np.uint32).reshape(-1)) \
        if config.get("scalar_in") else None
    vectors, reductions = [], []
    for n in range(len(vecs)):
        scalar = next(scalars) if scalars is not None and first[n] else None
        vector, reduction = state.step(counter0[n], bool(first[n]), bool(last_inner[n]),
                                       vecs[n], None if others is None else others[n],
                                       scalar, bool(first_outer[n]), bool(last_outer[n]))
        if vector is not None:
            vectors.append(vector)
        if reduction is not None:
            reductions.append(reduction)
    vector = np.array(vectors, dtype=np.uint32).reshape(-1, lanes) \
        if config.get("vector_out") else None
    reduction = np.array(reductions, dtype=np.uint32) \
        if config.get("reduce", 0) != REDUCE_NONE else None
    return vector, reduction


# -- the SIMD pipeline on blocks of iterations ----------------------------------------------

#: Iterations computed together by :func:`simd_block` (bounds the numpy temporaries).
BLOCK_BEATS = 16384
#: Operands each operation reads (``hdl.fp.Op`` codes): the others are ignored.
_ARITY = {Op.PASS: 1, Op.TO_BF16: 1, Op.FROM_BF16: 1, Op.MADD: 3, Op.SELECT: 3}
_SRC_FIELDS = ("src_a", "src_b", "src_c")
_SIGN = np.uint32(0x80000000)
_NAN_KEY = 1 << 40


def _used_sources(stage):
    """The source codes of the operands the stage's operation reads."""
    return [stage.get(src, 0) for src in _SRC_FIELDS[:_ARITY.get(stage.get("op", 0), 2)]]


def _order_keys(words):
    """int64 keys ordering FP32 words (denormals-are-zero applied) by value with
    -0 < +0; NaN words need a separate mask."""
    w = words.astype(np.int64)
    return np.where(w & 0x80000000, -(w & 0x7FFFFFFF) - 1, w)


def _from_keys(keys):
    return np.where(keys < 0, (-(keys + 1)) | 0x80000000, keys).astype(np.uint32)


def _segments(first):
    """Inner-loop segments of a block: (segment of each iteration, position in it,
    segment count, longest segment, whether segment 0 starts an inner loop)."""
    n = len(first)
    starts = first.copy()
    starts[0] = True
    segment = np.cumsum(starts) - 1
    start_index = np.flatnonzero(starts)
    position = np.arange(n) - start_index[segment]
    return segment, position, len(start_index), int(position.max()) + 1, bool(first[0])


def _padded(values, segment, position, count, longest, lanes):
    out = np.zeros((count, longest, lanes), dtype=np.uint32)
    out[segment, position] = np.broadcast_to(values, (len(segment), lanes))
    return out


def _scan_accumulate(op, init, x):
    """The fast exact recurrences ``r_t = op(x_t, r_{t-1})``, ``r_-1 = init`` over padded
    (segments, positions, lanes) ``x`` and (segments, lanes) ``init``, or None when the
    result would not be bit-exact (the caller then steps through the positions)."""
    if op == "iadd":
        stacked = np.concatenate([init[:, None, :], x], axis=1)
        return np.add.accumulate(stacked, axis=1, dtype=np.uint32)[:, 1:]
    stacked = np.concatenate([fp.daz(init)[:, None, :], fp.daz(x)], axis=1)
    if op in ("max", "min"):
        nan = fp._is_nan(stacked)
        keys = _order_keys(stacked)
        if op == "max":
            keys = np.maximum.accumulate(np.where(nan, _NAN_KEY, keys), axis=1)
            out = np.where(keys >= _NAN_KEY, fp.CANONICAL_NAN, _from_keys(keys))
        else:
            keys = np.minimum.accumulate(np.where(nan, -_NAN_KEY, keys), axis=1)
            out = np.where(keys <= -_NAN_KEY, fp.CANONICAL_NAN, _from_keys(keys))
        return out[:, 1:].astype(np.uint32)
    # IEEE binary32 add / multiply (numpy, round to nearest even) equals the policy of
    # rdu.models.fp on normal operands unless a result is tiny: a denormal (or, for a
    # product, +-2**-126, which gradual underflow may reach by rounding up)
    ufunc = np.add if op == "add" else np.multiply
    with np.errstate(all="ignore"):
        acc = ufunc.accumulate(stacked.view(np.float32), axis=1, dtype=np.float32)
    out = acc.view(np.uint32)[:, 1:]
    magnitude = out & np.uint32(0x7FFFFFFF)
    tiny = (magnitude < np.uint32(0x00800000)) & (magnitude != 0)
    if op == "mul":
        tiny |= magnitude == np.uint32(0x00800000)
    if tiny.any():
        return None
    return np.where(fp._is_nan(out), fp.CANONICAL_NAN, out).astype(np.uint32)


def _reg_stage(stage, operands, init, layout, lanes):
    """A stage reading REG over a block: ``operands`` {source: array broadcastable to
    (n, lanes)}, ``init`` the register before the block (lanes,). Returns (n, lanes)."""
    segment, position, count, longest, starts_inner = layout
    op = stage.get("op", 0)
    constant = np.uint32(stage.get("constant", 0))
    inits = np.full((count, lanes), constant, dtype=np.uint32)
    if not starts_inner:
        inits[0] = init
    used = _used_sources(stage)
    padded = {source: _padded(value, segment, position, count, longest, lanes)
              for source, value in operands.items()
              if source != Source.REG and source in used}
    out = None
    others = [source for source in used if source != Source.REG]
    if used.count(Source.REG) == 1 and len(used) == 2:
        x = padded[others[0]]
        if op in (Op.MAX, Op.MIN):
            out = _scan_accumulate("max" if op == Op.MAX else "min", inits, x)
        elif op == Op.ADD:
            out = _scan_accumulate("add", inits, x)
        elif op == Op.MUL:
            out = _scan_accumulate("mul", inits, x)
        elif op == Op.SUB and used[0] == Source.REG:          # r - x = r + (-x)
            out = _scan_accumulate("add", inits, x ^ _SIGN)
        elif op == Op.IADD:
            out = _scan_accumulate("iadd", inits, x)
        elif op == Op.ISUB and used[0] == Source.REG:
            out = _scan_accumulate("iadd", inits, (~x + np.uint32(1)).astype(np.uint32))
    if out is None:
        out = np.empty((count, longest, lanes), dtype=np.uint32)
        register = inits
        zeros = np.zeros((count, lanes), dtype=np.uint32)
        for t in range(longest):
            args = [register if source == Source.REG else padded[source][:, t]
                    for source in used]
            args += [zeros] * (3 - len(args))
            register = out[:, t] = fp.apply(op, *args)
    return out[segment, position]


def simd_block(state, counter0, first, last_inner, vecs, others=None, scalars=None,
               first_outer=None, last_outer=None):
    """:meth:`SimdState.block`: the iterations in chunks of :data:`BLOCK_BEATS`, each
    stage vectorised over (iterations, lanes); a stage that reads REG runs its
    recurrence over the positions of the inner loop, all inner loops of the chunk at
    once (max / min / add / multiply / integer add recurrences as exact scans)."""
    config, lanes = state.config, state.lanes
    counter0 = np.asarray(counter0)
    first = np.asarray(first, dtype=bool)
    last_inner = np.asarray(last_inner, dtype=bool)
    vecs = np.asarray(vecs, dtype=np.uint32).reshape(-1, lanes)
    n = len(vecs)
    scalar_in = bool(config.get("scalar_in"))
    taken = np.zeros(n, dtype=np.uint32)
    if scalar_in:
        taken[first] = np.asarray(scalars, dtype=np.uint32).reshape(-1)
    if state.uses_in1:
        others = np.asarray(others, dtype=np.uint32).reshape(-1, lanes)
    vectors, reductions = [], []
    for lo in range(0, n, BLOCK_BEATS):
        hi = min(n, lo + BLOCK_BEATS)
        v, r = _simd_chunk(state, counter0[lo:hi], first[lo:hi], last_inner[lo:hi],
                           vecs[lo:hi], others[lo:hi] if state.uses_in1 else None,
                           taken[lo:hi] if scalar_in else None,
                           None if first_outer is None else first_outer[lo:hi],
                           None if last_outer is None else last_outer[lo:hi])
        vectors.append(v)
        reductions.append(r)
    vector = (np.concatenate(vectors) if vectors else np.zeros((0, lanes), np.uint32)) \
        if config.get("vector_out") else None
    reduction = (np.concatenate(reductions) if reductions else np.zeros(0, np.uint32)) \
        if config.get("reduce", 0) != REDUCE_NONE else None
    return vector, reduction


def _acc_stage(state, stage, operands, first, first_outer, counter0, lanes):
    """The accumulator stage over a block (``operands`` as :func:`_reg_stage`): one
    counter-0 loop at a time, vectorised over its iterations (their slots are distinct),
    ``REG`` the slots' words or the constant on the first iteration of counter 1."""
    n = len(first)
    op = stage.get("op", 0)
    used = _used_sources(stage)
    slots = (np.asarray(counter0, np.int64) % ACC_DEPTH)
    starts = np.flatnonzero(first)
    bounds = sorted({0, *starts.tolist(), n})
    constant = np.uint32(stage.get("constant", 0))
    values = {source: np.broadcast_to(value, (n, lanes)) for source, value in
              operands.items() if source != Source.REG and source in used}
    out = np.empty((n, lanes), dtype=np.uint32)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        index = slots[lo:hi]
        register = np.full((hi - lo, lanes), constant, dtype=np.uint32) if first_outer[lo] \
            else state.acc[index]
        args = [register if source == Source.REG else values[source][lo:hi]
                for source in used]
        args += [np.zeros((1, 1), dtype=np.uint32)] * (3 - len(args))
        out[lo:hi] = state.acc[index] = fp.apply(op, *args)
    return out


def _simd_chunk(state, counter0, first, last_inner, vec, other, taken, first_outer=None,
                last_outer=None):
    config, lanes = state.config, state.lanes
    n = len(vec)
    if taken is not None:
        index = np.arange(n)
        owner = np.maximum.accumulate(np.where(first, index, -1))
        scalar = np.where(owner >= 0, taken[np.maximum(owner, 0)], state.scalar
                          ).astype(np.uint32)
        state.scalar = np.uint32(scalar[-1])
    else:
        scalar = np.full(n, state.scalar, dtype=np.uint32)
    layout = None
    for index, stage in enumerate(config["stages"]):
        constant = np.uint32(stage.get("constant", 0))
        operands = {Source.PREV: vec, Source.SCALAR: scalar[:, None],
                    Source.CONST: np.full((1, 1), constant, dtype=np.uint32),
                    Source.IN1: other,
                    Source.COUNTER: np.asarray(counter0).astype(np.uint32)[:, None],
                    Source.LANE: np.arange(lanes, dtype=np.uint32)[None, :]}
        used = _used_sources(stage)
        prev = np.broadcast_to(vec, (n, lanes))
        if Source.LAST in used:
            last = np.empty((n, lanes), dtype=np.uint32)
            last[1:] = prev[:-1]
            last[0] = state.lasts[index]
            last[first] = constant
            operands[Source.LAST] = last
        state.lasts[index] = np.array(prev[-1], dtype=np.uint32)
        if index == state.acc_stage:
            vec = _acc_stage(state, stage, operands, first,
                             np.ones(n, bool) if first_outer is None else first_outer,
                             counter0, lanes)
        elif Source.REG in used:
            if layout is None:
                layout = _segments(first)
            vec = _reg_stage(stage, operands, state.registers[index], layout, lanes)
        else:
            args = [operands[source] for source in used]
            args += [np.zeros((1, 1), dtype=np.uint32)] * (3 - len(args))
            vec = np.broadcast_to(fp.apply(stage.get("op", 0), *args), (n, lanes))
        state.registers[index] = np.array(vec[-1], dtype=np.uint32)
    vec = apply_tail(config, vec)
    emitted = vec[emits(config, last_inner,
                        last_inner if last_outer is None else last_outer)]
    vector = np.array(emitted, dtype=np.uint32) if config.get("vector_out") else None
    reduction = None
    kind = config.get("reduce", 0)
    if kind != REDUCE_NONE:
        level = emitted
        while level.shape[1] > 1:
            left, right = level[:, 0::2], level[:, 1::2]
            level = fp.fmax(left, right) if kind == REDUCE_MAX else \
                fp.add(left, right)
        reduction = np.asarray(level[:, 0], dtype=np.uint32)
    return vector, reduction


def run_simd(config, lanes, vector_in0, vector_in1=None, scalar_in=None):
    """Run a SIMD-mode configuration.

    Parameters
    ----------
    vector_in0 : array (beats, lanes) of uint32
        One beat per counter-chain iteration.
    vector_in1 : array (beats, lanes), optional
        Consumed one beat per iteration when a stage reads ``in1``.
    scalar_in : array of uint32, optional
        One word per inner loop when ``config["scalar_in"]`` is set.

    Returns
    -------
    dict with ``vector_out`` (list of lane arrays), ``scalar_out`` (list of ints) and
    ``control_out`` (``[1]``: the DONE token).
    """
    state = SimdState(config, lanes)
    vector_out, scalar_out = [], []
    in0 = iter(np.asarray(vector_in0, dtype=np.uint32))
    in1 = iter(np.asarray(vector_in1, dtype=np.uint32)) if state.uses_in1 else None
    scalars = iter(np.asarray(scalar_in, dtype=np.uint32)) if config.get("scalar_in") else None
    for (v0, v1, _), first, last_inner, _ in iterations(config):
        vec = next(in0)
        other = next(in1) if in1 is not None else None
        scalar = next(scalars) if scalars is not None and first else None
        first_outer, last_outer = outer_flags(config, v1)
        vector, reduction = state.step(v0, first, last_inner, vec, other, scalar,
                                       first_outer, last_outer)
        if vector is not None:
            vector_out.append(vector)
        if reduction is not None:
            scalar_out.append(reduction)
    return {"vector_out": vector_out, "scalar_out": scalar_out, "control_out": [1]}


def bf16_words(values):
    """float values -> uint32 words carrying their BF16 rounding in the high half."""
    f32 = np.asarray(values, dtype=np.float32).view(np.uint32)
    return fp.to_bf16(f32)


def systolic_accumulate(a_columns, b_rows):
    """The systolic array's arithmetic, the one reference of it: ``C[..., i, j] =
    sum_k A[..., k, i] * B[..., k, j]`` accumulated in k order.

    ``a_columns`` is (..., K, M) (beat k = column k of A), ``b_rows`` (..., K, N) (beat
    k = row k of B), K >= 1, any leading (batch) dimensions; only the BF16 high halves
    of the words are used. The first product (an FP32 multiply, exact for BF16 inputs)
    initialises the accumulator; each later one is added with an FP32 add (round to
    nearest even, denormals flushed: :mod:`rdu.models.fp`). Returns (..., M, N) uint32.
    """
    mask = np.uint32(0xFFFF0000)
    a = np.asarray(a_columns, dtype=np.uint32) & mask
    b = np.asarray(b_rows, dtype=np.uint32) & mask
    acc = fp.mul(a[..., 0, :, None], b[..., 0, None, :])
    for k in range(1, a.shape[-2]):
        acc = fp.add(acc, fp.mul(a[..., k, :, None], b[..., k, None, :]))
    return acc


def systolic_tile(a_columns, b_rows):
    """One output tile (:func:`systolic_accumulate`): ``a_columns`` is (K, lanes) (beat k
    = column k of the A tile), ``b_rows`` (K, lanes) (beat k = row k of the B tile).
    Returns the (lanes, lanes) uint32 tile."""
    return systolic_accumulate(a_columns, b_rows)


def run_systolic(config, lanes, vector_in0, vector_in1, group=1):
    """Run a systolic-mode configuration: counter 0 is the reduction length K, each
    other iteration of the chain one tile. Returns the output streams (``vector_out``
    holds ``lanes`` rows per tile).

    ``group`` (:func:`hdl.fp_latency.systolic_group`, more than 1 with ``fp_latency``):
    a tile is ``lanes x (group * lanes)``; each k step takes one beat of ``vector_in0``
    and ``group`` beats of ``vector_in1`` (row k of column block 0, 1, ...), and the tile
    drains as ``group`` blocks of ``lanes`` rows, block 0 first. Mode ``SYSTOLIC_ROWS``
    turns the roles: ``group`` beats of ``vector_in0`` (column k of row block 0, 1, ...)
    and one of ``vector_in1`` per k step, a tile ``(group * lanes) x lanes`` drained row
    block by row block."""
    steps = iterations(config)
    k_len = trip_count(config["counters"][0])
    rows_grouped = config["mode"] == Mode.SYSTOLIC_ROWS
    per_step = (group, 1) if rows_grouped else (1, group)
    a = np.asarray(vector_in0, dtype=np.uint32).reshape(-1, lanes)
    b = np.asarray(vector_in1, dtype=np.uint32).reshape(-1, lanes)
    if len(a) != len(steps) * per_step[0] or len(b) != len(steps) * per_step[1]:
        raise ValueError(f"Systolic run needs {len(steps) * per_step[0]} beats on "
                         f"vector_in0 and {len(steps) * per_step[1]} on vector_in1, not "
                         f"{len(a)} and {len(b)}")
    a = a.reshape(-1, per_step[0], lanes)
    b = b.reshape(-1, per_step[1], lanes)
    rows = []
    for start in range(0, len(steps), k_len):
        for block in range(group):
            rows.extend(systolic_tile(a[start:start + k_len, block if rows_grouped else 0],
                                      b[start:start + k_len, 0 if rows_grouped else block]))
    return {"vector_out": rows, "scalar_out": [], "control_out": [1]}


def matmul_streams(a_words, b_words, lanes, group=1, group_rows=False):
    """Tile ``A (M x K) @ B (K x N)`` for the systolic mode (zero padding to multiples
    of ``lanes``, and the column tiles to a multiple of ``group``). Returns
    ``(config_counters, in0 beats, in1 beats, tiles)`` where tiles is ``(row tiles,
    column tiles)``; tiles go row-tile major. With ``group`` > 1 (:func:`run_systolic`)
    a tile of the run covers ``group`` column tiles: counter 1 counts
    ``column tiles / group``, ``in1`` has ``group`` beats per k step (row k of each
    column tile of the group) and the drained rows are those of ``group = 1`` for the
    padded column tiles, in the same order. ``group_rows`` (mode ``SYSTOLIC_ROWS``): the
    row tiles are padded to a multiple of ``group`` and a tile covers ``group`` of them
    (counter 2 counts ``row tiles / group``, ``in0`` has ``group`` beats per k step); the
    drained rows go by groups of row tiles, column tile by column tile."""
    a = np.asarray(a_words, dtype=np.uint32)
    b = np.asarray(b_words, dtype=np.uint32)
    m_len, k_len = a.shape
    if b.shape[0] != k_len:
        raise ValueError(f"Inner dimensions differ: A is {a.shape}, B is {b.shape}")
    n_len = b.shape[1]
    row_tiles, col_tiles = _tiles((m_len, n_len), lanes, group, group_rows)
    a_pad = np.zeros((row_tiles * lanes, k_len), dtype=np.uint32)
    a_pad[:m_len] = a
    b_pad = np.zeros((k_len, col_tiles * lanes), dtype=np.uint32)
    b_pad[:, :n_len] = b
    in0, in1 = [], []
    rows_per, cols_per = (group, 1) if group_rows else (1, group)
    for ti in range(0, row_tiles, rows_per):
        for tj in range(0, col_tiles, cols_per):
            for k in range(k_len):
                in0 += [a_pad[t * lanes:(t + 1) * lanes, k] for t in range(ti, ti + rows_per)]
                in1 += [b_pad[k, t * lanes:(t + 1) * lanes] for t in range(tj, tj + cols_per)]
    counters = [{"min": 0, "max": k_len, "stride": 1},
                {"min": 0, "max": col_tiles // cols_per, "stride": 1},
                {"min": 0, "max": row_tiles // rows_per, "stride": 1}]
    return counters, np.array(in0, dtype=np.uint32), np.array(in1, dtype=np.uint32), \
        (row_tiles, col_tiles)


def _tiles(shape, lanes, group, group_rows):
    """Row and column tiles of an ``M x N`` product: ``ceil(M / lanes)`` and ``ceil(N /
    lanes)``, the grouped one (``group_rows``: the rows) rounded up to a multiple of
    ``group``."""
    m_len, n_len = shape
    rows_per, cols_per = (group, 1) if group_rows else (1, group)
    return (-(-m_len // (lanes * rows_per)) * rows_per,
            -(-n_len // (lanes * cols_per)) * cols_per)


def matmul_from_stream(rows, shape, lanes, group=1, group_rows=False):
    """Reassemble drained tile rows (:func:`matmul_streams`' order) into the ``shape``
    result."""
    m_len, n_len = shape
    row_tiles, col_tiles = _tiles(shape, lanes, group, group_rows)
    rows = np.asarray(rows, dtype=np.uint32)
    if group_rows:      # (row groups, column tiles, group * lanes rows, lanes)
        out = rows.reshape(row_tiles // group, col_tiles, group * lanes, lanes)
        out = out.transpose(0, 2, 1, 3)
    else:               # (row tiles, column tiles, lanes rows, lanes)
        out = rows.reshape(row_tiles, col_tiles, lanes, lanes).transpose(0, 2, 1, 3)
    return out.reshape(row_tiles * lanes, col_tiles * lanes)[:m_len, :n_len]

"""Bit-exact reference model of a configured PCU (:mod:`hdl.pcu`) on streams of vectors.

Configuration is a plain dict with the fields of ``hdl.pcu.pcu_config_layout``
(missing fields are zero)::

    {"mode": 0, "counters": [{"min": 0, "max": 4, "stride": 1}, ...],
     "scalar_in": 0, "emit_every": 0, "vector_out": 1, "reduce": 1, "tail": 0,
     "stages": [{"op": 1, "src_a": 0, "src_b": 1, "src_c": 0, "constant": 0}, ...]}

:func:`run_simd` and :func:`run_systolic` take the input streams as uint32 arrays and
return the output streams. :func:`matmul_streams` tiles a matrix product for the
systolic mode and :func:`matmul_from_stream` puts the drained rows back together.
"""

import numpy as np

from hdl.pcu import Mode, Reduce, Source, Tail

from . import fpmodel

__all__ = ["MODE_SIMD", "MODE_SYSTOLIC", "SOURCES", "REDUCE_NONE", "REDUCE_SUM",
           "REDUCE_MAX", "TAIL_NONE", "TAIL_EXP", "TAIL_RECIPROCAL", "trip_count",
           "iterations", "reduce_lanes", "uses_in1", "SimdState", "run_simd",
           "systolic_accumulate", "systolic_tile", "run_systolic", "matmul_streams",
           "matmul_from_stream", "bf16_words"]

# The codes are the hardware's (hdl.pcu); these names are aliases.
MODE_SIMD, MODE_SYSTOLIC = Mode.SIMD, Mode.SYSTOLIC
#: Operand source codes by lower-case name (``hdl.pcu.Source``).
SOURCES = {source.name.lower(): source for source in Source}
REDUCE_NONE, REDUCE_SUM, REDUCE_MAX = Reduce.NONE, Reduce.SUM, Reduce.MAX
TAIL_NONE, TAIL_EXP, TAIL_RECIPROCAL = Tail.NONE, Tail.EXP, Tail.RECIPROCAL


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


def reduce_lanes(words, kind):
    """Cross-lane reduction tree of one vector: pairs (0,1), (2,3), ... level by level."""
    level = np.asarray(words, dtype=np.uint32)
    while level.size > 1:
        left, right = level[0::2], level[1::2]
        level = fpmodel.fmax(left, right) if kind == REDUCE_MAX else fpmodel.add(left, right)
    return int(level[0])


def uses_in1(config):
    """Whether some SIMD stage reads ``vector_in1`` (then one beat is taken per iteration)."""
    return any(stage.get(src, 0) == SOURCES["in1"] for stage in config["stages"]
               for src in ("src_a", "src_b", "src_c"))


class SimdState:
    """The registers of one SIMD-mode run; :meth:`step` is one counter-chain iteration.

    :func:`run_simd` runs a whole stream through it; the functional model
    (:mod:`rdu.funcmodel`) steps it one beat at a time as beats arrive.
    """

    def __init__(self, config, lanes):
        self.config = config
        self.lanes = lanes
        self.uses_in1 = uses_in1(config)
        self.registers = [np.zeros(lanes, dtype=np.uint32) for _ in config["stages"]]
        self.scalar = np.uint32(0)

    def step(self, counter0, first, last_inner, vec, other=None, scalar=None):
        """One iteration: ``vec`` from vector_in0, ``other`` from vector_in1 (when used),
        ``scalar`` the word taken at the first inner iteration (when ``scalar_in``).
        Returns ``(vector or None, reduction or None)``: what the iteration emits."""
        config, lanes = self.config, self.lanes
        vec = np.asarray(vec, dtype=np.uint32)
        other = (np.asarray(other, dtype=np.uint32) if self.uses_in1
                 else np.zeros(lanes, dtype=np.uint32))
        if config.get("scalar_in") and first:
            self.scalar = np.uint32(scalar)
        for index, stage in enumerate(config["stages"]):
            constant = np.full(lanes, stage.get("constant", 0), dtype=np.uint32)
            operand_values = {
                Source.PREV: vec,
                Source.REG: constant if first else self.registers[index],
                Source.SCALAR: np.full(lanes, self.scalar, dtype=np.uint32),
                Source.CONST: constant,
                Source.IN1: other,
                Source.COUNTER: np.full(lanes, counter0, dtype=np.uint32),
            }
            a, b, c = (operand_values[stage.get(src, 0)] for src in ("src_a", "src_b", "src_c"))
            vec = fpmodel.apply(stage.get("op", 0), a, b, c)
            self.registers[index] = vec
        tail = config.get("tail", 0)
        if tail == TAIL_EXP:
            vec = fpmodel.exp(vec)
        elif tail == TAIL_RECIPROCAL:
            vec = fpmodel.reciprocal(vec)
        vector = reduction = None
        if config.get("emit_every") or last_inner:
            if config.get("vector_out"):
                vector = vec.copy()
            if config.get("reduce", 0) != REDUCE_NONE:
                reduction = reduce_lanes(vec, config["reduce"])
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
    for (v0, _, _), first, last_inner, _ in iterations(config):
        vec = next(in0)
        other = next(in1) if in1 is not None else None
        scalar = next(scalars) if scalars is not None and first else None
        vector, reduction = state.step(v0, first, last_inner, vec, other, scalar)
        if vector is not None:
            vector_out.append(vector)
        if reduction is not None:
            scalar_out.append(reduction)
    return {"vector_out": vector_out, "scalar_out": scalar_out, "control_out": [1]}


def bf16_words(values):
    """float values -> uint32 words carrying their BF16 rounding in the high half."""
    f32 = np.asarray(values, dtype=np.float32).view(np.uint32)
    return fpmodel.to_bf16(f32)


def systolic_accumulate(a_columns, b_rows):
    """The systolic array's arithmetic, the one reference of it: ``C[..., i, j] =
    sum_k A[..., k, i] * B[..., k, j]`` accumulated in k order.

    ``a_columns`` is (..., K, M) (beat k = column k of A), ``b_rows`` (..., K, N) (beat
    k = row k of B), K >= 1, any leading (batch) dimensions; only the BF16 high halves
    of the words are used. The first product (an FP32 multiply, exact for BF16 inputs)
    initialises the accumulator; each later one is added with an FP32 add (round to
    nearest even, denormals flushed: :mod:`rdu.fpmodel`). Returns (..., M, N) uint32.
    """
    mask = np.uint32(0xFFFF0000)
    a = np.asarray(a_columns, dtype=np.uint32) & mask
    b = np.asarray(b_rows, dtype=np.uint32) & mask
    acc = fpmodel.mul(a[..., 0, :, None], b[..., 0, None, :])
    for k in range(1, a.shape[-2]):
        acc = fpmodel.add(acc, fpmodel.mul(a[..., k, :, None], b[..., k, None, :]))
    return acc


def systolic_tile(a_columns, b_rows):
    """One output tile (:func:`systolic_accumulate`): ``a_columns`` is (K, lanes) (beat k
    = column k of the A tile), ``b_rows`` (K, lanes) (beat k = row k of the B tile).
    Returns the (lanes, lanes) uint32 tile."""
    return systolic_accumulate(a_columns, b_rows)


def run_systolic(config, lanes, vector_in0, vector_in1):
    """Run a systolic-mode configuration: counter 0 is the reduction length K, each
    other iteration of the chain one tile. Returns the output streams (``vector_out``
    holds ``lanes`` rows per tile)."""
    steps = iterations(config)
    k_len = trip_count(config["counters"][0])
    a = np.asarray(vector_in0, dtype=np.uint32).reshape(-1, lanes)
    b = np.asarray(vector_in1, dtype=np.uint32).reshape(-1, lanes)
    if len(a) != len(steps) or len(b) != len(steps):
        raise ValueError(f"Systolic run needs {len(steps)} beats on each input, "
                         f"not {len(a)} and {len(b)}")
    rows = []
    for start in range(0, len(steps), k_len):
        tile = systolic_tile(a[start:start + k_len], b[start:start + k_len])
        rows.extend(tile)
    return {"vector_out": rows, "scalar_out": [], "control_out": [1]}


def matmul_streams(a_words, b_words, lanes):
    """Tile ``A (M x K) @ B (K x N)`` for the systolic mode (zero padding to multiples
    of ``lanes``). Returns ``(config_counters, in0 beats, in1 beats, tiles)`` where
    tiles is ``(row tiles, column tiles)``; tiles go row-tile major."""
    a = np.asarray(a_words, dtype=np.uint32)
    b = np.asarray(b_words, dtype=np.uint32)
    m_len, k_len = a.shape
    if b.shape[0] != k_len:
        raise ValueError(f"Inner dimensions differ: A is {a.shape}, B is {b.shape}")
    n_len = b.shape[1]
    row_tiles, col_tiles = -(-m_len // lanes), -(-n_len // lanes)
    a_pad = np.zeros((row_tiles * lanes, k_len), dtype=np.uint32)
    a_pad[:m_len] = a
    b_pad = np.zeros((k_len, col_tiles * lanes), dtype=np.uint32)
    b_pad[:, :n_len] = b
    in0, in1 = [], []
    for ti in range(row_tiles):
        for tj in range(col_tiles):
            for k in range(k_len):
                in0.append(a_pad[ti * lanes:(ti + 1) * lanes, k])
                in1.append(b_pad[k, tj * lanes:(tj + 1) * lanes])
    counters = [{"min": 0, "max": k_len, "stride": 1},
                {"min": 0, "max": col_tiles, "stride": 1},
                {"min": 0, "max": row_tiles, "stride": 1}]
    return counters, np.array(in0, dtype=np.uint32), np.array(in1, dtype=np.uint32), \
        (row_tiles, col_tiles)


def matmul_from_stream(rows, shape, lanes):
    """Reassemble drained tile rows (row-tile major) into the ``shape`` result."""
    m_len, n_len = shape
    row_tiles, col_tiles = -(-m_len // lanes), -(-n_len // lanes)
    out = np.zeros((row_tiles * lanes, col_tiles * lanes), dtype=np.uint32)
    rows = np.asarray(rows, dtype=np.uint32).reshape(row_tiles, col_tiles, lanes, lanes)
    for ti in range(row_tiles):
        for tj in range(col_tiles):
            out[ti * lanes:(ti + 1) * lanes, tj * lanes:(tj + 1) * lanes] = rows[ti, tj]
    return out[:m_len, :n_len]

"""The attention family: ``out = attention(q, k, v)`` of BF16 inputs, the whole chain of
``docs/attention.md`` in one configuration (attention fuses on its own: its result is the
output).

Tiling: chunks of :data:`ATTENTION_CHUNK` keys (fewer for a short sequence), whole AXI
beats of BF16 keys (:func:`tile_attention`); with ``fp_latency`` on, whole systolic tiles
of row blocks (``AttentionShape.tile_group``: ``docs/attention.md``, "On the pipelined
datapath"; ``lsum`` then reads its probabilities from a chunk buffer of its own,
``p_sum``). Lowering: the streaming chain below.

Eight PCUs and seven PMUs, one configuration; nothing but ``O`` leaves the array. Per
*pass* (a key/value head and up to ``lanes`` queries, one per lane) and per chunk of
``C`` keys (``W`` = lanes, ``Dk`` the score dimensions, ``Dp`` the padded head
dimension, ``N`` chunks)::

    load_q -> q_t (PMU: Q^T, replayed per key block) ----------------.
    load_k (K by key block, dimension-major) -> scores (systolic) <--'
    scores --multicast--> s_buf (PMU, C beats) and chunk_max (SIMD: max per chunk)
    chunk_max --> alpha (SIMD: running max, exp((m_old - m) * scale)) and m_rep (PMU)
    m_rep (m_c, C times) + s_buf --> probs (SIMD: running max in the accumulator,
                                     bf16(exp((s - m) * scale)))
    probs --multicast--> p_buf (PMU, replayed per dimension block) and lsum
    alpha --multicast--> al_rep (PMU, C times) and ao_rep (PMU, Dp times)
    lsum (SIMD: a_k = a_k * alpha + p_k across chunks, sum, 1/l) --> l_buf (PMU: the
         last, Dp times)
    load_v (V by chunk and dimension block) -> pv (systolic) <-- p_buf
    pv --> merge (SIMD: O = O * alpha + O_c in the accumulator) <-- ao_rep
    merge --> normalise (SIMD: O * (1 / l)) <-- l_buf --> store_out

A KV cache (``kv_layout`` ``rows``, decode: K and V rows of ``pitch`` BF16, a row per
key, :func:`_front_rows`) streams its rows as they come: ``load_k -> k_t`` (PMU: a key
block a buffer, written with a lane stride, read transposed) feeds ``scores``, ``load_v
-> v_buf`` (PMU: a chunk a buffer, read block by block) feeds ``pv``. With ``D`` a
multiple of the lanes the softmax sum comes out of ``P V`` (V's column ``D`` holds 1):
``v_buf`` reads that block first, ``merge`` merges ``l`` with ``O``, ``linv`` (SIMD:
hold the first beat, 1/l) replaces ``lsum``, ``al_rep`` and ``l_buf`` (8 PCUs, 7 PMUs);
otherwise ``scores`` takes ``Q^T`` from HBM once per key block, without ``q_t`` (8 PMUs).

The arithmetic is :func:`rdu.frontend.attention.chain_outputs`, which the results are checked
against bit for bit.
"""

import math
from dataclasses import dataclass

from hdl.fp_latency import systolic_group
from hdl.pcu_config import ACC_DEPTH

from ...frontend.attention import AttentionError, AttentionShape
from ...frontend.attention import images as attention_images
from ...frontend.graph import Node
from ...ir import AccessPattern, Kernel
from ...models import reference
from ...models.fp import NEG_INF
from ..core import CompileError
from ..group import Group, Lowered
from ..lower import BF16, COUNT_LIMIT, WORD, ceil_div, check_layout, place_images
from .base import (
    Family,
    is_bf16_input,
    moved_work,
    pcu_programs,
    tensor_shape,
    unsupported,
)

__all__ = ["AttentionGroup", "AttentionFamily", "ATTENTION", "ATTENTION_CHUNK",
           "tile_attention", "lower_attention"]

#: Keys per online-softmax chunk of attention (at most; fewer for short sequences).
ATTENTION_CHUNK = 64

_NEG_INF = int(NEG_INF)


@dataclass
class AttentionGroup(Group):
    """``out = attention(q, k, v)``: the whole chain of ``docs/attention.md``, one
    configuration."""
    q: Node
    k: Node
    v: Node
    scale: float
    output: str
    node: Node
    causal: bool = False
    dim_align: int = 2
    kv_layout: str = "blocks"
    valid: int = None

    def describe(self):
        return (f"group {self.output}: attention q{list(self.q.shape)} "
                f"k{list(self.k.shape)} v{list(self.v.shape)}")


def _match_attention(graph, name, out):
    if out.op != "attention":
        node = next(n for n in graph.live_nodes() if n.op == "attention")
        raise unsupported(node, f"output {name!r}: attention fuses on its own (its result "
                           f"is the output); operators around it are not fused yet")
    for operand in out.inputs:
        if not is_bf16_input(operand):
            raise unsupported(out, f"output {name!r}: attention operands must be BF16 "
                               f"inputs (got {operand.op} {operand.dtype})")
    q, k, v = out.inputs
    return AttentionGroup(q, k, v, out.attrs.get("scale"), name, out,
                          out.attrs.get("causal", False), out.attrs.get("dim_align", 2),
                          out.attrs.get("kv_layout", "blocks"), out.attrs.get("valid"))


def _rows_chunk(make, seq, tile, pmu_words):
    """Keys per chunk of a ``rows`` cache: the largest multiple of ``tile`` (the lanes,
    or the keys of a systolic tile), at most :data:`ATTENTION_CHUNK` unless ``tile`` is
    more, that divides the capacity ``seq`` (no padded keys: the cache is read whole)
    and whose PMUs fit (``make(chunk)``: the shape); ``tile`` when none does (the shape
    and PMU checks then name the problem)."""
    for chunk in range(max(ATTENTION_CHUNK // tile, 1) * tile, tile - 1, -tile):
        if seq % chunk == 0:
            try:
                if _pmu_words(make(chunk)) <= pmu_words:
                    return chunk
            except AttentionError:
                break
    return tile


def _pmu_words(shape):
    """Words the fullest PMU of the chain holds."""
    lanes = shape.lanes
    need = max(2 * shape.dim_k * lanes, 2 * shape.chunk * lanes)
    if shape.rows_layout:           # k_t: systolic tiles of keys; v_buf: V chunks
        need = max(need, _KT_BUFFERS * shape.pitch * lanes * shape.tile_group,
                   2 * _v_read(shape) * shape.chunk * lanes)
    return need


def tile_attention(group, geometry, machine):
    """The :class:`rdu.frontend.attention.AttentionShape` of an attention group on ``geometry``:
    chunks of :data:`ATTENTION_CHUNK` keys (fewer for a short sequence), whole AXI beats
    of BF16 keys; refuses what the chain cannot hold."""
    lanes = geometry.lanes
    heads, rows, dim = group.q.shape
    kv_heads, seq, _ = group.k.shape
    cache = group.kv_layout == "rows"
    tile_group = systolic_group(machine.latency_table)
    # whole AXI beats of BF16 keys, whole systolic tiles (tile_group key blocks)
    step = math.lcm(2 * lanes, tile_group * lanes)
    chunk = min(max(step, ATTENTION_CHUNK // step * step), ceil_div(seq, step) * step)
    mode = "decode" if (rows == 1 or cache) and not group.causal else "prefill"
    queries = rows if cache and rows > 1 else None

    def make(chunk):
        return AttentionShape(mode, seq, dim, heads, kv_heads, lanes, chunk, group.scale,
                              group.causal, group.dim_align, group.kv_layout, group.valid,
                              queries, tile_group)
    if group.kv_layout == "rows":
        chunk = _rows_chunk(make, seq, lanes * tile_group, geometry.pmu_words)
    try:
        shape = make(chunk)
    except AttentionError as error:
        raise CompileError(f"{group.node.where}: {error}") from None
    where = group.node.where
    if machine.agcus < 3:
        raise CompileError(f"{where}: attention streams Q, K and V from HBM on three AGCUs; "
                           f"the machine has {machine.agcus} (--agcus 3)")
    if shape.v_cols > ACC_DEPTH:          # (a chunk, at most ATTENTION_CHUNK, fits)
        raise CompileError(f"{where}: attention: head dimension {dim} (padded to "
                           f"{shape.v_cols}) over the PCU accumulator's {ACC_DEPTH} words")
    need = _pmu_words(shape)
    if need > geometry.pmu_words:
        raise CompileError(f"{where}: attention needs {need} words per PMU, the PMUs hold "
                           f"{geometry.pmu_words}")
    axi = 2 * lanes                         # BF16 values of an AXI beat
    beats = max(shape.seq_pad * shape.dim_k, shape.seq_pad * shape.dim_pad) // axi
    if shape.rows_layout:
        beats = shape.seq * shape.pitch // axi
    passes = len(shape.passes())
    tile = lanes * tile_group               # rows of a systolic tile
    for what, count in (("key tiles", shape.seq_pad // tile),
                        ("beats of K or V per pass", beats),
                        ("tiles of P V per pass", shape.chunks * shape.dim_pad // tile),
                        ("passes", passes)):
        if count > COUNT_LIMIT:
            raise CompileError(f"{where}: attention: {count} {what}, the units count to "
                               f"{COUNT_LIMIT}")
    return shape


def _linear(beats, lanes):
    return AccessPattern(0, (beats, 1, 1), (lanes, 0, 0))


#: Buffers of ``k_t`` (one key block each: K rows written as they come, read transposed).
_KT_BUFFERS = 2


def _v_read(s):
    """Vector beats of each V row of a ``rows`` cache that ``load_v`` streams: ``dim`` in
    whole AXI beats (:attr:`AttentionShape.v_beats`) when a three-level pattern can skip
    the rest (one pass per key/value head, or one head), else the whole ``pitch``."""
    per_group = len(s.passes()) // s.kv_heads
    if s.sum_in_pv or not (per_group == 1 or s.kv_heads == 1):
        return s.pitch // s.lanes           # the ones column too, or a 4-level pattern
    return s.v_beats


def _buffer(kernel, label, source, words, write, read, read_passes, read_start=0,
            **extra):
    """A PMU ``label``: ``source`` written along ``write``, read along ``read`` (from
    ``read_start``) ``read_passes`` buffers; double-buffered unless ``extra`` says."""
    config = {"write": write, "write_lanes": 1,
              "read": AccessPattern(read_start, read.counts, read.strides), "read_lanes": 1,
              "buffers": 2, "buffer_words": words, "read_repeat": 1,
              "read_passes": read_passes, **extra}
    return kernel.buffer(label, words, [source], buffers=config["buffers"], config=config)


def _front_blocks(kernel, s, tensors, addresses, names):
    """Loads and ``S^T = K_blk Q^T`` of the ``blocks`` layout: ``(scores, V stream,
    launch)``; ``V`` arrives chunk by chunk, block by block."""
    q, k, v = names
    lanes, n = s.lanes, len(s.passes())
    beat = lanes * WORD
    per_group = n // s.kv_heads                # passes per key/value head
    copies = s.kv_heads * s.key_copies         # K copies (causal: one per row tile)
    dim_k = s.dim_k
    q_bytes = dim_k * lanes * BF16
    load_q = kernel.load(tensors[q], AccessPattern(addresses[q], (dim_k // 2, n, 1),
                                                   (beat, q_bytes, 0)),
                         name=f"load_{q}", config={"bf16": True})
    k_copy = s.seq_pad * dim_k * BF16
    load_k = kernel.load(tensors[k], AccessPattern(addresses[k],
                                                   (k_copy // beat, n // copies, copies),
                                                   (beat, 0, k_copy)),
                         name=f"load_{k}", config={"bf16": True})
    v_head = s.seq_pad * s.dim_pad * BF16
    load_v = kernel.load(tensors[v], AccessPattern(addresses[v],
                                                   (v_head // beat, per_group, s.kv_heads),
                                                   (beat, 0, v_head)),
                         name=f"load_{v}", config={"bf16": True})
    launch = kernel.output(kernel.nodes[f"load_{k}"], "control_out")
    tiles = s.seq_pad // (lanes * s.tile_group)     # systolic tiles of keys
    q_t = _buffer(kernel, "q_t", load_q, dim_k * lanes, _linear(dim_k, lanes),
                  AccessPattern(0, (dim_k, tiles, 1), (lanes, 0, 0)), n)
    scores = kernel.compute("scores", "matmul", [load_k, q_t], config={
        "mode": "systolic", "trips": (dim_k, tiles, n), **_grouped(s)})
    return scores, load_v, launch


def _grouped(s):
    """The systolic configuration fields of a product grouping ``s.tile_group`` row
    blocks (``Mode.SYSTOLIC_ROWS``: K's key blocks, V^T's dimension blocks), none for
    groups of one."""
    return {"group": s.tile_group, "group_rows": True} if s.tile_group > 1 else {}


def _front_rows(kernel, s, tensors, addresses, names):
    """Loads and ``S^T = K_blk Q^T`` of a ``rows`` cache: ``(scores, V stream,
    launch)``. K rows stream into ``k_t`` (a systolic tile of ``tile_group`` key blocks
    a buffer, each written with a lane stride: out transposed, one dimension of
    ``lanes`` keys a beat, block by block); ``Q^T`` replays from ``q_t``
    (:attr:`AttentionShape.sum_in_pv`) or streams from HBM once per tile (no PMU is
    left for it); V rows into ``v_buf``, read chunk by chunk, block by block
    (``sum_in_pv``: the last block, ``l``'s, first, then down to block 0; grouped: a
    tile of blocks by key)."""
    q, k, v = names
    lanes, n = s.lanes, len(s.passes())
    beat = lanes * WORD
    per_group = n // s.kv_heads
    group, dim_k, pitch = s.tile_group, s.dim_k, s.pitch
    tiles = s.seq // (lanes * group)            # systolic tiles of keys
    row = pitch * BF16                          # bytes of one cache row
    head = s.seq * row
    q_bytes = dim_k * lanes * BF16
    q_replay = (dim_k // 2, n, 1) if s.sum_in_pv else (dim_k // 2, tiles, n)
    load_q = kernel.load(tensors[q], AccessPattern(
        addresses[q], q_replay, (beat, q_bytes, 0) if s.sum_in_pv else (beat, 0, q_bytes)),
        name=f"load_{q}", config={"bf16": True})
    load_k = kernel.load(tensors[k], AccessPattern(addresses[k],
                                                   (head // beat, per_group, s.kv_heads),
                                                   (beat, 0, head)),
                         name=f"load_{k}", config={"bf16": True})
    v_read = _v_read(s)
    if v_read == pitch // lanes:
        v_pattern = AccessPattern(addresses[v], (head // beat, per_group, s.kv_heads),
                                  (beat, 0, head))
    else:
        v_pattern = AccessPattern(addresses[v], (v_read // 2, s.seq, n),
                                  (beat, row, head if per_group == 1 else 0))
    load_v = kernel.load(tensors[v], v_pattern, name=f"load_{v}", config={"bf16": True})
    launch = kernel.output(kernel.nodes[f"load_{k}"], "control_out")
    # a buffer a systolic tile: its key blocks one after another, each written with a
    # lane stride (a dimension of lanes keys a row) and read transposed, block by block
    block_words = pitch * lanes
    write = AccessPattern(0, (pitch // lanes, lanes, group),
                          (lanes * lanes, 1, block_words if group > 1 else 0))
    read = (AccessPattern(0, (group, dim_k, 1), (block_words, lanes, 0)) if group > 1
            else _linear(dim_k, lanes))
    k_t = _buffer(kernel, "k_t", load_k, block_words * group, write, read, tiles * n,
                  write_lanes=lanes, skew_shift=lanes.bit_length() - 1, buffers=_KT_BUFFERS)
    q_t = load_q
    if s.sum_in_pv:
        q_t = _buffer(kernel, "q_t", load_q, dim_k * lanes, _linear(dim_k, lanes),
                      AccessPattern(0, (dim_k, tiles, 1), (lanes, 0, 0)), n)
    scores = kernel.compute("scores", "matmul", [k_t, q_t], config={
        "mode": "systolic", "trips": (dim_k, tiles, n), **_grouped(s)})
    chunk, blocks = s.chunk, s.v_cols // lanes
    read, start = AccessPattern(0, (chunk, blocks, 1), (lanes, chunk * lanes, 0)), 0
    if group > 1:                               # by tile of blocks, key, block
        read = AccessPattern(0, (group, chunk, blocks // group),
                             (chunk * lanes, lanes, group * chunk * lanes))
    if s.sum_in_pv:                             # blocks - 1 .. 0 (addresses wrap)
        read = AccessPattern(0, (chunk, blocks, 1), (lanes, -chunk * lanes, 0))
        start = (blocks - 1) * chunk * lanes
    v_buf = _buffer(kernel, "v_buf", load_v, v_read * chunk * lanes,
                    AccessPattern(0, (v_read, chunk, 1), (chunk * lanes, lanes, 0)),
                    read, s.chunks * n, read_start=start)
    return scores, v_buf, launch


def lower_attention(name, group, s, hbm_size, plan=None):
    """``(kernel, images, addresses, bitstream_address)`` of attention shape ``s``; the
    images from ``plan.start`` (or where ``plan.addresses`` puts them)."""
    lanes = s.lanes
    beat = lanes * WORD                        # bytes of one AXI beat
    n = len(s.passes())
    chunk, chunks, dim_pad = s.chunk, s.chunks, s.v_cols
    dim_tiles = dim_pad // (lanes * s.tile_group)    # systolic tiles of dimensions
    scale = s.scale_word
    images = attention_images(s, group.q.name, group.k.name, group.v.name, group.output)
    addresses, bitstream_address = place_images(name, images, hbm_size, plan)
    kernel = Kernel(name)
    tensors = {n_: kernel.tensor(n_, image.shape, image.format)
               for n_, image in images.items()}
    names = (group.q.name, group.k.name, group.v.name)
    front = _front_rows if s.rows_layout else _front_blocks
    scores, v_stream, launch = front(kernel, s, tensors, addresses, names)
    out = group.output

    def buffer(label, source, words, write, read, read_passes, read_start=0):
        return _buffer(kernel, label, source, words, write, read, read_passes, read_start)

    def simd(label, inputs, trips, stages, **fields):
        stream = kernel.compute(label, "map", inputs, config={
            "mode": "simd", "trips": trips, "stages": stages, "vector_out": True,
            **fields})
        kernel.connect(launch, kernel.nodes[label], "control_in")
        return stream

    # scores: S^T = K_blk Q^T, beat = key, lane = query
    kernel.connect(launch, kernel.nodes["scores"], "control_in")
    s_buf = buffer("s_buf", scores, chunk * lanes, _linear(chunk, lanes),
                   _linear(chunk, lanes), chunks * n)
    chunk_max = simd("chunk_max", [scores], (chunk, chunks, n),
                     [("MAX", "PREV", "REG", "PREV", _NEG_INF)])
    alpha = simd("alpha", [chunk_max], (chunks, 1, n), [
        ("MAX", "PREV", "REG", "PREV", _NEG_INF),
        ("SUB", "LAST", "PREV", "PREV", _NEG_INF),
        ("MUL", "PREV", "CONST", "PREV", scale)], tail="EXP", emit_every=True)
    m_rep = buffer("m_rep", chunk_max, lanes, _linear(1, lanes),
                   AccessPattern(0, (chunk, 1, 1), (0, 0, 0)), chunks * n)
    probs = simd("probs", [m_rep, s_buf], (chunk, chunks, n), [
        ("MAX", "PREV", "REG", "PREV", _NEG_INF),
        ("SUB", "IN1", "PREV", "PREV", 0),
        ("MUL", "PREV", "CONST", "PREV", scale)],
        acc_stage=0, tail="EXP", tail_bf16=True, emit_every=True)
    if not s.sum_in_pv:
        # the running sum l, its reciprocal once per pass
        al_rep = buffer("al_rep", alpha, lanes, _linear(1, lanes),
                        AccessPattern(0, (chunk, 1, 1), (0, 0, 0)), chunks * n)
        p_sum = probs
        if s.tile_group > 1 and not s.rows_layout:
            # on the pipelined operators lsum's running sum (ADD into REG) takes a beat
            # every ADD-latency cycles: a chunk's probabilities wait in p_sum, so probs
            # (and P V after it) do not (a KV cache's chain has no PMU left for it)
            p_sum = buffer("p_sum", probs, chunk * lanes, _linear(chunk, lanes),
                           _linear(chunk, lanes), chunks * n)
        lsum = simd("lsum", [p_sum, al_rep], (chunk, chunks, n), [
            ("MADD", "REG", "IN1", "PREV", 0),
            ("ADD", "PREV", "REG", "PREV", 0)],
            acc_stage=0, tail="RECIPROCAL", emit_outer=True)
        inverse = buffer("l_buf", lsum, chunk * lanes, _linear(chunk, lanes),
                         AccessPattern(0, (dim_pad, 1, 1), (0, 0, 0)), n,
                         read_start=(chunk - 1) * lanes)
    # O_c^T = V_c^T P_c^T, beat = dimension, lane = query; merged across chunks
    p_buf = buffer("p_buf", probs, chunk * lanes, _linear(chunk, lanes),
                   AccessPattern(0, (chunk, dim_tiles, 1), (lanes, 0, 0)), chunks * n)
    pv = kernel.compute("pv", "matmul", [v_stream, p_buf], config={
        "mode": "systolic", "trips": (chunk, dim_tiles * chunks, n), **_grouped(s)})
    kernel.connect(launch, kernel.nodes["pv"], "control_in")
    ao_rep = buffer("ao_rep", alpha, lanes, _linear(1, lanes),
                    AccessPattern(0, (dim_pad, 1, 1), (0, 0, 0)), chunks * n)
    merge = simd("merge", [pv, ao_rep], (dim_pad, chunks, n),
                 [("MADD", "REG", "IN1", "PREV", 0)], acc_stage=0, emit_outer=True)
    if s.sum_in_pv:
        # l is the pass's first O^T beat: SELECT(COUNTER, REG, PREV) holds it, 1 / l
        inverse = simd("linv", [merge], (dim_pad, 1, n),
                       [("SELECT", "COUNTER", "REG", "PREV", 0)], tail="RECIPROCAL",
                       emit_every=True)
    result = simd("normalise", [merge, inverse], (dim_pad, 1, n),
                  [("MUL", "PREV", "IN1", "PREV", 0)], emit_every=True)
    kernel.store(result, tensors[out], AccessPattern(addresses[out], (dim_pad, n, 1),
                                                     (beat, dim_pad * beat, 0)),
                 name=f"store_{out}", config={"bf16": False})
    return kernel, images, addresses, bitstream_address


class AttentionFamily(Family):
    """Attention of BF16 Q, K, V (decode, prefill, causal, grouped-query)."""
    name = "attention"
    placement_seed = "attention"
    anneal = True                   # a long chain of units: anneal before routing
    benchmark = ("attention", {"seq": 64, "dim": 32, "heads": 2, "kv_heads": 2,
                               "mode": "decode", "causal": False})

    def claims(self, graph):
        return any(node.op == "attention" for node in graph.live_nodes())

    def fuse(self, graph, name, out):
        return _match_attention(graph, name, out)

    def tile(self, group, state):
        return tile_attention(group, state.geometry, state.machine)

    def kernel_name(self, graph_name, group, t):
        rows = f"_rows{t.valid_keys}" if t.rows_layout else ""
        if t.queries is not None:
            rows += f"q{t.queries}"
        return f"{graph_name}_{t.mode}_h{t.heads}g{t.kv_heads}_l{t.seq}d{t.dim}{rows}"

    def lower(self, name, group, tiling, state):
        lowered = Lowered(*lower_attention(name, group, tiling,
                                           state.machine.region("hbm").size, state.plan))
        for image_name, image in lowered.images.items():
            check_layout(name, state.plan, image_name, image)
        return lowered

    def meta(self, group, t, kernel):
        return {
            "group": self.name, "mode": t.mode, "seq": t.seq, "dim": t.dim,
            "heads": t.heads, "kv_heads": t.kv_heads, "chunk": t.chunk,
            "scale": t.scale, "causal": t.causal, "passes": len(t.passes()),
            "dim_align": t.dim_align, "kv_layout": t.kv_layout, "valid": t.valid,
            "queries": t.queries, "tile_group": t.tile_group,
            "pcus": kernel.units_needed()["pcu"], "pmus": kernel.units_needed()["pmu"],
            "macs": t.macs,
            "operands": [group.q.name, group.k.name, group.v.name],
            "pcu_programs": pcu_programs(kernel)}

    def exact(self, program, graph):
        return reference.exact_attention(program)

    def work(self, program):
        """``2 D`` MACs (a score and its share of ``O``) per head and query-key pair the
        query sees (Q ``H x R x D``, K ``G x L x D``; causal: row ``r`` sees keys ``0 ..
        r``; a ``rows`` cache: its ``valid`` keys); padding, masked keys and idle lanes
        are not work. Q, K and V read (a cache at its capacity), O written."""
        q, k, _ = program.meta["operands"]
        heads, rows, dim = tensor_shape(program, q)
        seq = program.meta.get("valid") or tensor_shape(program, k)[1]
        pairs = (sum(min(row + 1, seq) for row in range(rows)) if program.meta["causal"]
                 else rows * seq)
        return moved_work(program, program.meta["operands"], 2 * dim * heads * pairs)


#: The attention family (registered first: attention fuses on its own).
ATTENTION = AttentionFamily()
AttentionGroup.family = ATTENTION

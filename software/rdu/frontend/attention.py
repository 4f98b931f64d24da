"""Attention on the array: the shape of a run, and the arithmetic of the fused chain.

``O = softmax(Q K^T * scale) V`` per head, grouped-query (``G`` key/value heads shared
by ``H / G`` query heads each), computed by the streaming chain of ``docs/attention.md``
with online softmax over chunks of ``C`` keys. This module holds what does not depend on
placement: :class:`AttentionShape` (the parameters and the derived tiling of a run),
:func:`images` (how Q, K, V and O are laid out, masks included), and
:func:`chain_matrices` / :func:`chain_outputs`, the hardware's arithmetic bit for bit
(every operation is an :mod:`rdu.models.fp` or :func:`rdu.models.pcu_reference.systolic_accumulate`
call in the order the units execute it), which compiled kernels are checked against;
:func:`float64_attention` is the independent reference of the error budget.

The chain, per *pass* (one key/value head ``g`` and up to ``lanes`` queries, one per
lane; a beat is one key, or one head dimension):

1. scores ``S^T = K_blk Q^T`` on a systolic PCU (a block of ``lanes`` keys against the
   pass's queries; ``K`` and ``Q`` in BF16, FP32 accumulation in dimension order). Masks
   are more dimensions of this product: ``K`` holds ``-BIG`` (the most negative BF16)
   where a key is masked, ``Q`` holds ``1``, so a masked key scores ``-BIG`` and its
   probability is ``0`` (padded keys; causal prefill: :func:`images`);
2. chunk maximum ``m_c = max_k s_k`` (``MAX(PREV, REG)`` from ``-inf``);
3. running maximum ``m = max(m_old, m_c)`` and ``alpha = exp((m_old - m) * scale)``
   (``-inf`` before the first chunk, so ``alpha = 0`` there);
4. ``p = bf16(exp((s - m) * scale))``, ``m`` from an accumulator stage that takes the
   maximum of ``m_c`` across chunks (every slot holds the same running maximum);
5. ``l``: an accumulator per key position ``a_k = a_k * alpha + p_k`` across chunks, then
   their sum in key order (``sum_k a_k`` equals the running sum ``l`` of online softmax),
   its reciprocal;
6. ``O_c^T = V_c^T P_c^T`` on a systolic PCU (BF16 ``V`` and ``p``, key order);
7. ``O = O * alpha + O_c`` per dimension (an accumulator stage; ``O_c`` on the first
   chunk);
8. ``O * (1 / l)``.

A KV cache (``kv_layout`` ``rows``) gives the same arithmetic on its rows, except with
:attr:`AttentionShape.sum_in_pv`: there ``l`` is not step 5 but one more row of step 6
(V's column ``dim`` holds 1: ``l_c = sum_k 1 * p_k`` in key order), merged by step 7
as the dimensions are, and ``O^T`` leaves in the order of ``P V``'s blocks (``l``'s
first).
"""

import math
from dataclasses import dataclass

import numpy as np

from hdl.pcu_config import ACC_DEPTH

from ..models import fp as fpmodel
from ..models import pcu_reference as pcu_model

__all__ = ["AttentionShape", "AttentionError", "query_rows", "scale_value", "attention64",
           "images", "chain_outputs", "chain_matrices", "unpack_outputs",
           "float64_attention", "MODES", "KV_LAYOUTS", "NEG_BIG"]

MODES = ("decode", "prefill")
#: How K and V lie in HBM: ``blocks`` (K key block by key block, dimension-major; V
#: chunk by chunk, block by block: :func:`images`) or ``rows`` (a position-major KV
#: cache, one row of ``pitch`` BF16 per key: appendable a row at a time; decode only).
KV_LAYOUTS = ("blocks", "rows")
#: The most negative finite BF16 (in the high half): the score of a padded key.
NEG_BIG = 0xFF7F0000


class AttentionError(ValueError):
    """Attention parameters that do not describe a run (one line)."""


def query_rows(mode, seq):
    """Queries per head: one (decode) or one per key (prefill)."""
    return 1 if mode == "decode" else seq


def scale_value(dim, scale=None):
    """The score scale as the hardware holds it (FP32): ``1 / sqrt(dim)`` unless given."""
    return np.float32(1.0 / math.sqrt(dim) if scale is None else scale)


def attention64(q, k, v, scale, causal=False):
    """Float64 attention of float arrays ``q`` (heads, rows, dim), ``k`` and ``v``
    (kv_heads, seq, dim) with ``scale``; ``causal``: row ``r`` sees keys ``0 .. r``.
    Returns ``(O, budget)``: the budget of the chain against it is ``2^-8 max|V|`` of
    each head's values (each probability is rounded to BF16, relative 2^-9, before
    ``P V`` and is in the sum that normalises it), far above the FP32 accumulation."""
    heads, rows, _ = q.shape
    kv_heads, seq, _ = k.shape
    group = heads // kv_heads
    out = np.zeros(q.shape)
    budget = np.zeros(q.shape)
    for h in range(heads):
        g = h // group
        scores = q[h] @ k[g].T * float(scale)
        if causal:
            scores = np.where(np.tri(rows, seq, dtype=bool), scores, -np.inf)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        out[h] = weights @ v[g] / weights.sum(axis=1, keepdims=True)
        budget[h] = 2.0 ** -8 * np.abs(v[g]).max()
    return out, budget


def _ceil(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class AttentionShape:
    """One attention run: ``heads`` query heads of ``rows`` queries each (1 for decode,
    ``seq`` for prefill), ``kv_heads`` key/value heads of ``seq`` keys, head dimension
    ``dim``; ``lanes`` the machine's vector width and ``chunk`` the keys of one online
    softmax step (a multiple of ``2 * lanes``). ``kv_layout`` ``rows`` (decode): K and V
    are a position-major cache of capacity ``seq`` (a multiple of the lanes; ``chunk`` a
    multiple of the lanes dividing it) of which the first ``valid`` keys of each head
    are filled (default all), read by ``queries`` queries per head (default 1: a decode
    step's rows padded to a tile of the lanes are 8). ``tile_group``: the systolic PCUs'
    group (:func:`hdl.fp_latency.systolic_group`, more than 1 with ``fp_latency``): both
    products group their row blocks (``Mode.SYSTOLIC_ROWS``: ``tile_group`` key blocks
    of ``S^T``, dimension blocks of ``O^T``), so ``chunk`` and :attr:`dim_pad` are
    multiples of ``tile_group * lanes`` (a ``rows`` cache: its capacity too, and
    :attr:`dim_pad` within a row)."""
    mode: str
    seq: int
    dim: int
    heads: int
    kv_heads: int
    lanes: int
    chunk: int
    scale: float = None
    causal: bool = False
    dim_align: int = 2
    kv_layout: str = "blocks"
    valid: int = None
    queries: int = None
    tile_group: int = 1

    def __post_init__(self):
        if self.mode not in MODES:
            raise AttentionError(f"mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.kv_layout not in KV_LAYOUTS:
            raise AttentionError(f"kv_layout {self.kv_layout!r} is not one of "
                                 f"{', '.join(KV_LAYOUTS)}")
        for name in ("seq", "dim", "heads", "kv_heads", "lanes", "chunk", "tile_group"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AttentionError(f"{name} must be a positive integer, not {value!r}")
        if self.heads % self.kv_heads:
            raise AttentionError(f"heads {self.heads} is not a multiple of kv_heads "
                                 f"{self.kv_heads}")
        if self.rows_layout:
            self._check_rows()
        elif self.queries is not None:
            raise AttentionError(f"queries {self.queries}: a set number of queries per head "
                                 f"reads a KV cache (kv_layout 'rows')")
        elif self.valid not in (None, self.seq):
            raise AttentionError(f"valid {self.valid} < seq {self.seq}: a cache holding "
                                 f"fewer keys than its capacity is kv_layout 'rows'")
        elif self.chunk % (2 * self.lanes):
            raise AttentionError(f"chunk {self.chunk} is not a multiple of 2 x lanes "
                                 f"({2 * self.lanes}: whole AXI beats of BF16 keys)")
        elif self.chunk % (self.tile_group * self.lanes):
            raise AttentionError(f"chunk {self.chunk} is not a multiple of tile_group x "
                                 f"lanes ({self.tile_group * self.lanes}: whole systolic "
                                 f"tiles of keys)")
        if self.causal and self.mode == "decode":
            raise AttentionError("causal masking is for prefill (a decode query sees every "
                                 "key)")
        if self.scale is not None and not (math.isfinite(self.scale) and self.scale > 0):
            raise AttentionError(f"scale must be a positive finite number, not {self.scale}")

    def _check_rows(self):
        if self.tile_group > 1 and self.dim_pad > self.pitch:
            raise AttentionError(f"kv_layout 'rows' on systolic tiles of {self.tile_group} "
                                 f"blocks: dim {self.dim} is padded to {self.dim_pad}, wider "
                                 f"than a cache row of {self.pitch} (not supported yet; "
                                 f"fp_latency off)")
        if self.mode != "decode":
            raise AttentionError("kv_layout 'rows' is for decode (one query per head); "
                                 "prefill reads K and V by blocks (kv_layout 'blocks')")
        tile = self.lanes * self.tile_group     # keys of a systolic tile
        if self.seq % tile:
            raise AttentionError(f"kv_layout 'rows': the capacity {self.seq} is not a "
                                 f"multiple of the {self.lanes} lanes (whole key blocks)"
                                 if self.tile_group == 1 else
                                 f"kv_layout 'rows': the capacity {self.seq} is not a "
                                 f"multiple of {tile} keys (systolic tiles of "
                                 f"{self.tile_group} key blocks of {self.lanes})")
        if self.chunk % tile or self.seq % self.chunk:
            raise AttentionError(f"kv_layout 'rows': chunk {self.chunk} is not a multiple "
                                 f"of {tile} keys dividing the capacity {self.seq}")
        if self.valid is not None and not (isinstance(self.valid, int)
                                           and 1 <= self.valid <= self.seq):
            raise AttentionError(f"valid must be 1 to the capacity {self.seq}, not "
                                 f"{self.valid!r}")
        if self.queries is not None and (isinstance(self.queries, bool) or
                                         not isinstance(self.queries, int) or
                                         self.queries < 1):
            raise AttentionError(f"queries must be a positive integer, not "
                                 f"{self.queries!r}")

    @property
    def rows_layout(self):
        """Whether K and V are a position-major cache (``kv_layout`` ``rows``)."""
        return self.kv_layout == "rows"

    @property
    def valid_keys(self):
        """Keys in the cache (``rows``: the first ``valid`` of ``seq``; else all)."""
        return self.seq if self.valid is None else self.valid

    @property
    def pitch(self):
        """BF16 values of one row of the ``rows`` cache: ``dim`` and the mask column,
        whole AXI beats (``2 * lanes`` values)."""
        return _ceil(self.dim + 1, 2 * self.lanes) * 2 * self.lanes

    @property
    def v_beats(self):
        """Vector beats of one ``rows`` V row the chain reads: ``dim`` in whole AXI
        beats (the mask column and the padding past them are not read), at least
        :attr:`dim_pad` (whole systolic tiles of dimensions)."""
        return max(_ceil(self.dim, 2 * self.lanes) * 2, self.dim_pad // self.lanes)

    @property
    def sum_in_pv(self):
        """``rows`` with ``dim`` a multiple of the lanes (and room for one more block
        in the accumulator): the softmax sum ``l`` is one more row of ``P V``, from V's
        column ``dim`` (1 in every row of the cache), so the chain needs no ``lsum``
        and ``Q^T`` stays in a PMU. Not on systolic tiles of several blocks
        (``tile_group``), where the extra block would cost a whole tile."""
        return (self.rows_layout and self.dim % self.lanes == 0
                and self.dim + self.lanes <= ACC_DEPTH and self.tile_group == 1)

    @property
    def v_cols(self):
        """Columns of V the ``P V`` product reads: ``dim_pad``; with :attr:`sum_in_pv`
        one more block (the ones column and ``lanes - 1`` padding columns)."""
        return self.dim + self.lanes if self.sum_in_pv else self.dim_pad

    @property
    def out_dims(self):
        """Columns of a pass's ``O^T`` in the output image (:attr:`v_cols`)."""
        return self.v_cols

    @property
    def rows(self):
        """Queries per head: :attr:`queries` of a ``rows`` cache (a decode step's rows,
        padded to a tile, all seeing the whole cache), else the mode's."""
        if self.queries is not None:
            return self.queries
        return query_rows(self.mode, self.seq)

    @property
    def group(self):
        """Query heads per key/value head."""
        return self.heads // self.kv_heads

    @property
    def scale_word(self):
        """The FP32 word of the score scale (``1 / sqrt(dim)`` unless given)."""
        return int(scale_value(self.dim, self.scale).view(np.uint32))

    @property
    def chunks(self):
        return _ceil(self.seq, self.chunk)

    @property
    def seq_pad(self):
        """Keys per head in the images: whole chunks."""
        return self.chunks * self.chunk

    @property
    def masked(self):
        """Whether padded keys exist (they are masked); ``rows``: always (the cache's
        mask column)."""
        return self.rows_layout or self.seq_pad != self.seq

    @property
    def mask_dims(self):
        """Score dimensions that mask: causal, ``1 + lanes`` (keys past the pass's last
        row, and one per key of the pass's diagonal block); else 1 when keys are padded."""
        return 1 + self.lanes if self.causal else int(self.masked)

    @property
    def dim_k(self):
        """Dimensions of the score product: ``dim`` and the mask dimensions, made even
        (a pass's ``Q^T`` is whole AXI beats of BF16; an extra dimension is zero), or a
        multiple of ``dim_align`` (the lanes, when a matmul writes Q^T and K: whole
        tiles of ``lanes`` rows)."""
        return _ceil(self.dim + self.mask_dims, self.dim_align) * self.dim_align

    @property
    def dim_pad(self):
        """Dimensions of ``V`` and ``O`` in the images: whole blocks of lanes (whole
        systolic tiles: ``tile_group`` blocks)."""
        tile = self.lanes * self.tile_group
        return _ceil(self.dim, tile) * tile

    @property
    def tiles(self):
        """Row tiles of a head (prefill: ``lanes`` rows each)."""
        return _ceil(self.rows, self.lanes)

    @property
    def key_copies(self):
        """Copies of each key/value head's K in the K image: causal masks differ per row
        tile (one copy each), else one."""
        return self.tiles if self.causal else 1

    def describe(self):
        cache = (f", K/V rows of {self.pitch} ({self.valid_keys} of {self.seq} keys "
                 f"valid)" if self.rows_layout else "")
        return (f"attention {self.mode}{' causal' if self.causal else ''}: {self.heads} "
                f"heads ({self.kv_heads} K/V{cache}) x {self.rows} rows, {self.seq} keys "
                f"(chunks of {self.chunk}, {self.chunks}), dim {self.dim}; "
                f"{len(self.passes())} passes of {self.lanes} lanes")

    @property
    def macs(self):
        """Multiply-accumulates of the two products, as computed (padding included)."""
        return len(self.passes()) * self.lanes * self.seq_pad * (self.dim_k + self.v_cols)

    def passes(self):
        """``[(kv_head, copy, [(head, row), ...])]``: the queries of each pass, at most
        ``lanes``, and the copy of the head's K it reads, in the order the hardware runs
        them. Causal: by key/value head, row tile, then query head (the passes of one
        tile share a K copy; a pass is one head's rows); else the queries of a key/value
        head in order, ``lanes`` at a time."""
        out = []
        heads = range(self.group)
        for g in range(self.kv_heads):
            if self.causal:
                for tile in range(self.tiles):
                    rows = range(tile * self.lanes, min(self.rows, (tile + 1) * self.lanes))
                    out += [(g, tile, [(g * self.group + h, r) for r in rows]) for h in heads]
                continue
            queries = [(g * self.group + h, r) for h in heads for r in range(self.rows)]
            for start in range(0, len(queries), self.lanes):
                out.append((g, 0, queries[start:start + self.lanes]))
        return out


def images(shape, q="q", k="k", v="v", out="o"):
    """``{name: rdu.layout.Image}`` of the chain: ``Q^T`` by pass (with the mask
    dimensions' constants), K by key/value head and copy, key block by key block
    (``tile_group`` blocks by ``tile_group``), dimension-major (with the mask constants),
    V by head, chunk and dimension block (tile), and
    ``O^T`` by pass (FP32). The compiler lays the tensors out with them and the reference
    computes from their logical matrices, so both see the same masks."""
    from ..layout import Image, Piece
    s = shape
    lanes, passes = s.lanes, s.passes()
    n = len(passes)
    neg_big = float(np.uint32(NEG_BIG).view(np.float32))
    q_pieces, o_pieces, k_pieces, v_pieces = [], [], [], []
    for index, (_, _, queries) in enumerate(passes):
        head, row = queries[0]
        first = head * s.rows + row
        q_pieces.append(Piece(q, (index * lanes, 0), (len(queries), s.dim), part=first))
        o_pieces.append(Piece(out, (index * lanes, 0), (len(queries), s.dim), part=first))
        if s.causal:
            # Q^T: 1 on the first mask dimension, and lane j holds 1 on diagonal
            # dimension m for every m > j (a key m past the tile's first row is masked
            # for the lanes before it)
            for m in range(1, lanes):
                q_pieces.append(Piece(None, (index * lanes, s.dim + 1 + m), (m, 1), 1.0))
    if s.mask_dims:
        q_pieces.append(Piece(None, (0, s.dim), (n * lanes, 1), 1.0))
    if s.rows_layout:
        return _rows_images(s, q, k, v, out, q_pieces, o_pieces, neg_big)
    copy_rows = s.seq_pad
    for g in range(s.kv_heads):
        v_pieces.append(Piece(v, (g * s.seq_pad, 0), (s.seq, s.dim), part=g * s.seq))
        for copy in range(s.key_copies):
            base = (g * s.key_copies + copy) * copy_rows
            k_pieces.append(Piece(k, (base, 0), (s.seq, s.dim), part=g * s.seq))
            # keys no row of the copy's passes may see: padded ones, and (causal) the
            # keys past the tile's last row
            first_masked = min(s.seq, (copy + 1) * lanes) if s.causal else s.seq
            if first_masked < s.seq_pad:
                k_pieces.append(Piece(None, (base + first_masked, s.dim),
                                      (s.seq_pad - first_masked, 1), neg_big))
            if s.causal:
                for m in range(1, lanes):       # the diagonal block: key r0 + m
                    key = copy * lanes + m
                    if key < min(s.seq, (copy + 1) * lanes):
                        k_pieces.append(Piece(None, (base + key, s.dim + 1 + m), (1, 1),
                                              neg_big))
    # K: a systolic tile (tile_group key blocks) at a time, dimension-major, block by
    # block; V: by chunk, tile of dimension blocks, key, block
    group = s.tile_group
    tiles, dim_tiles = s.seq_pad // (lanes * group), s.dim_pad // (lanes * group)
    return {
        q: Image((n * lanes, s.dim_k), tuple(q_pieces), (n, lanes, s.dim_k), (0, 2, 1),
                 "bf16"),
        k: Image((s.kv_heads * s.key_copies * s.seq_pad, s.dim_k), tuple(k_pieces),
                 (s.kv_heads * s.key_copies, tiles, group, lanes, s.dim_k),
                 (0, 1, 4, 2, 3), "bf16"),
        v: Image((s.kv_heads * s.seq_pad, s.dim_pad), tuple(v_pieces),
                 (s.kv_heads, s.chunks, s.chunk, dim_tiles, group, lanes),
                 (0, 1, 3, 2, 4, 5), "bf16"),
        out: Image((n * lanes, s.dim_pad), tuple(o_pieces), (n, lanes, s.dim_pad),
                   (0, 2, 1), "fp32"),
    }


def _rows_images(s, q, k, v, out, q_pieces, o_pieces, neg_big):
    """The images of a ``rows`` cache: ``Q^T`` and ``O^T`` by pass as for ``blocks``; K
    and V ``(kv_heads * seq, pitch)`` row-major (element ``[g, j, d]`` at byte ``((g *
    seq + j) * pitch + d) * 2``), K's column ``dim`` 0 for the first ``valid`` keys of
    each head and ``-BIG`` for the empty slots, V's column ``dim`` 1 in every row (the
    softmax sum's row of ``P V``, :attr:`AttentionShape.sum_in_pv`), every padding
    column 0."""
    from ..layout import Image, Piece
    n, lanes, rows = len(s.passes()), s.lanes, s.kv_heads * s.seq
    k_pieces = [Piece(k, (0, 0), (rows, s.dim), part=0)]
    if s.valid_keys < s.seq:
        k_pieces += [Piece(None, (g * s.seq + s.valid_keys, s.dim),
                           (s.seq - s.valid_keys, 1), neg_big) for g in range(s.kv_heads)]
    if s.sum_in_pv:
        o_pieces = _reversed_blocks(s, out)
    return {
        q: Image((n * lanes, s.dim_k), tuple(q_pieces), (n, lanes, s.dim_k), (0, 2, 1),
                 "bf16"),
        k: Image((rows, s.pitch), tuple(k_pieces), None, None, "bf16"),
        v: Image((rows, s.pitch), (Piece(v, (0, 0), (rows, s.dim), part=0),
                                   Piece(None, (0, s.dim), (rows, 1), 1.0)), None, None,
                 "bf16"),
        out: Image((n * lanes, s.out_dims), tuple(o_pieces), (n, lanes, s.out_dims),
                   (0, 2, 1), "fp32"),
    }


def _reversed_blocks(s, out):
    """``O^T`` pieces of a :attr:`AttentionShape.sum_in_pv` pass: its ``dim / lanes +
    1`` blocks of ``lanes`` dimensions leave ``P V`` last block first (``l``'s block,
    which the image drops, then blocks ``dim / lanes - 1`` .. 0); a piece per query and
    block (``O`` seen as a matrix of ``lanes`` columns: row ``query * dim / lanes +
    block``)."""
    from ..layout import Piece
    lanes, blocks = s.lanes, s.dim // s.lanes
    pieces = []
    for index, (_, _, queries) in enumerate(s.passes()):
        for lane, (head, row) in enumerate(queries):
            first = (head * s.rows + row) * blocks
            pieces += [Piece(out, (index * lanes + lane, (blocks - b) * lanes), (1, lanes),
                             part=first + b) for b in range(blocks)]
    return pieces


def chain_outputs(shape, q, k, v):
    """``O`` (heads, rows, dim) as uint32 FP32 words: the chain's arithmetic on BF16
    words ``q`` (heads, rows, dim), ``k`` and ``v`` (kv_heads, seq, dim), laid out by
    :func:`images`."""
    layout = images(shape)
    arrays = {"q": q, "k": k, "v": v}
    matrices = {name: layout[name].matrix(arrays) for name in ("q", "k", "v")}
    result = chain_matrices(shape, matrices["q"], matrices["k"], matrices["v"])
    return unpack_outputs(shape, result)


def unpack_outputs(shape, matrix):
    """``O`` (heads, rows, dim) from the logical ``O^T``-by-pass matrix of the chain."""
    return images(shape)["o"].tensor_of(np.asarray(matrix, np.uint32), "o").reshape(
        shape.heads, shape.rows, shape.dim)


def chain_matrices(shape, qm, km, vm):
    """The chain on the logical matrices of the ``q``, ``k``, ``v`` images (uint32
    words, BF16 in the high halves): the logical ``O^T``-by-pass matrix (n * lanes,
    dim_pad) of FP32 words."""
    s = shape
    lanes, chunk = s.lanes, s.chunk
    scale = np.uint32(s.scale_word)
    passes = s.passes()
    # the columns the products read (a ``rows`` cache holds ``pitch``)
    km = np.asarray(km, np.uint32)[:, :s.dim_k]
    vm = np.asarray(vm, np.uint32)[:, :s.v_cols]
    out = np.zeros((len(passes) * lanes, s.out_dims), np.uint32)
    for index, (g, copy, _) in enumerate(passes):
        qt = np.asarray(qm[index * lanes:(index + 1) * lanes], np.uint32).T   # (dim_k, W)
        base = (g * s.key_copies + copy) * s.seq_pad
        keys = np.asarray(km[base:base + s.seq_pad], np.uint32)
        values = np.asarray(vm[g * s.seq_pad:(g + 1) * s.seq_pad], np.uint32)
        # 1. scores, block by block of lanes keys: beat = key, lane = query
        blocks = keys.reshape(-1, lanes, s.dim_k).transpose(0, 2, 1)   # (blocks, d, key)
        scores = pcu_model.systolic_accumulate(blocks, np.broadcast_to(
            qt, (len(blocks),) + qt.shape)).reshape(s.chunks, chunk, lanes)
        running = np.full(lanes, fpmodel.NEG_INF, np.uint32)
        acc_l = np.zeros((chunk, lanes), np.uint32)
        acc_o = np.zeros((s.v_cols, lanes), np.uint32)
        for c in range(s.chunks):
            sc = scores[c]
            # 2. chunk maximum
            m_c = np.full(lanes, fpmodel.NEG_INF, np.uint32)
            for row in sc:
                m_c = fpmodel.fmax(row, m_c)
            # 3. running maximum, alpha
            new = fpmodel.fmax(m_c, running)
            alpha = fpmodel.exp(fpmodel.mul(fpmodel.sub(running, new), scale))
            # 4. probabilities (the accumulator stage's maximum: the same `new`)
            p = fpmodel.to_bf16(fpmodel.exp(fpmodel.mul(fpmodel.sub(sc, new), scale)))
            # 5. per-position accumulators of l (MADD(REG, IN1, PREV), REG = 0 on the
            # first chunk)
            acc_l = fpmodel.add(fpmodel.mul(acc_l if c else np.zeros_like(p), alpha), p)
            # 6. O_c^T per block of lanes dimensions: beat = dimension, lane = query
            vc = values[c * chunk:(c + 1) * chunk]
            o_c = np.concatenate([pcu_model.systolic_accumulate(
                vc[:, b * lanes:(b + 1) * lanes], p) for b in range(s.v_cols // lanes)])
            # 7. merge
            base_o = np.zeros_like(o_c) if c == 0 else acc_o
            acc_o = fpmodel.add(fpmodel.mul(base_o, alpha), o_c)
            running = new
        total = np.zeros(lanes, np.uint32)
        for row in acc_l:
            total = fpmodel.add(row, total)
        if s.sum_in_pv:         # l: the product with V's ones column, merged as O is
            total = acc_o[s.dim]
        inverse = fpmodel.reciprocal(total)
        # 8. normalise
        result = fpmodel.mul(acc_o, inverse)
        if s.sum_in_pv:         # leaves in block order: l's block, then D / W - 1 .. 0
            result = np.concatenate([result[b * lanes:(b + 1) * lanes]
                                     for b in range(s.dim // lanes, -1, -1)])
        out[index * lanes:(index + 1) * lanes] = result.T
    return out


def float64_attention(shape, q, k, v):
    """``O`` (heads, rows, dim) in float64 from the same BF16 words (the budget's
    reference: no online softmax, no rounding; :func:`attention64`)."""
    q, k, v = (np.asarray(x, np.uint32).view(np.float32).astype(np.float64)
               for x in (q, k, v))
    valid = shape.valid_keys                # a cache: its first ``valid`` keys only
    return attention64(q, k[:, :valid], v[:, :valid], scale_value(shape.dim, shape.scale),
                       shape.causal)[0]

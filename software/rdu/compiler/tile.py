"""Pass ``tile``: choose the tiles of each group for the array and the PMU size.

A matmul group ``(M x K) @ (K x N)`` (K counts the folded bias row, if any) runs on
``P`` systolic PCUs, each computing ``lanes``-row blocks of the output with its
``lanes x lanes`` array:

* a *pass* covers ``P * lanes`` rows; passes walk down M (``passes``);
* within a pass each PCU computes one tile per column tile (``col_tiles``), ``k_pad``
  steps per tile, in lockstep (the B stream is multicast to every PCU);
* PCU ``p`` reads its A block from its own PMU, which keeps ``lanes`` rows of a K
  *chunk* at a row pitch ``k_pitch`` (a power of two: the diagonal banks read a column
  per beat). When a whole row fits a PMU (``chunks == 1``) the panel stays for the
  whole pass and is read once per column tile; otherwise K is cut into ``chunks`` of
  ``chunk`` columns, each buffer holds one chunk, and the chunks are streamed again for
  every column tile. The partial sums never leave the array: the PEs accumulate all
  ``k_pad`` steps of a tile in K order.
* K is padded to whole AXI beats of BF16 (``2 * lanes``), N to ``lanes``, M to the pass
  height; padding is zero.
* with an epilogue (SIMD stages after the matmul) one PCU per store stream is kept for
  it (at most two: two store channels).

A shape that cannot fit raises :class:`~rdu.compiler.core.CompileError` naming the
resource and by how much.
"""

from dataclasses import dataclass

from .core import CompileError, register

__all__ = ["MatmulTiling", "tile_matmul", "RowTiling", "tile_rows", "tile_attention",
           "MlpTiling", "tile_mlp", "ATTENTION_CHUNK"]

#: Keys per online-softmax chunk of attention (at most; fewer for short sequences).
ATTENTION_CHUNK = 64

COUNT_LIMIT = (1 << 16) - 1


def _ceil(a, b):
    return -(-a // b)


def _pow2_at_least(value):
    return 1 << max(0, (value - 1).bit_length())


@dataclass(frozen=True)
class MatmulTiling:
    """The tiles of one matmul group (sizes in elements unless named otherwise)."""
    m: int
    n: int
    k: int                  # the user's K
    k_total: int            # K plus the folded bias row
    lanes: int
    pcus: int               # systolic PCUs
    epilogue_pcus: int      # SIMD PCUs after the merges (0: no epilogue)
    stores: int             # store streams (merges)
    chunks: int             # K chunks (1: the whole row fits a PMU buffer)
    chunk: int              # columns per chunk (a multiple of 2 * lanes)
    k_pitch: int            # PMU row pitch of a chunk (power of two)
    col_tiles: int
    passes: int
    buffers: int            # PMU buffers of a panel

    @property
    def k_pad(self):
        return self.chunks * self.chunk

    @property
    def rows_per_pass(self):
        return self.pcus * self.lanes

    @property
    def m_pad(self):
        return self.passes * self.rows_per_pass

    @property
    def n_pad(self):
        return self.col_tiles * self.lanes

    @property
    def panel_words(self):
        return self.lanes * self.k_pitch

    @property
    def macs(self):
        return self.m * self.n * self.k

    def describe(self):
        split = (f", K in {self.chunks} chunks of {self.chunk} re-read per column tile"
                 if self.chunks > 1 else "")
        return (f"matmul {self.m}x{self.n}x{self.k}: {self.pcus} systolic PCUs"
                f"{f' + {self.epilogue_pcus} epilogue' if self.epilogue_pcus else ''}, "
                f"{self.passes} passes of {self.rows_per_pass} rows, {self.col_tiles} column "
                f"tiles, K padded to {self.k_pad} (pitch {self.k_pitch}, {self.buffers} "
                f"buffers{split}), {self.stores} store streams")


def tile_matmul(group, geometry, max_pcus=None, agcus=2):
    """The tiling of ``group`` on ``geometry`` with at most ``max_pcus`` systolic PCUs."""
    lanes = geometry.lanes
    capacity = geometry.capacity()
    epilogue = bool(group.epilogue)
    m, n, k = group.m, group.n, group.k
    k_total = k + (1 if group.bias is not None else 0)
    if capacity["pcu"] == 0 or capacity["pmu"] == 0:
        raise CompileError(f"a matmul needs at least one PCU and one PMU; the "
                           f"{geometry.rows}x{geometry.cols} array has {capacity['pcu']} "
                           f"PCUs and {capacity['pmu']} PMUs")
    stores = min(2, agcus)
    free_pcus = capacity["pcu"]
    if epilogue:
        stores = min(stores, max(1, (free_pcus - 1)))
        free_pcus -= stores
        if free_pcus < 1:
            raise CompileError(f"a matmul with an epilogue needs at least 2 PCUs; the "
                               f"{geometry.rows}x{geometry.cols} array has "
                               f"{capacity['pcu']}")
    pcus = min(free_pcus, capacity["pmu"], _ceil(m, lanes))
    if max_pcus is not None:
        pcus = min(pcus, max_pcus)
    stores = min(stores, pcus)

    pmu_words = geometry.pmu_words
    beat = 2 * lanes                                    # BF16 values per AXI beat
    k_pad = _ceil(k_total, beat) * beat
    k_pitch = max(lanes, _pow2_at_least(k_pad))
    if lanes * k_pitch <= pmu_words:
        chunks, chunk = 1, k_pad
        buffers = 2 if 2 * lanes * k_pitch <= pmu_words else 1
    else:
        # K chunks, double buffered: a chunk of `lanes` rows at a power-of-two pitch
        k_pitch = pmu_words // (2 * lanes)
        if k_pitch < beat:
            raise CompileError(f"a PMU of {pmu_words} words cannot double-buffer a "
                               f"{lanes}-row chunk of {beat} columns")
        chunks = _ceil(k_pad, k_pitch)
        chunk = _ceil(_ceil(k_pad, chunks), beat) * beat
        buffers = 2
    k_pad = chunks * chunk
    col_tiles = _ceil(n, lanes)
    if chunks > 1:
        # the A stream of a pass is one run of beats (16-bit count): fewer rows per pass
        # when K is long
        rows_limit = COUNT_LIMIT * beat // k_pad
        pcus = max(1, min(pcus, rows_limit // lanes))
    passes = _ceil(m, pcus * lanes)
    for what, value in (("padded K", k_pad), ("column tiles", col_tiles),
                        ("passes", passes)):
        if value > COUNT_LIMIT:
            raise CompileError(f"matmul {m}x{n}x{k}: {what} = {value} exceeds the "
                               f"16-bit loop counters by {value - COUNT_LIMIT}")
    if chunks > 1 and passes * col_tiles * chunks > COUNT_LIMIT:
        raise CompileError(f"matmul {m}x{n}x{k}: {passes * col_tiles * chunks} PMU buffer "
                           f"passes exceed the 16-bit pass counter")
    return MatmulTiling(m, n, k, k_total, lanes, pcus, stores if epilogue else 0, stores,
                        chunks, chunk, k_pitch, col_tiles, passes, buffers)


@dataclass(frozen=True)
class RowTiling:
    """A row group streamed row by row: ``rows`` rows of ``length`` values, each row
    ``beats`` vector beats; row buffers of ``buffers`` rows in the PMUs."""
    rows: int
    length: int
    lanes: int
    buffers: int

    @property
    def beats(self):
        return self.length // self.lanes

    def describe(self):
        return (f"rows: {self.rows} rows of {self.length} ({self.beats} beats each), row "
                f"buffers of {self.buffers} rows")


def tile_rows(group, geometry):
    """The tiling of a :class:`~rdu.compiler.fuse.RowGroup`."""
    lanes = geometry.lanes
    rows, length = group.rows, group.length
    if length % (2 * lanes):
        raise CompileError(f"{group.x.where}: rows of {length} values: a row-wise kernel "
                           f"streams whole AXI beats, rows must be a multiple of "
                           f"{2 * lanes} values")
    if length > geometry.pmu_words:
        raise CompileError(f"{group.x.where}: a row of {length} values does not fit a PMU "
                           f"({geometry.pmu_words} words, {length - geometry.pmu_words} "
                           f"over)")
    if rows > COUNT_LIMIT or length // lanes > COUNT_LIMIT:
        raise CompileError(f"{group.x.where}: {rows} rows of {length // lanes} beats exceed "
                           f"the 16-bit loop counters")
    buffers = max(1, min(4, geometry.pmu_words // length))
    return RowTiling(rows, length, lanes, buffers)


def tile_attention(group, geometry, machine):
    """The :class:`rdu.attention.AttentionShape` of an attention group on ``geometry``:
    chunks of :data:`ATTENTION_CHUNK` keys (fewer for a short sequence), whole AXI beats
    of BF16 keys; refuses what the chain cannot hold."""
    from hdl.pcu_config import ACC_DEPTH

    from ..attention import AttentionError, AttentionShape
    lanes = geometry.lanes
    heads, rows, dim = group.q.shape
    kv_heads, seq, _ = group.k.shape
    step = 2 * lanes
    chunk = min(max(step, ATTENTION_CHUNK // step * step), _ceil(seq, step) * step)
    try:
        shape = AttentionShape("decode" if rows == 1 and not group.causal else "prefill",
                               seq, dim, heads, kv_heads, lanes, chunk, group.scale,
                               group.causal)
    except AttentionError as error:
        raise CompileError(f"{group.node.where}: {error}") from None
    where = group.node.where
    if machine.agcus < 3:
        raise CompileError(f"{where}: attention streams Q, K and V from HBM on three AGCUs; "
                           f"the machine has {machine.agcus} (--agcus 3)")
    if shape.dim_pad > ACC_DEPTH:          # (a chunk, at most ATTENTION_CHUNK, fits)
        raise CompileError(f"{where}: attention: head dimension {dim} (padded to "
                           f"{shape.dim_pad}) over the PCU accumulator's {ACC_DEPTH} words")
    need = max(2 * shape.dim_k * lanes, 2 * chunk * lanes)
    if need > geometry.pmu_words:
        raise CompileError(f"{where}: attention needs {need} words per PMU, the PMUs hold "
                           f"{geometry.pmu_words}")
    beats = max(shape.seq_pad * shape.dim_k, shape.seq_pad * shape.dim_pad) // step
    passes = len(shape.passes())
    for what, count in (("key blocks", shape.seq_pad // lanes),
                        ("beats of K or V per pass", beats),
                        ("tiles of P V per pass", shape.chunks * shape.dim_pad // lanes),
                        ("passes", passes)):
        if count > COUNT_LIMIT:
            raise CompileError(f"{where}: attention: {count} {what}, the units count to "
                               f"{COUNT_LIMIT}")
    return shape


@dataclass(frozen=True)
class MlpTiling:
    """Two matmuls on one systolic PCU each (one row block of ``lanes`` rows), the
    activation chain between them."""
    first: MatmulTiling
    second: MatmulTiling

    @property
    def macs(self):
        return self.first.macs + self.second.macs

    def describe(self):
        return f"mlp: {self.first.describe()}; then {self.second.describe()}"


def tile_mlp(group, geometry, machine):
    """The :class:`MlpTiling` of a :class:`~rdu.compiler.fuse.MlpGroup`: both matmuls
    keep their whole K in a PMU panel, the hidden rows are one row block."""
    lanes = geometry.lanes
    where = f"output {group.output!r}"
    if machine.agcus < 3:
        raise CompileError(f"{where}: a fused MLP loads A, W1 and W2 at once: it needs 3 "
                           f"AGCUs, the machine has {machine.agcus} (--agcus)")
    m, f = group.first.m, group.first.n
    if m > lanes:
        raise CompileError(f"{where}: a fused MLP keeps its {m} rows in one block of "
                           f"{lanes} (one systolic PCU per matmul): at most {lanes} rows")
    if f % (2 * lanes):
        raise CompileError(f"{where}: the hidden size {f} must be a multiple of "
                           f"{2 * lanes} (the hidden rows fill the second matmul's panel "
                           f"in whole BF16 beats)")
    first = tile_matmul(group.first, geometry, 1, machine.agcus)
    second = tile_matmul(group.second, geometry, 1, machine.agcus)
    for name, t in (("first", first), ("second", second)):
        if t.chunks > 1:
            raise CompileError(f"{where}: the {name} matmul's K ({t.k}) does not fit one "
                               f"PMU panel ({geometry.pmu_words} words for {lanes} rows)")
    return MlpTiling(first, second)


@register("tile", "choose tiles for the array and the PMU size")
def tile(state):
    group, = state.groups
    if group.pattern == "attention":
        state.tiling = tile_attention(group, state.geometry, state.machine)
    elif group.pattern == "matmul":
        state.tiling = tile_matmul(group, state.geometry, state.max_pcus,
                                   state.machine.agcus)
    elif group.pattern == "mlp":
        state.tiling = tile_mlp(group, state.geometry, state.machine)
    else:
        state.tiling = tile_rows(group, state.geometry)
    return state.tiling.describe()

"""The matmul family: ``out = epilogue(a @ b [+ bias])`` on the systolic PCUs.

Fusion rules (each a small function over one node):

* ``matmul``: ``a @ b`` of two BF16 inputs is the core of a :class:`MatmulGroup` (the
  systolic PCUs);
* ``bias``: ``matmul + v`` with ``v`` a BF16 input of shape ``(N,)`` or ``(1, N)`` is
  folded into the matmul: the compiler appends a column of ones to A and the row ``v``
  to B, so the systolic array adds ``v`` as its last accumulation step (the same FP32
  addition a SIMD ADD would do after the sum, exact: ``1 * v = v``);
* ``epilogue``: an element-wise operator of the group's value and a constant (``+ - *
  max min``, ``relu``, ``/ c``) or a cast to BF16 becomes a SIMD stage of the epilogue
  PCUs on the result streams (constants are rounded to FP32).

Tiling: a group ``(M x K) @ (K x N)`` (K counts the folded bias row, if any) runs on
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
* *held B* (a skinny B, one systolic tile of columns: ``N <= group * lanes``, and more
  than one pass): B is the same for every pass, so a PMU keeps it (written once, read
  ``passes`` times, :data:`rdu.units.pmu.READ_REPEAT_LIMIT` at most) instead of HBM
  sending it again per pass, and each PCU reads its A rows on a load of its own. Such a
  matmul is bound by A's stream (a pass takes ``k_pad`` cycles of compute and ``lanes
  x k_pad`` values of A), so the PCUs take one load each, as many as the AGCUs have
  beside B's; y^T = W^T x^T of a decode step (``rdu.apps.onnx_transposed``) then moves
  W once at the HBM rate of its loads.

Lowering, the IR on ``P`` systolic PCUs::

    load_a --multicast--> a_panel0..P-1 (PMU: keep my rows, transpose through the banks)
    a_panel_p ----------> matmul_p.vector_in0              (systolic PCU)
    load_b --multicast--> matmul_0..P-1.vector_in1         (all PCUs in lockstep)
    load_b.control_out -> every PCU's control_in           (the launch token)
    matmul_p --merge----> [epilogue_g (SIMD PCU) ->] store_g   (even / odd p)

With held B: ``load_a_p -> a_panel_p`` (the row block of ``matmul_p``) and ``load_b ->
b_held (PMU) --multicast--> matmul_0..P-1.vector_in1``.

*Row groups* (``fp_latency`` on and one column tile, ``N <= lanes``: a decode step's
``y^T = W^T x^T``): a systolic tile of ``group`` column tiles would pad B's one to
``group`` and take a beat of A per ``group`` cycles, so each PCU takes ``group`` row
tiles a pass instead (``Mode.SYSTOLIC_ROWS``, ``row_group``), ``load_a_p ->
matmul_p.vector_in0`` with A laid out by row group, K-major, block by block (no panel),
B's column tile as it is (held in a PMU for several passes), the results merged
``group * lanes`` rows at a turn; the PCUs as many as the loads allow, padding the
fewest row groups (:func:`_row_grouped`).

The A panel's write pattern is the A stream's order, its read pattern the columns of
each tile. When no placement routes, the driver tiles again with one systolic PCU fewer
(:meth:`MatmulFamily.fewer_pcus`).
"""

import math
from dataclasses import dataclass, field

from hdl import defaults
from hdl.fp_latency import systolic_group

from ...frontend.graph import ELEMENTWISE, Node
from ...ir import AccessPattern, BlockOffset, Kernel
from ...layout import Image, Piece
from ...models import reference
from ...units.pmu import READ_REPEAT_LIMIT
from ..core import CompileError
from ..group import Group, Lowered
from ..lower import BF16, COUNT_LIMIT, WORD, ceil_div, check_layout, f32_word, place_images
from .base import Family, is_bf16_input, moved_work, pcu_programs, tensor_shape, unsupported

__all__ = ["MatmulGroup", "MatmulTiling", "MatmulFamily", "MATMUL", "tile_matmul", "hbm_loads",
           "matmul_images", "lower_matmul", "matmul_group", "epilogue_step",
           "transposed_a_image"]


def hbm_loads(machine):
    """BF16 operand loads that together stream at ``machine``'s HBM peak: a load brings
    ``lanes`` values (``2 lanes`` bytes) a cycle, as much as one systolic PCU takes
    (``docs/agcu.md``, ``docs/pcu.md``); 2 on the default machine."""
    return max(1, ceil_div(int(machine.hbm_bytes_per_cycle), machine.lanes * BF16))


def _pow2_at_least(value):
    return 1 << max(0, (value - 1).bit_length())


@dataclass
class MatmulGroup(Group):
    """``out = epilogue(a @ b [+ bias])``, one configuration."""
    a: Node                       # frontend.Node: input (M, K) BF16
    b: Node                       # frontend.Node: input (K, N) BF16
    bias: Node | None = None             # frontend.Node: input (N,) or (1, N) BF16, or None
    epilogue: list = field(default_factory=list)    # SIMD stages (op, a, b, c, constant)
    output: str = ""
    out_dtype: str = "fp32"
    nodes: list = field(default_factory=list)        # the frontend nodes covered

    @property
    def m(self):
        return self.a.shape[0]

    @property
    def k(self):
        return self.a.shape[1]

    @property
    def n(self):
        return self.b.shape[1]

    def describe(self):
        parts = [f"matmul {self.a.name}{list(self.a.shape)} @ {self.b.name}"
                 f"{list(self.b.shape)}"]
        if self.bias is not None:
            parts.append(f"+ {self.bias.name} (folded into K)")
        parts += [f"-> {op}({a}, {b}{', ' + hex(c) if 'CONST' in (a, b) else ''})"
                  for op, a, b, _, c in self.epilogue]
        return f"group {self.output}: " + " ".join(parts)


def epilogue_step(node, chain):
    """The SIMD stage of ``node`` applied to ``chain`` (its other operand a constant), or
    None when ``node`` is not an epilogue operator."""
    if node.op == "binary":
        a, b = node.inputs
        fn = ELEMENTWISE[node.attrs["fn"]]
        if a is chain and b.op == "const":
            return (fn, "PREV", "CONST", "PREV", f32_word(b.attrs["value"]))
        if b is chain and a.op == "const":
            return (fn, "CONST", "PREV", "PREV", f32_word(a.attrs["value"]))
    if node.op == "unary" and node.attrs["fn"] == "cast" and node.dtype == "bf16":
        return ("TO_BF16", "PREV", "PREV", "PREV", 0)
    if node.op == "unary" and node.attrs["fn"] == "cast" and node.dtype == "fp32":
        return ()           # a cast to FP32 of an FP32 value: nothing to do
    return None


def _match_matmul(graph, name, out):
    """Walk back from output ``out``: epilogue operators, an optional bias, the matmul."""
    steps, covered, node = [], [out], out
    while node.op != "matmul":
        if node.op == "binary" and node.attrs["fn"] == "add":
            # the bias rule: matmul + row vector
            left, right = node.inputs
            for core, vector in ((left, right), (right, left)):
                if core.op == "matmul" and is_bf16_input(vector) and \
                        vector.shape in ((core.shape[1],), (1, core.shape[1])):
                    group = matmul_group(core, name)
                    group.bias = vector
                    group.epilogue = steps
                    group.nodes = covered + [core]
                    return group
        previous = [i for i in node.inputs if i.op != "const"]
        if len(previous) != 1:
            raise unsupported(node, f"output {name!r}: {node.op} "
                               f"{node.attrs.get('fn', '')} of two computed tensors is "
                               f"not fused by this compiler yet (a matmul with a bias and "
                               f"element-wise operators with constants is)")
        step = epilogue_step(node, previous[0])
        if step is None:
            raise unsupported(node, f"output {name!r}: {node.op} "
                               f"{node.attrs.get('fn', '')} is not fused by this compiler "
                               f"yet (supported after a matmul: + - * max min relu with "
                               f"constants, a bias row, casts)")
        if step:
            steps.insert(0, step)
        node = previous[0]
        covered.append(node)
    group = matmul_group(node, name)
    group.epilogue = steps
    group.nodes = covered
    return group


def matmul_group(matmul, name):
    a, b = matmul.inputs
    for operand in (a, b):
        if not is_bf16_input(operand):
            raise unsupported(matmul, f"output {name!r}: matmul operands must be BF16 "
                               f"inputs (got {operand.op} {operand.dtype}); a matmul of "
                               f"computed values is not fused yet")
    return MatmulGroup(a, b, output=name)


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
    col_tiles: int          # a multiple of group
    passes: int
    buffers: int            # PMU buffers of a panel
    group: int = 1          # column tiles per systolic tile (hdl.fp_latency.systolic_group)
    held_b: bool = False    # B kept in a PMU for every pass, A on a load per PCU
    split: int = 1          # PCUs sharing one row block's panel, each its column groups
    row_group: int = 1      # row tiles per systolic tile (Mode.SYSTOLIC_ROWS: one column
                            # tile of B held, A streamed on a load per PCU, no panel)

    @property
    def pcu_groups(self):
        """Systolic tiles per pass of each PCU: its share of the column groups."""
        return self.col_groups // self.split

    @property
    def pcu_tiles(self):
        """Column tiles per pass of each PCU."""
        return self.col_tiles // self.split

    @property
    def col_groups(self):
        """Systolic tiles per pass and PCU: ``group`` column tiles each."""
        return self.col_tiles // self.group

    @property
    def k_pad(self):
        return self.chunks * self.chunk

    @property
    def rows_per_pass(self):
        return self.pcus // self.split * self.lanes * self.row_group

    @property
    def block_rows(self):
        """Rows of the output each PCU drains a pass (a systolic tile's, row-grouped)."""
        return self.lanes * self.row_group

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
        head = (f"matmul {self.m}x{self.n}x{self.k}: {self.pcus} systolic PCUs"
                f"{f' + {self.epilogue_pcus} epilogue' if self.epilogue_pcus else ''}, "
                f"{self.passes} passes of {self.rows_per_pass} rows")
        if self.row_group > 1:
            return (f"{head} in groups of {self.row_group} row tiles, A on a load per PCU, "
                    f"one column tile of B{' held in a PMU' if self.held_b else ''}, K "
                    f"padded to {self.k_pad}, {self.stores} store streams")
        split = (f", K in {self.chunks} chunks of {self.chunk} re-read per column tile"
                 if self.chunks > 1 else "")
        return (f"{head}, {self.col_tiles} column "
                f"tiles{f' in groups of {self.group}' if self.group > 1 else ''}, K padded "
                f"to {self.k_pad} (pitch {self.k_pitch}, {self.buffers} "
                f"buffers{split}), {self.stores} store streams"
                f"{', B held in a PMU, A on a load per PCU' if self.held_b else ''}"
                f"{', column groups split, B on a load per PCU' if self.split > 1 else ''}")


def tile_matmul(group, geometry, max_pcus=None, agcus=defaults.AGCUS, tile_group=1,
                hbm_loads=None, own_loads=True, k_multiple=1):
    """The tiling of ``group`` on ``geometry`` with at most ``max_pcus`` systolic PCUs;
    ``tile_group``: column tiles per systolic tile (the PCUs'
    :func:`hdl.fp_latency.systolic_group`: more than 1 with ``fp_latency``);
    ``k_multiple``: K padded to a multiple of it too (the MLP's second matmul, whose K is
    the first's column tiles; with K in one PMU panel);
    ``hbm_loads``: the most operand loads worth running at once with held B or split
    (the HBM's bytes a cycle over a load's; None: as many as the AGCUs allow);
    ``own_loads`` False: neither (a family with a lowering of its own, the MLP's)."""
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
    pcus = min(free_pcus, capacity["pmu"], ceil_div(m, lanes))
    if max_pcus is not None:
        pcus = min(pcus, max_pcus)
    store_slots, stores = stores, min(stores, pcus)

    pmu_words = geometry.pmu_words
    beat = 2 * lanes                                    # BF16 values per AXI beat
    step = math.lcm(beat, k_multiple)
    k_pad = ceil_div(k_total, step) * step
    loads = agcus if hbm_loads is None else min(agcus, hbm_loads + 1)
    if tile_group > 1 and own_loads and ceil_div(n, lanes) == 1:
        return _row_grouped(group, lanes, k_total, k_pad, tile_group, min(pcus, free_pcus),
                            capacity, pmu_words, loads, stores if epilogue else 0, stores)
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
        chunks = ceil_div(k_pad, k_pitch)
        chunk = ceil_div(ceil_div(k_pad, chunks), beat) * beat
        buffers = 2
    k_pad = chunks * chunk
    col_tiles = ceil_div(n, lanes * tile_group) * tile_group
    if chunks > 1:
        # the A stream of a pass is one run of beats (16-bit count): fewer rows per pass
        # when K is long
        rows_limit = COUNT_LIMIT * beat // k_pad
        pcus = max(1, min(pcus, rows_limit // lanes))
    held = own_loads and _held_b_pcus(m, k_pad, col_tiles, tile_group, chunks, pcus,
                                      capacity, pmu_words, loads, lanes)
    held_b = bool(held)
    if held_b:
        pcus = held
        stores = min(stores, pcus)
    passes = ceil_div(m, pcus * lanes)
    split = 1 if not own_loads else _column_split(
        m, lanes, col_tiles // tile_group, chunks,
        min(free_pcus, max_pcus or free_pcus, loads - 1, store_slots))
    if split > 1:
        pcus = stores = split
    _check_counts(group, (("padded K", k_pad), ("column tiles", col_tiles),
                          ("passes", passes), ("B beats per tile", k_pad * tile_group // 2)))
    col_groups = col_tiles // tile_group
    if chunks > 1 and passes * col_groups * chunks > COUNT_LIMIT:
        raise CompileError(f"matmul {m}x{n}x{k}: {passes * col_groups * chunks} PMU buffer "
                           f"passes exceed the 16-bit pass counter")
    return MatmulTiling(m, n, k, k_total, lanes, pcus, stores if epilogue else 0, stores,
                        chunks, chunk, k_pitch, col_tiles, passes, buffers, tile_group,
                        held_b, split)


def _check_counts(group, counts):
    """A one-line error when one of ``counts`` (``(what, value)``) passes the units'
    16-bit loop counters."""
    for what, value in counts:
        if value > COUNT_LIMIT:
            raise CompileError(f"matmul {group.m}x{group.n}x{group.k}: {what} = {value} "
                               f"exceeds the 16-bit loop counters by {value - COUNT_LIMIT}")


def _row_grouped(group, lanes, k_total, k_pad, row_group, pcus, capacity, pmu_words, loads,
                 epilogue_pcus, stores):
    """The tiling of a product with one column tile (``N <= lanes``) on systolic tiles
    of ``row_group`` blocks (``fp_latency`` on): each PCU takes ``row_group`` row tiles a
    pass (``Mode.SYSTOLIC_ROWS``), its A straight from a load of its own (A laid out by
    row group, K-major, block by block: a vector beat per cycle, no panel), B's one
    column tile held beside it, from a PMU when it fits and there is more than one
    pass. So a skinny product (a decode step's ``y^T = W^T x^T``) streams its A at a
    load's rate, as held B does with the parameter off, instead of ``1 / row_group`` of
    it with ``row_group`` column tiles of which one is B's. ``loads``: the operand loads
    worth running at once (B's and one per PCU); of the PCU counts that allows, the one
    padding the fewest row groups (the padding is streamed), then the most."""
    tile_rows = lanes * row_group
    groups = ceil_div(group.m, tile_rows)
    most = max(1, min(pcus, loads - 1, groups))
    pcus = min(range(1, most + 1), key=lambda p: (ceil_div(groups, p) * p, -p))
    passes = ceil_div(groups, pcus)
    held_b = passes > 1 and k_pad * lanes <= pmu_words and capacity["pmu"] >= 1 and \
        passes <= READ_REPEAT_LIMIT
    _check_counts(group, (("padded K", k_pad), ("passes", passes),
                          ("A beats per pass and PCU", tile_rows * k_pad // (2 * lanes))))
    return MatmulTiling(group.m, group.n, group.k, k_total, lanes, pcus, epilogue_pcus,
                        min(stores, pcus), chunks=1, chunk=k_pad, k_pitch=lanes, col_tiles=1,
                        passes=passes, buffers=1, held_b=held_b, row_group=row_group)


def _column_split(m, lanes, col_groups, chunks, most):
    """PCUs (``split``, 1: none) sharing one row block's A panel (``m <= lanes``, K in
    one panel), each computing an equal share of the column groups from a load of B of
    its own: one B load is 16 bytes a cycle, so a single-row-block matmul (a decode
    step's product by a weight) streams its weights on ``most`` loads at once."""
    if m > lanes or chunks != 1:
        return 1
    return max((p for p in range(1, most + 1) if col_groups % p == 0), default=1)


def _held_b_pcus(m, k_pad, col_tiles, tile_group, chunks, pcus, capacity, pmu_words, agcus,
                 lanes):
    """The PCUs of held B (module docstring; 0: B not held): one systolic tile of
    columns, K in one panel, B in one PMU, more than one pass without it (B read again),
    a PMU and a load beside the PCUs', at most :data:`READ_REPEAT_LIMIT` passes with the
    PCUs left."""
    if col_tiles != tile_group or chunks != 1 or k_pad * col_tiles * lanes > pmu_words or \
            ceil_div(m, pcus * lanes) == 1:
        return 0
    pcus = min(pcus, capacity["pmu"] - 1, agcus - 1)
    return pcus if pcus >= 1 and ceil_div(m, pcus * lanes) <= READ_REPEAT_LIMIT else 0


def matmul_images(group, t):
    """The tensor images of the group: A (+ the ones column of a folded bias), B (+ the
    bias row), the output."""
    a_pieces = [Piece(group.a.name, (0, 0), (t.m, t.k))]
    b_pieces = [Piece(group.b.name, (0, 0), (t.k, t.n))]
    if group.bias is not None:
        a_pieces.append(Piece(None, (0, t.k), (t.m, 1), 1.0))
        b_pieces.append(Piece(group.bias.name, (t.k, 0), (1, t.n)))
    if t.chunks > 1:
        a_split = ((t.passes, t.rows_per_pass, t.chunks, t.chunk), (0, 2, 1, 3))
    elif t.row_group > 1:
        # by row group, K-major, block by block: a systolic tile's k step of A in a row
        a_split = ((t.m_pad // t.block_rows, t.row_group, t.lanes, t.k_pad), (0, 3, 1, 2))
    else:
        a_split = (None, None)
    return {
        group.a.name: Image((t.m_pad, t.k_pad), tuple(a_pieces), *a_split, "bf16"),
        # B by groups of column tiles: row k of a group's group * lanes columns is
        # contiguous (a systolic tile's k step)
        group.b.name: Image((t.k_pad, t.n_pad), tuple(b_pieces),
                            (t.k_pad, t.col_groups, t.group * t.lanes), (1, 0, 2), "bf16"),
        group.output: Image((t.m_pad, t.n_pad), (Piece(group.output, (0, 0), (t.m, t.n)),),
                            (t.m_pad, t.col_tiles, t.lanes), (1, 0, 2),
                            "bf16" if group.out_dtype == "bf16" else "fp32"),
    }


def transposed_a_image(name, m_pad, k_pad, lanes):
    """A ``(m_pad, k_pad)`` stored as ``A^T`` in column tiles of ``lanes`` rows of A
    (tile by tile, K-major within a tile: the layout of a matmul's B or result of ``lanes``
    columns), BF16: what a matmul reads as its A when ``plan`` asks for it (a producer
    that computed ``A^T``)."""
    return Image((m_pad, k_pad), (Piece(name, (0, 0), (m_pad, k_pad)),),
                 (m_pad // lanes, lanes, k_pad), (0, 2, 1), "bf16")


def _a_transposed(name, group, t, plan):
    """Whether ``plan`` asks for A as :func:`transposed_a_image`; a one-line error when
    this tiling cannot read it so."""
    wanted = plan.layout(group.a.name) if plan else None
    if wanted is None or wanted.split is None or len(wanted.split) != 3 or \
            tuple(wanted.perm or ()) != (0, 2, 1):
        return False
    if t.chunks > 1 or group.bias is not None:
        what = "a folded bias" if group.bias is not None else f"K in {t.chunks} chunks"
        raise CompileError(f"{name}: A given transposed ({wanted.describe()}) with {what}; "
                           f"supported: K in one PMU panel, no bias")
    return True


def lower_matmul(name, group, t, hbm_size, plan=None):
    """``(kernel, images, addresses, bitstream_address)`` of tiling ``t``; ``plan``
    (:class:`ImagePlan`) may ask for the output row-major (FP32: a consumer that reads
    rows) and for A transposed (:func:`transposed_a_image`: each PMU writes its rows'
    columns, a lane per row), else every image must be the one this lowering
    chooses."""
    lanes, pcus = t.lanes, t.pcus
    images = matmul_images(group, t)
    a_transposed = _a_transposed(name, group, t, plan)
    if a_transposed and t.row_group > 1:
        raise CompileError(f"{name}: A given transposed on systolic tiles of "
                           f"{t.row_group} row tiles (fp_latency on); supported: A as "
                           f"this lowering lays it out")
    if a_transposed:
        a_image = images[group.a.name]
        images[group.a.name] = Image(a_image.shape, a_image.pieces, (t.m_pad // lanes, lanes,
                                                                     t.k_pad), (0, 2, 1), "bf16")
    c_image = images[group.output]
    wanted = plan.layout(group.output) if plan else None
    row_major = wanted is not None and wanted.split is None
    if row_major:
        if group.out_dtype == "bf16":
            raise CompileError(f"{name}: a BF16 matmul result is written by column tiles "
                               f"(two rows per beat), not row-major")
        images[group.output] = c_image = Image(c_image.shape, c_image.pieces, None, None,
                                               c_image.format)
    for image_name, image in images.items():
        if not (row_major and image_name == group.output):
            check_layout(name, plan, image_name, image)
    addresses, bitstream_address = place_images(name, images, hbm_size, plan)
    a_name, b_name, c_name = group.a.name, group.b.name, group.output
    kernel = Kernel(name)
    tensors = {image_name: kernel.tensor(image_name, image.shape, image.format)
               for image_name, image in images.items()}
    a_streams, panel_config = _a_side(kernel, tensors[a_name], addresses[a_name], t,
                                      a_transposed)
    b_streams, launch = _b_side(kernel, tensors[b_name], addresses[b_name], t)
    results, panels = [], []
    grouped = ({"group": t.row_group, "group_rows": True} if t.row_group > 1 else
               {"group": t.group} if t.group > 1 else {})
    for p in range(pcus):
        if t.row_group > 1:         # A straight from its load
            panels.append(a_streams[p])
        elif p < len(a_streams):    # a panel per row block (one, read by all, if split)
            panels.append(kernel.buffer(f"a_panel{p}", t.panel_words, [a_streams[p]],
                                        buffers=t.buffers, block_of=f"matmul{p}",
                                        config=panel_config))
        result = kernel.compute(f"matmul{p}", "matmul", [panels[p % len(panels)],
                                                         b_streams[p % len(b_streams)]],
                                config={"mode": "systolic",
                                        "trips": (t.k_pad, t.pcu_groups, t.passes),
                                        **grouped})
        kernel.connect(launch, kernel.nodes[f"matmul{p}"], "control_in")
        results.append(result)
    kernel.row_groups = []
    for g in range(t.stores):
        members = results[g::t.stores]
        stream = members[0] if len(members) == 1 else kernel.merge(
            f"c_rows{g}", members, [t.block_rows] * len(members))
        if t.epilogue_pcus:
            stream = kernel.compute(f"epilogue{g}", "map", [stream], config={
                "mode": "simd", "trips": (len(members) * t.block_rows, t.pcu_tiles,
                                          t.passes),
                "stages": list(group.epilogue), "emit_every": True, "vector_out": True})
            kernel.connect(launch, kernel.nodes[f"epilogue{g}"], "control_in")
        kernel.store(stream, tensors[c_name], _store_pattern(t, addresses[c_name], len(members),
                                                             group.out_dtype, row_major),
                     name=f"store_c{g}",
                     block_of=f"c_rows{g}" if len(members) > 1 else members[0].source.node,
                     config={"bf16": group.out_dtype == "bf16"})
        kernel.row_groups.append([s.source.node for s in members])
    return kernel, images, addresses, bitstream_address


def _store_pattern(t, address, members, out_dtype, row_major):
    """The store of ``members`` PCUs' results (one row block each, merged), its start a
    :class:`BlockOffset` of the first's row block; with ``split``, of its column tiles."""
    lanes, beat = t.lanes, t.lanes * WORD
    rows = t.rows_per_pass
    # C by column tile: a row of a tile is a vector beat (FP32) or half a beat (BF16, the
    # AGCU packs two rows into one AXI beat)
    row = lanes * (BF16 if out_dtype == "bf16" else WORD)
    block = t.block_rows                # rows a PCU drains per column tile and pass
    if row_major:
        # a tile's row is one beat of C's row: rows t.n_pad * 4 bytes apart
        pitch = t.n_pad * WORD
        step = t.pcu_tiles * beat if t.split > 1 else block * pitch
        return AccessPattern(BlockOffset(address, step), (members * block, t.pcu_tiles,
                                                          t.passes), (pitch, beat, rows * pitch))
    step = t.pcu_tiles * t.m_pad * row if t.split > 1 else block * row
    return AccessPattern(BlockOffset(address, step), (members * block * row // beat,
                                                      t.pcu_tiles, t.passes),
                         (beat, t.m_pad * row, rows * row))


def _a_side(kernel, tensor, address, t, transposed):
    """``(streams, panel configuration)``: the loads of A and the panels' configuration
    (each keeps the rows of its PCU's row block: :class:`BlockOffset` s). One load
    carries every row block of a pass, multicast to the panels (one panel with split);
    with held B each PCU's load carries its own block (its start the block's rows, as
    its panel's predicate)."""
    lanes, rows = t.lanes, t.rows_per_pass
    beat, row_bytes = lanes * WORD, t.k_pad * BF16
    if t.row_group > 1:
        # each PCU's row group a pass, laid out as its A stream (matmul_images)
        group_bytes = t.block_rows * row_bytes
        pattern = AccessPattern(BlockOffset(address, group_bytes),
                                (group_bytes // beat, t.passes, 1), (beat, rows * row_bytes, 0))
        return [kernel.load(tensor, pattern, name=f"load_a{p}", config={"bf16": True},
                            block_of=f"matmul{p}") for p in range(t.pcus)], None
    blocks = 1 if t.held_b else t.pcus // t.split        # row blocks a load carries
    own = blocks * lanes
    start = BlockOffset(address, lanes * row_bytes) if t.held_b else address
    first = BlockOffset(0, t.panel_words) if t.held_b else 0
    write_lanes = 1
    read = AccessPattern(BlockOffset(0, t.panel_words), (t.k_pad, t.pcu_groups, 1), (1, 0, 0))
    read_passes = t.passes
    if transposed:
        # a pass's tiles in one run; tile p's vector k is column k of its lanes rows
        pattern = AccessPattern(start, (own * t.k_pad // (2 * lanes), t.passes, 1),
                                (beat, rows * row_bytes, 0))
        write = AccessPattern(first, (t.k_pad, blocks, 1), (1, t.panel_words, 0))
        write_lanes = t.k_pitch
    elif t.chunks == 1:
        # the pass's rows once; each PMU keeps its panel for every column tile
        pattern = AccessPattern(start, (t.k_pad // (2 * lanes), own, t.passes),
                                (beat, row_bytes, rows * row_bytes))
        write = AccessPattern(first, (t.k_pad // lanes, own, 1), (lanes, t.k_pitch, 0))
    else:
        # chunk-major A: the pass's chunks again for every systolic tile (never held B)
        pattern = AccessPattern(address, (rows * t.k_pad // (2 * lanes), t.col_groups,
                                          t.passes), (beat, 0, rows * row_bytes))
        write = AccessPattern(0, (t.chunk // lanes, rows, 1), (lanes, t.k_pitch, 0))
        read = AccessPattern(BlockOffset(0, t.panel_words), (t.chunk, 1, 1), (1, 0, 0))
        read_passes = t.passes * t.col_groups * t.chunks
    if t.held_b:
        streams = [kernel.load(tensor, pattern, name=f"load_a{p}", config={"bf16": True},
                               block_of=f"matmul{p}") for p in range(t.pcus)]
    else:
        streams = [kernel.load(tensor, pattern, name="load_a",
                               config={"bf16": True})] * blocks
    return streams, {
        "write": write, "write_lanes": write_lanes, "read": read, "read_lanes": t.k_pitch,
        "buffers": t.buffers, "buffer_words": t.panel_words, "read_repeat": 1,
        "read_passes": read_passes, "skew_shift": t.k_pitch.bit_length() - 1,
        "predicate": (BlockOffset(0, t.panel_words),
                      BlockOffset(t.panel_words, t.panel_words))}


def _b_side(kernel, tensor, address, t):
    """``(streams, launch token)``: B multicast to every PCU (through a PMU when held),
    or with ``split`` a load per PCU of its column groups (the block ``bind`` gives
    it)."""
    lanes, beat = t.lanes, t.lanes * WORD
    group_bytes = t.k_pad * t.group * lanes * BF16        # one systolic tile's columns
    counts = (t.k_pad * t.group // 2, t.pcu_groups, 1 if t.held_b else t.passes)
    if t.split > 1:
        streams = [kernel.load(tensor, AccessPattern(
            BlockOffset(address, t.pcu_groups * group_bytes), counts, (beat, group_bytes, 0)),
            name=f"load_b{p}", config={"bf16": True}, block_of=f"matmul{p}")
            for p in range(t.split)]
        return streams, kernel.output(kernel.nodes["load_b0"], "control_out")
    stream = kernel.load(tensor, AccessPattern(address, counts, (beat, group_bytes, 0)),
                         name="load_b", config={"bf16": True})
    launch = kernel.output(kernel.nodes["load_b"], "control_out")
    return [_held_b(kernel, stream, t) if t.held_b else stream], launch


def _held_b(kernel, stream, t):
    """The PMU keeping B (``k_pad`` beats of each of the group's column tiles, in the
    stream's order): written once, read once per pass, then released."""
    beats = t.k_pad * t.col_tiles
    order = AccessPattern(0, (beats, 1, 1), (t.lanes, 0, 0))
    return kernel.buffer("b_held", beats * t.lanes, [stream], buffers=1, config={
        "write": order, "write_lanes": 1, "read": order, "read_lanes": 1, "buffers": 1,
        "buffer_words": beats * t.lanes, "read_repeat": t.passes, "read_passes": 1})


class MatmulFamily(Family):
    """A matmul with an optional folded bias and an epilogue of SIMD stages."""
    name = "matmul"
    placement_seed = "gemm"
    benchmark = ("gemm", {"m": 64, "n": 64, "k": 64})

    def claims(self, graph):
        return any(node.op == "matmul" for node in graph.live_nodes())

    def fuse(self, graph, name, out):
        group = _match_matmul(graph, name, out)
        group.out_dtype = out.dtype
        return group

    def tile(self, group, state):
        machine = state.machine
        return tile_matmul(group, state.geometry, state.max_pcus, machine.agcus,
                           systolic_group(machine.latency_table), hbm_loads(machine))

    def fewer_pcus(self, tiling):
        return tiling.pcus - 1 if tiling.pcus > 1 else None

    def kernel_name(self, graph_name, group, tiling):
        return f"{graph_name}_{tiling.m}x{tiling.n}x{tiling.k}"

    def lower(self, name, group, tiling, state):
        return Lowered(*lower_matmul(name, group, tiling, state.machine.region("hbm").size,
                                     state.plan))

    def meta(self, group, t, kernel):
        return {
            "group": self.name, "m": t.m, "n": t.n, "k": t.k, "pcus": t.pcus,
            "epilogue_pcus": t.epilogue_pcus, "k_pad": t.k_pad, "m_pad": t.m_pad,
            "n_pad": t.n_pad, "k_pitch": t.k_pitch, "chunks": t.chunks, "chunk": t.chunk,
            "passes": t.passes, "col_tiles": t.col_tiles, "buffers": t.buffers,
            "tile_group": t.group, "held_b": t.held_b, "split": t.split,
            "row_group": t.row_group,
            "operands": [group.a.name, group.b.name],
            "bias": group.bias.name if group.bias is not None else None,
            "epilogue": [list(step) for step in group.epilogue], "macs": t.macs,
            "pcu_programs": pcu_programs(kernel)}

    def exact(self, program, graph):
        return reference.exact_matmul(program, graph)

    def work(self, program):
        """``M N K`` MACs (A ``M x K``, B ``K x N``; a folded bias is an addition, not
        a MAC); A, B and the bias read, the output written."""
        a, b = program.meta["operands"]
        (m, k), n = tensor_shape(program, a), tensor_shape(program, b)[1]
        return moved_work(program, [a, b, program.meta["bias"]], m * n * k)


#: The matmul family (registered in :data:`rdu.compiler.families.FAMILIES`).
MATMUL = MatmulFamily()
MatmulGroup.family = MATMUL

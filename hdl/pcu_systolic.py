"""The PCU's systolic body: a lanes x lanes output-stationary BF16 x BF16 -> FP32 array,
and the ALU a PCU with ``shared_units`` shares between its SIMD stages and that array."""

from amaranth import Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .fp import FPALU, FPALU_SIGNATURE, MAC_SIGNATURE, BF16MultiplyAccumulate, Op
from .interfaces import control_stream, vector_stream
from .pcu_counters import chain_status_layout

__all__ = ["SystolicArray", "SharedALU", "skew", "skewed_edges", "pe_inputs"]


def skew(array, domain, enable, value, cycles, name):
    """``value`` delayed by ``cycles`` registers of ``domain`` (taken while ``enable``):
    one cycle per row (A) or column (B) of the array."""
    for n in range(cycles):
        stage = Signal.like(value, name=f"{name}_d{n + 1}")
        with array.If(enable):
            array.d[domain] += stage.eq(value)
        value = stage
    return value


def skewed_edges(array, domain, enable, inject_tag, inject_a, inject_b):
    """The injected tag and words at the array's edges: the tag and A word of row ``i``
    ``i`` cycles late (west), the B word of column ``j`` ``j`` cycles late (north)."""
    lanes = len(inject_a)
    west_tag = [skew(array, domain, enable, inject_tag, row, f"sys_west_tag{row}")
                for row in range(lanes)]
    west_a = [skew(array, domain, enable, inject_a[row], row, f"sys_west_a{row}")
              for row in range(lanes)]
    north_b = [skew(array, domain, enable, inject_b[col], col, f"sys_north_b{col}")
               for col in range(lanes)]
    return west_tag, west_a, north_b


def pe_inputs(array, domain, enable, west_tag, west_a, north_b):
    """The systolic data movement: A words and tags move right one PE per cycle, B words
    down. Yields ``(row, col, name, tag, a, b)`` for every PE (the values it computes on
    this cycle: its west and north neighbours' registers, or the skewed edges)."""
    lanes = len(west_a)
    tag_shape = west_tag[0].shape()
    tag_reg = [[None] * lanes for _ in range(lanes)]
    a_reg = [[None] * lanes for _ in range(lanes)]
    b_reg = [[None] * lanes for _ in range(lanes)]
    for row in range(lanes):
        for col in range(lanes):
            tag_in = west_tag[row] if col == 0 else tag_reg[row][col - 1]
            a_in = west_a[row] if col == 0 else a_reg[row][col - 1]
            b_in = north_b[col] if row == 0 else b_reg[row - 1][col]
            name = f"pe{row}_{col}"
            tag_reg[row][col] = Signal(tag_shape, name=f"{name}_tag")
            a_reg[row][col] = Signal(16, name=f"{name}_a")
            b_reg[row][col] = Signal(16, name=f"{name}_b")
            with array.If(enable):
                array.d[domain] += [tag_reg[row][col].eq(tag_in),
                                    a_reg[row][col].eq(a_in), b_reg[row][col].eq(b_in)]
            yield row, col, name, tag_in, a_in, b_in


class SystolicArray(wiring.Component):
    """Output-stationary ``lanes x lanes`` array, BF16 x BF16 -> FP32, skewed inputs,
    double-buffered accumulators (the drain of tile n overlaps tile n + 1).

    Each iteration of the counter chain (``issue``) takes one beat of ``in0`` (column
    ``k`` of A: the high half of each word is the BF16 value) and one of ``in1`` (row
    ``k`` of B); processing element ``(row, col)`` accumulates ``A[row, k] * B[k, col]``
    over counter 0's iterations. At the end of counter 0 the tile's sums move into the
    shadow registers, and ``vector_out`` drains them a row per beat (row 0 first) while
    the next tile computes; an issue at the end of a tile waits while a tile is still
    draining. ``done`` pushes the run's ``DONE`` token once the run is ``finishing`` and
    the last tile is drained. The protocol and its timing are in ``docs/pcu.md``.

    The data path (injection, skew, PE registers, accumulators, shadows) is a submodule
    of its own whose registers take ``active`` as their enable, in clock domain
    ``domain``, so that with a gated clock nothing of it is evaluated in SIMD mode; the
    drain control is in ``sync``.

    See also: the PCU that holds it (:class:`hdl.pcu.PCU`, ``mode = SYSTOLIC``), the
    processing element (:class:`hdl.fp.BF16MultiplyAccumulate`), the encoder
    ``software/rdu/units/pcu.py``, the functional model (``software/rdu/models/pcu.py``,
    ``PCUModel``), the reference ``rdu.models.pcu_reference.run_systolic`` /
    ``matmul_streams``,
    ``docs/pcu.md``, tests ``tests/test_pcu_components.py`` and ``tests/test_pcu.py``.

    Parameters
    ----------
    lanes : int
        Vector width: the array is ``lanes x lanes``.
    shared_units : bool
        The processing elements compute on ALUs outside (``macs``: :class:`SharedALU`)
        instead of MACs of the array's own.
    domain : str
        Clock domain of the data path (the PCU's gated ``systolic`` domain in
        simulation builds).

    Attributes
    ----------
    active : In(1)
        Systolic mode: the data path's enable; without it the rest is inactive (its
        outputs 0).
    running, finishing : In(1)
        The PCU's run control is in ``RUN`` / ``FINISH``.
    chain : In(chain_status_layout())
        The counter chain's current iteration.
    group_rows : In(1)
        ``Mode.SYSTOLIC_ROWS``: a tile's group spans row blocks of A instead of column
        blocks of B (:class:`hdl.pcu_systolic_pipelined.PipelinedSystolicArray`; this
        array's groups are of one tile, so it ignores it).
    in0, in1 : In(vector_stream(lanes))
    vector_out : Out(vector_stream(lanes))
    control_out : Out(control_stream())
    issue : Out(1)
        A beat pair enters now (the counter chain steps).
    done : Out(1)
        The run's ``DONE`` token enters ``control_out``.
    macs : In(MAC_SIGNATURE).array(lanes, lanes)
        With ``shared_units`` only: the ports of each processing element.
    """

    def __init__(self, lanes, *, shared_units=False, domain="sync"):
        self._lanes, self._shared_units, self._domain = lanes, shared_units, domain
        members = {
            "active": In(1),
            "running": In(1),
            "finishing": In(1),
            "group_rows": In(1),
            "chain": In(chain_status_layout()),
            "in0": In(vector_stream(lanes)),
            "in1": In(vector_stream(lanes)),
            "vector_out": Out(vector_stream(lanes)),
            "control_out": Out(control_stream()),
            "issue": Out(1),
            "done": Out(1),
        }
        if shared_units:
            members["macs"] = In(MAC_SIGNATURE).array(lanes, lanes)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.systolic_array = array = Module()
        pending = Signal(name="sys_pending")      # a tile's results await draining
        row_full = Signal(self._lanes, name="sys_row_full")
        with m.If(self.active):
            m.d.comb += self.issue.eq(self.running & self.in0.valid & self.in1.valid &
                                      (~self.chain.last[0] | ~pending))
            m.d.comb += [self.in0.ready.eq(self.issue), self.in1.ready.eq(self.issue)]
        west_tag, west_a, north_b = self._injection(array)
        shadow = self._grid(m, array, west_tag, west_a, north_b, row_full)
        with m.If(self.active):
            self._drain(m, shadow, row_full, pending)
        return m

    def _injection(self, array):
        """The beats entering the array, delayed by one cycle per row (A) and per
        column (B): the skew. Returns the tags and A words at the west edge of each row
        and the B words at the north edge of each column."""
        lanes, domain, active, issue = self._lanes, self._domain, self.active, self.issue
        tag = data.StructLayout({"valid": 1, "first": 1, "last": 1})
        inject_tag = Signal(tag, name="sys_inject_tag")
        inject_a = Signal(data.ArrayLayout(unsigned(16), lanes), name="sys_inject_a")
        inject_b = Signal(data.ArrayLayout(unsigned(16), lanes), name="sys_inject_b")
        with array.If(active):
            array.d[domain] += [
                inject_tag.valid.eq(issue),
                inject_tag.first.eq(self.chain.first_inner),
                inject_tag.last.eq(self.chain.last[0]),
            ]
        for lane in range(lanes):
            with array.If(active & issue):
                array.d[domain] += [inject_a[lane].eq(self.in0.payload[lane][16:]),
                                    inject_b[lane].eq(self.in1.payload[lane][16:])]

        return skewed_edges(array, domain, active, inject_tag, inject_a, inject_b)

    def _grid(self, m, array, west_tag, west_a, north_b, row_full):
        """The processing elements; returns their shadow registers ``[row][col]``."""
        lanes, domain, active = self._lanes, self._domain, self.active
        shadow = [[Signal(32, name=f"sys_shadow{row}_{col}") for col in range(lanes)]
                  for row in range(lanes)]
        for row, col, name, tag_in, a_in, b_in in pe_inputs(array, domain, active, west_tag,
                                                            west_a, north_b):
            acc = Signal(32, name=f"{name}_acc")
            if self._shared_units:
                mac = self.macs[row][col]
            else:
                # one submodule per PE: Verilog generation then shares one module
                mac = array.submodules[name] = BF16MultiplyAccumulate()
            array.d.comb += [mac.a.eq(a_in), mac.b.eq(b_in), mac.acc.eq(acc),
                             mac.first.eq(tag_in.first)]
            new = mac.result
            with array.If(active & tag_in.valid):
                array.d[domain] += acc.eq(new)
                with array.If(tag_in.last):
                    array.d[domain] += shadow[row][col].eq(new)
            if col == lanes - 1:
                with m.If(active & tag_in.valid & tag_in.last):
                    m.d.sync += row_full[row].eq(1)
        return shadow

    def _drain(self, m, shadow, row_full, pending):
        """Drain the shadow registers a row per beat; the ``DONE`` token after the last."""
        lanes, vec_out, control_out = self._lanes, self.vector_out, self.control_out
        drain_row = Signal(range(lanes), name="sys_drain_row")
        m.d.comb += vec_out.valid.eq(row_full.bit_select(drain_row, 1))
        with m.Switch(drain_row):
            for row in range(lanes):
                with m.Case(row):
                    m.d.comb += vec_out.payload.eq(Cat(*shadow[row]))
        with m.If(vec_out.valid & vec_out.ready):
            m.d.sync += row_full.bit_select(drain_row, 1).eq(0)
            m.d.sync += drain_row.eq(Mux(drain_row == lanes - 1, 0, drain_row + 1))
            with m.If(drain_row == lanes - 1):
                m.d.sync += pending.eq(0)
        with m.If(self.issue & self.chain.last[0]):
            m.d.sync += pending.eq(1)
        m.d.comb += [
            control_out.valid.eq(self.finishing & ~pending),
            control_out.payload.eq(1),
            self.done.eq(self.finishing & ~pending & control_out.ready),
        ]


class SharedALU(wiring.Component):
    """One :class:`hdl.fp.FPALU` of a PCU with ``shared_units``: its operands come from
    a SIMD stage (``stage``) while ``simd`` is high, else from a systolic processing
    element (``pe``: the ports of a :class:`hdl.fp.BF16MultiplyAccumulate`). A PE's
    ``acc + a * b`` is the ALU's ``MADD`` of the BF16 words widened to FP32 (their
    product is exact: the MAC's ``bf16_mul`` is ``fp32_mul`` of them bit for bit,
    ``formal/fp.py``), and ``first``'s ``a * b`` its ``MUL``.

    See also: :class:`hdl.pcu.PCU` (``shared_units``), :class:`SystolicArray` and
    :class:`hdl.pcu_simd.SIMDPipeline` (their ``macs`` / ``alus`` ports), ``docs/pcu.md``
    (Shared functional units), tests ``tests/test_pcu_components.py``.

    Attributes
    ----------
    simd : In(1)
        SIMD mode.
    stage : Out(FPALU_SIGNATURE)
        The SIMD stage's side.
    pe : Out(MAC_SIGNATURE)
        The processing element's side.
    """

    def __init__(self):
        super().__init__({"simd": In(1), "stage": Out(FPALU_SIGNATURE),
                          "pe": Out(MAC_SIGNATURE)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.alu = alu = FPALU()
        simd, stage, pe = self.simd, self.stage, self.pe
        m.d.comb += [
            stage.result.eq(alu.result),
            pe.result.eq(alu.result),
            alu.op.eq(Mux(simd, stage.op, Mux(pe.first, Op.MUL, Op.MADD))),
            alu.a.eq(Mux(simd, stage.a, Cat(Const(0, 16), pe.a))),
            alu.b.eq(Mux(simd, stage.b, Cat(Const(0, 16), pe.b))),
            alu.c.eq(Mux(simd, stage.c, pe.acc)),
        ]
        return m

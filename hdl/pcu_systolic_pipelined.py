"""The PCU's systolic body on the pipelined FP operators (``PCU(fp_latency=...)``).

A processing element (:class:`PipelinedMAC`) multiplies on a :class:`PipelinedBF16Mul` and
accumulates on a :class:`PipelinedFP32Add`: its sum comes back to the adder's input only
``add`` latency cycles after it entered. So each PE keeps ``group`` (the adder's latency,
:func:`hdl.fp_latency.systolic_group`) independent sums in flight, one per *slot*, and the
array (:class:`PipelinedSystolicArray`) feeds them in turn: a tile is ``lanes`` rows by
``group * lanes`` columns, each k step holds the A column for ``group`` cycles while
``vector_in1`` brings row k of each of the ``group`` column blocks of B. With
``group_rows`` (``Mode.SYSTOLIC_ROWS``) the roles turn: a tile is ``group * lanes`` rows
by ``lanes`` columns, ``vector_in0`` brings column k of each of the ``group`` row blocks
of A while the row of B is held. Every sum still adds its products in k order, so the
words are those of the combinational array.
``docs/pcu.md``, "Systolic array on the pipelined operators", has the streams and the
timing.
"""

from amaranth import Cat, Const, Module, Mux, Shape, Signal, Value, unsigned
from amaranth.hdl import DomainRenamer
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .fp_latency import DEFAULT_LATENCY, FPKind, systolic_group
from .fp_pipelined import PipelinedBF16Mul, PipelinedFP32Add
from .pcu_systolic import SystolicArray, pe_inputs, skewed_edges

__all__ = ["PipelinedMAC", "PipelinedSystolicArray", "pe_operands_layout",
           "pe_result_layout"]

#: FP32 -0: ``-0 + p`` is ``p`` bit for bit for every product ``p`` (``+0`` too, and
#: the canonical NaN), so a sum's first step goes through the adder like the others.
NEG_ZERO = 0x80000000


def pe_operands_layout(group):
    """What enters a :class:`PipelinedMAC` each cycle: the BF16 operands, the first and
    last k step of the sum, and the sum's slot."""
    return data.StructLayout({"a": unsigned(16), "b": unsigned(16), "first": unsigned(1),
                              "last": unsigned(1), "slot": Shape.cast(range(group))})


def pe_result_layout(group):
    """What leaves a :class:`PipelinedMAC`: a sum after one more step, its slot, and
    whether that step was the last (the final sum)."""
    return data.StructLayout({"result": unsigned(32), "last": unsigned(1),
                              "slot": Shape.cast(range(group))})


def _delayed(m, value, cycles, name):
    """``value`` ``cycles`` cycles late (registers without reset)."""
    value = Value.cast(value)
    for n in range(cycles):
        stage = Signal(value.shape(), name=f"{name}_d{n + 1}", reset_less=True)
        m.d.sync += stage.eq(value)
        value = stage
    return value


class PipelinedMAC(wiring.Component):
    """A systolic processing element on the pipelined operators: ``group`` sums
    ``acc[slot] = acc[slot] + a * b`` (``a * b`` alone at the ``first`` step), BF16
    operands, FP32 sums, one step of one slot per cycle.

    The product takes ``mul_latency`` cycles, the addition ``add_latency``; the adder's
    result is forwarded to its input when the same slot enters in that cycle (a step
    every ``group`` cycles), else it waits in the slot's register ``acc[slot]`` (after a
    gap in the stream). A slot's next step must enter at least ``add_latency`` cycles
    after its previous one: ``group >= add_latency`` makes every stream without slot
    repetitions closer than ``group`` beats safe.

    Parameters
    ----------
    group : int or None
        Slots (default: :func:`hdl.fp_latency.systolic_group` of ``add_latency``, the
        group of :class:`PipelinedSystolicArray`'s PEs).
    mul_latency, add_latency : int or None
        Register stages of the product and of the adder (default
        :data:`hdl.fp_latency.DEFAULT_LATENCY` of ``BF16_MUL`` and ``ADD``); the adder
        needs at least one.

    Attributes
    ----------
    i : In(stream.Signature(pe_operands_layout(group), always_ready=True))
    o : Out(stream.Signature(pe_result_layout(group), always_ready=True))
        Every step's new sum, ``mul_latency + add_latency`` cycles after its operands.
    """

    def __init__(self, group=None, *, mul_latency=None, add_latency=None):
        if mul_latency is None:
            mul_latency = DEFAULT_LATENCY[FPKind.BF16_MUL]
        if add_latency is None:
            add_latency = DEFAULT_LATENCY[FPKind.ADD]
        if add_latency < 1:
            raise ValueError(f"The accumulating adder needs at least one register, not "
                             f"{add_latency}")
        if group is None:
            group = systolic_group({FPKind.ADD: add_latency})
        if group < add_latency:
            raise ValueError(f"A PE needs at least as many slots as its adder's latency "
                             f"({add_latency}), not {group}")
        self._group, self._mul_latency, self._add_latency = group, mul_latency, add_latency
        super().__init__({
            "i": In(stream.Signature(pe_operands_layout(group), always_ready=True)),
            "o": Out(stream.Signature(pe_result_layout(group), always_ready=True)),
        })

    @property
    def group(self):
        return self._group

    @property
    def latency(self):
        """Cycles from the operands to the new sum."""
        return self._mul_latency + self._add_latency

    def elaborate(self, platform):
        m = Module()
        mul = m.submodules.mul = PipelinedBF16Mul(self._mul_latency)
        add = m.submodules.add = PipelinedFP32Add(self._add_latency)
        operands = self.i.payload
        m.d.comb += [mul.i.valid.eq(self.i.valid), mul.i.payload.a.eq(operands.a),
                     mul.i.payload.b.eq(operands.b)]
        first = _delayed(m, operands.first, self._mul_latency, "first")
        last = _delayed(m, operands.last, self._mul_latency, "last")
        slot = _delayed(m, operands.slot, self._mul_latency, "slot")
        out_last = _delayed(m, last, self._add_latency, "out_last")
        out_slot = _delayed(m, slot, self._add_latency, "out_slot")
        acc = Signal(data.ArrayLayout(unsigned(32), self._group), name="acc")
        forward = add.o.valid & (out_slot == slot)
        running = Mux(forward, add.o.payload, acc[slot])
        m.d.comb += [
            add.i.valid.eq(mul.o.valid),
            add.i.payload.a.eq(Mux(first, Const(NEG_ZERO, 32), running)),
            add.i.payload.b.eq(mul.o.payload),
            self.o.valid.eq(add.o.valid),
            self.o.payload.result.eq(add.o.payload),
            self.o.payload.last.eq(out_last),
            self.o.payload.slot.eq(out_slot),
        ]
        with m.If(add.o.valid):
            m.d.sync += acc[out_slot].eq(add.o.payload)
        return m


class PipelinedSystolicArray(SystolicArray):
    """:class:`hdl.pcu_systolic.SystolicArray` on :class:`PipelinedMAC` processing
    elements: the same ports and counter chain (counter 0 = K, one iteration per k step
    of a tile), but a tile is ``lanes x (group * lanes)`` and a k step takes ``group``
    beats of ``in1`` (row k of column block 0, 1, ...) with one beat of ``in0`` (column
    k of A, taken with the first and held); ``issue`` (the chain's step) comes with the
    last of them. The tile drains as ``group * lanes`` beats, column block by column
    block, each ``lanes`` rows (the rows of ``group`` tiles of the combinational array,
    in their order). With ``group_rows`` a tile is ``(group * lanes) x lanes``: a k step
    takes ``group`` beats of ``in0`` (column k of row block 0, 1, ...) with one of
    ``in1`` (held), and the tile drains its rows in order (row block by row block).
    ``docs/pcu.md``, "Systolic array on the pipelined operators".

    Parameters
    ----------
    lanes : int
    table : dict
        The latencies (:func:`hdl.fp_latency.latency_table`, not ``None``).
    domain : str
        Clock domain of the data path.
    """

    def __init__(self, lanes, table, *, domain="sync"):
        self._group = systolic_group(table)
        self._mul_latency = table[FPKind.BF16_MUL]
        self._add_latency = table[FPKind.ADD]
        super().__init__(lanes, domain=domain)

    @property
    def group(self):
        return self._group

    def elaborate(self, platform):
        m = Module()
        m.submodules.systolic_array = array = Module()
        lanes, group = self._lanes, self._group
        pending = Signal(name="sys_pending")      # a tile's results await draining
        row_full = Signal(lanes, name="sys_row_full")
        slot = Signal(range(group), name="sys_slot")    # the column block of the next beat
        take = Signal(name="sys_take")          # a beat of the grouped stream enters now
        rows = self.group_rows                  # in0 grouped (row blocks), in1 held
        first = slot == 0
        with m.If(self.active):
            m.d.comb += [
                take.eq(self.running & Mux(rows, self.in0.valid, self.in1.valid) &
                        (~first | (self.in0.valid & self.in1.valid)) &
                        ~(self.chain.last[0] & first & pending)),
                self.in0.ready.eq(take & (rows | first)),
                self.in1.ready.eq(take & (~rows | first)),
                self.issue.eq(take & (slot == group - 1)),
            ]
            with m.If(take):
                m.d.sync += slot.eq(Mux(slot == group - 1, 0, slot + 1))
        west_tag, west_a, north_b = self._pipelined_injection(array, take, slot)
        shadow = self._pipelined_grid(m, array, west_tag, west_a, north_b, row_full)
        with m.If(self.active):
            self._pipelined_drain(m, shadow, row_full, pending, take, slot)
        return m

    def _pipelined_injection(self, array, take, slot):
        """The beats entering the array (the held operand, A or with ``group_rows`` B,
        through a k step's ``group`` beats), skewed as in the combinational array."""
        lanes, domain, active = self._lanes, self._domain, self.active
        tag = data.StructLayout({"valid": 1, "first": 1, "last": 1,
                                 "slot": Shape.cast(range(self._group))})
        inject_tag = Signal(tag, name="sys_inject_tag")
        inject_a = Signal(data.ArrayLayout(unsigned(16), lanes), name="sys_inject_a")
        inject_b = Signal(data.ArrayLayout(unsigned(16), lanes), name="sys_inject_b")
        with array.If(active):
            array.d[domain] += [
                inject_tag.valid.eq(take),
                inject_tag.first.eq(self.chain.first_inner),
                inject_tag.last.eq(self.chain.last[0]),
                inject_tag.slot.eq(slot),
            ]
        rows, first = self.group_rows, slot == 0
        for lane in range(lanes):
            with array.If(active & take & (rows | first)):
                array.d[domain] += inject_a[lane].eq(self.in0.payload[lane][16:])
            with array.If(active & take & (~rows | first)):
                array.d[domain] += inject_b[lane].eq(self.in1.payload[lane][16:])

        return skewed_edges(array, domain, active, inject_tag, inject_a, inject_b)

    def _pipelined_grid(self, m, array, west_tag, west_a, north_b, row_full):
        """The processing elements; returns their final sums ``[row][col][slot]``."""
        lanes, group, domain, active = self._lanes, self._group, self._domain, self.active
        shadow = [[Signal(data.ArrayLayout(unsigned(32), group),
                          name=f"sys_shadow{row}_{col}") for col in range(lanes)]
                  for row in range(lanes)]
        for row, col, name, tag_in, a_in, b_in in pe_inputs(array, domain, active, west_tag,
                                                            west_a, north_b):
            pe = PipelinedMAC(group, mul_latency=self._mul_latency,
                              add_latency=self._add_latency)
            # no clock enable inside the PE (it would fan out to every operator stage):
            # outside systolic mode its operands are frozen and marked invalid, so no
            # sum changes
            array.submodules[name] = DomainRenamer(domain)(pe)
            array.d.comb += [
                pe.i.valid.eq(active & tag_in.valid), pe.i.payload.a.eq(a_in),
                pe.i.payload.b.eq(b_in), pe.i.payload.first.eq(tag_in.first),
                pe.i.payload.last.eq(tag_in.last), pe.i.payload.slot.eq(tag_in.slot),
            ]
            final = active & pe.o.valid & pe.o.payload.last
            with array.If(final):
                array.d[domain] += shadow[row][col][pe.o.payload.slot].eq(
                    pe.o.payload.result)
            if col == lanes - 1:
                with m.If(final & (pe.o.payload.slot == group - 1)):
                    m.d.sync += row_full[row].eq(1)
        return shadow

    def _pipelined_drain(self, m, shadow, row_full, pending, take, slot):
        """Drain the final sums a column block at a time, ``lanes`` rows each; the
        ``DONE`` token after the last."""
        lanes, group = self._lanes, self._group
        vec_out, control_out = self.vector_out, self.control_out
        drain_row = Signal(range(lanes), name="sys_drain_row")
        drain_slot = Signal(range(group), name="sys_drain_slot")
        m.d.comb += vec_out.valid.eq(row_full.bit_select(drain_row, 1))
        with m.Switch(drain_row):
            for row in range(lanes):
                with m.Case(row):
                    m.d.comb += vec_out.payload.eq(
                        Cat(*(shadow[row][col][drain_slot] for col in range(lanes))))
        with m.If(vec_out.valid & vec_out.ready):
            m.d.sync += drain_row.eq(Mux(drain_row == lanes - 1, 0, drain_row + 1))
            with m.If(drain_slot == group - 1):
                m.d.sync += row_full.bit_select(drain_row, 1).eq(0)
            with m.If(drain_row == lanes - 1):
                m.d.sync += drain_slot.eq(Mux(drain_slot == group - 1, 0, drain_slot + 1))
                with m.If(drain_slot == group - 1):
                    m.d.sync += pending.eq(0)
        with m.If(take & self.chain.last[0] & (slot == 0)):
            m.d.sync += pending.eq(1)
        m.d.comb += [
            control_out.valid.eq(self.finishing & ~pending),
            control_out.payload.eq(1),
            self.done.eq(self.finishing & ~pending & control_out.ready),
        ]

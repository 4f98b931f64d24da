"""The pipelined FP operators (hdl.fp_pipelined): operands streamed one per cycle
through each operator in Amaranth's simulator; each result leaves exactly ``latency``
cycles after its operands, and equals both the combinational operator of hdl.fp (on the
same operands, in the same simulation) and the reference model rdu.models.fp. The
argument checks, the latency table (hdl.fp_latency) and the register placement."""

import numpy as np
import pytest
from amaranth import Elaboratable, Module, Value
from amaranth.sim import Simulator
from rdu.models import fp as fpmodel

from formal.fp import REFERENCES
from hdl.fp_latency import DEFAULT_LATENCY, FPKind, latency_of
from hdl.fp_pipelined import (
    PIPELINED_OPERATORS,
    PipelinedFP32Add,
    PipelinedFP32Mul,
    PipelinedFP32MultiplyAdd,
    spread_cuts,
)
from tb.suites.pcu import edge_words, random_operands

#: Operands per operator and latency (edge-case pairs first, then random ones).
COUNT = 240


def _model(kind, a, b, c):
    """The model's word (an int; the comparison's five fields packed as its payload)."""
    if kind is FPKind.COMPARE:
        return (fpmodel.fmax(a, b).astype(object) | fpmodel.fmin(a, b).astype(object) << 32
                | fpmodel.cmp_lt(a, b).astype(object) << 64
                | fpmodel.cmp_le(a, b).astype(object) << 65
                | fpmodel.cmp_eq(a, b).astype(object) << 66)
    if kind is FPKind.BF16_MUL:
        return fpmodel.mul(a << np.uint32(16), b << np.uint32(16))
    return {FPKind.ADD: lambda: fpmodel.add(a, b), FPKind.MUL: lambda: fpmodel.mul(a, b),
            FPKind.MADD: lambda: fpmodel.madd(a, b, c),
            FPKind.TO_BF16: lambda: fpmodel.to_bf16(a),
            FPKind.FROM_BF16: lambda: fpmodel.from_bf16(a)}[kind]()


def _operands(kind, rng):
    edges = edge_words()
    pairs = np.array([(x, y) for x in edges for y in edges], dtype=np.uint32)
    pairs = pairs[rng.permutation(len(pairs))[:COUNT // 2]]
    a, b, c = random_operands(rng, COUNT - len(pairs))
    a = np.concatenate([pairs[:, 0], a])
    b = np.concatenate([pairs[:, 1], b])
    c = np.concatenate([edges[rng.integers(0, len(edges), len(pairs))], c])
    if kind is FPKind.BF16_MUL:           # BF16 words: the high halves
        a, b = a >> np.uint32(16), b >> np.uint32(16)
    return a, b, c


class _Checked(Elaboratable):
    """The operator, and beside it the combinational operator on its inputs."""

    def __init__(self, dut):
        self.dut = dut
        self.expected = None

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.dut
        self.expected = REFERENCES[self.dut.KIND](m, self.dut.i.payload)
        return m


def _stream(dut, a, b, c, valid):
    """Drive one operand set per cycle (``valid`` as given); return the cycles on which
    ``o.valid`` was set, the results then, and the combinational words of every input."""
    checked = _Checked(dut)
    sim = Simulator(checked)
    if dut.latency:
        sim.add_clock(1e-6)
    seen, reference = [], []

    async def testbench(ctx):
        operands = {"a": a, "b": b, "c": c}
        for cycle in range(len(a) + dut.latency):
            index = min(cycle, len(a) - 1)
            ctx.set(dut.i.valid, cycle < len(a) and bool(valid[index]))
            for key in dut.OPERANDS:
                ctx.set(dut.i.payload[key], int(operands[key][index]))
            reference.append(ctx.get(checked.expected))
            if ctx.get(dut.o.valid):
                seen.append((cycle, ctx.get(Value.cast(dut.o.payload))))
            if dut.latency:
                await ctx.tick()
            else:
                await ctx.delay(1e-6)

    sim.add_testbench(testbench)
    sim.run()
    return seen, reference


def _cases():
    cases = [(kind, None) for kind in FPKind]
    return cases + [(FPKind.ADD, 0), (FPKind.ADD, 3), (FPKind.MUL, 0), (FPKind.MUL, 6)]


@pytest.mark.parametrize("kind, latency", _cases(),
                         ids=lambda v: v.value if isinstance(v, FPKind) else str(v))
def test_stream_matches_combinational_and_model(kind, latency, seed):
    rng = np.random.default_rng(seed)
    a, b, c = _operands(kind, rng)
    valid = rng.random(len(a)) < 0.85
    dut = PIPELINED_OPERATORS[kind](latency)
    expected_latency = DEFAULT_LATENCY[kind] if latency is None else latency
    assert dut.latency == expected_latency
    seen, reference = _stream(dut, a, b, c, valid)
    # exactly one result per valid input, exactly `latency` cycles after it
    assert [cycle for cycle, _ in seen] == [int(i) + dut.latency for i in np.flatnonzero(valid)]
    model = _model(kind, a, b, c)
    for cycle, word in seen:
        index = cycle - dut.latency
        assert word == reference[index], (kind, index, hex(a[index]), hex(b[index]))
        assert word == int(model[index]), (kind, index, hex(a[index]), hex(b[index]))


def test_latency_table():
    assert set(DEFAULT_LATENCY) == set(FPKind) == set(PIPELINED_OPERATORS)
    assert latency_of("madd") == latency_of(FPKind.MUL) + latency_of(FPKind.ADD)
    for kind, cls in PIPELINED_OPERATORS.items():
        assert 1 <= DEFAULT_LATENCY[kind] <= cls.max_latency(), kind


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_register_placement():
    """Every latency names that many steps, the last step among them; the adder's and
    the multiplier's tables keep the first cut after the slow first steps."""
    for kind, cls in PIPELINED_OPERATORS.items():
        for latency in range(cls.max_latency() + 1):
            cuts = cls.cuts(latency)
            assert len(set(cuts)) == latency == len(cuts), (kind, latency, cuts)
            assert all(1 <= cut <= len(cls.STEPS) for cut in cuts)
            if latency:
                assert max(cuts) == len(cls.STEPS), (kind, latency)
    assert PipelinedFP32Mul.cuts(2) == (1, 6)      # partial products registered
    assert PipelinedFP32MultiplyAdd.cuts(11) == (1, 3, 5, 6, 7, 8, 9, 10, 12, 13, 14)
    assert spread_cuts(8, 3) == (3, 6, 8) and spread_cuts(2, 2) == (1, 2)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_rejects_bad_latency():
    with pytest.raises(ValueError, match="latency must be between 0 and 8, not 9"):
        PipelinedFP32Add(9)
    with pytest.raises(ValueError, match="latency must be between 0 and 6, not -1"):
        PipelinedFP32Mul(-1)
    with pytest.raises(TypeError, match="latency must be an integer, not '2'"):
        PipelinedFP32Add("2")
    with pytest.raises(ValueError, match="mul_latency must be between 0 and 3, not 4"):
        PipelinedFP32MultiplyAdd(3, mul_latency=4)
    assert PipelinedFP32MultiplyAdd(3).latency == 3

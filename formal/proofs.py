"""The registry of proofs run by ``python -m formal`` / ``make formal``.

Parameters are small so that the proofs close in seconds to minutes on a 2-core
machine with z3; ``docs/formal.md`` lists them with the measured times.
"""

from formal.agcu import AGCUHarness, BurstGeneratorHarness, EngineWindowsHarness
from formal.driver import Proof
from formal.fifo import FIFOHarness
from formal.fp import (
    AlignHarness,
    BF16ProductHarness,
    BF16RoundHarness,
    FP32ProductHarness,
    PipelineHarness,
)
from formal.mutants import (
    BufferGatedReadAGCU,
    DroppingFIFO,
    EarlyLastAGCU,
    LateCorruptingFIFO,
    PageCrossingGenerator,
    RunOnAddressGenerator,
    UnstableFIFO,
    UnwindowedWriteEngine,
    broken_merge_order,
)
from formal.pmu import AddressGeneratorHarness
from formal.switch import SwitchNetworkHarness
from hdl.agcu_engines import ReadEngine, WriteEngine
from hdl.fp_latency import DEFAULT_LATENCY, FPKind

__all__ = ["AGCU_GENERATOR", "AGCU_SMALL", "MERGE_CONFIG", "PROOFS", "by_name"]

#: Concrete switch configuration of the quick merge proof (5 inputs, 3 outputs):
#: output 0 merges north 1, south 2, local 1 (its select, east, is ignored); output 1
#: is a plain route from north (north is thus merged and multicast); output 2 a plain
#: route from south.
MERGE_CONFIG = [(2, [1, 0, 2, 0, 1]), (1, [0] * 5), (3, [0] * 5)]

#: The burst generator as the AGCU builds it by default (``AGCU()``: 8 lanes = 32-byte
#: beats, 32-bit addresses, 16-beat bursts); its proof closes by induction at this size.
AGCU_GENERATOR = dict(addr_width=32, beat_bytes=32, max_burst=16)

#: The whole AGCU, narrowed through its parameters so that BMC reaches several bursts:
#: 1 lane (4-byte beats, 1024 per 4 KiB page), 14-bit addresses (4 pages), bursts of up
#: to 4 beats, 2 bursts in flight per direction, a 2-beat read buffer. The counters
#: that are not parameters (pattern counts and indices, lengths) stay 32-bit.
AGCU_SMALL = dict(lanes=1, addr_width=14, max_burst=4, max_outstanding=2, buffer_depth=2)


def _broken_merge():
    with broken_merge_order():
        from amaranth.hdl import Fragment
        # elaborate while the mutant is active
        return Fragment.get(SwitchNetworkHarness(inputs=5, outputs=3, config=MERGE_CONFIG,
                                                 invariants=True), None)


PROOFS = [
    Proof("fifo", lambda: FIFOHarness(width=2, depth=3, invariants=True),
          mode="prove", depth=1, quick=True,
          summary="StreamFIFO (2-bit payload, depth 3): output N is input N (tracked "
                  "item), level = in - out <= depth, valid/ready = occupancy, "
                  "o.valid/o.payload held while stalled; with its internal invariants"),
    Proof("fifo_32", lambda: FIFOHarness(width=32, depth=32, invariants=True),
          mode="prove", depth=1,
          summary="StreamFIFO (32-bit payload, depth 32): the same"),
    Proof("fifo_late", lambda: FIFOHarness(width=2, depth=3, invariants=True,
                                           fifo=LateCorruptingFIFO),
          mode="prove", depth=1, quick=True, expect="unproven",
          fails_with="tracked item not in slot read_ptr + N - items out",
          summary="mutant: a FIFO that corrupts input item 100 (far beyond the BMC "
                  "depths used here): its induction step fails"),
    Proof("fifo_dropping", lambda: FIFOHarness(width=2, depth=3, fifo=DroppingFIFO),
          depth=10, quick=True, expect="fail",
          fails_with="i.ready is not 'room left'",
          summary="mutant: a FIFO that acknowledges and drops an item when full"),
    Proof("fifo_unstable", lambda: FIFOHarness(width=2, depth=3, fifo=UnstableFIFO),
          depth=10, quick=True, expect="fail", fails_with="o: payload changed while stalled",
          summary="mutant: a FIFO whose payload changes while stalled"),
    Proof("switch_merge", lambda: SwitchNetworkHarness(inputs=5, outputs=3,
                                                       config=MERGE_CONFIG, invariants=True),
          mode="prove", depth=1, quick=True, engine="smtbmc --unroll z3",
          summary="switch network, fixed merge N1 S2 L1 + multicast + plain route: "
                  "merge order, per-input order without loss or duplication, "
                  "stable outputs while stalled, silent unrouted outputs; with its "
                  "internal invariants"),
    Proof("switch_merge_broken", _broken_merge, mode="prove", depth=4, quick=True,
          expect="fail", engine="smtbmc --unroll z3",
          fails_with="out0: merge input is not the reference's",
          summary="mutant: merge that returns to the first listed input after each one"),
    Proof("switch_symbolic", lambda: SwitchNetworkHarness(inputs=5, outputs=3, max_count=3,
                                                          invariants=True),
          mode="prove", depth=1, engine="smtbmc --unroll z3",
          summary="switch network, 5 inputs x 3 outputs, any configuration (selects, "
                  "merge counts 0..3): the same properties"),
    Proof("switch_full", lambda: SwitchNetworkHarness(inputs=5, outputs=6, max_count=255,
                                                      invariants=True),
          mode="prove", depth=1, engine="smtbmc --unroll z3",
          summary="switch network at the vector network's size: 5 inputs x 6 outputs, "
                  "any configuration (selects, merge counts 0..255): the same properties"),
    Proof("pmu_address", lambda: AddressGeneratorHarness(max_bound=2, stride_bits=4,
                                                         invariants=True),
          mode="prove", depth=1, quick=True,
          summary="AffineAddressGenerator: address = start + sum(i_k * stride_k), inside "
                  "[start, start + buffer_words), last on the final iteration; with its "
                  "internal invariants"),
    Proof("pmu_address_3", lambda: AddressGeneratorHarness(max_bound=3, stride_bits=4,
                                                           invariants=True),
          mode="prove", depth=1,
          summary="the same with bounds 1..3"),
    Proof("pmu_address_run_on",
          lambda: AddressGeneratorHarness(max_bound=2, stride_bits=4, invariants=True,
                                          generator=RunOnAddressGenerator),
          mode="prove", depth=4, quick=True, expect="fail",
          fails_with="address is not the affine iteration",
          summary="mutant: a generator that starts a new row from the current address"),
    Proof("agcu_bursts", lambda: BurstGeneratorHarness(**AGCU_GENERATOR, invariants=True),
          mode="prove", depth=1, quick=True,
          summary="AffineBurstGenerator (the AGCU's: 32-bit addresses, 32-byte beats, "
                  "max_burst 16): no 4 KiB crossing, 1..max_burst beats, aligned, held "
                  "until ready; with its internal invariants"),
    Proof("agcu_bursts_crossing",
          lambda: BurstGeneratorHarness(**AGCU_GENERATOR, invariants=True,
                                        generator=PageCrossingGenerator),
          mode="prove", depth=6, quick=True, expect="fail",
          fails_with="open: burst crosses a 4 KiB boundary",
          summary="mutant: a generator that merges runs across a 4 KiB boundary"),
    Proof("agcu_axi", lambda: AGCUHarness(**AGCU_SMALL, invariants=True), mode="prove",
          depth=1, quick=True,
          summary="whole AGCU (1 lane, 14-bit addresses, max_burst 4, 2 outstanding, "
                  "read buffer 2), any commands and configuration: ar/aw/w held until "
                  "ready, ar/aw bursts in one 4 KiB page, w.last on beat len of aw "
                  "burst N, vector_in -> w beat for beat (plain and BF16 stores); with "
                  "its internal invariants"),
    Proof("agcu_windows_read", lambda: EngineWindowsHarness(ReadEngine), mode="prove",
          depth=1, quick=True,
          summary="the AGCU's ReadEngine (14-bit addresses, 4-byte beats, max_burst 4) "
                  "under any four memory windows: no ar burst offered outside an enabled "
                  "read window, whatever the pattern, aborts and handshakes"),
    Proof("agcu_windows_write", lambda: EngineWindowsHarness(WriteEngine), mode="prove",
          depth=1, quick=True,
          summary="the WriteEngine likewise: no aw burst offered (nor queued for aw) "
                  "outside an enabled write window"),
    Proof("agcu_windows", lambda: AGCUHarness(**AGCU_SMALL, invariants=True, windows=True),
          mode="prove", depth=2,
          summary="the agcu_axi harness with any four memory windows (fixed per trace): "
                  "every ar burst offered lies in an enabled read window, every aw burst "
                  "offered (and queued) in an enabled write window; the agcu_axi "
                  "properties too (the data until a refused burst drains the command); "
                  "with its internal invariants"),
    Proof("agcu_windows_unchecked", lambda: EngineWindowsHarness(UnwindowedWriteEngine),
          depth=6, quick=True, expect="fail",
          fails_with="aw: burst outside the enabled write windows",
          summary="mutant: a write engine that queues bursts without the window check"),
    Proof("agcu_axi_16", lambda: AGCUHarness(**AGCU_SMALL, seq_bits=16, invariants=True),
          mode="prove", depth=1,
          summary="the same with 16-bit harness counters (traces of up to 65534 bursts "
                  "per channel and vector beats instead of 14)"),
    Proof("agcu_axi_cover", lambda: AGCUHarness(**AGCU_SMALL, covers=True), mode="cover",
          depth=8, quick=True,
          summary="the agcu_axi harness reaches each checked situation (multi-beat "
                  "bursts on a page end, w before aw, BF16 halves, stalls)"),
    Proof("agcu_axi_early_last", lambda: AGCUHarness(**AGCU_SMALL, agcu=EarlyLastAGCU),
          depth=8, quick=True, expect="fail",
          fails_with=("w.last not on beat len of its aw burst",
                      "w burst N does not have the length of aw burst N"),
          summary="mutant: an AGCU whose w.last comes one beat early"),
    Proof("agcu_axi_gated_ar", lambda: AGCUHarness(**AGCU_SMALL, agcu=BufferGatedReadAGCU),
          depth=8, quick=True, expect="fail", fails_with="ar: valid withdrawn before ready",
          summary="mutant: an AGCU that withdraws ar.valid while its read buffer is full"),
    Proof("agcu_axi_crossing",
          lambda: AGCUHarness(**AGCU_SMALL, generator=PageCrossingGenerator),
          depth=8, quick=True, expect="fail", fails_with="ar: burst crosses a 4 KiB boundary",
          summary="mutant: an AGCU whose generators merge runs across a 4 KiB boundary"),
    Proof("fp32_product", lambda: FP32ProductHarness(), mode="bmc", depth=1, quick=True,
          summary="hdl.fp.fp32_mul (one-bit normalisation of the product) equals the "
                  "product through the general round_pack, for every input"),
    Proof("fp32_product_broken", lambda: FP32ProductHarness(broken=True), mode="bmc",
          depth=1, quick=True, expect="fail",
          fails_with="fp32_mul differs from the general normalisation",
          summary="mutant: an FP32 product whose ties round up instead of to even"),
    Proof("fp32_align", lambda: AlignHarness(), mode="bmc", depth=1, quick=True,
          summary="hdl.fp.align_sticky (the adder's alignment: 27-bit shifter, sticky "
                  "mask) equals the 54-bit shift, for every significand and shift"),
    Proof("fp32_align_broken", lambda: AlignHarness(broken=True), mode="bmc", depth=1,
          quick=True, expect="fail", fails_with="align_sticky differs from the 54-bit shift",
          summary="mutant: a sticky bit that misses the last bit shifted out"),
    Proof("bf16_round", lambda: BF16RoundHarness(), mode="bmc", depth=1, quick=True,
          summary="hdl.fp.fp32_to_bf16 (rounding at bit 16, no normalisation) equals "
                  "round_pack at precision 8, for every input"),
    Proof("bf16_round_broken", lambda: BF16RoundHarness(broken=True), mode="bmc",
          depth=1, quick=True, expect="fail", fails_with="fp32_to_bf16 differs from round_pack",
          summary="mutant: FP32 -> BF16 by truncation"),
    Proof("bf16_product", lambda: BF16ProductHarness(), mode="bmc", depth=1, quick=True,
          summary="hdl.fp.bf16_mul (the systolic MAC's 8 x 8 significand product) equals "
                  "fp32_mul of the same BF16 values widened to FP32, for every input"),
    Proof("bf16_product_broken", lambda: BF16ProductHarness(broken=True), mode="bmc",
          depth=1, quick=True, expect="fail", fails_with="bf16_mul differs from fp32_mul",
          summary="mutant: a BF16 product that does not flush results below 2**-126"),
    # BMC from reset: the pipeline has no feedback, so the result on cycle L is a
    # function of the operands of cycle 0 alone, as on any cycle t + L of those of t
    # (k-induction closes too, but the multiplier's step takes the solver minutes)
    *[Proof(f"fp_pipelined_{kind.value}", lambda kind=kind: PipelineHarness(kind),
            mode="bmc", depth=DEFAULT_LATENCY[kind] + 1, engine="smtbmc --unroll z3",
            summary=f"hdl.fp_pipelined's {kind.value} at its default latency L = "
                    f"{DEFAULT_LATENCY[kind]}: o on cycle t + L is the combinational "
                    f"operator of i on cycle t, o.valid is i.valid of cycle t, every input")
      # not MADD: the multiplier's and the adder's pipelines chained (c delayed beside
      # the first), each proven alone; the chain had no answer from z3 in 10 minutes
      for kind in FPKind if kind is not FPKind.MADD],
    Proof("fp_pipelined_add_skewed", lambda: PipelineHarness(FPKind.ADD, broken=True),
          mode="bmc", depth=DEFAULT_LATENCY[FPKind.ADD] + 1, quick=True, expect="fail",
          engine="smtbmc --unroll z3",
          fails_with="pipelined result differs from the combinational operator",
          summary="mutant: a pipelined adder whose NaN flag skips its first register"),
]


def by_name(name):
    for proof in PROOFS:
        if proof.name == name:
            return proof
    raise KeyError(name)

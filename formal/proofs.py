"""The registry of proofs run by ``python -m formal`` / ``make formal``.

Parameters are small so that the proofs close in seconds to minutes on a 2-core
machine with z3; ``docs/formal.md`` lists them with the measured times.
"""

from formal.agcu import BurstGeneratorHarness
from formal.driver import Proof
from formal.fifo import FIFOHarness
from formal.mutants import DroppingFIFO, LateCorruptingFIFO, UnstableFIFO, broken_merge_order
from formal.pmu import AddressGeneratorHarness
from formal.switch import SwitchNetworkHarness

__all__ = ["PROOFS", "MERGE_CONFIG", "by_name"]

#: Concrete switch configuration of the quick merge proof (5 inputs, 3 outputs):
#: output 0 merges north 1, south 2, local 1 (its select, east, is ignored); output 1
#: is a plain route from north (north is thus merged and multicast); output 2 a plain
#: route from south.
MERGE_CONFIG = [(2, [1, 0, 2, 0, 1]), (1, [0] * 5), (3, [0] * 5)]


def _broken_merge():
    with broken_merge_order():
        from amaranth.hdl import Fragment
        # elaborate while the mutant is active
        return Fragment.get(SwitchNetworkHarness(inputs=5, outputs=3, config=MERGE_CONFIG),
                            None)


PROOFS = [
    Proof("fifo", lambda: FIFOHarness(width=2, depth=3), depth=10, quick=True,
          summary="StreamFIFO (2-bit payload, depth 3): output N is input N (tracked "
                  "item), level = in - out <= depth, valid/ready = occupancy, "
                  "o.valid/o.payload held while stalled"),
    Proof("fifo_induction", lambda: FIFOHarness(width=2, depth=3, invariants=True),
          mode="prove", depth=1, quick=True,
          summary="StreamFIFO (2-bit payload, depth 3): the fifo properties plus its "
                  "internal invariants, for every cycle (k-induction)"),
    Proof("fifo_induction_32", lambda: FIFOHarness(width=32, depth=32, invariants=True),
          mode="prove", depth=1,
          summary="StreamFIFO (32-bit payload, depth 32): the same, k-induction"),
    Proof("fifo_induction_late", lambda: FIFOHarness(width=2, depth=3, invariants=True,
                                                     fifo=LateCorruptingFIFO),
          mode="prove", depth=1, quick=True, expect="unproven",
          summary="mutant: a FIFO that corrupts input item 100 (beyond any BMC depth "
                  "used here): its induction step fails"),
    Proof("fifo_dropping", lambda: FIFOHarness(width=2, depth=3, fifo=DroppingFIFO),
          depth=10, quick=True, expect="fail",
          summary="mutant: a FIFO that acknowledges and drops an item when full"),
    Proof("fifo_unstable", lambda: FIFOHarness(width=2, depth=3, fifo=UnstableFIFO),
          depth=10, quick=True, expect="fail",
          summary="mutant: a FIFO whose payload changes while stalled"),
    Proof("switch_merge", lambda: SwitchNetworkHarness(inputs=5, outputs=3,
                                                       config=MERGE_CONFIG),
          depth=8, engine="smtbmc --unroll z3",
          summary="switch network, fixed merge N1 S2 L1 + multicast + plain route: "
                  "merge order, per-input order without loss or duplication, "
                  "stable outputs while stalled, silent unrouted outputs"),
    Proof("switch_merge_broken", _broken_merge, depth=8, quick=True, expect="fail",
          engine="smtbmc --unroll z3",
          summary="mutant: merge that returns to the first listed input after each one"),
    Proof("switch_symbolic", lambda: SwitchNetworkHarness(inputs=3, outputs=2,
                                                          max_count=2),
          depth=6, engine="smtbmc --unroll z3",
          summary="switch network, 3 inputs x 2 outputs, any configuration (selects, "
                  "merge counts 0..2): the same properties"),
    Proof("pmu_address", lambda: AddressGeneratorHarness(max_bound=2, stride_bits=4),
          depth=8,
          summary="AffineAddressGenerator: address = start + sum(i_k * stride_k), inside "
                  "[start, start + buffer_words), last on the final iteration"),
    Proof("agcu_bursts", lambda: BurstGeneratorHarness(addr_width=14, beat_bytes=64,
                                                       max_burst=4),
          depth=8, quick=True,
          summary="AffineBurstGenerator (14-bit addresses, 64-byte beats, max_burst 4): "
                  "no 4 KiB crossing, 1..max_burst beats, aligned, held until ready"),
]


def by_name(name):
    for proof in PROOFS:
        if proof.name == name:
            return proof
    raise KeyError(name)

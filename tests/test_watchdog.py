"""The watchdog never fires on a correct run (issue #37): its estimate
(:func:`rdu.runtime.watchdog.estimate_cycles`, from the program's bitstream and MACs)
against cycles measured on the native RTL, over kernels and shapes (every family,
heads and GQA groups, K chunks, causal prefill, padded rows: ``benchmarks.watchdog``'s
quick points; ``python -m benchmarks.watchdog`` runs longer ones)."""

import pytest
from rdu.frontend.kernels import get_kernel
from rdu.machine import Machine
from rdu.runtime.watchdog import WATCHDOG_FLOOR_CYCLES, estimate_cycles, work_cycles
from rdu.units.registry import busiest_unit

from benchmarks.watchdog import QUICK, QUICK_MACHINES, measure


def test_the_estimate_grows_with_the_work_it_reads_from_the_bitstream():
    """A softmax of 4096 rows of 1024 (no MACs) streams 524,288 beats through its
    busiest unit: the estimate follows the beats, not only the floor; a prefill's
    estimate follows its heads."""
    kernel = get_kernel("softmax")
    program = kernel.compile(Machine(), m=4096, n=1024)
    beats, *_ = busiest_unit(program.bitstream, program.machine.stages)
    assert beats == 4096 * 1024 // Machine().lanes
    assert estimate_cycles(program) > WATCHDOG_FLOOR_CYCLES + 2 * beats
    assert work_cycles(program) == beats == program.meta["busiest_beats"]
    # a bitstream damaged after compilation (fuzzing) keeps the compiled estimate
    estimate = estimate_cycles(program)
    program.bitstream = list(program.bitstream)
    program.bitstream[5] ^= 0xFFFF
    assert estimate_cycles(program) == estimate
    del program.meta["busiest_beats"]                   # an older program file
    assert work_cycles(program) == 0 < estimate_cycles(program)
    attention = get_kernel("attention")
    one, eight = (attention.compile(Machine(**attention.machine), mode="prefill", seq=64,
                                    dim=16, heads=heads, kv_heads=1) for heads in (1, 8))
    assert work_cycles(eight) == 8 * work_cycles(one)


@pytest.mark.verilator
@pytest.mark.parametrize("name, params", QUICK, ids=[f"{n}-{'-'.join(map(str, p.values()))}"
                                                   for n, p in QUICK])
def test_the_estimate_covers_measured_cycles(name, params, sim_dir, seed):
    """Measured on the native RTL: correct, at least the busiest unit's beats (the
    estimate's lower bound holds), at most the estimate (the watchdog, four times it,
    never comes near)."""
    row = measure(name, params, "native", seed, work_dir=sim_dir / name,
                  machine=QUICK_MACHINES.get(name))
    assert row["ok"], row
    assert row["busiest"] <= row["cycles"] <= row["estimate"], row

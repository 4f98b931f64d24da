"""Configuration fuzzing and AXI fault injection on the RTL: damaged bitstreams of small
compiled GEMMs run under Verilator in one simulation (``tb.suites.fuzz.run_cases``),
each case compared with the functional model."""

import time
from collections import Counter

import pytest
from rdu.frontend import gemm

from hdl.system import RDUSystem
from tb.suites.fuzz import ACCEPTED, GEOMETRY, fuzz_programs, model_outcome, run_rtl


@pytest.mark.verilator
def test_fuzz_and_faults_verilator(sim_dir, seed):
    """60 damaged GEMM bitstreams (fixed seed) and six fault-injection runs of the
    undamaged GEMM, all in one Verilator simulation of the 2x2 PCU/PMU system, reset
    between cases: every case ends in a loader/unit/AGCU error, a watchdog stop or the
    model's outputs; each injected fault is reported by the AGCU on whose port it was
    injected, with its code and burst."""
    from rdu.sim.verilator import build
    programs = fuzz_programs(60, 20_261_204)
    params = programs[0].machine.system_params()
    built = build(RDUSystem, **params)
    names = RDUSystem(**params).perf_counter_names()
    base = gemm.compile_gemm(5, 7, 9, GEOMETRY)
    a, b = gemm.random_inputs(5, 7, 9, seed)
    gemm.pack_inputs(base, a, b)
    faults = [{"read": [0], "resp": "SLVERR"}, {"read": [3], "resp": "DECERR"},
              {"write": [0], "resp": "SLVERR"}, {"write": [1], "resp": "DECERR"},
              {"read": 0.2, "write": 0.2, "resp": "SLVERR", "seed": seed},
              {"read": 0.2, "write": 0.2, "resp": "DECERR", "seed": seed + 1}]
    cases = programs + [base] * len(faults)
    models = [model_outcome(program) for program in programs] + [None] * len(faults)
    start = time.perf_counter()
    results, verdicts, stats = run_rtl(built, cases, models, sim_dir, seed=seed,
                                       perf_counters=names,
                                       faults=[None] * len(programs) + faults)
    seconds = time.perf_counter() - start
    table = Counter()
    for program, model, result, verdict in zip(programs, models, results, verdicts,
                                               strict=False):
        assert verdict in ACCEPTED, f"{program.name}: {verdict}: {result.get('message')}"
        assert "\n" not in result.get("message", "")
        table[model[0], result["outcome"], verdict] += 1
    for (model, rtl, verdict), count in sorted(table.items()):
        print(f"model {model:12} RTL {rtl:14} {verdict:20} {count}")
    for spec, result in zip(faults, results[len(programs):], strict=True):
        print(f"faults {spec}: {result.get('message', 'outputs')}")
        if isinstance(spec.get("read"), list) or isinstance(spec.get("write"), list):
            kind = "read" if "read" in spec else "write"
            index = spec[kind][0]
            assert result["outcome"] == "agcu_error", result
            assert f"{spec['resp']} on {kind} of " in result["message"]
            assert f"injected fault ({kind} burst {index})" in result["message"]
            assert f"{kind.upper()}_{spec['resp']}" in result["message"]
        else:
            assert result["outcome"] in ("agcu_error", "outputs"), result
    print(f"{len(cases)} cases in {seconds:.0f} s ({stats.cycles} cycles, "
          f"{stats.cycles_per_second:.0f} cycles/s)")

"""Fuzzing and AXI fault injection: damaged bitstreams of small compiled kernels of every
family and damaged orchestrator schedules on the functional model and on the RTL (many
cases in one simulation, ``tb.suites.fuzz.run_cases``,
``tb.suites.fuzz_schedule.run_schedule_cases``), each case compared with the model;
random AXI4-Lite traffic on the IP top's registers (``tb.suites.fuzz_axi``)."""

import time
from collections import Counter

import numpy as np
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


# -- every kernel family, the orchestrator's schedules, the IP's registers ---------------

#: Outcome classes a damaged case may end in on the model (``other``: none of them).
ENDINGS = {"outputs", "loader", "unit_error", "agcu_error", "deadlock", "no_end", "request",
           "stuck"}


def test_targets_cover_every_family_with_a_kernel():
    """Every registered family that has a kernel (``Family.benchmark``) has a fuzz
    target; ``select_targets`` picks by family object, by target name, or all."""
    from rdu.compiler.families import FAMILIES
    from rdu.compiler.families.attention import ATTENTION

    from tb.suites.fuzz import TARGETS, select_targets
    covered = {id(target.family) for target in TARGETS}
    assert all(id(family) in covered for family in FAMILIES if family.benchmark)
    assert {t.name for t in select_targets(ATTENTION.name, FAMILIES)} == \
        {"attention_decode", "attention_prefill"}
    assert [t.name for t in select_targets("softmax", FAMILIES)] == ["softmax"]
    assert select_targets("all", FAMILIES) == list(TARGETS)
    assert select_targets("no such family", FAMILIES) == []


@pytest.mark.parametrize("name", ["gemm", "linear_relu", "softmax", "mlp", "attention_decode",
                                  "attention_prefill"])
def test_fuzz_family_model(name):
    """A seeded campaign of damaged bitstreams per target on the functional model: the
    undamaged programs (compiled into the target's family) give outputs, every damaged
    one ends in an error status, a deadlock or outputs."""
    from tb.suites.fuzz import TARGETS
    target = next(t for t in TARGETS if t.name == name)
    assert all(model_outcome(base)[0] == "outputs" for base in target.bases(3))
    outcomes = Counter(model_outcome(program)[0] for program in target.programs(12, 3))
    assert set(outcomes) <= ENDINGS, outcomes
    assert outcomes["outputs"] < 12, outcomes         # the damage reaches the hardware


def test_fuzz_schedules_model():
    """Damaged orchestrator schedules on the functional model: the undamaged one gives
    the GEMMs' outputs and the copy; every damaged one ends in an error status of the
    orchestrator (request, loader, AGCU), a watchdog stop, or outputs; the requests'
    checks are reached (bad opcode, bad length, too long)."""
    from hdl.orchestrator import FETCH_INDEX, ScheduleError
    from hdl.sequencer import ErrorSource
    from tb.suites.fuzz_schedule import ScheduleCase, model_schedule_outcome, schedule_cases
    plan, regions, cases = schedule_cases(40, 17)
    outcome, outputs = model_schedule_outcome(
        plan, regions, ScheduleCase("base", plan.words, 4 * plan.words.size, "none"))
    assert outcome == "outputs" and np.array_equal(outputs["copy"], outputs["c0"])
    models = [model_schedule_outcome(plan, regions, case) for case in cases]
    assert {outcome for outcome, _ in models} <= ENDINGS
    statuses = {tuple(detail[1:3]) for outcome, detail in models if outcome == "request"}
    assert (ErrorSource.REQUEST, ScheduleError.BAD_LENGTH) in statuses
    assert any(detail[0] == FETCH_INDEX for outcome, detail in models if outcome != "outputs")


@pytest.mark.verilator
def test_fuzz_families_and_schedules_native(sim_dir, seed):
    """A handful of damaged bitstreams of every family and damaged schedules on the RTL
    (native runner, the 2x2 and the 4x4 builds of the other RTL tests), one simulation
    per machine: each ends in an error status, a watchdog stop, or the model's outputs;
    a schedule's error status is the model's (command index, source, code). Includes the
    schedule that runs EXECUTE before any PROGRAM_LOAD (it hung until the sequencer
    refused an EXECUTE without a configuration)."""
    from rdu.sim.verilator import build

    from tb.suites.fuzz import TARGETS
    from tb.suites.fuzz_schedule import (
        ScheduleCase,
        model_schedule_outcome,
        run_schedules_rtl,
        schedule_cases,
    )
    for machine in {target.machine: None for target in TARGETS}:
        programs = [program for target in TARGETS if target.machine == machine
                    for program in target.programs(4, 5)]
        params = machine.system_params()
        built = build(RDUSystem, **params)
        models = [model_outcome(program) for program in programs]
        results, verdicts, _ = run_rtl(built, programs, models, sim_dir / f"r{machine.rows}",
                                       seed=seed, native=True, timeout=30_000,
                                       perf_counters=RDUSystem(**params).perf_counter_names())
        for program, model, result, verdict in zip(programs, models, results, verdicts,
                                                   strict=True):
            assert verdict in ACCEPTED, f"{program.name}: {verdict} {model[0]} {result}"
            assert result["outcome"] != "host_watchdog", program.name
    plan, regions, cases = schedule_cases(12, 7)
    words = plan.words.reshape(-1, 4)
    execute_first = np.concatenate([words[1:2], words[0:1], words[2:]]).reshape(-1)
    cases.append(ScheduleCase("execute first", execute_first, 4 * execute_first.size,
                              "commands"))
    models = [model_schedule_outcome(plan, regions, case) for case in cases]
    built = build(RDUSystem, **TARGETS[0].machine.system_params())
    results, verdicts, _ = run_schedules_rtl(built, plan, regions, cases, models,
                                             sim_dir / "schedules", seed=seed)
    for case, model, result, verdict in zip(cases, models, results, verdicts, strict=True):
        assert verdict in ("equal", "equal on fresh SRAM", "same status") or (
            verdict == "stop" and result["outcome"] == "host_watchdog"), \
            f"{case.name} ({case.kind}): {verdict}: model {model}, RTL {result}"
    assert verdicts[-1] == "same status" and results[-1]["outcome"] == "hw_watchdog"


@pytest.mark.verilator
def test_axi4lite_register_fuzz_verilator(sim_dir, seed):
    """300 random AXI4-Lite accesses on the 2x2 IP top under cocotb (random pauses on
    every channel): every answer OKAY and within its bound, unmapped words read 0,
    writable fields read back under their strobes, read-only ones unchanged, runs with
    good and bad run registers end as documented, START/SCHEDULE_START while busy
    ignored, SOFT_RESET clears the status."""
    from rdu.sim.runner import run_verilator
    from rdu.sim.verilator import build

    from hdl.ip import RDUIP
    from tb.suites.fuzz import SMALL_MACHINE, TARGETS
    from tb.suites.fuzz_axi import run_axi_fuzz
    program = TARGETS[0].bases(seed)[0]
    built = build(RDUIP, toplevel="rdu_ip", **SMALL_MACHINE.system_params())
    stats = run_verilator(built, run_axi_fuzz, sim_dir / "axi", seed=seed, watchdog=10**9,
                          program_dir=str(program.save(sim_dir / "program")),
                          transactions=300, fuzz_seed=seed)
    result = stats.result
    print(result["counts"], result["outcomes"])
    assert not result["problems"], "\n".join(result["problems"])
    assert result["counts"]["reads"] + result["counts"]["writes"] >= 300
    assert result["counts"]["unmapped"] and result["counts"]["runs"]

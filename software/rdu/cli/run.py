"""``rdu run`` and ``rdu sim``: compile a kernel (or read a program file), run it on the
functional model or the RTL, check it against numpy."""

import json
import shutil
import time
from pathlib import Path

import numpy as np

from rdu.apps.onnx_groups import describe_stage
from rdu.apps.onnx_operators import markdown as operators_markdown
from rdu.apps.onnx_operators import operator_table
from rdu.apps.unfused import Sequence
from rdu.cli.common import (
    CommandError,
    WrongResult,
    add_command,
    add_kernel_options,
    add_machine_options,
    check_output,
    print_report,
    program_for,
)
from rdu.roofline import describe as describe_roofline
from rdu.runtime import BACKENDS, SIMULATORS, run_kernel, run_sequence

#: ``--execution`` -> how :func:`rdu.runtime.run_sequence` launches the programs.
EXECUTIONS = {"fused": None, "unfused": "orchestrated", "unfused-host": "host"}


def sim_names(test):
    """``"a, b or c"``: the back ends (``--sim`` names) that pass ``test``."""
    names = [name for name, backend in BACKENDS.items() if test(backend)]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def cmd_run(args):
    """``rdu run``: run the program, report its figures, exit 1 if its result is wrong."""
    start = time.perf_counter()
    backend = BACKENDS[args.sim]
    if args.save:
        check_output(args.save, directory=True)
    if args.waves:
        if not backend.timed:
            raise CommandError(f"--waves needs the RTL: --sim "
                               f"{sim_names(lambda b: b.timed)} (the functional model "
                               f"has no signals)")
        check_output(args.waves)
    execution = getattr(args, "execution", "fused")    # rdu sim: always fused
    kernel, program, arrays, sources = program_for(args)
    unfused = isinstance(program, Sequence)     # unfused, or an ONNX model's groups
    if unfused and not backend.schedules:
        what = (f"--execution {execution}" if execution != "fused" else
                "a model of several configurations")
        raise CommandError(f"{what} runs on --sim {sim_names(lambda b: b.schedules)} (the IP "
                           f"block runs one program per start)")
    if unfused and args.waves:
        raise CommandError("--waves is for one configuration (--execution fused of a "
                           "kernel or a model the compiler fuses)")
    if arrays and set(arrays) != set(kernel.data_inputs()):
        missing = sorted(set(kernel.data_inputs()) - set(arrays))
        raise CommandError(f"give every input or none: missing "
                           f"{', '.join(kernel.input_option(m) for m in missing)}")
    inputs = (kernel.user_inputs(program, arrays, sources) if arrays
              else kernel.random_inputs(program, args.seed))
    if unfused:
        figures, results, _ = run_sequence(
            kernel, program, inputs, args.sim, seed=args.seed, progress=not args.json,
            timeout=args.timeout, execution=EXECUTIONS[execution] or "orchestrated",
            windows=args.windows)
        figures["configurations"] = [f"{stage.name}: {describe_stage(stage)}"
                                     for stage in program.stages]
        if getattr(args, "operators", False) and hasattr(kernel, "imported"):
            figures["operators"] = operator_table(kernel, program, inputs, figures)
        result = None
    else:
        figures, results, result = run_kernel(kernel, program, inputs, args.sim,
                                              seed=args.seed, waves=bool(args.waves),
                                              progress=not args.json, timeout=args.timeout,
                                              windows=args.windows)
    ok, max_abs_err = figures["ok"], figures["max_abs_err"]
    agrees, others = kernel.references(program, inputs, results)   # onnxruntime's
    figures = {key: value for name, value in figures.items()
               for key, value in ((name, value), *(others.items() if name == "max_abs_err"
                                                   else ()))}
    report = {
        "ok": ok and agrees,
        "kernel": kernel.describe(program),
        "sim": args.sim,
        "execution": ("configurations in sequence, orchestrated" if unfused and
                      execution == "fused" else execution),
        "seed": args.seed,
        "inputs": ", ".join(sources.values()) if sources else f"random (seed {args.seed})",
        "machine": program.machine.describe(),
        **{name: value for name, value in figures.items() if name != "ok"},
        "wall_seconds": round(time.perf_counter() - start, 2),
    }
    if args.waves:
        if not result.waves:
            raise CommandError("the simulation wrote no waveform")
        target = Path(args.waves)
        produced = Path(result.waves).suffix       # .fst with lz4/zlib headers, else .vcd
        if target.suffix != produced:
            target = target.with_suffix(produced)
        shutil.copyfile(result.waves, target)
        report["waves"] = str(target)
    if args.save:
        save_run(Path(args.save), program, inputs, results, report)
    print_report(report if args.json else
                 {**{k: v for k, v in report.items() if k != "operators"},
                  "roofline": describe_roofline(report["roofline"])}, args.json)
    if report.get("operators") and not args.json:
        print(operators_markdown(report["operators"]))
    if ok and not agrees:
        raise WrongResult(f"{', '.join(results)} differs from onnxruntime's (on the same "
                          f"BF16 inputs and weights) beyond twice the float64 budget "
                          f"{onnx_share(kernel)}(max |err| "
                          f"{others['max_abs_err_onnxruntime']:.3g})")
    if not ok:
        raise WrongResult(f"{', '.join(results)} differs from numpy (float64 of the same "
                          f"BF16 inputs) beyond the FP32 accumulation budget (max |err| "
                          f"{max_abs_err:.3g})")
    return 0


def onnx_share(kernel):
    """The words naming the share budget of a model with attention of computed
    operands (``rdu.onnx.kernel.compare``: a share per such attention), or nothing."""
    from rdu.onnx.kernel import ATTENTION_SHARE, computed_attention
    graph = getattr(getattr(kernel, "imported", None), "graph", None)
    count = computed_attention(graph) if graph is not None else 0
    if not count:
        return ""
    return f"or {count * ATTENTION_SHARE:.0%} of its largest output "


def save_run(save, program, inputs, results, report):
    """``--save``: every input and output as a .npy file in ``save``, the report beside
    them; the report says which dtype each file holds (``report["saved"]``)."""
    files = {}
    for tensor, words in inputs.items():
        if np.asarray(words).dtype == np.int64:        # token ids (rdu.onnx.lookup)
            np.save(save / f"{tensor}.npy", words)
            files[f"{tensor}.npy"] = "int64 (token ids)"
            continue
        np.save(save / f"{tensor}.npy", np.asarray(words, np.uint32).view(np.float32))
        files[f"{tensor}.npy"] = "float32 (the BF16 input values)"
    for tensor, values in results.items():
        np.save(save / f"{tensor}.npy", values)
        stored = getattr(program, "tensors", {}).get(tensor, {}).get("dtype")
        files[f"{tensor}.npy"] = str(np.asarray(values).dtype) + (
            " (the BF16 output values)" if stored == "bf16" else "")
    report["saved"] = f"{save}: " + ", ".join(f"{name} {dtype}"
                                              for name, dtype in files.items())
    (save / "report.json").write_text(json.dumps(report, indent=1))


def cmd_sim(args):
    """The main job: a GEMM on the default machine under Verilator (``make sim``)."""
    args.target, args.sim = "gemm", "verilator"
    return cmd_run(args)


def add_run_options(cmd, sim_choice=True):
    """The options of a run: seed, execution and back end (``sim_choice``), watchdog,
    where the data and waves go, JSON."""
    cmd.add_argument("--seed", type=int, default=1,
                     help="seed of the random inputs and of the simulation")
    if sim_choice:
        cmd.add_argument("--execution", choices=list(EXECUTIONS), default="fused",
                         help="fused: the kernel as one configuration; unfused: one "
                              "configuration per operator, intermediates through HBM, "
                              "the launches run by the on-chip orchestrator; "
                              "unfused-host: the same launched one by one by the host "
                              "(docs/fusion.md)")
        cmd.add_argument("--sim", choices=list(SIMULATORS),
                         default="model",
                         help="model: the functional model (seconds, no cycles); "
                              "verilator: the RTL (cycle-accurate) under cocotb; "
                              "native: the same RTL and cycles with the memory models "
                              "in C++, several times faster "
                              "(docs/simulation-speed.md); ip: the RTL as an "
                              "IP block, driven over AXI4-Lite on cocotbext-axi models "
                              "(docs/ip.md)")
    cmd.add_argument("--timeout", type=int, metavar="CYCLES",
                     help="watchdog: cycles a launch may take (default: 4x an "
                          "estimate from the program)")
    cmd.add_argument("--no-windows", dest="windows", action="store_false",
                     help="run without memory windows (default: every launch, copy and "
                          "schedule confined to the regions its manifest declares; an "
                          "access elsewhere ends with WINDOW)")
    cmd.add_argument("--save", metavar="DIR",
                     help="write the inputs, outputs (.npy) and the report to DIR")
    cmd.add_argument("--operators", action="store_true",
                     help="an ONNX model of several configurations: a table of its "
                          "operators, each with the configurations, units and cycles it "
                          "takes and its error against onnxruntime (report['operators'])")
    cmd.add_argument("--waves", metavar="FILE",
                     help="write the waveform (verilator, native or ip; .fst, or "
                          ".vcd without the FST libraries)")
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")


def add_parsers(commands):
    """``rdu run`` and ``rdu sim`` on the subparsers object ``commands``."""
    run = add_command(commands, "run", "run a kernel or a program file and check its result",
                      "Compile (KERNEL) or read (PROGRAM file) a program, run it on the "
                      "functional model or the RTL, check the result against numpy.")
    add_kernel_options(run, run=True)
    add_run_options(run)
    run.set_defaults(func=cmd_run)

    sim = add_command(commands, "sim",
                      "the main job: a GEMM on the default machine under Verilator",
                      "Run C = A B (BF16 in, FP32 out) on the RTL of the default machine "
                      "(the first run builds it), check it against numpy and report cycles "
                      "and utilisation: what 'make sim' runs.")
    for name, default in (("m", 64), ("n", 64), ("k", 64)):
        sim.add_argument(f"--{name}", type=int, default=default, metavar=name.upper(),
                         help=f"GEMM {name.upper()}")
    sim.add_argument("--a", metavar="A.npy", help="A as a float .npy array")
    sim.add_argument("--b", metavar="B.npy", help="B as a float .npy array")
    add_machine_options(sim, defaults=True)
    add_run_options(sim, sim_choice=False)
    sim.set_defaults(func=cmd_sim)

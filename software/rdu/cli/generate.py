"""``rdu generate MODEL.onnx --prompt 1,2,3 --tokens N``: greedy token generation of a
causal LM on the functional model or the RTL, checked against onnxruntime at every run
(``docs/generate.md``)."""

from pathlib import Path

from rdu.apps.generate import GenerateConfig, generate
from rdu.cli.common import (
    CommandError,
    WrongResult,
    add_command,
    add_machine_options,
    bind_dims,
    machine_for,
    print_report,
)
from rdu.runtime import BACKENDS


def _ids(text):
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--prompt {text}: give token ids separated by commas "
                           f"(1,2,3)") from None
    return ids


def _print_stages(stages):
    """The per-configuration split of a token's cycles, one aligned line each."""
    if not stages:
        return
    width = max(len(row["stage"]) for row in stages)
    print(f"\n{'configuration':<{width}}  {'load':>6}  {'execute':>8}  {'HBM bytes':>10}")
    for row in stages:
        print(f"{row['stage']:<{width}}  {row['load_cycles']:>6}  {row['cycles']:>8}  "
              f"{row['hbm_bytes']:>10}")


def cmd_generate(args):
    """``rdu generate``: generate, check every run, report; exit 1 on a difference."""
    if not Path(args.model).is_file():
        raise CommandError(f"{args.model}: no such file")
    config = GenerateConfig(model=args.model, prompt=_ids(args.prompt), tokens=args.tokens,
                            sim=args.sim, capacity=args.capacity, dims=bind_dims(args.bind),
                            machine=machine_for(args, {"agcus": 4}), seed=args.seed,
                            check=not args.no_check, progress=args.progress,
                            save=args.save)
    report, ok = generate(config)
    if args.json:
        print_report(report, True)
    else:
        print_report({k: v for k, v in report.items() if k != "stages"}, False)
        _print_stages(report.get("stages"))
    if not ok:
        raise WrongResult(report["failure"])
    return 0


def add_parsers(commands):
    """``rdu generate`` on the subparsers object ``commands``."""
    cmd = add_command(commands, "generate", "greedy token generation of an ONNX causal LM",
                      "Compile one decode step of MODEL.onnx (a causal LM with a KV cache, "
                      "as the exporters write it) and run it once per token on one "
                      "machine and memory: the prompt a token at a time, then TOKENS "
                      "greedy tokens (the last prompt token's run gives the first). Every "
                      "run is checked against onnxruntime (docs/generate.md).")
    cmd.add_argument("model", metavar="MODEL.onnx", help="the causal LM")
    cmd.add_argument("--prompt", required=True, metavar="IDS",
                     help="the prompt's token ids, separated by commas")
    cmd.add_argument("--tokens", type=int, default=8, metavar="N",
                     help="new tokens (Hugging Face's max_new_tokens)")
    cmd.add_argument("--capacity", type=int, default=None, metavar="C",
                     help="keys per head of each KV cache (default: the positions the "
                          "generation takes plus the step's padding rows, in whole tiles)")
    cmd.add_argument("--bind", action="append", metavar="NAME=VALUE",
                     help="fix a dynamic dimension of the model besides the sequence's "
                          "and the past's")
    cmd.add_argument("--sim", choices=[name for name, backend in BACKENDS.items()
                                       if backend.orchestrates and backend.schedules],
                     default="model",
                     help="model: the functional model (no cycles); verilator or native: "
                          "the RTL, every cycle")
    cmd.add_argument("--seed", type=int, default=1,
                     help="seed of the RTL's memory stall patterns")
    cmd.add_argument("--no-check", action="store_true",
                     help="skip the onnxruntime check (no onnxruntime needed)")
    cmd.add_argument("--json", action="store_true", help="print the report as JSON")
    cmd.add_argument("--save", metavar="DIR",
                     help="write the report (DIR/generate.json), each run's input token "
                          "(inputs.npy) and logits (logits.npy, runs x vocabulary)")
    cmd.add_argument("--progress", action="store_true",
                     help="show the RTL build and simulation progress on stderr")
    add_machine_options(cmd, defaults=False)
    cmd.set_defaults(func=cmd_generate)

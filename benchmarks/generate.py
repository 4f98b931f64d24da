"""Token generation of a tiny Llama on the machine (``rdu generate``, ``docs/generate.md``).

    .venv/bin/python -m benchmarks.generate [--layers 2] [--hidden 256] [--heads 4]
        [--kv-heads 2] [--ffn 688] [--vocab 512] [--prompt-length 16] [--tokens 32]
        [--seeds 1,2,3] [--sim model,native] [--rows 4] [--cols 4] [--agcus 4]
        [--capacity N] [--json]

For each seed: a tiny Llama with a KV cache (``rdu.onnx.tiny_llama``, that seed's
weights) and a prompt of seeded random ids; ``rdu generate`` runs it on each back end
(every run checked against onnxruntime; the RTL's words are the model's). The table:
the tokens (the same as onnxruntime's own greedy generation? a run whose token differs
from onnxruntime's by less than its own error is a *tie*, listed), and on the RTL the
cycles per token of the prompt's runs and of the decode runs, their program-load
cycles, the HBM bytes per token against the minimum (the weights once and the KV cache),
the share of the HBM peak of the minimum's bytes over the cycles, and tokens per second
at the report's clock. ``--capacity`` fixes the caches' keys per head (default: what
the prompt and the tokens need): the per-token figures of a long generation from a
short one, as every run reads the whole cache. ``--rows`` and ``--cols`` choose the
array (``--rows 8 --cols 8``: the issue's 8x8; its native build is one of its own).
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
from rdu.apps.generate import GenerateConfig, generate, rounded_source
from rdu.machine import Machine
from rdu.onnx.generation import reference_generate
from rdu.onnx.tiny_llama import tiny_llama

COLUMNS = ("seed", "sim", "ok", "same_tokens", "decode_cycles_per_token",
           "decode_load_cycles_per_token", "decode_hbm_bytes_per_token",
           "decode_minimum_bytes_per_token", "decode_roofline_share",
           "prefill_cycles_per_token", "tokens_per_second", "seconds")


def _reference_tokens(path, prompt, tokens):
    """onnxruntime's own greedy generation (a prefill of the prompt, then decode steps)
    of the model with the weights the machine holds."""
    import onnx
    from rdu.apps.decode_step import compile_decode_step
    held = compile_decode_step(path, Machine(agcus=4), 8 * (-(-(len(prompt) + 7) // 8))
                               ).kernel.imported.held
    return reference_generate(rounded_source(onnx.load(str(path)), held), prompt,
                              tokens).tokens


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.generate",
                                     description=__doc__.split("\n\n")[0])
    for name, default in (("layers", 2), ("hidden", 256), ("heads", 4), ("kv-heads", 2),
                          ("ffn", 688), ("vocab", 512), ("prompt-length", 16),
                          ("tokens", 32), ("rows", 4), ("cols", 4), ("agcus", 4)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--capacity", type=int, default=None,
                        help="keys per head of each cache (default: prompt + tokens - 1 "
                             "plus a tile of rows, in whole tiles)")
    parser.add_argument("--seeds", default="1,2,3", help="weights and prompt seeds")
    parser.add_argument("--sim", default="model,native", help="back ends, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    out = Path("build/generate")
    out.mkdir(parents=True, exist_ok=True)
    rows, reference = [], {}
    for seed in (int(s) for s in args.seeds.split(",")):
        import onnx
        path = out / f"tiny_llama_seed{seed}.onnx"
        onnx.save(tiny_llama(layers=args.layers, hidden=args.hidden, heads=args.heads,
                             kv_heads=args.kv_heads, ffn=args.ffn, vocab=args.vocab,
                             seed=seed, embedding="gather", kv_cache=True), str(path))
        prompt = [int(i) for i in np.random.default_rng(seed).integers(
            0, args.vocab, args.prompt_length)]
        for sim in args.sim.split(","):
            start = time.perf_counter()
            report, _ = generate(GenerateConfig(model=str(path), prompt=prompt,
                                                tokens=args.tokens, sim=sim,
                                                capacity=args.capacity,
                                                machine=Machine(rows=args.rows,
                                                                cols=args.cols,
                                                                agcus=args.agcus)))
            report.update(seed=seed, seconds=round(time.perf_counter() - start))
            report["reference_tokens"] = reference[seed] = reference.get(seed) or \
                _reference_tokens(path, prompt, args.tokens)
            report["same_tokens"] = report["tokens"] == report["reference_tokens"]
            rows.append(report)
            print(json.dumps(report) if args.json else
                  "  ".join(f"{key}={report.get(key)}" for key in COLUMNS), flush=True)
    return 0 if all(row["ok"] and row["same_tokens"] for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())

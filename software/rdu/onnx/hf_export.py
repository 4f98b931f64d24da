"""Export Hugging Face ``LlamaForCausalLM`` of a small random config with PyTorch's dynamo
exporter (``docs/onnx.md``, "Models exported by PyTorch"): the fixtures of
``tests/data/`` and the configurations of the table there.

Runs where torch and transformers are installed (not the project's environment: nothing
imports this module)::

    python -m rdu.onnx.hf_export --hidden 64 --heads 4 --kv-heads 2 --ffn 128 \\
        --vocab 64 --seq 16 --input embeds -o tests/data/hf_llama_embeds.onnx
    python -m rdu.onnx.hf_export --cache --hidden 32 --heads 2 --kv-heads 1 --ffn 64 \\
        --vocab 64 -o tests/data/hf_llama_cache.onnx

One decoder layer by default; eager attention (``--attention sdpa``: PyTorch's
``scaled_dot_product_attention``); opset 18; batch 1, static shapes; the model's
input ``inputs_embeds`` (1, L, hidden) (``--input embeds``) or ``input_ids`` (1, L)
(``--input ids``), its output ``logits`` (1, L, vocab). Weights: HF's initialisation
with ``initializer_range`` ``--std`` (seeded by ``--seed``), the RMSNorm weights
(ones in HF) ``1 + N(0, 0.25^2)`` so that the three norms differ. The file holds its
weights (no external data); the nodes' ``metadata_props`` (the exporter's stack traces
and module names) are dropped.
"""

import argparse
import sys
import tempfile
from pathlib import Path

__all__ = ["export", "main"]


def _model(args):
    """The seeded random ``LlamaForCausalLM`` of ``args`` (eval mode)."""
    import torch
    import transformers
    config = transformers.LlamaConfig(
        vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.ffn,
        num_hidden_layers=args.layers, num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads or args.heads,
        max_position_embeddings=args.max_positions or max(64, args.seq),
        initializer_range=args.std,
        attn_implementation=args.attention, tie_word_embeddings=args.tie)
    torch.manual_seed(args.seed)
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(1 + 0.25 * torch.randn_like(parameter))
    return model


def _cache_body(model, layers):
    """``(module, example, names, dynamic shapes)`` of the model with a KV cache: the
    past of every layer a pair of inputs, put into a ``DynamicCache``."""
    import torch
    from torch.export import Dim
    from transformers import DynamicCache
    config = model.config

    class Body(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, position_ids, *past):
            cache = DynamicCache(config=config)
            for layer in range(layers):
                cache.update(past[2 * layer], past[2 * layer + 1], layer)
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                             position_ids=position_ids, past_key_values=cache,
                             use_cache=True)
            presents = []
            for layer in out.past_key_values.layers:
                presents += [layer.keys, layer.values]
            return (out.logits, *presents)

    past_length, length = 3, 5              # over 1: not specialised by torch.export
    heads = config.num_key_value_heads
    dim = config.hidden_size // config.num_attention_heads
    example = (torch.randint(0, config.vocab_size, (1, length)),
               torch.ones(1, past_length + length, dtype=torch.int64),
               torch.arange(past_length, past_length + length)[None],
               *[torch.randn(1, heads, past_length, dim) for _ in range(2 * layers)])
    past = [f"past_key_values.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    names = (["input_ids", "attention_mask", "position_ids", *past],
             ["logits", *[name.replace("past_key_values", "present") for name in past]])
    dynamic = ({1: Dim.DYNAMIC},) * 3 + (({2: Dim.DYNAMIC},) * (2 * layers),)   # *past
    return Body(model).eval(), example, names, dynamic


def export(args):
    """Write the ONNX model ``args`` describe to ``args.output`` (one file)."""
    import onnx
    import torch
    import transformers
    model = _model(args)
    if args.cache:
        body, example, (inputs, outputs), dynamic = _cache_body(model, args.layers)
        with tempfile.TemporaryDirectory() as scratch:
            path = Path(scratch) / "model.onnx"
            torch.onnx.export(body, example, str(path), opset_version=18, dynamo=True,
                              input_names=inputs, output_names=outputs,
                              dynamic_shapes=dynamic)
            exported = onnx.load(str(path))
        onnx.helper.set_model_props(exported, {"max_position_embeddings": str(
            model.config.max_position_embeddings)})
        return _save(exported, args, torch, transformers)
    keyword = "inputs_embeds" if args.input == "embeds" else "input_ids"

    class Body(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(**{keyword: x}, use_cache=False).logits

    example = (torch.randn(1, args.seq, args.hidden) if args.input == "embeds" else
               torch.randint(0, args.vocab, (1, args.seq)))
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "model.onnx"
        torch.onnx.export(Body(model).eval(), (example,), str(path), opset_version=18,
                          dynamo=True, input_names=[keyword], output_names=["logits"])
        exported = onnx.load(str(path))             # with its external data
    return _save(exported, args, torch, transformers)


def _save(exported, args, torch, transformers):
    import onnx
    for node in exported.graph.node:                # the exporter's stack traces
        del node.metadata_props[:]
    exported.doc_string = (f"rdu.onnx.hf_export {' '.join(sys.argv[1:])} (torch "
                           f"{torch.__version__}, transformers {transformers.__version__})")
    onnx.save(exported, str(args.output), save_as_external_data=False)
    return args.output


def main(argv=None):
    """``python -m rdu.onnx.hf_export``: 0, or 2 with one line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m rdu.onnx.hf_export",
                                     description=__doc__.split("\n\n")[0])
    for name, default in (("layers", 1), ("hidden", 64), ("heads", 4), ("kv-heads", 0),
                          ("ffn", 128), ("vocab", 64), ("seq", 16), ("seed", 0)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--std", type=float, default=0.1,
                        help="HF's initializer_range (the weights' standard deviation)")
    parser.add_argument("--attention", choices=("eager", "sdpa"), default="eager")
    parser.add_argument("--input", choices=("embeds", "ids"), default="embeds")
    parser.add_argument("--cache", action="store_true",
                        help="the model with a KV cache (past_key_values in, present out; "
                             "L and P dynamic)")
    parser.add_argument("--max-positions", type=int, default=0,
                        help="max_position_embeddings (0: max(64, --seq))")
    parser.add_argument("--tie", action="store_true",
                        help="the LM head shares the embedding table (Llama 3.2's)")
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        path = export(args)
    except (ValueError, ImportError, RuntimeError) as error:
        text = str(error).strip().splitlines()
        print(f"{parser.prog}: error: {text[0] if text else type(error).__name__}",
              file=sys.stderr)
        return 2
    print(f"{path}: {path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

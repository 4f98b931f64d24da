"""Greedy generation with onnxruntime: the reference the machine's ``rdu generate`` will
be checked against (``docs/onnx.md``, "A KV cache").

:func:`reference_generate` runs a causal LM with a KV cache as the exporters write it
(inputs ``input_ids``, ``position_ids`` and/or ``attention_mask``,
``past_key_values.{i}.key`` and ``.value``; outputs ``logits``, ``present.{i}.key`` and
``.value``): the prefill of the prompt (an empty past), then greedy decode steps of one
token each, every step's ``present`` fed back as the next one's past::

    python -m rdu.onnx.generation MODEL.onnx --prompt 1,2,3 --tokens 8

``tokens`` new tokens (as Hugging Face's ``max_new_tokens``): the prefill gives the
first, each of the ``tokens - 1`` decode steps one more. A prompt (with the tokens) longer
than the model's ``max_position_embeddings`` (its metadata, when it has it) and a token
id outside the vocabulary are one line (:class:`GenerationError`; exit 2 from the
command line).
"""

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

from .cache import is_past
from .importer import cpu_session, load_model

__all__ = ["reference_generate", "Generation", "GenerationError", "cache_session",
           "run_step", "past_of", "main"]


class GenerationError(ValueError):
    """Bad input to a generation: one line."""


@dataclass
class Generation:
    """What :func:`reference_generate` returns: ``tokens`` (the new ones), ``logits``
    (each step's ``(L, vocab)`` float32: the prefill's ``L`` is the prompt's, a decode
    step's 1), ``presents`` (the last step's ``{name: (1, G, P + L, D)}``)."""
    tokens: list
    logits: list = field(default_factory=list)
    presents: dict = field(default_factory=dict)


class _Session:
    """An onnxruntime session of a cache model and what it takes."""

    def __init__(self, source):
        model, self.label = load_model(source)
        self.session = cpu_session(model)
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.past = [name for name in self.inputs if is_past(name)]
        if "input_ids" not in self.inputs or "logits" not in self.outputs:
            raise GenerationError(f"{self.label}: generation takes a model of input_ids "
                                  f"in and logits out (inputs: {', '.join(self.inputs)})")
        meta = {p.key: p.value for p in model.metadata_props}
        self.max_positions = int(meta["max_position_embeddings"]) if \
            "max_position_embeddings" in meta else None
        self.vocab = self.session.get_outputs()[self.outputs.index("logits")].shape[-1]
        if not isinstance(self.vocab, int):
            raise GenerationError(f"{self.label}: logits of a dynamic vocabulary")

    def empty_past(self):
        past = {}
        for name in self.past:
            shape = self.inputs[name].shape
            if len(shape) != 4 or not all(isinstance(d, int) for d in (shape[1], shape[3])):
                raise GenerationError(f"{self.label}: past input {name} of shape {shape}; "
                                      f"supported: (1, key/value heads, past length, head "
                                      f"dimension), heads and dimension static")
            past[name] = np.zeros((1, shape[1], 0, shape[3]), np.float32)
        return past


def cache_session(source):
    """The onnxruntime session of the cache model ``source`` (a path or a ModelProto),
    for :func:`run_step`."""
    return _Session(source)


def run_step(session, ids, past, start):
    """One run of ``session``: the tokens ``ids`` at positions ``start, start + 1, ...``
    after the ``past`` (``{past input: (1, G, start, D)}``, empty for a prefill):
    ``(logits (L, vocab), {present output: array})``."""
    ids = np.asarray(ids, np.int64).reshape(1, -1)
    length = ids.shape[1]
    feed = {"input_ids": ids, **past}
    if "position_ids" in session.inputs:
        feed["position_ids"] = np.arange(start, start + length, dtype=np.int64)[None]
    if "attention_mask" in session.inputs:
        feed["attention_mask"] = np.ones((1, start + length), np.int64)
    results = dict(zip(session.outputs, session.session.run(None, feed), strict=True))
    presents = {name: value for name, value in results.items() if name != "logits"}
    return np.asarray(results["logits"], np.float32)[0], presents


def past_of(session, presents):
    """The next step's past: ``present.{i}.key`` fed as ``past_key_values.{i}.key``."""
    past = {}
    for name in session.past:
        present = "present" + name[name.index("."):] if "." in name else None
        if present not in presents:
            raise GenerationError(f"{session.label}: no output {present} for the past "
                                  f"input {name}")
        past[name] = presents[present]
    return past


def reference_generate(model_path, prompt_ids, tokens, session=None):
    """Greedy generation with onnxruntime (CPU, one thread) of the cache model at
    ``model_path``: the prefill of ``prompt_ids``, then ``tokens - 1`` decode steps
    feeding each step's ``present`` back as the past; a :class:`Generation`. One line
    (:class:`GenerationError`) for an empty prompt, fewer than one token, an id outside
    the vocabulary, or more positions than the model's ``max_position_embeddings``."""
    session = session or _Session(model_path)
    prompt = [int(i) for i in np.asarray(prompt_ids).ravel()]
    if not prompt:
        raise GenerationError(f"{session.label}: an empty prompt")
    if tokens < 1:
        raise GenerationError(f"{session.label}: --tokens {tokens}; at least 1")
    for index, token in enumerate(prompt):
        if not 0 <= token < session.vocab:
            raise GenerationError(f"{session.label}: prompt token {token} at {index} is "
                                  f"outside the vocabulary of {session.vocab}")
    total = len(prompt) + tokens - 1            # the positions the steps feed
    if session.max_positions is not None and total > session.max_positions:
        raise GenerationError(f"{session.label}: a prompt of {len(prompt)} tokens and "
                              f"{tokens} new ones take {total} positions; the model has "
                              f"{session.max_positions} (max_position_embeddings)")
    result = Generation([])
    past, ids, start = session.empty_past(), prompt, 0
    for _ in range(tokens):
        logits, presents = run_step(session, ids, past, start)
        token = int(np.argmax(logits[-1]))
        result.tokens.append(token)
        result.logits.append(logits)
        result.presents = presents
        start += len(ids)
        ids = [token]
        past = past_of(session, presents) if session.past else past
    return result


def main(argv=None):
    """``python -m rdu.onnx.generation MODEL --prompt 1,2,3 --tokens N``: the tokens, or
    exit 2 with one line on stderr."""
    parser = argparse.ArgumentParser(prog="python -m rdu.onnx.generation",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="the ONNX model with a KV cache")
    parser.add_argument("--prompt", required=True, help="token ids, comma-separated")
    parser.add_argument("--tokens", type=int, default=8, help="new tokens")
    args = parser.parse_args(argv)
    try:
        prompt = [int(t) for t in args.prompt.split(",")]
    except ValueError:
        print(f"{parser.prog}: error: --prompt {args.prompt}: token ids separated by "
              f"commas", file=sys.stderr)
        return 2
    try:
        result = reference_generate(args.model, prompt, args.tokens)
    except (GenerationError, ValueError) as error:
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 2
    print(",".join(str(t) for t in result.tokens))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Token generation on the machine (``docs/generate.md``): ``rdu generate MODEL.onnx
--prompt 1,2,3 --tokens N``.

One decode step (:func:`rdu.apps.decode_step.compile_decode_step`) is compiled once
and run once per token on one machine and memory (:func:`rdu.runtime.run_generation`):
run ``r`` is at position ``r``, its input the prompt's token ``r`` while the prompt
lasts (the prompt is fed a token at a time), then the token the run before generated
(the argmax of its logits). Weights, tables and the caches are written once; per run the
host writes the token's rows and reads the logits.

Every run is checked against onnxruntime (the model with the weights the machine holds,
rounded to BF16) on the same inputs, a step at a time with its own cache: the logits
within :data:`rdu.onnx.kernel.ATTENTION_SHARE` of the largest per attention (layer),
and the same greedy token. The first run that differs stops the check with one line
naming the run, the token and the error (exit 1).
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..machine import Machine
from ..onnx.generation import cache_session, past_of, run_step
from ..onnx.importer import load_model
from ..onnx.kernel import ATTENTION_SHARE, computed_attention
from ..onnx.values import OnnxImportError
from ..runtime import LogitsOutput, TokenInput, run_generation
from ..runtime.results import roofline
from .decode_step import compile_decode_step
from .onnx_views import bf16, floats

__all__ = ["GenerateConfig", "GenerateError", "generate", "default_capacity",
           "rounded_source", "minimum_bytes", "verdict", "REPORT_CLOCK_MHZ"]

#: The clock the report's tokens per second assume: the FPGA target of the pipelined
#: datapath (issue #31, ``docs/fpga.md``); cycles are reported too, for any other.
REPORT_CLOCK_MHZ = 100


class GenerateError(ValueError):
    """Bad input to a generation (one line, exit 2)."""


@dataclass
class GenerateConfig:
    """A generation: ``model`` (path), ``prompt`` (token ids), ``tokens`` (new ones, as
    Hugging Face's ``max_new_tokens``), ``sim`` (a back end), ``capacity`` (keys per
    head of each cache; default: :func:`default_capacity`), ``dims`` (``--bind``),
    ``machine``, ``seed`` (the RTL's stall patterns), ``check`` (against
    onnxruntime), ``save`` (a directory: the report, and each run's input token and
    logits as ``.npy``)."""
    model: str
    prompt: list
    tokens: int
    sim: str = "model"
    capacity: int = None
    dims: dict = field(default_factory=dict)
    machine: Machine = None
    seed: int = 1
    check: bool = True
    work_dir: object = None
    progress: bool = False
    save: object = None


def default_capacity(runs, rows):
    """Keys per head a generation of ``runs`` runs needs: the last run's position plus
    its ``rows`` rows, in whole tiles."""
    return -(-(runs - 1 + rows) // rows) * rows


def rounded_source(model, held):
    """A copy of ModelProto ``model`` with the initializers named in ``held`` rounded to
    BF16 (the weights as the machine holds them), in their own element type."""
    from onnx import numpy_helper
    copy = type(model)()
    copy.CopyFrom(model)
    for init in copy.graph.initializer:
        if init.name in held:
            array = numpy_helper.to_array(init)
            rounded = floats(bf16(np.asarray(array, np.float32))).reshape(
                array.shape).astype(array.dtype)
            init.CopyFrom(numpy_helper.from_array(rounded, init.name))
    return copy


def _vocabulary(config):
    """The vocabulary of the model's ``logits`` (their last dimension, static), or None
    when the model does not say."""
    model, _ = load_model(config.model)
    for output in model.graph.output:
        if output.name == "logits":
            dims = output.type.tensor_type.shape.dim
            return dims[-1].dim_value or None if len(dims) else None
    return None


def _checked(config, vocabulary, capacity, rows):
    """The prompt's ids checked against the vocabulary and the cache (one line each),
    before anything is compiled."""
    if not config.prompt:
        raise GenerateError(f"{config.model}: --prompt: an empty prompt")
    if config.tokens < 1:
        raise GenerateError(f"{config.model}: --tokens {config.tokens}: at least 1")
    for index, token in enumerate(config.prompt):
        if token < 0 or (vocabulary is not None and token >= vocabulary):
            raise GenerateError(f"{config.model}: --prompt: token {token} at {index} is "
                                f"outside the vocabulary of {vocabulary}")
    runs = len(config.prompt) + config.tokens - 1
    positions = capacity - rows + 1
    if runs > positions:
        raise GenerateError(f"{config.model}: a prompt of {len(config.prompt)} tokens and "
                            f"{config.tokens} new ones take {runs} positions; the cache of "
                            f"{capacity} keys holds {positions} (--capacity)")
    return runs


def _reference(config, step, inputs):
    """onnxruntime's logits of every run (the same inputs, a step at a time)."""
    model, _ = load_model(config.model)
    session = cache_session(rounded_source(model, step.kernel.imported.held))
    past, logits = session.empty_past(), []
    for position, token in enumerate(inputs):
        out, presents = run_step(session, [token], past, position)
        logits.append(np.asarray(out, np.float32).reshape(-1))
        past = past_of(session, presents)
    return logits


def _check(config, step, result):
    """The runs against onnxruntime's on the same inputs: ``{"ok", "failure" (the first
    run off its budget, or None), "errors" (per run), "chosen" (onnxruntime's argmax
    per run), "ties" (runs whose token is not onnxruntime's)}``.

    A run fails when a logit is off by more than :data:`ATTENTION_SHARE` per layer of
    the largest. Within that budget a token that is not onnxruntime's is a *tie*: the
    two logits are closer in onnxruntime's own run than twice the run's error, so the
    BF16 arithmetic may break it either way (:func:`verdict`); it is reported, and the
    check goes on with the machine's tokens."""
    inputs = [run.token for run in result.runs]
    reference = _reference(config, step, inputs)
    layers = computed_attention(step.kernel.imported.graph) or 1
    found = {"ok": True, "failure": None, "errors": [], "ties": [],
             "chosen": [int(np.argmax(ref)) for ref in reference]}
    for index, (run, ref) in enumerate(zip(result.runs, reference, strict=True)):
        budget = ATTENTION_SHARE * layers * float(np.abs(ref).max())
        what, error, tie = verdict(run.logits, ref, budget,
                                   index >= len(config.prompt) - 1)
        found["errors"].append(round(error, 6))
        if tie is not None:
            found["ties"].append({"run": index, **tie})
        if what is not None and found["failure"] is None:
            found["ok"] = False
            found["failure"] = (f"run {index} (position {run.position}, token {run.token}): "
                                f"{what} (max abs error {error:.4g}, budget {budget:.4g})")
    return found


def verdict(logits, reference, budget, generated=True):
    """``(what is wrong or None, max abs error, tie or None)`` of a run's ``logits``
    against onnxruntime's ``reference`` (:func:`_check`): wrong when an element is off
    by more than ``budget``. Within it, an argmax that is not onnxruntime's
    (``generated``: the run's token is used) is a tie, ``{"token", "onnxruntime",
    "margin", "error"}``: onnxruntime's logit of our token trails its own choice by
    ``margin``, which the run's own ``error`` explains (it is at most twice it)."""
    got = np.asarray(logits, np.float64)
    ref = np.asarray(reference, np.float64)
    error = float(np.abs(got - ref).max())
    if not error <= budget:                 # NaN logits are wrong too
        return "logits", error, None
    ours, theirs = int(np.argmax(got)), int(np.argmax(ref))
    if not generated or ours == theirs:
        return None, error, None
    return None, error, {"token": ours, "onnxruntime": theirs,
                         "margin": round(float(ref[theirs] - ref[ours]), 6),
                         "error": round(error, 6)}


def _run_figures(run):
    """``(load cycles, HBM bytes)`` of a run's launches."""
    launches = [item.launch for item in run.steps if item.launch is not None]
    loads = sum(launch.load_cycles or 0 for launch in launches)
    hbm = sum(launch.memory_bytes.get("hbm", {}).get("read_bytes", 0) +
              launch.memory_bytes.get("hbm", {}).get("write_bytes", 0) for launch in launches)
    return loads, hbm


def minimum_bytes(step, position):
    """The HBM bytes a run at ``position`` cannot do without: every weight once (as the
    machine holds it: BF16, FP32 tables; not a weight the importer derived from another
    by ``rotate_half``, :mod:`rdu.onnx.rotary`: the model holds it once) and each
    layer's K and V of the ``position + 1`` keys it attends to, read, and its new row
    written."""
    inputs = step.kernel.imported.graph.inputs
    weights = sum(np.size(words) * (2 if inputs[name].dtype == "bf16" else 4)
                  for name, words in step.kernel.weight_words().items()
                  if "rotation_of" not in inputs[name].attrs)
    cache = sum(2 * cache["kv_heads"] * cache["dim"] * 2 * (position + 2)
                for cache in step.plan.caches)
    return weights + cache


def _stage_cycles(step, runs):
    """Per configuration of the step, averaged over ``runs``: its name, load and
    execution cycles and HBM bytes (the split of a token's cycles)."""
    rows = []
    for index, stage in enumerate(step.sequence.stages):
        launches = [[item.launch for item in run.steps if item.launch is not None][index]
                    for run in runs]
        hbm = [launch.memory_bytes.get("hbm", {}) for launch in launches]
        rows.append({"stage": stage.name,
                     "load_cycles": round(np.mean([x.load_cycles or 0 for x in launches])),
                     "cycles": round(np.mean([x.cycles or 0 for x in launches])),
                     "hbm_bytes": round(np.mean([h.get("read_bytes", 0) +
                                                 h.get("write_bytes", 0) for h in hbm]))})
    return rows


def _figures(step, result, prompt):
    """Cycles, loads, HBM bytes and shares of the runs (RTL), by prefill (the prompt's
    runs) and decode (the rest)."""
    machine = step.sequence.machine
    runs = result.runs
    figures = {"configurations_per_token": len(step.sequence.stages),
               "sim_seconds": round(result.seconds, 1)}
    if runs[0].cycles is None:
        return figures
    work = roofline(step.sequence.programs)       # the MACs of one run's programs
    for label, part in (("prefill", runs[:len(prompt)]), ("decode", runs[len(prompt):])):
        if not part:
            continue
        cycles = sum(run.cycles for run in part)
        loads, hbm = (sum(values) for values in zip(*(_run_figures(run) for run in part),
                                                     strict=True))
        figures[f"{label}_cycles_per_token"] = round(cycles / len(part))
        figures[f"{label}_load_cycles_per_token"] = round(loads / len(part))
        figures[f"{label}_hbm_bytes_per_token"] = round(hbm / len(part))
        figures[f"{label}_hbm_peak_share"] = round(
            hbm / (cycles * machine.hbm_bytes_per_cycle), 4)
        figures[f"{label}_mac_peak_share"] = round(
            len(part) * work.macs / (cycles * machine.macs_per_cycle), 4)
        least = sum(minimum_bytes(step, run.position) for run in part)
        figures[f"{label}_minimum_bytes_per_token"] = round(least / len(part))
        figures[f"{label}_roofline_share"] = round(
            least / (cycles * machine.hbm_bytes_per_cycle), 4)
    figures["stages"] = _stage_cycles(step, runs[len(prompt):] or runs)
    figures["tokens_per_second"] = round(
        REPORT_CLOCK_MHZ * 1e6 / (sum(run.cycles for run in runs) / len(runs)), 1)
    figures["clock_mhz"] = REPORT_CLOCK_MHZ
    return figures


def generate(config):
    """Run ``config``; ``(report, ok)``: ``ok`` False when a run differs from
    onnxruntime (the report's ``failure`` says where)."""
    machine = config.machine or Machine(agcus=4)
    capacity = config.capacity or default_capacity(len(config.prompt) + config.tokens - 1,
                                                   machine.lanes)
    if capacity % machine.lanes or capacity < machine.lanes:
        raise GenerateError(f"{config.model}: a cache of {capacity} keys; supported: a "
                            f"multiple of the {machine.lanes} lanes")
    try:
        _checked(config, _vocabulary(config), capacity, machine.lanes)
        step = compile_decode_step(config.model, machine, capacity, config.dims)
    except OnnxImportError as error:
        raise GenerateError(str(error)) from None
    _checked(config, step.vocabulary, capacity, machine.lanes)
    images = step.token_images()
    tables = [np.stack([step.token_words(t)[i] for t in range(step.vocabulary)])
              for i in range(len(images))]
    token_input = [TokenInput(address, table) for (_, _, address), table in
                   zip(images, tables, strict=True)]
    launch, output, words = step.logits_words()
    result = run_generation(step.steps(config.prompt[0]), config.sim,
                            token_input=token_input,
                            logits=LogitsOutput(launch, output, words),
                            prompt=list(config.prompt), count=config.tokens,
                            machine=machine, seed=config.seed, work_dir=config.work_dir,
                            progress=config.progress)
    report = {"model": config.model, "sim": config.sim, "machine": machine.describe(),
              "prompt": list(config.prompt), "tokens": list(result.tokens),
              "capacity": step.capacity, "runs": len(result.runs)}
    ok = True
    if config.check:
        found = _check(config, step, result)
        ok = found["ok"]
        report["onnxruntime_tokens"] = found["chosen"][len(config.prompt) - 1:]
        report["ok"] = ok
        report["max_abs_err"] = max(found["errors"])
        report["ties"] = found["ties"]
        if found["failure"]:
            report["failure"] = found["failure"]
    report.update(_figures(step, result, config.prompt))
    if config.save is not None:
        out = Path(config.save)
        out.mkdir(parents=True, exist_ok=True)
        np.save(out / "logits.npy", np.stack([run.logits for run in result.runs]))
        np.save(out / "inputs.npy", np.asarray([run.token for run in result.runs], np.int64))
        (out / "generate.json").write_text(json.dumps(report, indent=1))
    return report, ok

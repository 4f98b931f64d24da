"""Token generation (``rdu generate``, ``docs/generate.md``): one decode step of an ONNX
causal LM compiled once and run per token, its KV cache appended in HBM at the launch's
position, checked against onnxruntime a run at a time; the native RTL's words against
the functional model's."""

import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from rdu.apps.decode_step import compile_decode_step  # noqa: E402
from rdu.apps.generate import GenerateConfig, generate, rounded_source  # noqa: E402
from rdu.cli import main  # noqa: E402
from rdu.frontend.attention import NEG_BIG  # noqa: E402
from rdu.machine import Machine  # noqa: E402
from rdu.onnx.generation import (  # noqa: E402
    cache_session,
    past_of,
    reference_generate,
    run_step,
)
from rdu.onnx.tiny_llama import tiny_llama  # noqa: E402
from rdu.runtime import LogitsOutput, TokenInput, run_generation  # noqa: E402

MACHINE = Machine(agcus=4)
PROMPT = [5, 17, 3]


@pytest.fixture(scope="module")
def kv_model(tmp_path_factory):
    """A one-layer tiny Llama with a KV cache: 4 query heads on 2 key/value heads, a
    vocabulary of 64."""
    path = tmp_path_factory.mktemp("generate") / "kv.onnx"
    onnx.save(tiny_llama(heads=4, kv_heads=2, vocab=64, embedding="gather", kv_cache=True),
              str(path))
    return path


@pytest.fixture(scope="module")
def step(kv_model):
    return compile_decode_step(kv_model, MACHINE, 16)


def _generation(step, sim, prompt, count, read_back=()):
    images = step.token_images()
    tables = [np.stack([step.token_words(t)[i] for t in range(step.vocabulary)])
              for i in range(len(images))]
    launch, output, words = step.logits_words()
    return run_generation(step.steps(prompt[0]), sim,
                          token_input=[TokenInput(address, table) for (_, _, address), table
                                       in zip(images, tables, strict=True)],
                          logits=LogitsOutput(launch, output, words), prompt=prompt,
                          count=count, read_back=read_back)


def test_generation_is_onnxruntimes_greedy_generation(kv_model, tmp_path, capsys):
    """Three prompt tokens and five new ones on the functional model (``rdu generate
    --json --save DIR``): every run's logits within budget of onnxruntime's on the same
    inputs (the BF16 weights the machine holds), the tokens those of onnxruntime's own
    greedy generation (a prefill of the prompt, then decode steps); the report on
    stdout and in DIR, each run's input token and logits as .npy."""
    import json
    assert main(["generate", str(kv_model), "--prompt", ",".join(map(str, PROMPT)),
                 "--tokens", "5", "--json", "--save", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and not report["ties"]
    assert report["runs"] == len(PROMPT) + 5 - 1 and report["capacity"] == 16
    step_ = compile_decode_step(kv_model, MACHINE, 16)
    rounded = rounded_source(onnx.load(str(kv_model)), step_.kernel.imported.held)
    expected = reference_generate(rounded, PROMPT, 5).tokens
    assert report["tokens"] == report["onnxruntime_tokens"] == expected
    assert 0 < report["max_abs_err"] < 0.1
    assert report == json.loads((tmp_path / "generate.json").read_text())
    logits, inputs = np.load(tmp_path / "logits.npy"), np.load(tmp_path / "inputs.npy")
    assert logits.shape == (7, 64) and list(inputs[:3]) == PROMPT
    assert list(inputs[3:]) == report["tokens"][:4]
    assert [int(np.argmax(row)) for row in logits[2:]] == report["tokens"]


def test_a_rotation_other_than_rotate_half_generates(step, tmp_path, capsys):
    """A model whose rotary turns each head's halves the other way (``cat(x2, -x1)``, not
    HF's ``rotate_half``): no rotated copy (each rotary pair is two products, the
    second of ``W R``, where the rotate_half model's Q is one product and a copy), and
    three prompt tokens and two new ones: every run within budget of onnxruntime's
    logits for this model, its tokens onnxruntime's."""
    import json
    path = tmp_path / "reversed.onnx"
    onnx.save(tiny_llama(heads=4, kv_heads=2, vocab=64, embedding="gather", kv_cache=True,
                         rotation="reversed"), str(path))
    def names(stages):                  # tiny_llama_3_q_0 -> q_0
        return [re.sub(r"^tiny_llama_\d+_", "", stage.name) for stage in stages]
    reversed_names = names(compile_decode_step(path, MACHINE, 16).sequence.stages)
    assert "q_1" in reversed_names and not any("rotated" in n for n in reversed_names)
    assert "q_rotated" in names(step.sequence.stages)
    assert main(["generate", str(path), "--prompt", ",".join(map(str, PROMPT)),
                 "--tokens", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["tokens"] == report["onnxruntime_tokens"], report


def test_cache_rows_are_onnxruntimes_present(step, kv_model):
    """After the runs, each layer's K and V caches hold onnxruntime's ``present`` rows
    (rotary applied) at every position within BF16 rounding; K's mask column is 0 for
    the filled rows and -BIG after them, V's is 1 in every row."""
    runs = 6
    caches = step.plan.caches
    regions = [(cache[kind][0], cache[kind][1] // 4) for cache in caches for kind in "kv"]
    result = _generation(step, "model", PROMPT, runs - len(PROMPT) + 1, regions)
    session = cache_session(rounded_source(onnx.load(str(kv_model)),
                                           step.kernel.imported.held))
    past = session.empty_past()
    for position, run in enumerate(result.runs):
        _, presents = run_step(session, [run.token], past, position)
        past = past_of(session, presents)
    neg_big = np.uint32(NEG_BIG).view(np.float32)
    for layer, cache in enumerate(caches):
        for kind, name in (("k", "key"), ("v", "value")):
            address, nbytes = cache[kind]
            words = result.read(address, nbytes // 4)
            values = (np.frombuffer(words.astype("<u4").tobytes(), "<u2").astype(
                np.uint32) << 16).view(np.float32)
            theirs = presents[f"present.{layer}.{name}"][0]         # (G, runs, D)
            heads, _, dim = theirs.shape
            rows = values.reshape(heads, step.capacity, -1)
            assert np.abs(rows[:, :runs, :dim] - theirs).max() <= \
                2.0 ** -7 * np.abs(theirs).max()
            mask = rows[:, :, dim]
            if kind == "k":
                assert (mask[:, :runs] == 0).all() and (mask[:, runs:] == neg_big).all()
            else:
                assert (mask == 1.0).all()


def test_native_runs_give_the_models_words(step):
    """Two runs on the native RTL: the logits words, the tokens and the caches are the
    functional model's, bit for bit; each run counts its cycles and program loads."""
    regions = [(cache[kind][0], cache[kind][1] // 4) for cache in step.plan.caches
               for kind in "kv"]
    model = _generation(step, "model", [9], 2, regions)
    native = _generation(step, "native", [9], 2, regions)
    assert native.tokens == model.tokens
    for ours, theirs in zip(native.runs, model.runs, strict=True):
        assert np.array_equal(ours.logits.view(np.uint32), theirs.logits.view(np.uint32))
        assert ours.cycles > 0
        loads = [item.launch.load_cycles for item in ours.steps if item.launch is not None]
        assert len(loads) == len(step.sequence.stages) and all(loads)
    for address, words in regions:
        assert np.array_equal(native.read(address, words), model.read(address, words))


def test_hf_exported_model_generates(tmp_path):
    """The Hugging Face Llama exported with its cache by the dynamo exporter
    (``tests/data/hf_llama_cache.onnx``) generates as onnxruntime does."""
    from pathlib import Path
    path = Path(__file__).parent / "data" / "hf_llama_cache.onnx"
    report, ok = generate(GenerateConfig(model=str(path), prompt=[3, 1, 4], tokens=3,
                                         machine=MACHINE))
    assert ok, report.get("failure")
    assert report["tokens"] == report["onnxruntime_tokens"]


@pytest.mark.parametrize("args,message", [
    (["--prompt", "5,64"], "token 64 at 1 is outside the vocabulary of 64"),
    (["--prompt", "1,2,3", "--tokens", "7", "--capacity", "8"],
     "take 9 positions; the cache of 8 keys holds 1"),
    (["--prompt", "1,x"], "--prompt 1,x: give token ids separated by commas"),
    (["--prompt", "1", "--capacity", "12"], "a cache of 12 keys; supported: a multiple of "
                                            "the 8 lanes"),
])
def test_bad_input_is_one_line(kv_model, capsys, args, message):
    assert main(["generate", str(kv_model), *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err and "Traceback" not in err


def test_a_model_without_token_ids_is_refused(tmp_path, capsys):
    path = tmp_path / "plain.onnx"
    onnx.save(tiny_llama(heads=2, vocab=0), str(path))        # embedding rows in
    assert main(["generate", str(path), "--prompt", "1"]) == 2
    err = capsys.readouterr().err
    assert "no input 'input_ids'" in err and len(err.strip().splitlines()) == 1


def test_a_run_off_its_reference_exits_1(kv_model, capsys, monkeypatch):
    """A budget no run can meet: the first run is named, one line, exit 1."""
    import rdu.apps.generate as generate_app
    monkeypatch.setattr(generate_app, "ATTENTION_SHARE", 1e-9)
    assert main(["generate", str(kv_model), "--prompt", "5", "--tokens", "1"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "run 0 (position 0, token 5): logits" in err[0]


def test_a_token_off_onnxruntime_within_budget_is_a_tie():
    """Logits within budget whose argmax differs from onnxruntime's: a tie, with
    onnxruntime's margin between the two (at most twice the run's error); off budget,
    wrong whatever the tokens; a prompt run's token is not judged."""
    from rdu.apps.generate import verdict
    ref = np.array([1.00, 0.99, -1.0])
    what, error, tie = verdict([0.985, 0.995, -1.0], ref, budget=0.1)
    assert what is None and tie == {"token": 1, "onnxruntime": 0, "margin": 0.01,
                                    "error": 0.015}
    assert tie["margin"] <= 2 * error
    assert verdict([1.0, 0.99, -0.5], ref, budget=0.1)[0] == "logits"
    assert verdict([0.985, 0.995, -1.0], ref, 0.1, generated=False)[2] is None
    what, error, tie = verdict([1.0, 0.98, -1.0], ref, 0.1)
    assert what is None and tie is None and error == pytest.approx(0.01)
    # a NaN logit is wrong, not a tie (a NaN error is within no budget)
    assert verdict([np.nan, 0.99, -1.0], ref, 0.1)[0] == "logits"


def test_decode_step_on_the_pipelined_datapath_is_refused(tmp_path):
    """A decode step with ``fp_latency`` on is refused in one line at compile time
    (its products, norms, rotary and attention tail are laid out for tiles of one
    block), not run to wrong logits."""
    from rdu.apps.decode_step import compile_decode_step
    from rdu.machine import Machine
    from rdu.onnx.importer import OnnxImportError
    from rdu.onnx.tiny_llama import tiny_llama
    model = tiny_llama(hidden=64, heads=4, kv_heads=2, ffn=128, vocab=64, kv_cache=True,
                       embedding="gather")
    with pytest.raises(OnnxImportError, match="a decode step with fp_latency default is "
                                              r"not supported yet \(--fp-latency off\)"):
        compile_decode_step(model, Machine(agcus=4, fp_latency="default"), 16)

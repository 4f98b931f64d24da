"""Causal LMs with a KV cache (``docs/onnx.md``, "A KV cache"): the tiny Llama's
``--kv-cache`` form and HF's export with a ``DynamicCache`` (tests/data/hf_llama_cache.onnx),
their dynamic dimensions bound, the prefill run on the functional model with the
``present`` outputs checked against onnxruntime like the logits, what is refused, and the
onnxruntime generation reference checked against runs without a cache."""

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from rdu.cli import main  # noqa: E402
from rdu.onnx import OnnxImportError, generation, import_model  # noqa: E402
from rdu.onnx.tiny_llama import tiny_llama  # noqa: E402

HF_CACHE = Path(__file__).parent / "data" / "hf_llama_cache.onnx"


@pytest.fixture(scope="module")
def kv_model(tmp_path_factory):
    """The tiny Llama with a cache: 4 query and 2 key/value heads, an LM head of 64."""
    path = tmp_path_factory.mktemp("kv") / "kv.onnx"
    onnx.save(tiny_llama(heads=4, kv_heads=2, vocab=64, embedding="gather",
                         kv_cache=True), str(path))
    return path


def _dims(info):
    return [d.dim_param or d.dim_value for d in info.type.tensor_type.shape.dim]


def test_tiny_llama_kv_cache_form(kv_model):
    """The exporter's form: L and P dynamic (named), present = Concat(past, new) on axis
    2 of the keys after rotary and of the values, the mask from the attention mask's
    shape."""
    model = onnx.load(str(kv_model))
    inputs = {i.name: _dims(i) for i in model.graph.input}
    outputs = {o.name: _dims(o) for o in model.graph.output}
    assert inputs == {"input_ids": [1, "sequence_length"],
                      "position_ids": [1, "sequence_length"],
                      "attention_mask": [1, "total_sequence_length"],
                      "past_key_values.0.key": [1, 2, "past_sequence_length", 16],
                      "past_key_values.0.value": [1, 2, "past_sequence_length", 16]}
    assert outputs["present.0.key"] == [1, 2, "total_sequence_length", 16]
    assert outputs["logits"] == [1, "sequence_length", 64]
    nodes = {n.output[0]: n for n in model.graph.node}
    key, value = nodes["present.0.key"], nodes["present.0.value"]
    assert key.op_type == value.op_type == "Concat"
    assert list(key.input)[0] == "past_key_values.0.key"
    assert nodes[key.input[1]].op_type == "Add"               # rotary's q * cos + ...
    assert nodes[value.input[1]].op_type == "Transpose"       # the heads of x Wv
    assert {"Shape", "Range", "LessOrEqual", "And"} <= {n.op_type for n in model.graph.node}


def test_prefill_runs_and_present_is_checked(kv_model, capsys):
    """``rdu run kv.onnx --bind sequence_length=16``: the prefill (P = 0) in the tiny
    Llama's 26 configurations, ok; its outputs are the logits and the present K
    (after rotary) and V of the key/value heads, each checked against onnxruntime."""
    assert main(["run", str(kv_model), "--bind", "sequence_length=16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 26
    assert "past_sequence_length=0" in report["kernel"]
    imported = import_model(str(kv_model), {"sequence_length": 16})
    assert set(imported.outputs.values()) == {"logits", "present.0.key", "present.0.value"}
    shapes = {imported.outputs[n]: imported.graph.outputs[n].shape for n in imported.outputs}
    assert shapes["present.0.key"] == shapes["present.0.value"] == (2, 16, 16)


def test_prefill_is_the_model_without_a_cache():
    """The prefill of the cache form (P = 0) is, word for word on the machine, the tiny
    Llama without a cache of the same weights and ids (hidden 32, 2 / 1 heads)."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.machine import Machine
    from rdu.onnx import onnx_kernel
    from rdu.runtime import run_sequence
    words = []
    for kv_cache in (False, True):
        kernel = onnx_kernel(tiny_llama(hidden=32, heads=2, kv_heads=1, ffn=64, vocab=64,
                                        embedding="gather", kv_cache=kv_cache),
                             {"sequence_length": 16} if kv_cache else None)
        kernel, sequence = compile_groups(kernel, Machine(**kernel.machine))
        figures, results, _ = run_sequence(kernel, sequence, kernel.random_inputs(None, 1),
                                           "model", seed=1, progress=False)
        assert figures["ok"]
        words.append(np.asarray(results["logits"]).view(np.uint32))
    assert np.array_equal(*words)


def _swapped(path, target):
    """The model with present.0.key and present.0.value swapped (the same shapes)."""
    model = onnx.load(str(path))
    raw = {"present.0.key": "raw_key", "present.0.value": "raw_value"}
    for node in model.graph.node:
        node.input[:] = [raw.get(i, i) for i in node.input]
        node.output[:] = [raw.get(o, o) for o in node.output]
    model.graph.node.extend([
        onnx.helper.make_node("Identity", ["raw_value"], ["present.0.key"], name="swap_k"),
        onnx.helper.make_node("Identity", ["raw_key"], ["present.0.value"], name="swap_v")])
    onnx.save(model, str(target))
    return target


def test_wrong_present_exit_1(kv_model, tmp_path, capsys, monkeypatch):
    """onnxruntime given the model with its present outputs swapped, the machine the
    model itself: exit 1 (the present outputs are checked, not only the logits)."""
    from rdu.onnx import kernel as onnx_kernel_module
    wrong = import_model(str(_swapped(kv_model, tmp_path / "swapped.onnx")),
                         {"sequence_length": 16})
    real = onnx_kernel_module.onnxruntime_outputs
    monkeypatch.setattr(onnx_kernel_module, "onnxruntime_outputs",
                        lambda imported, inputs: real(wrong, inputs))
    assert main(["run", str(kv_model), "--bind", "sequence_length=16"]) == 1
    err = capsys.readouterr().err
    assert "differs from onnxruntime's" in err and err.count("\n") == 1, err


def test_hf_cache_fixture_binds_from_the_input_file(tmp_path, capsys):
    """HF's export (dimensions ``s..`` as the exporter names them): the sequence bound
    from ``--input input_ids=ids.npy``, the past 0, the mask P + L; ok."""
    ids = np.random.default_rng(3).integers(0, 64, (1, 16)).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    assert main(["run", str(HF_CACHE), "--input", f"input_ids={tmp_path / 'ids.npy'}",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 26
    assert 0 < report["max_abs_err_onnxruntime"] < 0.02


@pytest.mark.parametrize("args, words", [
    ([], "has a dynamic dimension sequence_length; supported: static shapes, or the "
         "dimension bound (--bind sequence_length=VALUE"),
    (["--bind", "sequence_length=16", "--bind", "past_sequence_length=4"],
     "input 'past_key_values.0.key' holds a past of length 4: decode steps run with "
     "`rdu generate` (docs/generate.md)"),
    (["--bind", "seq=16"], "--bind seq=16: the model has no dynamic dimension 'seq'"),
    (["--bind", "sequence_length=16", "--bind", "total_sequence_length=20"],
     "--bind total_sequence_length=20: the attention mask's length is the past's (0) "
     "plus the sequence's (16)"),
    (["--bind", "sequence_length=x"], "--bind sequence_length=x: give NAME=VALUE"),
])
def test_refused_in_one_line(kv_model, capsys, args, words):
    assert main(["run", str(kv_model), *args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_bound_inputs_are_not_given_and_inspect_binds(kv_model, tmp_path, capsys):
    """``--input position_ids=...``: the prefill binds it (one line, exit 2); ``rdu
    inspect --bind`` lists the 26 configurations."""
    np.save(tmp_path / "pos.npy", np.arange(16)[None])
    assert main(["run", str(kv_model), "--bind", "sequence_length=16", "--input",
                 f"position_ids={tmp_path / 'pos.npy'}"]) == 2
    err = capsys.readouterr().err
    assert "the prefill binds position_ids" in err and err.count("\n") == 1, err
    assert main(["inspect", str(kv_model), "--bind", "sequence_length=16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["configurations"] == 26


def test_static_model_refuses_bind():
    with pytest.raises(OnnxImportError, match="--bind L: the model's inputs have static"):
        import_model(tiny_llama(), {"L": 3})


@pytest.mark.parametrize("which", ["tiny", "hf"])
def test_reference_generate_against_runs_without_cache(kv_model, which):
    """Every step's logits (the prefill's rows, then each decode step's row) equal those
    of one onnxruntime run of the whole sequence so far without a cache (P = 0), within
    float32 tolerance; the greedy tokens are the argmax of those rows."""
    path = kv_model if which == "tiny" else HF_CACHE
    prompt = [5, 17, 3, 42, 8]
    result = generation.reference_generate(path, prompt, 6)
    assert len(result.tokens) == len(result.logits) == 6
    session = generation.cache_session(path)
    sequence = prompt + result.tokens
    for step, logits in enumerate(result.logits):
        length = len(prompt) + step
        full, presents = generation.run_step(session, sequence[:length],
                                             session.empty_past(), 0)
        rows = full[-len(logits):]
        scale = float(np.abs(full).max())
        assert np.allclose(logits, rows, rtol=0, atol=1e-5 * scale), (step, np.abs(
            logits - rows).max())
        assert result.tokens[step] == int(np.argmax(full[-1]))
    key = result.presents["present.0.key"]
    assert key.shape[2] == len(prompt) + 5           # the positions fed: prompt + 5 steps
    assert np.allclose(key, presents["present.0.key"][:, :, :key.shape[2]], atol=1e-5)


def test_generation_bad_input_exit_2(kv_model, capsys):
    """An id outside the vocabulary, more positions than the model's
    max_position_embeddings (HF's export: 64): one line, exit 2."""
    assert generation.main([str(kv_model), "--prompt", "1,64,2", "--tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert "prompt token 64 at 1 is outside the vocabulary of 64" in err, err
    assert generation.main([str(HF_CACHE), "--prompt", ",".join(["1"] * 60),
                            "--tokens", "8"]) == 2
    err = capsys.readouterr().err
    assert "take 67 positions; the model has 64" in err and err.count("\n") == 1, err
    assert generation.main([str(kv_model), "--prompt", "1,2", "--tokens", "3"]) == 0
    assert len(capsys.readouterr().out.strip().split(",")) == 3
    with pytest.raises(generation.GenerationError, match="at least 1"):
        generation.reference_generate(kv_model, [1], 0)


@pytest.mark.parametrize("which", ["tiny", "hf"])
def test_rotary_tables_are_every_decode_steps_cos_and_sin(kv_model, which):
    """``rotary_tables(model, C)``: the Cos and Sin the importer folds for positions
    0 .. C - 1; row p is what onnxruntime computes in a decode step at position p (P = p,
    L = 1, position_ids [[p]]), for p across the table."""
    from rdu.onnx.importer import cpu_session, rotary_tables
    model = onnx.load(str(kv_model if which == "tiny" else HF_CACHE))
    tables = rotary_tables(model, 40)
    assert tables and all(table.shape[-2] == 40 for table in tables.values())
    probe = onnx.load(str(kv_model if which == "tiny" else HF_CACHE))
    known = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name)
                              for name in tables if name not in known)
    session = cpu_session(probe)
    for p in (0, 1, 17, 39):
        feed = {}
        for info in probe.graph.input:
            dims = [d.dim_value for d in info.type.tensor_type.shape.dim]
            if info.name.startswith("past"):
                feed[info.name] = np.zeros((1, dims[1], p, dims[3]), np.float32)
            elif info.name == "position_ids":
                feed[info.name] = np.array([[p]], np.int64)
            elif info.name == "attention_mask":
                feed[info.name] = np.ones((1, p + 1), np.int64)
            else:
                feed[info.name] = np.array([[3]], np.int64)
        values = dict(zip([o.name for o in session.get_outputs()],
                          session.run(None, feed), strict=True))
        for name, table in tables.items():
            step = np.asarray(values[name], np.float32)
            assert step.shape[-2] == 1, name
            np.testing.assert_allclose(table[..., p, :], step[..., 0, :], atol=2e-6,
                                       err_msg=f"{name} at position {p}")

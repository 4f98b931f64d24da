"""Hugging Face ``LlamaForCausalLM`` exported by PyTorch's dynamo exporter (the fixtures of
tests/data, made by ``software/rdu/onnx/hf_export.py``: tests/data/README.md), run
without torch: each imports, runs on the functional model and agrees with onnxruntime
(``docs/onnx.md``, "Models exported by PyTorch"); the token ids of ``input_ids`` are
looked up by the host (``rdu.onnx.lookup``)."""

import json
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from rdu.cli import main  # noqa: E402
from rdu.frontend.kernels import to_bf16_words  # noqa: E402
from rdu.onnx import OnnxImportError, import_model, onnx_kernel  # noqa: E402
from rdu.onnx.kernel import ATTENTION_SHARE, onnxruntime_outputs, rounded_model  # noqa: E402

DATA = Path(__file__).parent / "data"
FIXTURES = {"hf_llama_embeds.onnx": (4, 2), "hf_llama_sdpa.onnx": (4, 4),
            "hf_llama_ids_sdpa.onnx": (2, 1)}     # query heads, key/value heads


def _largest(path, seed=1):
    """onnxruntime's largest |logit| on the inputs ``rdu run --seed`` draws."""
    kernel = onnx_kernel(path)
    others = onnxruntime_outputs(kernel.imported, kernel.random_inputs(None, seed))
    return max(float(np.abs(value).max()) for value in others.values())


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_runs_and_agrees_with_onnxruntime(name, capsys):
    """``rdu run FIXTURE --json`` on the functional model: ok; the error against
    onnxruntime is over 0 (the machine rounds to BF16 where onnxruntime keeps FP32)
    and under the share budget of its largest logit; the attention is grouped as the
    config says."""
    path = DATA / name
    graph = import_model(str(path)).graph
    node, = [n for n in graph.live_nodes() if n.op == "attention"]
    assert (node.inputs[0].shape[0], node.inputs[1].shape[0]) == FIXTURES[name]
    assert main(["run", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["launches"] == 26
    error = report["max_abs_err_onnxruntime"]
    assert 0 < error < ATTENTION_SHARE / 2 * _largest(path), error


def _wrong_weights(path, target):
    """The model at ``path`` with the weight of the MatMul producing ``logits`` rolled
    by one column (every logit moved to its neighbour's place), written to ``target``."""
    model = onnx.load(str(path))
    last, = [n for n in model.graph.node if n.output[0] == "logits"]
    init, = [i for i in model.graph.initializer if i.name == last.input[1]]
    rolled = np.roll(numpy_helper.to_array(init), 1, axis=1)
    init.CopyFrom(numpy_helper.from_array(rolled, init.name))
    onnx.save(model, str(target))
    return target


def test_wrong_weights_exit_1(tmp_path, capsys, monkeypatch):
    """The machine runs the fixture with the LM head's columns rolled, onnxruntime the
    fixture itself on the same inputs: exit 1, one line."""
    from rdu.onnx import kernel as onnx_kernel_module
    path = DATA / "hf_llama_embeds.onnx"
    right = onnx_kernel(path).imported
    real = onnx_kernel_module.onnxruntime_outputs
    monkeypatch.setattr(onnx_kernel_module, "onnxruntime_outputs",
                        lambda imported, inputs: real(right, inputs))
    assert main(["run", str(_wrong_weights(path, tmp_path / "wrong.onnx"))]) == 1
    err = capsys.readouterr().err
    assert "differs from onnxruntime's" in err and err.count("\n") == 1, err


def test_input_ids_looked_up_by_the_host(tmp_path, capsys):
    """``--input input_ids=ids.npy``: the program's rows input holds the BF16 rows
    ``E[ids]`` of the embedding table, onnxruntime gets the ids themselves (its result
    equals the model's own on them); the run is ok and its inputs name the file."""
    import onnxruntime
    path = DATA / "hf_llama_ids_sdpa.onnx"
    kernel = onnx_kernel(path)
    ids = np.random.default_rng(5).integers(0, 64, (1, 16))
    inputs = kernel.user_inputs(None, {"input_ids": ids}, {"input_ids": "ids"})
    lookup, = kernel.imported.lookups.values()
    table = numpy_helper.to_array(next(i for i in kernel.imported.model.graph.initializer
                                       if i.name.endswith("embed_tokens.weight")))
    assert np.array_equal(inputs[lookup.rows], to_bf16_words(table[ids[0]], "E"))
    assert np.array_equal(inputs["input_ids"], ids)
    session = onnxruntime.InferenceSession(rounded_model(kernel.imported)
                                           .SerializeToString())
    theirs, = session.run(["logits"], {"input_ids": ids.astype(np.int64)})
    ours = onnxruntime_outputs(kernel.imported, inputs)["logits"]
    assert np.array_equal(ours, theirs.reshape(ours.shape).astype(np.float64))
    np.save(tmp_path / "ids.npy", ids)
    assert main(["run", str(path), "--input", f"input_ids={tmp_path / 'ids.npy'}",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["inputs"].endswith("ids.npy")
    assert "input_ids [1, 16]" in report["kernel"]


def test_out_of_vocabulary_id_is_one_line(tmp_path, capsys):
    """``rdu run --input input_ids=FILE`` with an id past the vocabulary: exit 2, one
    line naming the file, the id and where it is."""
    np.save(tmp_path / "ids.npy", np.array([[3] * 15 + [64]]))
    assert main(["run", str(DATA / "hf_llama_ids_sdpa.onnx"), "--input",
                 f"input_ids={tmp_path / 'ids.npy'}"]) == 2
    err = capsys.readouterr().err
    assert err == (f"rdu run: error: --input input_ids={tmp_path / 'ids.npy'}: token id 64 "
                   f"at (0, 15) is outside the vocabulary of 64 rows\n"), err


@pytest.mark.parametrize("ids, message", [
    (np.array([[-1] + [0] * 15]), "token id -1 at (0, 0) is outside the vocabulary"),
    (np.zeros((1, 16), np.float32), "float32 values; input_ids holds token ids"),
    (np.zeros((1, 8), np.int64), "shape (1, 8), the model takes input_ids as (1, 16)")],
    ids=["negative", "floats", "shape"])
def test_bad_ids_are_one_line(ids, message):
    """A negative id, a non-integer array, another shape: one line naming the source
    (what ``rdu run`` prints, exit 2)."""
    from rdu.frontend.kernels import KernelInputError
    kernel = onnx_kernel(DATA / "hf_llama_ids_sdpa.onnx")
    with pytest.raises(KernelInputError) as caught:
        kernel.user_inputs(None, {"input_ids": ids}, {"input_ids": "--input ids"})
    text = str(caught.value)
    assert text.startswith("--input ids: ") and message in text and "\n" not in text


def _ids_model(op="Gather", axis=0):
    """``y = Gather(E, ids) @ W`` (E of 16 x 8), or another use of the ids."""
    rng = np.random.default_rng(0)
    table = numpy_helper.from_array(rng.standard_normal((16, 8)).astype(np.float32), "E")
    weight = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W")
    first = (helper.make_node("Gather", ["E", "ids"], ["rows"], name="embed", axis=axis)
             if op == "Gather" else
             helper.make_node("Cast", ["ids"], ["rows"], name="embed", to=TensorProto.FLOAT))
    nodes = [first, helper.make_node("MatMul", ["rows", "W"], ["y"], name="proj")]
    graph = helper.make_graph(
        nodes, "ids", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8])],
        [table, weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 10
    return model


def test_lookup_of_a_small_model_and_its_refusals():
    """A Gather of a table by ids is a rows input of the table's width; a Cast of the
    ids, or a Gather along axis 1, is refused in one line naming the node."""
    imported = import_model(_ids_model())
    assert list(imported.data) == [] and list(imported.ids) == ["ids"]
    assert imported.graph.inputs["rows"].shape == (8, 8) and "E" in imported.held
    for model, what in ((_ids_model("Cast"), "node embed (Cast): Cast of the integer "
                         "input 'ids'"), (_ids_model(axis=1), "node embed (Gather): "
                                          "Gather by 'ids' along axis 1")):
        with pytest.raises(OnnxImportError) as caught:
            import_model(model)
        text = str(caught.value)
        assert what in text and "the host looks the rows up" in text and "\n" not in text


def test_tiny_llama_gather_form_runs(tmp_path, capsys):
    """``python -m rdu.onnx.tiny_llama --vocab 64 --embedding gather``: its input_ids
    run with seeded random ids (in range of the vocabulary) and agree with onnxruntime."""
    from rdu.onnx.tiny_llama import main as tiny_main
    path = tmp_path / "tiny.onnx"
    assert tiny_main(["--hidden", "32", "--ffn", "64", "--vocab", "64",
                      "--embedding", "gather", "-o", str(path)]) == 0
    capsys.readouterr()
    assert main(["run", str(path), "--json", "--seed", "4"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["kernel"].endswith("(tiny_llama: input_ids [1, 16])")

"""The project's tiny Llama (rdu.onnx.tiny_llama, docs/onnx.md "A tiny Llama"): written
with onnx.helper in the exporter's operator form, run on the functional model against
onnxruntime; its command's errors; HF's LlamaForCausalLM exported by torch and imported
(skipped without torch and transformers)."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from rdu.machine import Machine  # noqa: E402
from rdu.onnx import import_model, onnx_kernel  # noqa: E402
from rdu.onnx.tiny_llama import main, tiny_llama  # noqa: E402

SHARE = 0.02            # of onnxruntime's largest output, as tests/test_onnx_attention.py


def _share(kernel, inputs, results, model):
    from rdu.onnx.kernel import onnxruntime_outputs
    others = onnxruntime_outputs(onnx_kernel(model).imported, inputs)
    return max(float(np.abs(np.asarray(results[name], np.float64) - others[name]).max() /
                     np.abs(others[name]).max()) for name in others)


def test_tiny_llama_runs_and_agrees_with_onnxruntime():
    """One layer of 4 query and 2 key/value heads, the final norm and an LM head of 64:
    26 configurations on the functional model, stage by stage bit-exact, within 2% of
    onnxruntime's largest logit; a model of the same shape with other weights (seed)
    is far outside it."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.runtime import run_sequence
    shape = {"hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 64, "seq": 16}
    kernel, sequence = compile_groups(onnx_kernel(tiny_llama(**shape)), Machine(agcus=4))
    groups = [stage.program.meta["group"] for stage in sequence.stages]
    assert len(groups) == 26 and groups.count("attention") == 1
    assert groups[-4:] == ["rows", "matmul", "rows", "matmul"]    # final norm, LM head
    inputs = kernel.random_inputs(None, 2)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"], figures["max_abs_err"]
    assert kernel.references(None, inputs, results)[0]
    assert np.asarray(results["logits"]).size == 16 * 64
    assert _share(kernel, inputs, results, tiny_llama(**shape)) < SHARE
    assert _share(kernel, inputs, results, tiny_llama(**shape, seed=1)) > 10 * SHARE
    _check_operator_table(kernel, sequence, inputs, tiny_llama(**shape, seed=1))


def _check_operator_table(kernel, sequence, inputs, other):
    """``rdu run --operators``' rows (:func:`rdu.apps.onnx_operators.operator_table`):
    the decoder's operators in order, every configuration in one row, each operator's
    words within 2% of onnxruntime's value of it; against the weights of ``other``
    every operator is far off."""
    from rdu.apps.onnx_operators import operator_table
    rows = operator_table(kernel, sequence, inputs)
    names = [row["operator"] for row in rows]
    assert names == [
        "model.layers.0.input_layernorm/Mul_1", "model.layers.0.self_attn.rotary_q/Add",
        "model.layers.0.self_attn.rotary_k/Add", "model.layers.0/self_attn/Transpose_v",
        "model.layers.0/self_attn/MatMul_1", "model.layers.0/self_attn/o_proj",
        "model.layers.0/Add", "model.layers.0.post_attention_layernorm/Mul_1",
        "model.layers.0/mlp/gate_proj", "model.layers.0/mlp/up_proj",
        "model.layers.0/mlp/Mul", "model.layers.0/mlp/down_proj", "model.layers.0/Add_1",
        "model.norm/Mul_1", "lm_head/MatMul"], names
    assert [c for row in rows for c in row["configurations"]] == list(range(1, 27))
    assert all(0 < row["share"] < SHARE for row in rows), rows
    wrong = operator_table(onnx_kernel(other), sequence, inputs)
    assert all(row["share"] > 5 * SHARE for row in wrong), wrong


def test_tiny_llama_nodes_are_the_exporters():
    """The operator form: Gather of token ids with --embedding gather, repeat_kv with
    fewer key/value heads, no custom domain; every layer's weights named as HF's."""
    model = tiny_llama(layers=2, heads=4, kv_heads=1, vocab=32, embedding="gather")
    ops = [node.op_type for node in model.graph.node]
    assert ops[0] == "Gather" and ops.count("Expand") == 4 and ops.count("Softmax") == 2
    assert {node.domain for node in model.graph.node} == {""}
    names = {init.name for init in model.graph.initializer}
    assert {"model.layers.1.mlp.down_proj.weight.T", "model.norm.weight",
            "lm_head.weight.T", "model.embed_tokens.weight"} <= names
    assert model.graph.input[0].name == "input_ids"


def test_tiny_llama_command(tmp_path, capsys):
    """``python -m rdu.onnx.tiny_llama``: writes a model that imports; a bad option is
    one line on stderr and exit 2."""
    path = tmp_path / "tiny.onnx"
    assert main(["--hidden", "32", "--heads", "2", "--ffn", "64", "--seq", "8",
                 "-o", str(path)]) == 0
    graph = import_model(onnx.load(str(path))).graph
    assert [n for n in graph.live_nodes() if n.op == "attention"]
    for argv, message in ((["--hidden", "30", "--heads", "4"], "--hidden 30 is not a "
                           "multiple of --heads 4"),
                          (["--heads", "4", "--kv-heads", "3"], "--heads 4 is not a "
                           "multiple of --kv-heads 3"),
                          (["--embedding", "gather"], "--embedding gather needs a --vocab"),
                          (["--layers", "0"], "--layers 0 must be at least 1")):
        capsys.readouterr()
        assert main(argv + ["-o", str(path)]) == 2
        err = capsys.readouterr().err
        assert err == f"python -m rdu.onnx.tiny_llama: error: tiny_llama: {message}\n", err
    with pytest.raises(SystemExit) as caught:
        main(["--hidden", "wide", "-o", str(path)])
    err = capsys.readouterr().err
    assert caught.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("python -m rdu.onnx.tiny_llama: error: argument --hidden"), err


def test_hf_llama_exports_and_imports(tmp_path):
    """HF's LlamaForCausalLM of a small random config, exported by torch (eager
    attention, opset 18) and imported; skipped without torch and transformers."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="eager")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    embeds = torch.randn(1, 16, 64)

    class Body(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, inputs_embeds):
            return self.inner(inputs_embeds=inputs_embeds, use_cache=False).logits

    path = tmp_path / "hf_llama.onnx"
    torch.onnx.export(Body(model), (embeds,), str(path), opset_version=18,
                      input_names=["inputs_embeds"], output_names=["logits"])
    graph = import_model(onnx.load(str(path))).graph
    node, = [n for n in graph.live_nodes() if n.op == "attention"]
    assert node.inputs[0].shape[0] == 4 and node.inputs[1].shape[0] == 2


def test_two_layers_run_orchestrated_and_agree_with_onnxruntime():
    """Two decoder layers with grouped-query heads, the final norm and an LM head: the
    second layer's norm, projections and residual read the first layer's residual where
    the first layer left it (kept transposed; a row group writes B's identity rows
    first), 49 configurations in one orchestrated schedule on the functional model,
    bit-exact stage by stage, within 2% of onnxruntime's largest logit, every operator
    of both layers in the table within 5% of onnxruntime's value of it; another seed's
    weights are far outside."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.apps.onnx_operators import operator_table
    from rdu.runtime import run_sequence
    shape = {"layers": 2, "heads": 4, "kv_heads": 2, "vocab": 64}
    kernel, sequence = compile_groups(onnx_kernel(tiny_llama(**shape)), Machine(agcus=4))
    names = [stage.name for stage in sequence.stages]
    groups = [stage.program.meta["group"] for stage in sequence.stages]
    assert len(names) == 49 and groups.count("attention") == 2
    assert sum(name.endswith("norm_identity") for name in names) == 1   # layer 2's
    inputs = kernel.random_inputs(None, 3)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"] and figures["launches"] == 49, figures["max_abs_err"]
    assert kernel.references(None, inputs, results)[0]
    assert _share(kernel, inputs, results, tiny_llama(**shape)) < SHARE
    assert _share(kernel, inputs, results, tiny_llama(**shape, seed=1)) > 10 * SHARE
    rows = operator_table(kernel, sequence, inputs)
    layer_1 = [row for row in rows if row["operator"].startswith("model.layers.1")]
    assert len(layer_1) == 13 and all(0 < row["share"] < 0.05 for row in rows), rows


def test_pipelined_datapath_refused_in_one_line(tmp_path, capsys):
    """``rdu run MODEL.onnx --fp-latency default``: the attention of projections' norm
    writes its products' B as rows of column tiles, which the pipelined datapath's
    products lay out in groups of 8 column tiles: exit 2, one line naming the node and
    the setting, no traceback (the kernels that generate the grouped streams run:
    ``tests/test_attention.py``, ``tests/test_fusion.py``, ``tests/test_gemm.py``)."""
    from rdu.cli import main as rdu_main
    path = tmp_path / "llama.onnx"
    onnx.save(tiny_llama(hidden=256, heads=4, kv_heads=2, ffn=128, vocab=64, seq=16),
              str(path))                    # head dimension 64: one systolic tile
    assert rdu_main(["run", str(path), "--fp-latency", "default"]) == 2
    err = capsys.readouterr().err
    assert "with fp_latency on, the product's B is laid out in groups of 8 column tiles" \
        in err and err.startswith("rdu run: error: llama.onnx: node "), err
    assert err.count("\n") == 1 and "Traceback" not in err

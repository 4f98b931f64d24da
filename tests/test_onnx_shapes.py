"""Decoder layers of other shapes (docs/onnx.md "A tiny Llama", "Other shapes"): a
sequence that is not a multiple of 16 (B of the norm before the projections padded
with zero rows and columns to the keys), of two key chunks (V per chunk from its
column tiles of the norm's B), an FFN width that is not a multiple of 16 (zero
features after attention), other heads and hidden sizes; run on the
functional model against onnxruntime; a shape still refused is one line."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from rdu.cli import main  # noqa: E402
from rdu.machine import Machine  # noqa: E402
from rdu.onnx import onnx_kernel  # noqa: E402
from rdu.onnx.tiny_llama import tiny_llama  # noqa: E402

SHARE = 0.02            # of onnxruntime's largest output, as tests/test_onnx_attention.py


@pytest.mark.parametrize("shape, configurations", [
    ({"seq": 24}, 25),
    ({"seq": 8, "ffn": 72, "vocab": 64}, 26),
    ({"hidden": 128, "heads": 8, "kv_heads": 4, "ffn": 344}, 25),
    ({"hidden": 16, "heads": 1, "ffn": 32, "seq": 72}, 26),     # V of two key chunks
], ids=["seq24", "seq8_ffn72_lm", "hidden128_ffn344", "seq72_two_chunks"])
def test_other_shapes_run_and_agree_with_onnxruntime(shape, configurations):
    """The configurations (25 for a layer, one more per LM head or V chunk past the
    first), stage by stage bit-exact (the run's checks), every output within 2% of
    onnxruntime's largest."""
    from rdu.apps.onnx_groups import compile_groups
    from rdu.onnx.kernel import onnxruntime_outputs
    from rdu.runtime import run_sequence
    model = tiny_llama(**shape)
    kernel, sequence = compile_groups(onnx_kernel(model), Machine(agcus=4))
    assert len(sequence.stages) == configurations
    inputs = kernel.random_inputs(None, 1)
    figures, results, _ = run_sequence(kernel, sequence, inputs, "model")
    assert figures["ok"], figures["max_abs_err"]
    assert kernel.references(None, inputs, results)[0]
    others = onnxruntime_outputs(onnx_kernel(model).imported, inputs)
    for name, other in others.items():
        got = np.asarray(results[name], np.float64)
        assert got.shape == other.shape
        assert np.abs(got - other).max() < SHARE * np.abs(other).max()


def test_rows_not_whole_tiles_are_one_line(tmp_path, capsys):
    """A sequence that is not a multiple of the lanes (12) is refused in one line naming
    the attention's node (exit 2)."""
    path = tmp_path / "m.onnx"
    onnx.save(tiny_llama(seq=12), str(path))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == ("rdu run: error: m.onnx: node model.layers.0/self_attn/MatMul_1 "
                   "(MatMul): attention of projections of 2 query and 2 key/value heads, "
                   "12 rows; supported: key/value heads dividing the query heads, rows a "
                   "multiple of 8\n"), err

"""Input files as users have them (issue #37): ``.npy`` in float64, float32, float16 and
BF16 (ml_dtypes' bfloat16, stored by ``np.save`` as a 2-byte void dtype); anything else
refused in one line with exit 2; ``--save`` naming each file's dtype; ``rdu --version``."""

import json

import ml_dtypes
import numpy as np
import pytest
from rdu.bitstream import VERSION
from rdu.cli import main
from rdu.program import FORMAT


def _save(path, array):
    np.save(path, array)
    return str(path)


def _run(capsys, *argv):
    code = main(["run", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_a_bf16_npy_gives_the_c_of_the_same_values_in_float32(capsys, tmp_path, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((9, 40)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((40, 7)).astype(np.float32)
    bf16_file = _save(tmp_path / "a_bf16.npy", a)
    assert np.load(bf16_file).dtype == np.dtype("V2")       # what the file holds
    outputs = {}
    for name, a_file in (("bf16", bf16_file),
                         ("f32", _save(tmp_path / "a_f32.npy", a.astype(np.float32))),
                         ("f64", _save(tmp_path / "a_f64.npy", a.astype(np.float64)))):
        save = tmp_path / name
        save.mkdir()
        code, report = _run(capsys, "gemm", "--a", a_file, "--b",
                            _save(tmp_path / "b.npy", b), "--save", str(save))
        assert code == 0 and report["ok"]
        assert "c.npy float32" in report["saved"] and "a.npy float32" in report["saved"]
        outputs[name] = np.load(save / "c.npy")
    assert np.array_equal(outputs["bf16"], outputs["f32"])
    assert np.array_equal(outputs["bf16"], outputs["f64"])
    # and the values are those of the BF16 array: numpy's product within the budget
    expected = a.astype(np.float64) @ b.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.allclose(outputs["bf16"], expected, rtol=1e-5, atol=1e-5)


def test_a_float16_npy_runs(capsys, tmp_path, seed):
    x = np.random.default_rng(seed).standard_normal((3, 20)).astype(np.float16)
    code, report = _run(capsys, "softmax", "--x", _save(tmp_path / "x.npy", x))
    assert code == 0 and report["ok"]


@pytest.mark.parametrize("array, dtype", [(np.arange(60, dtype=np.int32).reshape(3, 20),
                                           "int32"),
                                          (np.ones((3, 20), bool), "bool"),
                                          (np.ones((3, 20), np.complex64), "complex64")])
def test_other_dtypes_are_refused_in_one_line(capsys, tmp_path, array, dtype):
    path = _save(tmp_path / "x.npy", array)
    assert main(["run", "softmax", "--x", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"x.npy: dtype {dtype}" in err[0]
    assert "float64, float32, float16 or bfloat16" in err[0]


def test_run_help_lists_the_dtypes(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "bfloat16" in " ".join(capsys.readouterr().out.split())


def test_version_prints_the_package_and_the_formats(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("rdu ") and f"bitstream format {VERSION}" in out
    assert f"program file format {FORMAT}" in out


def test_attention_heads_default_to_one(capsys):
    code, report = _run(capsys, "attention", "--mode", "decode", "--seq", "10", "--dim",
                        "16")
    assert code == 0 and "HEADS=1 KV_HEADS=1" in report["kernel"]

"""Attention: the shape of a run and the chain's arithmetic (``rdu.frontend.attention``), against
float64 attention of the same BF16 inputs."""

import numpy as np
import pytest
from rdu.frontend.attention import (
    AttentionError,
    AttentionShape,
    attention64,
    chain_outputs,
    float64_attention,
    scale_value,
)
from rdu.frontend.kernels import get_kernel
from rdu.machine import Machine
from rdu.models.pcu_reference import bf16_words

#: (mode, seq, dim, heads, kv_heads): L = 1, L not a multiple of a chunk or of the lanes,
#: D from 16 to 128, one and several heads, GQA and MHA, prefill without masking
SHAPES = [("decode", 1, 16, 1, 1), ("decode", 37, 64, 4, 2), ("decode", 16, 32, 3, 3),
          ("decode", 100, 128, 8, 1), ("decode", 64, 24, 2, 2),
          ("prefill", 45, 32, 2, 1), ("prefill", 8, 16, 1, 1)]


def _inputs(shape, seed):
    rng = np.random.default_rng(seed)
    return (bf16_words(rng.standard_normal((shape.heads, shape.rows, shape.dim))),
            bf16_words(rng.standard_normal((shape.kv_heads, shape.seq, shape.dim))),
            bf16_words(rng.standard_normal((shape.kv_heads, shape.seq, shape.dim))))


def budget(v):
    """The error budget of the chain against float64: ``2^-8 max|V|`` per key/value head
    (each probability is rounded to BF16, relative 2^-9, before P V; the normalisation
    by the sum of the same rounded probabilities halves nothing: twice that), plus FP32
    accumulation far below it."""
    return 2.0 ** -8 * np.abs(np.asarray(v, np.uint32).view(np.float32)).max()


@pytest.mark.parametrize("mode,seq,dim,heads,kv_heads", SHAPES)
def test_chain_within_budget_of_float64(mode, seq, dim, heads, kv_heads, seed):
    shape = AttentionShape(mode, seq, dim, heads, kv_heads, lanes=8, chunk=16)
    q, k, v = _inputs(shape, seed)
    out = chain_outputs(shape, q, k, v)
    assert out.shape == (heads, shape.rows, dim)
    error = np.abs(out.view(np.float32) - float64_attention(shape, q, k, v)).max()
    assert error <= budget(v), f"max abs error {error:.3g} over budget {budget(v):.3g}"


def test_online_softmax_rescales():
    """Keys whose scores rise chunk after chunk: every chunk raises the running maximum,
    so every merge rescales (alpha < 1) what the chunks before it summed, by about
    e^-1.2; the result stays within budget of float64."""
    shape = AttentionShape("decode", 64, 16, 1, 1, lanes=8, chunk=16)
    q = bf16_words(np.full((1, 1, 16), 0.5))
    k = bf16_words((np.linspace(0, 20, 64)[:, None] * np.ones((1, 16)) / 8)[None])
    v = bf16_words(np.random.default_rng(3).standard_normal((1, 64, 16)))
    scores = (q.view(np.float32)[0] @ k.view(np.float32)[0].T)[0] / 4
    chunk_max = scores.reshape(4, 16).max(axis=1)
    assert np.all(np.diff(chunk_max) > 1.2)      # each chunk's max above the last one's
    error = np.abs(chain_outputs(shape, q, k, v).view(np.float32) -
                   float64_attention(shape, q, k, v)).max()
    assert error <= budget(v)


def test_padded_keys_do_not_count():
    """L = 37 in chunks of 16 (48 keys): the 11 padded keys (zero K and V) score -BIG
    through the mask dimension, so they add nothing to the normalising sum: the result
    is within budget of float64 attention over the 37 keys (a padded key scoring 0
    would add about 11 exp(-m) to it)."""
    shape = AttentionShape("decode", 37, 16, 2, 1, lanes=8, chunk=16)
    assert shape.masked and shape.dim_k == 18 and shape.seq_pad == 48
    q, k, v = _inputs(shape, 7)
    error = np.abs(chain_outputs(shape, q, k, v).view(np.float32) -
                   float64_attention(shape, q, k, v)).max()
    assert error <= budget(v)


@pytest.mark.parametrize("kwargs,message", [
    ({"mode": "train"}, "mode 'train' is not one of decode, prefill"),
    ({"heads": 6, "kv_heads": 4}, "heads 6 is not a multiple of kv_heads 4"),
    ({"chunk": 24}, r"chunk 24 is not a multiple of 2 x lanes \(16"),
    ({"seq": 0}, "seq must be a positive integer, not 0"),
    ({"causal": True}, "causal masking is for prefill"),
    ({"scale": -1.0}, "scale must be a positive finite number, not -1.0"),
])
def test_shape_errors(kwargs, message):
    args = {"mode": "decode", "seq": 16, "dim": 16, "heads": 4, "kv_heads": 2, "lanes": 8,
            "chunk": 16, **kwargs}
    with pytest.raises(AttentionError, match=message):
        AttentionShape(**args)


# -- the compiled kernel ----------------------------------------------------------------

#: (mode, seq, dim, heads, kv_heads) compiled and run on the functional model: L = 1,
#: L not a multiple of a chunk or of the lanes, several chunks, D from 16 to 128 (and
#: not a multiple of the lanes), MHA and GQA, more queries than lanes, prefill
KERNEL_SHAPES = [("decode", 1, 16, 1, 1, False), ("decode", 37, 16, 2, 1, False),
                 ("decode", 100, 64, 4, 2, False), ("decode", 64, 32, 8, 8, False),
                 ("decode", 200, 128, 2, 1, False), ("decode", 65, 24, 16, 1, False),
                 ("prefill", 45, 32, 2, 1, False), ("prefill", 16, 16, 1, 1, False),
                 ("prefill", 45, 32, 4, 2, True), ("prefill", 1, 16, 1, 1, True),
                 ("prefill", 130, 64, 2, 2, True)]


def _compile(mode, seq, dim, heads, kv_heads, causal=False, kv_layout="blocks",
             valid=None, **machine):
    from rdu.frontend.kernels import get_kernel
    from rdu.machine import Machine
    kernel = get_kernel("attention")
    return kernel, kernel.compile(Machine(**{"agcus": 4, **machine}), seq=seq, dim=dim,
                                  heads=heads, kv_heads=kv_heads, mode=mode, causal=causal,
                                  kv_layout=kv_layout, valid=valid)


@pytest.mark.parametrize("mode,seq,dim,heads,kv_heads,causal", KERNEL_SHAPES)
def test_kernel_on_functional_model(mode, seq, dim, heads, kv_heads, causal, seed):
    """One configuration per shape; the functional model's O bit-exact against the
    chain's arithmetic and within budget of float64 (Kernel.check; causal: of float64
    with the causal mask)."""
    from rdu.runtime import run_kernel
    kernel, program = _compile(mode, seq, dim, heads, kv_heads, causal)
    assert program.meta["group"] == "attention" and program.meta["pcus"] == 8
    inputs = kernel.random_inputs(program, seed)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    assert figures["ok"], f"max abs error {figures['max_abs_err']}"
    assert results["o"].shape == (heads, 1 if mode == "decode" else seq, dim)
    exact = chain_outputs(AttentionShape(mode, seq, dim, heads, kv_heads, 8,
                                         program.meta["chunk"], causal=causal),
                          *inputs.values())
    assert np.array_equal(results["o"].view(np.uint32), exact)


@pytest.mark.parametrize("mode,seq,dim,heads,kv_heads,causal,lanes", [
    ("decode", 37, 64, 8, 1, False, 8), ("decode", 100, 24, 4, 2, False, 8),
    ("prefill", 45, 32, 4, 2, True, 8), ("prefill", 20, 128, 1, 1, False, 8),
    ("decode", 70, 16, 4, 1, False, 4)])
def test_kernel_on_functional_model_fp_latency(mode, seq, dim, heads, kv_heads, causal,
                                               lanes, seed):
    """On a machine with ``fp_latency="default"`` both products group row blocks
    (``Mode.SYSTOLIC_ROWS``: ``S^T``'s key blocks, ``O^T``'s dimension blocks): chunks
    and V's dimensions are whole systolic tiles, the scores PCU takes ``group`` beats of
    K per beat of ``Q^T``, and the functional model's O is the same words as the
    parameter off (the chain's arithmetic) and within budget of float64."""
    from rdu.runtime import run_kernel

    from hdl.fp_latency import systolic_group
    machine = dict(lanes=lanes) if lanes != 8 else {}
    kernel, program = _compile(mode, seq, dim, heads, kv_heads, causal,
                               fp_latency="default", **machine)
    group = systolic_group(Machine(fp_latency="default").latency_table)
    meta = program.meta
    assert meta["tile_group"] == group > 1 and meta["chunk"] % (group * lanes) == 0
    systolic = [config for config in meta["pcu_programs"].values()
                if config["mode"] == "systolic"]
    assert len(systolic) == 2 and all(c["group"] == group and c["group_rows"]
                                      for c in systolic)
    inputs = kernel.random_inputs(program, seed)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    assert figures["ok"], f"max abs error {figures['max_abs_err']}"
    _, plain = _compile(mode, seq, dim, heads, kv_heads, causal, **machine)
    _, plain_results, _ = run_kernel(kernel, plain, inputs, "model")
    assert np.array_equal(results["o"].view(np.uint32), plain_results["o"].view(np.uint32))


@pytest.mark.parametrize("seq,dim,heads,kv_heads,valid,queries", [
    (128, 64, 4, 2, 100, None), (192, 64, 4, 2, 150, 8), (64, 48, 8, 1, 33, None)])
def test_cache_kernel_on_functional_model_fp_latency(seq, dim, heads, kv_heads, valid,
                                                     queries, seed):
    """A KV cache (``kv_layout`` ``rows``) on a machine with ``fp_latency="default"``:
    ``k_t`` holds a systolic tile of key blocks a buffer and ``v_buf`` is read a tile of
    dimension blocks at a time; the softmax sum comes from ``lsum`` (an extra block of
    ``P V`` would cost a whole tile). The functional model's O bit-exact against the
    chain's arithmetic of that shape and within budget of float64; where the chain is
    the parameter off's (D not a multiple of the lanes: ``lsum`` either way) the same
    words as off."""
    from rdu.frontend.kernels import get_kernel
    from rdu.runtime import run_kernel
    kernel = get_kernel("attention")
    params = dict(seq=seq, dim=dim, heads=heads, kv_heads=kv_heads, mode="decode",
                  kv_layout="rows", valid=valid, queries=queries)
    program = kernel.compile(Machine(agcus=4, fp_latency="default"), **params)
    meta = program.meta
    assert meta["tile_group"] == 8 and meta["chunk"] % 64 == 0
    systolic = [c for c in meta["pcu_programs"].values() if c["mode"] == "systolic"]
    assert all(c["group"] == 8 and c["group_rows"] for c in systolic)
    inputs = kernel.random_inputs(program, seed)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    assert figures["ok"], f"max abs error {figures['max_abs_err']}"
    if dim % 8:
        plain = kernel.compile(Machine(agcus=4), **params)
        _, plain_results, _ = run_kernel(kernel, plain, inputs, "model")
        assert np.array_equal(results["o"].view(np.uint32),
                              plain_results["o"].view(np.uint32))


def test_causal_mask_changes_the_result(seed):
    """The causal chain is within budget of causal float64 attention and far outside it
    of attention without the mask (so the budget check sees a missing mask); row 0 is
    V's first key, exactly as far as BF16 p = 1 allows."""
    shape = AttentionShape("prefill", 24, 16, 2, 1, lanes=8, chunk=32, causal=True)
    q, k, v = _inputs(shape, seed)
    out = chain_outputs(shape, q, k, v).view(np.float32)
    plain = AttentionShape("prefill", 24, 16, 2, 1, lanes=8, chunk=32)
    causal_ref = float64_attention(shape, q, k, v)
    assert np.abs(out - causal_ref).max() <= budget(v)
    assert np.abs(out - float64_attention(plain, q, k, v)).max() > 10 * budget(v)
    assert np.array_equal(out[:, 0], v.view(np.float32)[0:1, 0].repeat(2, axis=0))


def test_kernel_needs_three_agcus():
    from rdu.compiler.core import CompileError
    with pytest.raises(CompileError, match="three AGCUs; the machine has 2 \\(--agcus 3\\)"):
        _compile("decode", 16, 16, 1, 1, agcus=2)


def test_kernel_refuses_a_dimension_over_the_accumulator():
    from rdu.compiler.core import CompileError
    with pytest.raises(CompileError, match="head dimension 136 \\(padded to 136\\) over the "
                                           "PCU accumulator's 128 words"):
        _compile("decode", 16, 136, 1, 1)


def test_cli_runs_attention_and_saves(tmp_path):
    """``rdu run attention``: --json report, --save writes q, k, v, o in their shapes,
    and the saved inputs run again give the same O."""
    import json
    import subprocess
    import sys
    command = [sys.executable, "-m", "rdu.cli", "run", "attention", "--seq", "20", "--dim", "16",
               "--heads", "4", "--kv-heads", "2", "--json"]
    first = subprocess.run(command + ["--save", str(tmp_path / "a")], capture_output=True,
                           text=True, check=True)
    report = json.loads(first.stdout)
    assert report["ok"] and report["max_abs_err"] < 0.01 and "cycles" in report
    shapes = {name: np.load(tmp_path / "a" / f"{name}.npy").shape for name in "qkvo"}
    assert shapes == {"q": (4, 1, 16), "k": (2, 20, 16), "v": (2, 20, 16), "o": (4, 1, 16)}
    again = subprocess.run([sys.executable, "-m", "rdu.cli", "run", "attention", "--json",
                            "--save", str(tmp_path / "b")] +
                           [f"--{t}={tmp_path / 'a' / (t + '.npy')}" for t in "qkv"],
                           capture_output=True, text=True, check=True)
    assert json.loads(again.stdout)["ok"]
    assert np.array_equal(np.load(tmp_path / "a" / "o.npy"), np.load(tmp_path / "b" / "o.npy"))
    bad = subprocess.run([sys.executable, "-m", "rdu.cli", "run", "attention", "--seq", "8",
                          "--dim", "16", "--heads", "3", "--kv-heads", "2"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "HEADS 3 is not a multiple of KV_HEADS 2" in bad.stderr


@pytest.mark.verilator
def test_attention_on_verilator(sim_dir, seed):
    """Decode (L = 37: padded keys, GQA, two passes), prefill (three passes), causal
    prefill (six passes, a K copy per row tile) and decode from two KV caches (``rows``:
    29 of 40 and 17 of 24 keys) launched in sequence on the 4x4 RTL with
    four AGCUs: each launch's O equals the functional model's words and the chain's
    arithmetic, within budget of float64; only O is written (HBM write bytes = O's
    images)."""
    from rdu.frontend.kernels import get_kernel
    from rdu.machine import Machine
    from rdu.runtime import run_programs
    kernel = get_kernel("attention")
    machine = Machine(**kernel.machine)       # the build of test_row_kernels_on_verilator
    cases = [dict(mode="decode", seq=37, dim=16, heads=4, kv_heads=2),
             dict(mode="prefill", seq=20, dim=16, heads=1, kv_heads=1),
             dict(mode="prefill", seq=20, dim=16, heads=2, kv_heads=1, causal=True),
             # a KV cache (rows): l from P V, and the Q^T re-read of D = 12
             dict(mode="decode", seq=40, dim=16, heads=4, kv_heads=2, kv_layout="rows",
                  valid=29),
             dict(mode="decode", seq=24, dim=12, heads=2, kv_heads=1, kv_layout="rows",
                  valid=17),
             # a decode step's 8 rows per head (its rows padded to a tile)
             dict(mode="decode", seq=32, dim=16, heads=4, kv_heads=2, kv_layout="rows",
                  valid=21, queries=8)]
    programs, all_inputs = zip(*(kernel.random_program(machine, seed + index, **params)
                                 for index, params in enumerate(cases)), strict=True)
    rtl = run_programs(programs, "verilator", seed=seed, work_dir=sim_dir / "attention")
    model = run_programs(programs, "model")
    for params, program, inputs, run, reference in zip(cases, programs, all_inputs, rtl,
                                                       model, strict=True):
        assert np.array_equal(run.outputs["o"], reference.outputs["o"]), params
        results = kernel.unpack(program, run.outputs)
        ok, error = kernel.check(program, inputs, results)
        assert ok, f"{params}: max abs error {error}"
    # the memory's counters cover the whole sequence: the bytes of the O images
    written = rtl[-1].counters["memory"]["hbm"]["write_beats"] * machine.beat_bytes
    assert written == sum(4 * p.outputs["o"][1] for p in programs), \
        "something besides O was stored"


# -- a KV cache: kv_layout "rows" --------------------------------------------------------

#: (seq = capacity C, dim, heads, kv_heads, chunk, valid N): D 32 and 64 (l from P V),
#: 36 and 128 (Q^T re-read), G < H, N < C, C not a multiple of 64
ROWS_SHAPES = [(64, 32, 4, 2, 32, 50), (200, 64, 4, 2, 40, 137), (96, 36, 3, 3, 32, 90),
               (48, 128, 2, 1, 16, 1)]


def _rows(seq, dim, heads, kv_heads, chunk, valid):
    return AttentionShape("decode", seq, dim, heads, kv_heads, 8, chunk, kv_layout="rows",
                          valid=valid)


@pytest.mark.parametrize("seq,dim,heads,kv_heads,chunk,valid", ROWS_SHAPES)
def test_cache_chain_attends_to_its_valid_keys(seq, dim, heads, kv_heads, chunk, valid,
                                               seed):
    """The chain on a cache whose empty slots hold random K and V: within budget of
    float64 attention over the first ``valid`` keys, and (N < C) far outside it over
    all ``seq`` (so a mask that let empty slots in would be seen)."""
    shape = _rows(seq, dim, heads, kv_heads, chunk, valid)
    assert shape.sum_in_pv == (dim % 8 == 0 and dim + 8 <= 128)
    q, k, v = _inputs(shape, seed)
    out = chain_outputs(shape, q, k, v).view(np.float32)
    assert np.abs(out - float64_attention(shape, q, k, v)).max() <= budget(v)
    if valid < seq:
        full = _rows(seq, dim, heads, kv_heads, chunk, None)
        assert np.abs(out - float64_attention(full, q, k, v)).max() > 2 * budget(v)


def test_cache_image_is_position_major():
    """The packed K and V images: element ``[g, j, d]`` at byte ``((g C + j) pitch + d)
    2`` (pitch = D + 1 in whole beats of 16 BF16), K's column D 0 for the first N keys of
    each head and -BIG after them, V's column D 1, the padding 0."""
    from rdu.frontend.attention import images
    shape = _rows(24, 20, 2, 2, 8, 11)
    assert shape.pitch == 32
    _, k, v = _inputs(shape, 5)
    layout = images(shape)
    for name, words, column in (("k", k, [0] * 11 + [0xFF7F] * 13), ("v", v, [0x3F80] * 24)):
        image = layout[name]
        halves = np.frombuffer(image.pack({name: words}).astype("<u4").tobytes(), "<u2")
        rows = halves.reshape(2, 24, 32)                 # (g, j, pitch) BF16 bits
        assert np.array_equal(rows[:, :, :20], (words >> 16).astype(np.uint16))
        assert np.array_equal(rows[:, :, 20], np.array([column, column], np.uint16))
        assert not rows[:, :, 21:].any()


@pytest.mark.parametrize("kwargs,message", [
    ({"mode": "prefill"}, "kv_layout 'rows' is for decode"),
    ({"seq": 20}, "capacity 20 is not a multiple of the 8 lanes"),
    ({"chunk": 24}, "chunk 24 is not a multiple of 8 keys dividing the capacity 32"),
    ({"valid": 33}, "valid must be 1 to the capacity 32, not 33"),
    ({"kv_layout": "cols"}, "kv_layout 'cols' is not one of blocks, rows"),
    ({"kv_layout": "blocks", "valid": 30}, "valid 30 < seq 32: .* kv_layout 'rows'"),
    # systolic tiles of 8 key blocks (fp_latency): 64 keys
    ({"tile_group": 8, "seq": 96, "dim": 64}, "capacity 96 is not a multiple of 64 keys "
                                              r"\(systolic tiles of 8 key blocks of 8\)"),
    ({"tile_group": 8, "seq": 128, "dim": 64, "chunk": 32},
     "chunk 32 is not a multiple of 64 keys dividing the capacity 128"),
    ({"tile_group": 8, "seq": 64, "chunk": 64}, "dim 16 is padded to 64, wider than a cache "
                                                "row of 32"),
])
def test_cache_shape_errors(kwargs, message):
    args = {"mode": "decode", "seq": 32, "dim": 16, "heads": 4, "kv_heads": 2, "lanes": 8,
            "chunk": 16, "kv_layout": "rows", **kwargs}
    with pytest.raises(AttentionError, match=message):
        AttentionShape(**args)


#: (seq, dim, heads, kv_heads, valid): D 32 and 64 with G < H and N < C (C = 200 in
#: chunks of 40), 16 query heads on one K/V head (two passes over one cache head), and
#: the Q^T re-read (D = 36, with the V pattern over two passes a head; D = 128)
ROWS_KERNELS = [(64, 32, 4, 2, 50), (200, 64, 4, 2, 137), (48, 16, 16, 1, 48),
                (40, 36, 16, 2, 33), (32, 128, 2, 1, 20)]


@pytest.mark.parametrize("seq,dim,heads,kv_heads,valid", ROWS_KERNELS)
def test_cache_kernel_on_functional_model(seq, dim, heads, kv_heads, valid, seed):
    """A compiled decode from a KV cache: 8 PCUs and at most 8 PMUs; the functional
    model's O bit-exact against the chain's arithmetic (on K and V whose empty slots are
    zero, as ``rdu run`` fills them) and within budget of float64 over the valid keys."""
    from rdu.runtime import run_kernel
    kernel, program = _compile("decode", seq, dim, heads, kv_heads, kv_layout="rows",
                               valid=valid)
    meta = program.meta
    assert meta["pcus"] == 8 and meta["pmus"] == (7 if dim % 8 == 0 and dim < 128 else 8)
    inputs = kernel.random_inputs(program, seed)
    assert not inputs["k"][:, valid:].any() and inputs["k"][:, :valid].any()
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    assert figures["ok"], f"max abs error {figures['max_abs_err']}"
    exact = chain_outputs(_rows(seq, dim, heads, kv_heads, meta["chunk"], valid),
                          *inputs.values())
    assert np.array_equal(results["o"].view(np.uint32), exact)
    assert figures["roofline"]["macs"] == 2 * dim * heads * valid


def test_cache_refusals():
    """Prefill from a cache, and valid keys without one, refused in one line each."""
    from rdu.frontend.graph import FrontendError, Graph, attention
    from rdu.frontend.kernels import KernelInputError
    graph = Graph("g")
    q, k, v = (graph.input(n, s) for n, s in (("q", (2, 4, 16)), ("k", (1, 4, 16)),
                                               ("v", (1, 4, 16))))
    with pytest.raises(FrontendError, match="kv_layout 'rows' \\(a KV cache\\) is for "
                                            "decode: every query row sees the whole cache"):
        attention(q, k, v, kv_layout="rows", causal=True)
    with pytest.raises(FrontendError, match="valid keys are those of a KV cache"):
        attention(q, k, v, valid=2)
    with pytest.raises(KernelInputError, match="--kv-layout rows .* is for --mode decode"):
        _compile("prefill", 16, 16, 1, 1, kv_layout="rows")
    with pytest.raises(KernelInputError, match="--queries 8: query rows that all see the "
                                               "whole cache are --kv-layout rows"):
        get_kernel("attention").compile(Machine(agcus=4), seq=16, dim=16, queries=8)
    with pytest.raises(AttentionError, match="queries 8: .* reads a KV cache"):
        AttentionShape("decode", 16, 16, 1, 1, 8, 16, queries=8)


#: (seq, dim, heads, kv_heads, valid, queries): a decode step's rows padded to a tile
#: (8: one pass per query head), and 12 rows (two heads share a pass)
QUERY_KERNELS = [(64, 64, 4, 2, 20, 8), (40, 36, 2, 1, 33, 12)]


@pytest.mark.parametrize("seq,dim,heads,kv_heads,valid,queries", QUERY_KERNELS)
def test_cache_read_by_several_query_rows(seq, dim, heads, kv_heads, valid, queries, seed):
    """Several query rows per head over a KV cache, each seeing every valid key: the
    functional model's O bit-exact against the chain's arithmetic, within budget of
    float64 over the valid keys, and far from attention over the whole capacity."""
    from rdu.runtime import run_kernel
    kernel = get_kernel("attention")
    program = kernel.compile(Machine(agcus=4), seq=seq, dim=dim, heads=heads,
                             kv_heads=kv_heads, kv_layout="rows", valid=valid,
                             queries=queries)
    meta = program.meta
    per_head = -(-heads // kv_heads * queries // 8)        # passes of a key/value head
    assert meta["queries"] == queries and meta["passes"] == kv_heads * per_head
    inputs = kernel.random_inputs(program, seed)
    assert inputs["q"].shape == (heads, queries, dim)
    figures, results, _ = run_kernel(kernel, program, inputs, "model")
    assert figures["ok"], f"max abs error {figures['max_abs_err']}"
    shape = AttentionShape("decode", seq, dim, heads, kv_heads, 8, meta["chunk"],
                           kv_layout="rows", valid=valid, queries=queries)
    exact = chain_outputs(shape, *inputs.values())
    assert np.array_equal(results["o"].view(np.uint32), exact)
    q, k, v = (np.asarray(inputs[n], np.uint32).view(np.float32).astype(np.float64)
               for n in "qkv")
    valid_only, _ = attention64(q, k[:, :valid], v[:, :valid], scale_value(dim))
    whole, _ = attention64(q, k, v, scale_value(dim))
    out = results["o"].astype(np.float64)
    assert np.abs(out - valid_only).max() <= budget(inputs["v"])
    assert figures["roofline"]["macs"] == 2 * dim * heads * valid * queries
    if (k[:, valid:] != 0).any():
        assert np.abs(out - whole).max() > 2 * budget(inputs["v"])


def test_cli_runs_a_cache(tmp_path):
    """``rdu compile`` and ``rdu run`` with ``--kv-layout rows --valid N``: the program
    file keeps both, its run is ok; a VALID past SEQ exits 2 in one line."""
    import json
    import subprocess
    import sys
    program = tmp_path / "cache.rdu"
    subprocess.run([sys.executable, "-m", "rdu.cli", "compile", "attention", "--seq", "48",
                    "--dim", "32", "--heads", "4", "--kv-heads", "2", "--kv-layout", "rows",
                    "--valid", "30", "-o", str(program)], capture_output=True, text=True,
                   check=True)
    run = subprocess.run([sys.executable, "-m", "rdu.cli", "run", str(program), "--json"],
                         capture_output=True, text=True, check=True)
    report = json.loads(run.stdout)
    assert report["ok"] and "KV_LAYOUT=rows" in report["kernel"] and "VALID=30" in \
        report["kernel"]
    bad = subprocess.run([sys.executable, "-m", "rdu.cli", "run", "attention", "--seq", "48",
                          "--dim", "32", "--kv-layout", "rows", "--valid", "49"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "--valid 49" in bad.stderr

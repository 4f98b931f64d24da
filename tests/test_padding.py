"""Rows of any length (issue #37): row kernels and the MLP's hidden size padded to whole
beats, the padding entering each reduction as its identity (``row_pad``, docs/pcu.md).

Every case runs on the functional model: bit-exact against the family's reference and
within the float64 budget of the same BF16 inputs (``Kernel.check``); two run on the RTL
too (the model's words, the reference's words). The reference pads with the identity
itself (:func:`rdu.models.reference.exact_rows`), so a test here would also fail if the
hardware let padding reach a sum or a maximum: ``test_padding_that_reached_a_sum_*``
shows the check can fail.
"""

import numpy as np
import pytest
from rdu.compiler import CompileError
from rdu.frontend.graph import Graph, exp, reciprocal
from rdu.frontend.kernels import KERNELS, Kernel
from rdu.layout import padded_row
from rdu.machine import Machine
from rdu.runtime import run_program, run_programs

LANES = Machine().lanes


def norm_graph(m, n):
    """``x / (sum(x * x) / n + 1) - max(x)``: a reduction after an element-wise stage
    (which padding puts on a PCU of its own) and a maximum, over rows of ``n``."""
    graph = Graph("norm")
    x = graph.input("x", (m, n))
    scale = reciprocal((x * x).sum() * (1.0 / n) + 1.0)
    graph.output("y", x * scale - x.max())
    return graph


NORM_KERNEL = Kernel("norm", ("m", "n"), {"x": ("m", "n")}, {"y": ("m", "n")},
                     "Y = X / (mean(X^2) + 1) - max(X)", norm_graph)


def run_on_model(kernel, machine, seed, **params):
    """``(program, inputs, results)`` of ``kernel`` on the functional model, checked:
    bit-exact against the reference and within the float64 budget."""
    program, inputs = kernel.random_program(machine, seed, **params)
    results = kernel.unpack(program, run_program(program, "model").outputs)
    for name, words in kernel.exact(program).items():
        assert np.array_equal(results[name].view(np.uint32), words), name
    ok, error = kernel.check(program, inputs, results)
    assert ok, f"{kernel.name} {params}: max |err| {error} outside the float64 budget"
    return program, inputs, results


@pytest.mark.parametrize("m, n", [(5, 30), (7, 100), (3, 5), (4, 17), (2, 1), (6, 48)])
def test_softmax_rows_of_any_length_on_the_model(m, n, seed):
    program, _, results = run_on_model(KERNELS["softmax"], Machine(), seed, m=m, n=n)
    assert program.meta["padded"] == padded_row(n, LANES)
    assert program.meta["padded"] % (2 * LANES) == 0 and program.meta["length"] == n
    # probabilities of each row sum to 1 (the padding took no share)
    assert np.allclose(results["y"].sum(axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("m, n", [(3, 30), (4, 7), (2, 64)])
def test_a_reduction_after_an_elementwise_stage_of_padded_rows(m, n, seed):
    """With padding, ``sum(x * x)`` is two PCUs (the square, then the sum reading the
    padded row on ``vector_in0``); without, one."""
    program, _, _ = run_on_model(NORM_KERNEL, Machine(), seed, m=m, n=n)
    unpadded = NORM_KERNEL.compile(Machine(), m=m, n=2 * LANES)
    extra = 1 if padded_row(n, LANES) != n else 0
    assert program.meta["pcus"] == unpadded.meta["pcus"] + extra


@pytest.mark.parametrize("m, d, f", [(3, 20, 50), (5, 64, 688), (1, 16, 1), (8, 24, 40)])
def test_mlp_hidden_size_of_any_width_on_the_model(m, d, f, seed):
    machine = Machine(**KERNELS["mlp"].machine)
    program, _, _ = run_on_model(KERNELS["mlp"], machine, seed, m=m, d=d, f=f)
    assert program.meta["k_pad"][1] == padded_row(f, LANES)


def test_linear_relu_of_odd_sizes_on_the_model(seed):
    run_on_model(KERNELS["linear_relu"], Machine(), seed, m=9, n=5, k=41)


def test_padding_that_reached_a_sum_fails_the_check(seed):
    """The check can fail: the softmax words with the padding's exp added into each
    row's sum (as a machine without ``row_pad`` would compute) differ from the
    reference."""
    kernel = KERNELS["softmax"]
    program, inputs, results = run_on_model(kernel, Machine(), seed, m=3, n=30)
    x = inputs["x"].view(np.float32).astype(np.float64)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    pad = padded_row(30, LANES) - 30
    wrong = e / (e.sum(axis=1, keepdims=True) + pad * np.exp(-x.max(axis=1, keepdims=True)))
    assert not np.allclose(wrong, results["y"], rtol=1e-6, atol=0)


def test_an_activation_infinite_at_zero_is_refused_for_a_padded_hidden_size():
    graph = Graph("mlp_recip")
    x = graph.input("x", (2, 16))
    w1 = graph.input("w1", (16, 20))
    w2 = graph.input("w2", (20, 16))
    h = x @ w1
    graph.output("y", reciprocal(h).astype("bf16") @ w2)
    kernel = Kernel("mlp_recip", (), {}, {}, "", lambda: graph)
    with pytest.raises(CompileError, match=r"hidden size 20 is padded .* not finite"):
        kernel.compile(Machine(**KERNELS["mlp"].machine))
    graph.outputs.clear()
    graph.output("y", exp(h).astype("bf16") @ w2)           # exp(0) = 1: finite
    kernel.compile(Machine(**KERNELS["mlp"].machine))


@pytest.mark.verilator
def test_padded_rows_on_the_rtl(sim_dir, seed):
    """Softmax 5 x 30 and the MLP 3 x 20 x 50 on the native RTL (both on four AGCUs, the
    attention tests' build): the model's words, the reference's words; the padding's
    cost in cycles (the same rows unpadded at 32 values) printed."""
    machine = Machine(**KERNELS["attention"].machine)
    cases = [("softmax", machine, {"m": 5, "n": 30}, {"m": 5, "n": 32}),
             ("mlp", machine, {"m": 3, "d": 20, "f": 50},
              {"m": 3, "d": 20, "f": 64})]
    for name, machine, params, whole in cases:
        kernel = KERNELS[name]
        program, inputs = kernel.random_program(machine, seed, **params)
        rtl, = run_programs([program], "native", seed=seed, work_dir=sim_dir / name)
        model, = run_programs([program], "model")
        for output in kernel.outputs:
            assert np.array_equal(rtl.outputs[output], model.outputs[output]), name
        results = kernel.unpack(program, rtl.outputs)
        assert kernel.check(program, inputs, results)[0], name
        reference, = run_programs([kernel.random_program(machine, seed, **whole)[0]],
                                  "native", seed=seed, work_dir=sim_dir / f"{name}_whole")
        print(f"{name} {params}: {rtl.cycles} cycles; {whole}: {reference.cycles}")

"""The generation loop (:func:`rdu.runtime.run_generation`): one orchestrated schedule
run once per token on one machine and memory.

A toy decoder of two GEMM launches reading the token's input image A (one row of an
embedding table, written by the host before each run): the first stores its product
into entry ``position`` of a positioned table (a KV cache's append), the second's row 0
is the logits. Its weights plant a successor for every token with a wide margin, so the
greedy choice is unambiguous and the float64 loop of the same BF16 inputs is the
reference. The table read after the last run holds every run's row at its position.
"""

import numpy as np
import pytest
from rdu.compiler import compile_graph
from rdu.compiler.core import ImagePlan
from rdu.frontend import gemm
from rdu.frontend.kernels import KERNELS
from rdu.layout import Image
from rdu.machine import Machine
from rdu.memory_map import HBM
from rdu.models.machine import FunctionalMachine
from rdu.models.pcu_reference import bf16_words
from rdu.runtime import (
    LogitsOutput,
    RunFailure,
    TokenInput,
    run_generation,
    run_schedule,
)
from rdu.runtime.steps import Launch, Write

M, K, V, ENTRIES = 8, 32, 16, 8
PAGE = 4096
MACHINE = Machine(**KERNELS["attention"].machine)   # the attention tests' 4x4 build
PROMPT, COUNT = [3, 11, 5], 4
SENTINEL = 0x7FC0_0001                          # a NaN no run writes


def value(words):
    return np.asarray(words, np.uint32).view(np.float32).astype(np.float64)


def toy(seed):
    """The steps, the token input, the logits, the cache table's ``(address, words,
    image, stride)``, and the float64 reference: ``(embedding, cache weights, head
    weights)``."""
    rng = np.random.default_rng(seed)
    plain = compile_graph(gemm.gemm_graph(M, V, K), MACHINE)
    images = {name: Image.from_json(plain.meta["images"][name]) for name in ("a", "b", "c")}
    beat = MACHINE.beat_bytes
    stride = -(-images["c"].nbytes // beat) * beat
    token, cache = HBM.base, HBM.base + PAGE
    head_start = cache + -(-stride * ENTRIES // PAGE) * PAGE
    first = compile_graph(gemm.gemm_graph(M, V, K), MACHINE, plan=ImagePlan(
        start=head_start, addresses={"a": token, "c": cache},
        positions={"c": (stride, ENTRIES)}))
    second = compile_graph(gemm.gemm_graph(M, V, K), MACHINE, plan=ImagePlan(
        start=head_start + 4 * PAGE, addresses={"a": token}))
    # token t's embedding: 1 at column t, small noise elsewhere; the head maps column t
    # to the logit of successor[t] (4.0), so run after run visits a cycle of all tokens
    successor = rng.permutation(V)
    embedding = 0.05 * rng.standard_normal((V, K))
    embedding[np.arange(V), np.arange(V)] = 1.0
    head = 0.05 * rng.standard_normal((K, V))
    head[np.arange(V), successor] = 4.0
    weights = [bf16_words(rng.standard_normal((K, V))), bf16_words(head)]
    for program, words in zip((first, second), weights, strict=True):
        program.inputs["a"] = (program.inputs["a"][0], None)      # the host's token input
        program.inputs["b"] = (program.inputs["b"][0], images["b"].pack({"b": words}))
    table = np.stack([images["a"].pack({"a": bf16_words(
        np.vstack([embedding[t], np.zeros((M - 1, K))]))}) for t in range(V)])
    row0 = images["c"].unpack(np.arange(images["c"].nbytes // 4, dtype=np.uint32), "c")[0]
    steps = [Write(cache, np.full(ENTRIES * stride // 4, SENTINEL, np.uint32)),
             Launch(first), Launch(second)]
    reference = (value(bf16_words(embedding)), value(weights[0]), value(weights[1]))
    return (steps, TokenInput(token, table), LogitsOutput(1, "c", row0),
            (cache, ENTRIES * stride // 4, images["c"], stride), reference)


def greedy(reference):
    """The float64 greedy loop: per run its input token and logits, and the tokens."""
    embedding, _, head = reference
    inputs, logits, tokens, token = [], [], [], PROMPT[0]
    for run in range(len(PROMPT) + COUNT - 1):
        inputs.append(token)
        logits.append(embedding[token] @ head)
        ordered = np.sort(logits[-1])               # the choice is unambiguous
        assert ordered[-1] - ordered[-2] > 1.0
        chosen = int(np.argmax(logits[-1]))
        if run >= len(PROMPT) - 1:
            tokens.append(chosen)
        token = PROMPT[run + 1] if run + 1 < len(PROMPT) else chosen
    return inputs, logits, tokens


def check(result, cache, reference):
    inputs, logits, tokens = greedy(reference)
    assert result.tokens == tokens and len(tokens) == COUNT
    assert [run.position for run in result.runs] == list(range(len(inputs)))
    assert [run.token for run in result.runs] == inputs
    for run, expected in zip(result.runs, logits, strict=True):
        assert run.logits.dtype == np.float32 and run.logits.shape == (V,)
        assert np.abs(run.logits - expected).max() < 1e-3 * np.abs(expected).max()
    # the cache table after the last run: run r's product at entry r, sentinels after
    address, words, image, stride = cache
    table = result.read(address, words).reshape(ENTRIES, stride // 4)
    _, weights, _ = reference
    for entry in range(ENTRIES):
        if entry < len(inputs):
            c = value(image.unpack(table[entry], "c"))
            expected = np.zeros((M, V))
            expected[0] = reference[0][inputs[entry]] @ weights
            assert np.abs(c - expected).max() < 1e-3 * max(1.0, np.abs(expected).max())
        else:
            assert (table[entry] == SENTINEL).all()
    return table


def test_generation_on_the_model(seed):
    steps, token_input, logits, cache, reference = toy(seed)
    result = run_generation(steps, "model", token_input=token_input, logits=logits,
                            prompt=PROMPT, count=COUNT)
    check(result, cache, reference)
    assert all(run.cycles is None for run in result.runs)
    launches = [step for step in result.runs[0].steps if step.kind == "launch"]
    assert len(launches) == 2 and launches[0].launch.cycles is None


def test_one_run_is_run_schedule_at_that_position(seed):
    """Run r of a generation computes what ``run_schedule`` at position r computes from
    a fresh memory with r's token written: the loop adds only the token and the
    position."""
    steps, token_input, logits, cache, _ = toy(seed)
    result = run_generation(steps, "model", token_input=token_input, logits=logits,
                            prompt=PROMPT, count=COUNT)
    run = result.runs[4]
    alone = run_schedule([Write(token_input.address, token_input.table[run.token]), *steps],
                         "model", execution="orchestrated", position=run.position)
    words = alone[-1].launch.outputs["c"][logits.words]
    assert np.array_equal(words, run.logits.view(np.uint32))


@pytest.mark.verilator
def test_generation_native_matches_the_model(seed):
    steps, token_input, logits, cache, reference = toy(seed)
    model = run_generation(steps, "model", token_input=token_input, logits=logits,
                           prompt=PROMPT, count=COUNT)
    native = run_generation(steps, "native", token_input=token_input, logits=logits,
                            prompt=PROMPT, count=COUNT, read_back=[cache[:2]])
    table = check(native, cache, reference)
    assert native.tokens == model.tokens
    for ours, theirs in zip(native.runs, model.runs, strict=True):
        assert np.array_equal(ours.logits.view(np.uint32), theirs.logits.view(np.uint32))
        assert ours.cycles > 0 and ours.steps.host_commands == 0
        launch = ours.steps[-1].launch
        assert launch.load_cycles > 0 and launch.cycles > 0
        assert launch.memory_bytes["hbm"]["read_bytes"] > 0
    assert np.array_equal(table.reshape(-1), model.read(*cache[:2]))
    with pytest.raises(ValueError, match="was not read back after the last run"):
        native.read(HBM.base, 4)


def test_bad_arguments_are_refused_in_one_line(seed):
    steps, token_input, logits, _, _ = toy(seed)
    good = {"token_input": token_input, "logits": logits, "prompt": PROMPT,
            "count": COUNT}
    cases = [
        ({"prompt": []}, "a generation needs a prompt of at least one token"),
        ({"prompt": [1, V]}, rf"prompt token 1 \({V}\) is outside the token input table's "
                             rf"{V} rows"),
        ({"prompt": [-1]}, "prompt token 0 must be an integer of at least 0, not -1"),
        ({"count": 0}, r"count \(new tokens\) must be an integer of at least 1, not 0"),
        ({"count": ENTRIES}, rf"{len(PROMPT) + ENTRIES - 1} runs need positions 0 .. "
                             rf"{len(PROMPT) + ENTRIES - 2}: .*past the {ENTRIES} entries"),
        ({"logits": LogitsOutput(2, "c", logits.words)},
         r"logits launch 2: the schedule has 2 launches \(0-based\)"),
        ({"logits": LogitsOutput(0, "d", logits.words)},
         "logits output 'd' is not an output of launch 0"),
        ({"logits": LogitsOutput(1, "c", logits.words[:-1])},
         f"logits words must be {V} integer indices"),
        ({"logits": LogitsOutput(1, "c", logits.words + 1000)},
         "logits words .* are outside output 'c' of launch 1"),
        ({"token_input": TokenInput(2, token_input.table)}, "token input at 0x2"),
        ({"token_input": TokenInput(0, token_input.table[0])},
         "token input table must be a 2-D array of uint32 words"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message) as caught:
            run_generation(steps, "model", **{**good, **change})
        assert "\n" not in str(caught.value)
    with pytest.raises(ValueError, match="generation runs an orchestrated schedule: sim "):
        run_generation(steps, "ip", **good)
    with pytest.raises(ValueError, match="a schedule needs at least one launch"):
        run_generation(steps[:1], "model", **good)


def test_a_token_input_over_the_schedule_is_refused(seed):
    steps, token_input, logits, _, _ = toy(seed)
    top = MACHINE.regions()[0].end - 4 * token_input.table.shape[1]
    with pytest.raises(ValueError, match=f"token input at {top:#x} .* overlaps the "
                                         f"schedule's commands or a bitstream"):
        run_generation(steps, "model", token_input=TokenInput(top, token_input.table),
                       logits=logits, prompt=PROMPT, count=COUNT)


def test_a_failed_run_names_its_position(seed, monkeypatch):
    """A run that ends with an error status (the third: its schedule fetched with a
    length of 0, as if the host had set it wrong) fails in one line naming its position;
    the runs before it ran."""
    steps, token_input, logits, _, _ = toy(seed)
    calls = []
    original = FunctionalMachine.run_schedule

    def third_fails(self, address, length, **options):
        calls.append(address)
        return original(self, address, 0 if len(calls) == 3 else length, **options)

    monkeypatch.setattr(FunctionalMachine, "run_schedule", third_fails)
    with pytest.raises(RunFailure, match="generation run at position 2: schedule fetch: .*"
                                         "functional model") as caught:
        run_generation(steps, "model", token_input=token_input, logits=logits,
                       prompt=PROMPT, count=COUNT)
    assert "\n" not in str(caught.value) and len(calls) == 3

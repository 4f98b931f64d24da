"""Positioned images (``docs/agcu.md``, **Positioned patterns**): the launch position moves
the AGCU patterns of the images an :class:`ImagePlan` names; the runtime writes and reads
the launch's entry of their tables. A GEMM whose A and C are tables of four entries runs
at several positions on the functional model (host and orchestrated) and the native RTL:
C is entry ``position`` of A times B (float64 budget), written at entry ``position``."""

import numpy as np
import pytest
from rdu.compiler import compile_graph
from rdu.compiler.core import CompileError, ImagePlan
from rdu.frontend import gemm
from rdu.frontend.kernels import KERNELS
from rdu.layout import Image
from rdu.machine import Machine
from rdu.memory_map import HBM
from rdu.models.pcu_reference import bf16_words
from rdu.runtime import RunFailure, run_schedule
from rdu.runtime.steps import Launch, Write

M, N, K, ENTRIES = 8, 16, 32, 4
PAGE = 4096
MACHINE = Machine(**KERNELS["attention"].machine)   # the attention tests' 4x4 build


def positioned_gemm(machine=MACHINE, positions=None):
    """The GEMM with A and C tables of :data:`ENTRIES` entries from the HBM base:
    ``(program, images, strides, addresses)``."""
    plain = compile_graph(gemm.gemm_graph(M, N, K), machine)
    images = {name: Image.from_json(plain.meta["images"][name]) for name in ("a", "b", "c")}
    beat = machine.beat_bytes
    strides = {name: -(-images[name].nbytes // beat) * beat for name in ("a", "c")}
    addresses, address = {}, HBM.base
    for name in ("a", "c"):
        addresses[name] = address
        address += -(-strides[name] * ENTRIES // PAGE) * PAGE
    plan = ImagePlan(start=address, addresses=addresses, positions=positions or {
        name: (strides[name], ENTRIES) for name in ("a", "c")})
    program = compile_graph(gemm.gemm_graph(M, N, K), machine, plan=plan)
    return program, images, strides, addresses


def schedule(seed):
    """The steps (A's table and a C table of sentinels written, the launch) and the
    float64 products of every entry."""
    program, images, strides, addresses = positioned_gemm()
    rng = np.random.default_rng(seed)
    a = [bf16_words(rng.standard_normal((M, K))) for _ in range(ENTRIES)]
    b = bf16_words(rng.standard_normal((K, N)))
    table = np.zeros((ENTRIES, strides["a"] // 4), np.uint32)
    for entry, words in enumerate(a):
        packed = images["a"].pack({"a": words})
        table[entry, :packed.size] = packed
    program.inputs["b"] = (program.inputs["b"][0], images["b"].pack({"b": b}))
    sentinel = np.full(ENTRIES * strides["c"] // 4, 0x7FC0_0001, np.uint32)    # a NaN
    steps = [Write(addresses["a"], table.reshape(-1)), Write(addresses["c"], sentinel),
             Launch(program)]

    def value(words):
        return np.asarray(words, np.uint32).view(np.float32).astype(np.float64)

    products = [value(entry) @ value(b) for entry in a]
    return steps, images["c"], products


def check(result, image, products, position):
    c = image.unpack(result.outputs["c"], "c").view(np.float32).astype(np.float64)
    budget = 1e-3 * max(1.0, np.abs(products[position]).max())
    assert np.abs(c - products[position]).max() < budget, position
    for other in range(ENTRIES):
        if other != position:       # the entry of this position, not another one's
            assert np.abs(c - products[other]).max() > 10 * budget


@pytest.mark.parametrize("execution", ["host", "orchestrated"])
@pytest.mark.parametrize("position", [0, 3])
def test_positioned_gemm_on_the_model(execution, position, seed):
    steps, image, products = schedule(seed)
    results = run_schedule(steps, "model", execution=execution, position=position)
    check(results[-1].launch, image, products, position)


@pytest.mark.verilator
def test_positioned_gemm_native(seed):
    steps, image, products = schedule(seed)
    results = run_schedule(steps, "native", position=2)
    check(results[-1].launch, image, products, 2)


@pytest.mark.verilator
def test_positioned_gemm_through_the_ip(seed):
    """The IP top (``POSITION`` written over AXI4-Lite before the launch): the runtime
    writes A only at entry 2 of its table (the others stay zero) and reads C at entry 2,
    so C is A B only if the AGCUs read and wrote entry 2."""
    from rdu.runtime import run_programs
    machine = Machine(rows=2, cols=2, lanes=4, pmu_bytes=16384)
    program, images, _, _ = positioned_gemm(machine)
    rng = np.random.default_rng(seed)
    a = bf16_words(rng.standard_normal((M, K)))
    b = bf16_words(rng.standard_normal((K, N)))
    for name, words in (("a", a), ("b", b)):
        program.inputs[name] = (program.inputs[name][0], images[name].pack({name: words}))
    result = run_programs([program], "ip", position=2)[0]
    c = images["c"].unpack(result.outputs["c"], "c").view(np.float32).astype(np.float64)

    def value(words):
        return np.asarray(words, np.uint32).view(np.float32).astype(np.float64)

    product = value(a) @ value(b)
    assert np.abs(c - product).max() < 1e-3 * max(1.0, np.abs(product).max())


def test_positions_are_checked():
    steps, _, _ = schedule(1)
    with pytest.raises(RunFailure, match="position 4 is past the 4 entries of 'a'"):
        run_schedule(steps, "model", position=4)
    with pytest.raises(RunFailure, match="position must be an integer from 0 to 65535"):
        run_schedule(steps, "model", position=70000)
    beat = MACHINE.beat_bytes
    with pytest.raises(CompileError, match="stride 48 bytes and 4 entries"):
        positioned_gemm(positions={"a": (48, ENTRIES)})
    with pytest.raises(CompileError, match="positioned image 'x' is not an image"):
        positioned_gemm(positions={"x": (beat, ENTRIES)})
    with pytest.raises(CompileError, match="'b' has no fixed address"):
        positioned_gemm(positions={"b": (64 * beat, ENTRIES)})

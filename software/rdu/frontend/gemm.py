"""The GEMM kernel: ``C = A B`` with A (M x K) and B (K x N) in BF16, C in FP32.

Written with the front end (:mod:`rdu.frontend`) and compiled by :mod:`rdu.compiler`
like any other kernel; this module adds what the command line and the tests use: seeded
random inputs, packing and unpacking through the program's tensor images, the bit-exact
reference of the systolic arithmetic and the numpy check. ``docs/compiler.md`` walks a
GEMM through every pass.
"""

import numpy as np

from hdl import defaults

from ..compiler import compile_graph, machine_geometry
from ..compiler.families.matmul import MatmulGroup, tile_matmul
from ..layout import Image
from ..mapper import ArrayGeometry
from ..models import pcu_reference as pcu_model
from .graph import Graph

__all__ = ["gemm_graph", "plan_gemm", "compile_gemm", "pack_inputs", "unpack_output",
           "random_inputs", "exact_reference", "reference", "check_result", "pack_images",
           "unpack_images"]


def _check_shape(m, n, k):
    for name, value in (("M", m), ("N", n), ("K", k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"GEMM {name} must be a positive integer, not {value!r}")


def gemm_graph(m, n, k):
    """The GEMM as a front-end graph."""
    _check_shape(m, n, k)
    graph = Graph("gemm")
    a = graph.input("a", (m, k))
    b = graph.input("b", (k, n))
    graph.output("c", a @ b)
    return graph


def plan_gemm(m, n, k, geometry=None, max_pcus=None):
    """The compiler's tiling of an ``M x N x K`` GEMM (:class:`MatmulTiling`)."""
    graph = gemm_graph(m, n, k)
    group = MatmulGroup(graph.inputs["a"], graph.inputs["b"], output="c")
    return tile_matmul(group, geometry or ArrayGeometry(), max_pcus)


def compile_gemm(m, n, k, geometry=None, *, stages=defaults.STAGES, agcus=defaults.AGCUS,
                 machine=None):
    """Compile ``C = A B`` for ``machine`` (an :class:`rdu.machine.Machine`; or for the
    mapper's ``geometry`` with ``stages`` and ``agcus``); return a :class:`Program` (no
    images yet: :func:`pack_inputs` adds them)."""
    machine, geometry = machine_geometry(machine, geometry, stages=stages, agcus=agcus)
    return compile_graph(gemm_graph(m, n, k), machine, geometry=geometry, kernel="gemm",
                         params={"m": m, "n": n, "k": k})


# -- tensors ----------------------------------------------------------------------------

def pack_images(program, arrays):
    """Add the program's input images, packed from ``{tensor: uint32 words}`` (BF16 in
    the high half), to ``program.inputs``; each array must have its tensor's shape."""
    for name, spec in program.tensors.items():
        if spec["role"] != "input":
            continue
        array = np.asarray(arrays[name], np.uint32)
        if array.shape != tuple(spec["shape"]):
            raise ValueError(f"{program.name} takes {name} of shape {tuple(spec['shape'])}, "
                             f"got {array.shape}")
    images = program.meta["images"]
    for image_name, layout in images.items():
        if image_name not in program.inputs:
            continue
        image = Image.from_json(layout)
        program.inputs[image_name] = (layout["address"], image.pack(arrays))
    return program


def unpack_images(program, outputs):
    """``{output tensor: uint32 array}`` from the program's output words."""
    result = {}
    for name, spec in program.tensors.items():
        if spec["role"] == "output":
            image = Image.from_json(program.meta["images"][spec["image"]])
            result[name] = image.unpack(outputs[spec["image"]], name).reshape(spec["shape"])
    return result


def pack_inputs(program, a_words, b_words):
    """Add A and B, in the kernel's layouts, to ``program.inputs``."""
    meta = program.meta
    m, n, k = meta["m"], meta["n"], meta["k"]
    a_words, b_words = np.asarray(a_words, np.uint32), np.asarray(b_words, np.uint32)
    if a_words.shape != (m, k) or b_words.shape != (k, n):
        raise ValueError(f"GEMM {m}x{n}x{k} takes A {(m, k)} and B {(k, n)}, got "
                         f"{a_words.shape} and {b_words.shape}")
    return pack_images(program, {"a": a_words, "b": b_words})


def unpack_output(program, c_words):
    """The (M, N) float32 result from the packed C words."""
    return unpack_images(program, {"c": c_words})["c"].view(np.float32)


def random_inputs(m, n, k, seed):
    """BF16 A (M x K) and B (K x N) as uint32 words (BF16 in the high half), seeded."""
    rng = np.random.default_rng(seed)
    return (pcu_model.bf16_words(rng.standard_normal((m, k))),
            pcu_model.bf16_words(rng.standard_normal((k, n))))


def exact_reference(a_words, b_words, k_pad=None):
    """What the hardware computes, bit for bit: the PCUs' systolic arithmetic
    (:func:`rdu.models.pcu_reference.systolic_accumulate`: per element, the first product, then an
    FP32 add of each further product in k order) over K zero-padded to ``k_pad``.
    uint32 words."""
    a = np.asarray(a_words, np.uint32)
    b = np.asarray(b_words, np.uint32)
    k_len = a.shape[1]
    k_pad = k_pad or k_len
    a_columns = np.zeros((k_pad, a.shape[0]), np.uint32)
    a_columns[:k_len] = a.T
    b_rows = np.zeros((k_pad, b.shape[1]), np.uint32)
    b_rows[:k_len] = b
    return pcu_model.systolic_accumulate(a_columns, b_rows)


def reference(a_words, b_words):
    """numpy float32 matmul of the BF16 inputs."""
    return np.asarray(a_words, np.uint32).view(np.float32) @ \
        np.asarray(b_words, np.uint32).view(np.float32)


def check_result(c, a_words, b_words):
    """``(ok, max_abs_err)``: every element within the FP32 accumulation budget
    ``K * 2^-22 * (|A| |B|)`` of numpy's float64 product of the same BF16 inputs."""
    a = np.asarray(a_words, np.uint32).view(np.float32)
    b = np.asarray(b_words, np.uint32).view(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    error = np.abs(c.astype(np.float64) - ref)
    budget = a.shape[1] * 2.0 ** -22 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    ok = bool(np.all(error <= budget)) and c.shape == ref.shape
    return ok, float(error.max()) if error.size else 0.0

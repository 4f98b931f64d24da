"""The kernels the command line and the runtime know by name, behind one interface.

Each kernel is a front-end graph (:mod:`rdu.frontend`) built from its shape parameters;
everything else is generic: :mod:`rdu.compiler` compiles it, the program's manifest
says how each tensor is laid out (:mod:`rdu.layout`), so packing the user's arrays,
unpacking the outputs and checking them (bit-exact against :func:`rdu.reference.
exact_outputs`, and against float64 of the graph within its budget) need no
kernel-specific code. The program file names its kernel and shapes, so ``rdu run FILE``
needs no shape options.

To add a kernel: write its graph builder and add a :class:`Kernel` to :data:`KERNELS`.
"""

from dataclasses import dataclass

import numpy as np

from . import pcu_model, reference
from .compiler import compile_graph
from .frontend import Graph, exp, reciprocal, relu
from .gemm import gemm_graph, pack_images, unpack_images

__all__ = ["Kernel", "KERNELS", "get_kernel", "KernelInputError", "linear_relu_graph",
           "softmax_graph", "gemm_bf16_graph"]


class KernelInputError(ValueError):
    """User data that does not fit the program (one line: which array, what is wrong)."""


def to_bf16_words(array, name):
    """A float array (any float dtype, ml_dtypes bfloat16 included) as uint32 words with
    its BF16 rounding (round to nearest even) in the high half."""
    array = np.asarray(array)
    if array.dtype.kind not in "fiu" and array.dtype.name != "bfloat16":
        raise KernelInputError(f"{name}: dtype {array.dtype} is not a number type")
    values = array.astype(np.float32)
    if not np.all(np.isfinite(values)):
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
        raise KernelInputError(f"{name}: element {bad} is {values[bad]} (inputs must be "
                               f"finite)")
    return pcu_model.bf16_words(values)


def linear_relu_graph(m, n, k):
    """``C = relu(A B + bias)``: a linear layer, written only with the front end."""
    graph = Graph("linear_relu")
    a = graph.input("a", (m, k))
    b = graph.input("b", (k, n))
    bias = graph.input("bias", (n,))
    graph.output("c", relu(a @ b + bias))
    return graph


def gemm_bf16_graph(m, n, k):
    """``C = A B`` rounded to BF16 (round to nearest even on the epilogue PCUs, packed by
    the AGCUs' BF16 stores: half the output traffic)."""
    graph = Graph("gemm_bf16")
    a = graph.input("a", (m, k))
    b = graph.input("b", (k, n))
    graph.output("c", (a @ b).astype("bf16"))
    return graph


def softmax_graph(m, n):
    """``Y = softmax(X)`` over each row of X (M rows of N): written only with the front end."""
    graph = Graph("softmax")
    x = graph.input("x", (m, n))
    e = exp(x - x.max())
    graph.output("y", e * reciprocal(e.sum()))
    return graph


@dataclass(frozen=True)
class Kernel:
    """One kernel: its shape parameters, input and output names (in ``--a``, ``--b``
    order), what each tensor's shape is in terms of the parameters, and its graph."""
    name: str
    params: tuple
    inputs: dict          # name -> tuple of parameter names (its shape)
    outputs: dict         # name -> tuple of parameter names
    help: str
    build: object = None  # (**params) -> rdu.frontend.Graph

    def shape(self, tensor, params):
        dims = self.inputs.get(tensor) or self.outputs[tensor]
        return tuple(params[d] for d in dims)

    def params_from_inputs(self, arrays):
        """Shape parameters implied by user arrays ``{name: ndarray}`` (``None`` where
        no array fixes one); raises on arrays that contradict each other."""
        found = {}
        for tensor, array in arrays.items():
            dims = self.inputs[tensor]
            if np.ndim(array) != len(dims):
                raise KernelInputError(f"--{tensor}: {np.ndim(array)}-dimensional array, "
                                       f"{self.name} takes {tensor.upper()} as "
                                       f"{' x '.join(d.upper() for d in dims)}")
            for dim, size in zip(dims, np.shape(array), strict=True):
                if dim in found and found[dim][0] != size:
                    raise KernelInputError(
                        f"--{tensor}: {dim.upper()} = {size} does not match "
                        f"{dim.upper()} = {found[dim][0]} of --{found[dim][1]}")
                found.setdefault(dim, (size, tensor))
        return {dim: size for dim, (size, _) in found.items()}

    def graph(self, params):
        return self.build(**{name: params[name] for name in self.params})

    def compile(self, machine, state=None, **params):
        """The program for ``machine``; ``state``: a list that receives the compilation
        (:class:`rdu.compiler.core.Compilation`: dumps and times of each pass)."""
        return compile_graph(self.graph(params), machine, kernel=self.name, params=params,
                             state=state)

    def random_inputs(self, program, seed):
        """Standard normal BF16 inputs, drawn in input order from one seeded generator."""
        rng = np.random.default_rng(seed)
        return {tensor: pcu_model.bf16_words(rng.standard_normal(
            self.shape(tensor, program.params))) for tensor in self.inputs}

    def user_inputs(self, program, arrays, sources):
        """``{name: words}`` from user arrays, each checked against the program's shape."""
        words = {}
        for tensor, array in arrays.items():
            expected = self.shape(tensor, program.params)
            if tuple(np.shape(array)) != expected:
                raise KernelInputError(
                    f"{sources[tensor]}: shape {tuple(np.shape(array))}, the program "
                    f"{program.name!r} takes {tensor.upper()} as {expected} ("
                    f"{' x '.join(d.upper() for d in self.inputs[tensor])})")
            words[tensor] = to_bf16_words(array, sources[tensor])
        return words

    def pack(self, program, inputs):
        return pack_images(program, inputs)

    def unpack(self, program, outputs):
        """``{output: float32 array}`` (FP32 outputs; BF16 ones widened)."""
        return {name: words.view(np.float32)
                for name, words in unpack_images(program, outputs).items()}

    def exact(self, program):
        """``{output: uint32 words}`` of the hardware's arithmetic on the packed inputs."""
        return reference.exact_outputs(program, self.graph(program.params))

    def check(self, program, inputs, results):
        """``(ok, max_abs_err)``: bit-exact against the hardware's arithmetic and within
        the budget of float64 of the same BF16 inputs."""
        ok, error = reference.check(self.graph(program.params), inputs, results)
        exact = self.exact(program)
        for name, words in exact.items():
            ok = ok and np.array_equal(np.asarray(results[name]).view(np.uint32), words)
        return ok, error

    def describe(self, program):
        p = program.params
        return f"{self.name} " + " ".join(f"{k.upper()}={v}" for k, v in p.items())

    def work(self, program):
        """MACs of one run and the machine's peak MACs per cycle."""
        return program.meta["macs"], program.meta["peak_macs_per_cycle"]


KERNELS = {
    "gemm": Kernel("gemm", ("m", "n", "k"), {"a": ("m", "k"), "b": ("k", "n")},
                   {"c": ("m", "n")}, "C = A B, A (M x K) and B (K x N) in BF16, C in FP32",
                   gemm_graph),
    "gemm_bf16": Kernel("gemm_bf16", ("m", "n", "k"), {"a": ("m", "k"), "b": ("k", "n")},
                        {"c": ("m", "n")}, "C = A B rounded to BF16 (A, B, C in BF16)",
                        gemm_bf16_graph),
    "linear_relu": Kernel("linear_relu", ("m", "n", "k"),
                          {"a": ("m", "k"), "b": ("k", "n"), "bias": ("n",)},
                          {"c": ("m", "n")},
                          "C = relu(A B + bias), A, B and bias in BF16, C in FP32",
                          linear_relu_graph),
    "softmax": Kernel("softmax", ("m", "n"), {"x": ("m", "n")}, {"y": ("m", "n")},
                      "Y = softmax of each row of X (M rows of N), X in BF16, Y in FP32",
                      softmax_graph),
}


def get_kernel(name):
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelInputError(f"unknown kernel {name!r}; known: "
                               f"{', '.join(sorted(KERNELS))}") from None

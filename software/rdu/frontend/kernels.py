"""The kernels the command line and the runtime know by name, behind one interface.

Each kernel is a front-end graph (:mod:`rdu.frontend`) built from its shape parameters;
everything else is generic: :mod:`rdu.compiler` compiles it, the program's manifest
says how each tensor is laid out (:mod:`rdu.layout`), so packing the user's arrays,
unpacking the outputs and checking them (bit-exact against the program's family's
``exact``, and against float64 of the graph within its budget) need no
kernel-specific code. The program file names its kernel and shapes, so ``rdu run FILE``
needs no shape options.

To add a kernel: write its graph builder and add a :class:`Kernel` to :data:`KERNELS`.
"""

from dataclasses import dataclass, field

import numpy as np

from ..compiler import compile_graph
from ..compiler.families import family_named
from ..models import pcu_reference as pcu_model
from ..models import reference
from .attention import query_rows
from .gemm import gemm_graph, pack_images, unpack_images
from .graph import Graph, attention, exp, reciprocal, relu, rsqrt

__all__ = ["Kernel", "KERNELS", "get_kernel", "KernelInputError", "INPUT_DTYPES",
           "as_float_array", "to_bf16_words", "linear_relu_graph",
           "softmax_graph", "rmsnorm_graph", "gemm_bf16_graph", "attention_graph",
           "mlp_graph", "RMSNORM_EPS"]


class KernelInputError(ValueError):
    """User data that does not fit the program (one line: which array, what is wrong)."""


#: The dtypes a kernel's float inputs are accepted in (``rdu run --help``).
INPUT_DTYPES = ("float64, float32, float16 or bfloat16 (ml_dtypes' bfloat16, or a 2-byte "
                "void dtype such as np.save writes for it, read as BF16 bits)")


def as_float_array(array, name):
    """``array`` as a float array a kernel takes: a float dtype or BF16 (ml_dtypes'
    ``bfloat16``; a 2-byte void dtype, ``|V2``, which is how ``np.save`` stores it and
    ``np.load`` returns it without ml_dtypes, read as BF16 bits)."""
    array = np.asarray(array)
    if array.dtype.kind == "V" and array.dtype.itemsize == 2 and array.dtype.names is None:
        bits = array.view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32)
    if array.dtype.kind != "f" and array.dtype.name != "bfloat16":
        raise KernelInputError(f"{name}: dtype {array.dtype}; the kernel takes floats: "
                               f"{INPUT_DTYPES}")
    return array


def to_bf16_words(array, name):
    """A float array (:func:`as_float_array`) as uint32 words with its BF16 rounding
    (round to nearest even) in the high half."""
    values = as_float_array(array, name).astype(np.float32)
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


#: The epsilon of the ``rmsnorm`` kernel (``LlamaConfig``'s default ``rms_norm_eps``).
RMSNORM_EPS = 1e-6


def rmsnorm_graph(m, n):
    """``Y = X * rsqrt(mean(X * X) + eps) * w`` over each row of X (M rows of N), ``w`` a
    weight of N values (Llama's ``LlamaRMSNorm``): one configuration, the reciprocal
    square root on a PCU's tail."""
    graph = Graph("rmsnorm")
    x = graph.input("x", (m, n))
    w = graph.input("w", (n,))
    mean_square = (x * x).sum() * (1.0 / n)
    graph.output("y", x * rsqrt(mean_square + RMSNORM_EPS) * w)
    return graph


def mlp_graph(m, d, f):
    """``Y = SiLU(X W1) W2``: the MLP block of a decoder (X: M tokens of D, W1: D x F,
    W2: F x D), SiLU written with the front end: ``h * reciprocal(1 + exp(-h))``."""
    graph = Graph("mlp")
    x = graph.input("x", (m, d))
    w1 = graph.input("w1", (d, f))
    w2 = graph.input("w2", (f, d))
    h = x @ w1
    silu = h * reciprocal(exp(h * -1.0) + 1.0)
    graph.output("y", silu.astype("bf16") @ w2)
    return graph


def attention_graph(seq, dim, heads, kv_heads, valid=None, mode="decode", causal=False,
                    kv_layout="blocks", queries=None):
    """``O = softmax(Q K^T / sqrt(D)) V`` per head, grouped-query: Q (heads, rows, dim)
    with one row per head (decode) or ``seq`` (prefill), K and V (kv_heads, seq, dim);
    ``causal`` (prefill): row ``r`` sees keys ``0 .. r``; ``kv_layout`` ``rows``
    (decode): K and V are a KV cache of capacity ``seq`` holding ``valid`` keys, read
    by ``queries`` rows of each head (default 1)."""
    if queries not in (None, 1) and kv_layout != "rows":
        raise KernelInputError(f"--queries {queries}: query rows that all see the whole "
                               f"cache are --kv-layout rows")
    if queries is not None and queries < 1:
        raise KernelInputError(f"--queries {queries}: one query row or more")
    if causal and mode != "prefill":
        raise KernelInputError("--causal is for --mode prefill (a decode query sees every "
                               "key)")
    if kv_layout == "rows" and mode != "decode":
        raise KernelInputError("--kv-layout rows (a KV cache) is for --mode decode; "
                               "prefill reads K and V by blocks")
    if valid is not None and valid != seq and kv_layout != "rows":
        raise KernelInputError(f"--valid {valid}: a cache holding fewer keys than its "
                               f"capacity SEQ {seq} is --kv-layout rows")
    if valid is not None and not 1 <= valid <= seq:
        raise KernelInputError(f"--valid {valid}: the keys in the cache are 1 to its "
                               f"capacity SEQ {seq}")
    if heads % kv_heads:
        raise KernelInputError(f"HEADS {heads} is not a multiple of KV_HEADS {kv_heads} "
                               f"(each key/value head serves HEADS / KV_HEADS query heads)")
    graph = Graph("attention")
    q = graph.input("q", (heads, _rows_of({"mode": mode, "seq": seq, "kv_layout": kv_layout,
                                           "queries": queries}), dim))
    k = graph.input("k", (kv_heads, seq, dim))
    v = graph.input("v", (kv_heads, seq, dim))
    if kv_layout == "rows":
        graph.output("o", attention(q, k, v, kv_layout="rows", valid=valid))
    else:
        graph.output("o", attention(q, k, v, causal=causal))
    return graph


def _rows_of(params):
    """Query rows per head of attention ``params``: ``queries`` of a ``rows`` cache,
    else the mode's."""
    if params.get("kv_layout") == "rows" and params.get("queries"):
        return params["queries"]
    return query_rows(params["mode"], params["seq"])


def _empty_cache(params, tensor, words):
    """Seeded inputs of attention: K and V of a ``rows`` cache hold only their first
    ``valid`` keys (the empty slots zero)."""
    valid = params.get("valid")
    if tensor in ("k", "v") and valid is not None and valid < words.shape[1]:
        words = words.copy()
        words[:, valid:] = 0
    return words


@dataclass(frozen=True)
class Kernel:
    """One kernel: its shape parameters, input and output names (in ``--a``, ``--b``
    order), what each tensor's shape is in terms of the parameters, and its graph.

    ``choices``: named options that are not sizes, ``{name: (values, default, help)}``;
    ``defaults``: ``{param: (function(params), text)}`` for a size that may be left out;
    ``derived``: ``function(params) -> {dim: size}`` for tensor dimensions that follow
    from the others; ``machine``: machine parameters the kernel needs by default;
    ``options``: integer options that are not sizes (not swept), ``{name: (function(params)
    -> default, default text, help)}``; ``empty``: what the seeded inputs leave empty."""
    name: str
    params: tuple
    inputs: dict          # name -> tuple of parameter names (its shape)
    outputs: dict         # name -> tuple of parameter names
    help: str
    build: object = None  # (**params) -> rdu.frontend.graph.Graph
    choices: dict = field(default_factory=dict)
    defaults: dict = field(default_factory=dict)
    derived: object = None
    machine: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    empty: object = None  # (params, tensor, words) -> words: what seeded inputs leave empty

    def with_defaults(self, params):
        """``params`` with every choice, every size that may be left out and every
        option filled in."""
        params = {**{name: default for name, (_, default, _) in self.choices.items()},
                  **params}
        for name, (function, _) in self.defaults.items():
            if params.get(name) is None:
                params[name] = function(params)
        for name, (function, _, _) in self.options.items():
            if params.get(name) is None:
                params[name] = function(params)
        return params

    def dims(self, params):
        """Every dimension's size: the parameters and what follows from them."""
        return {**params, **(self.derived(params) if self.derived else {})}

    def shape(self, tensor, params):
        dims = self.inputs.get(tensor) or self.outputs[tensor]
        sizes = self.dims(params)
        return tuple(sizes[d] for d in dims)

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
                if dim not in self.params:
                    continue            # derived (checked against the program's shape)
                if dim in found and found[dim][0] != size:
                    raise KernelInputError(
                        f"--{tensor}: {dim.upper()} = {size} does not match "
                        f"{dim.upper()} = {found[dim][0]} of --{found[dim][1]}")
                found.setdefault(dim, (size, tensor))
        return {dim: size for dim, (size, _) in found.items()}

    def graph(self, params):
        params = self.with_defaults(params)
        return self.build(**{name: params[name]
                             for name in (*self.params, *self.choices, *self.options)})

    def compile(self, machine, state=None, passes=None, skip=(), **params):
        """The program for ``machine``; ``state``: a list that receives the compilation
        (:class:`rdu.compiler.core.Compilation`: dumps and times of each pass);
        ``passes`` and ``skip``: the passes to run (:func:`rdu.compiler.compile_graph`;
        None when ``emit`` does not run)."""
        params = self.with_defaults(params)
        return compile_graph(self.graph(params), machine, kernel=self.name, params=params,
                             state=state, passes=passes, skip=skip)

    def random_program(self, machine, seed, **params):
        """``(program, inputs)``: compiled for ``machine``, random inputs of ``seed``
        packed into its images (ready to launch)."""
        program = self.compile(machine, **params)
        inputs = self.random_inputs(program, seed)
        self.pack(program, inputs)
        return program, inputs

    def random_inputs(self, program, seed):
        """Standard normal BF16 inputs, drawn in input order from one seeded generator."""
        rng = np.random.default_rng(seed)
        words = {tensor: pcu_model.bf16_words(rng.standard_normal(
            self.shape(tensor, program.params))) for tensor in self.inputs}
        if self.empty is not None:
            words = {tensor: self.empty(program.params, tensor, array)
                     for tensor, array in words.items()}
        return words

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
        """``{output: uint32 words}`` of the hardware's arithmetic on the packed inputs
        (the reference of the program's kernel family)."""
        return family_named(program.meta["group"]).exact(program, self.graph(program.params))

    def check(self, program, inputs, results):
        """``(ok, max_abs_err)``: bit-exact against the hardware's arithmetic and within
        the budget of float64 of the same BF16 inputs."""
        ok, error = reference.check(self.graph(program.params), inputs, results)
        exact = self.exact(program)
        for name, words in exact.items():
            ok = ok and np.array_equal(np.asarray(results[name]).view(np.uint32), words)
        return ok, error

    def data_inputs(self):
        """The inputs a run supplies (every input of a kernel by name)."""
        return list(self.inputs)

    def input_option(self, name):
        """The option that gives input ``name``."""
        return f"--{name}"

    def references(self, program, inputs, results):
        """``(ok, figures)`` of checks beyond :meth:`check` (none; a model imported from
        ONNX is checked against onnxruntime, :class:`rdu.onnx.kernel.OnnxKernel`)."""
        return True, {}

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
    "rmsnorm": Kernel("rmsnorm", ("m", "n"), {"x": ("m", "n"), "w": ("n",)}, {"y": ("m", "n")},
                      "Y = X * rsqrt(mean(X * X) + 1e-6) * w over each row of X (M rows of N), "
                      "X and the weight w (N values) in BF16, Y in FP32",
                      rmsnorm_graph),
    "mlp": Kernel("mlp", ("m", "d", "f"), {"x": ("m", "d"), "w1": ("d", "f"),
                                            "w2": ("f", "d")},
                  {"y": ("m", "d")},
                  "Y = SiLU(X W1) W2, one fused configuration (the hidden rows stay on "
                  "chip); X, W1, W2 in BF16, the hidden rows rounded to BF16, Y in FP32",
                  mlp_graph, machine={"agcus": 5}),
    "attention": Kernel(
        "attention", ("seq", "dim", "heads", "kv_heads"),
        {"q": ("heads", "rows", "dim"), "k": ("kv_heads", "seq", "dim"),
         "v": ("kv_heads", "seq", "dim")},
        {"o": ("heads", "rows", "dim")},
        "O = softmax(Q K^T / sqrt(DIM)) V per head, grouped-query (HEADS a multiple of "
        "KV_HEADS), one fused configuration; Q (HEADS x ROWS x DIM, ROWS 1 for decode, SEQ "
        "for prefill), K, V (KV_HEADS x SEQ x DIM) in BF16, O in FP32",
        attention_graph,
        choices={"mode": (("decode", "prefill"), "decode",
                          "attention: one query per head (decode) or SEQ (prefill)"),
                 "causal": ((False, True), False,
                            "attention, prefill: row r sees keys 0 .. r only"),
                 "kv_layout": (("blocks", "rows"), "blocks",
                               "attention: K and V in the chain's block order, or rows: "
                               "a position-major KV cache of capacity SEQ holding VALID "
                               "keys (decode; docs/attention.md)")},
        defaults={"heads": (lambda params: 1, "1"),
                  "kv_heads": (lambda params: params["heads"], "HEADS")},
        options={"valid": (lambda params: params["seq"], "SEQ",
                           "attention, --kv-layout rows: the keys in the cache, its first "
                           "VALID rows of each head (the seeded inputs fill those; the "
                           "rest are empty slots)"),
                 "queries": (lambda params: 1, "1",
                             "attention, --kv-layout rows: query rows of each head, every "
                             "one seeing the whole cache (a decode step's rows padded to a "
                             "tile)")},
        empty=_empty_cache,
        derived=lambda params: {"rows": _rows_of(params)},
        machine={"agcus": 4}),
}


def get_kernel(name):
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelInputError(f"unknown kernel {name!r}; known: "
                               f"{', '.join(sorted(KERNELS))}") from None

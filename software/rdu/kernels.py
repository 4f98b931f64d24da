"""The kernels the command line and the runtime know by name, behind one interface.

A :class:`Kernel` compiles a program for a machine from its shape parameters, makes
seeded random inputs, takes the user's own arrays (checked against the shapes the
program was compiled for), packs them into the program's memory images, unpacks the
outputs and checks them against an independent numpy reference. The program file's
manifest names its kernel and shapes, so ``rdu run FILE`` needs no shape options.
"""

from dataclasses import dataclass

import numpy as np

from . import gemm, pcu_model

__all__ = ["Kernel", "KERNELS", "get_kernel", "KernelInputError"]


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


@dataclass(frozen=True)
class Kernel:
    """One kernel: its shape parameters, input and output names (in ``--a``, ``--b``
    order) and what each input's shape is in terms of the parameters."""
    name: str
    params: tuple
    inputs: dict          # name -> tuple of parameter names (its shape)
    outputs: dict         # name -> tuple of parameter names
    help: str

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

    # -- per kernel -----------------------------------------------------------------------
    def compile(self, machine, **params):
        if self.name == "gemm":
            return gemm.compile_gemm(params["m"], params["n"], params["k"], machine=machine)
        raise KeyError(self.name)

    def random_inputs(self, program, seed):
        p = program.params
        a, b = gemm.random_inputs(p["m"], p["n"], p["k"], seed)
        return {"a": a, "b": b}

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
        gemm.pack_inputs(program, inputs["a"], inputs["b"])
        return program

    def unpack(self, program, outputs):
        return {"c": gemm.unpack_output(program, outputs["c"])}

    def check(self, program, inputs, results):
        """``(ok, max_abs_err)`` against numpy float64 of the same BF16 inputs."""
        return gemm.check_result(results["c"], inputs["a"], inputs["b"])

    def describe(self, program):
        p = program.params
        return f"{self.name} " + " ".join(f"{k.upper()}={v}" for k, v in p.items())

    def work(self, program):
        """MACs of one run and the machine's peak MACs per cycle."""
        return program.meta["macs"], program.meta["peak_macs_per_cycle"]


KERNELS = {
    "gemm": Kernel("gemm", ("m", "n", "k"), {"a": ("m", "k"), "b": ("k", "n")},
                   {"c": ("m", "n")}, "C = A B, A (M x K) and B (K x N) in BF16, C in FP32"),
}


def get_kernel(name):
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelInputError(f"unknown kernel {name!r}; known: "
                               f"{', '.join(sorted(KERNELS))}") from None

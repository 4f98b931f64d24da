"""The values of an import (:mod:`rdu.onnx.importer`): constants known at import time,
front-end tensors with their ONNX shapes, and the one-line error."""

from dataclasses import dataclass

import numpy as np

from ..frontend.graph import Tensor

__all__ = ["OnnxImportError", "Const", "Value", "identifier", "core_shape"]


class OnnxImportError(ValueError):
    """A model the importer does not take: one line, ``model.onnx: node NAME (Op): what
    is unsupported; supported ...``."""


@dataclass
class Const:
    """A value known at import time: ``array`` (numpy); ``origin``: the initializer it
    is a relayout of (identity, transpose, reshape), whose values the machine holds
    rounded to BF16 when it becomes a weight."""
    array: np.ndarray
    origin: str | None = None
    name: str = ""


@dataclass
class Value:
    """A front-end tensor and its ONNX shape (the front-end shape is the ONNX shape
    with some leading size-1 dimensions dropped)."""
    tensor: Tensor
    shape: tuple


def identifier(name):
    """An ONNX tensor name as a front-end tensor name (an identifier)."""
    text = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "t"
    return text if text.isidentifier() else f"t_{text}"


def core_shape(shape, keep=0):
    """``shape`` without its leading size-1 dimensions, keeping at least ``keep``."""
    shape = tuple(shape)
    while len(shape) > keep and shape and shape[0] == 1:
        shape = shape[1:]
    return shape

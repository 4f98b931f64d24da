"""Words and views of the configurations of attention of projections
(:mod:`rdu.apps.onnx_attention`, :mod:`rdu.apps.onnx_norm`): a matrix stored column tile
by column tile (a matmul's B and result) seen as rows a row group reads and writes."""

import numpy as np

from ..models import pcu_reference as pcu_model

__all__ = ["floats", "bf16", "view", "unview", "identity_b", "PRODUCT_PCUS", "product_pcus"]

#: Systolic PCUs of a product of a decode step's one tile of rows, each streaming the
#: weight on a load of its own (two loads are the HBM peak): ``B`` (the rows) held in a
#: PMU and each PCU reading its rows of ``A`` (:mod:`rdu.compiler.families.matmul`,
#: "held B"), or ``A`` (the rows) one row block and each PCU reading its columns of
#: ``B`` ("split").
PRODUCT_PCUS = 2


def product_pcus(m, n, lanes):
    """The PCUs of a product ``(m x K) @ (K x n)``: :data:`PRODUCT_PCUS` for one row
    block (``m <= lanes``), or for one tile of columns (``n <= lanes``) when they pad no
    row (``m`` a multiple of ``PRODUCT_PCUS lanes``: the images the stages around it
    fix); else one."""
    if m <= lanes or (n <= lanes and m % (PRODUCT_PCUS * lanes) == 0):
        return PRODUCT_PCUS
    return 1


def floats(words):
    """uint32 words as float32 values."""
    return np.asarray(words, np.uint32).view(np.float32)


def bf16(array):
    """float32 values rounded to BF16 words."""
    return pcu_model.bf16_words(np.asarray(array, np.float32))


def view(matrix, lanes):
    """A ``(rows, columns)`` matrix stored column tile by column tile (``lanes``
    columns) as the row-major ``(tiles * rows / 2, 2 lanes)`` matrix of the same
    bytes: a row is two rows of a tile."""
    rows, columns = matrix.shape
    return matrix.reshape(rows // 2, 2, columns // lanes, lanes).transpose(
        2, 0, 1, 3).reshape(-1, 2 * lanes)


def unview(view, rows, lanes):
    """The inverse of :func:`view`."""
    return view.reshape(-1, rows // 2, 2, lanes).transpose(1, 2, 0, 3).reshape(rows, -1)


def identity_b(x_words, rows, width, columns):
    """``[x^T; I]`` (width + columns, columns) as BF16 words: x^T of the first ``rows``
    columns (zero past them), then the identity (Q's and K's B without a norm)."""
    b = np.zeros((width + columns, columns), np.float32)
    b[:width, :rows] = floats(x_words).reshape(rows, width).T
    b[width:] = np.eye(columns, dtype=np.float32)
    return bf16(b)

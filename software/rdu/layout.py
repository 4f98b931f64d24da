"""Memory images of tensors: how the compiler lays a tensor out in HBM, as data.

An :class:`Image` is a 2-D matrix of ``shape`` (zero padded) built from *pieces* (a user
tensor, or a constant, placed at a position), then reshaped to ``split`` and transposed
by ``perm`` (tiling), stored row-major as packed BF16 (two bytes per element, element
``i`` in bytes ``2i, 2i+1``) or as 32-bit words. The compiler chooses images
(:mod:`rdu.compiler.lower`) and records them in the program's manifest; the runtime packs
the user's arrays with :meth:`Image.pack` and unpacks outputs with :meth:`Image.unpack`,
for any kernel, with no kernel-specific code.

>>> image = Image((2, 4), (Piece("x", (0, 0), (2, 3)), Piece(None, (0, 3), (2, 1), 1.0)),
...               (2, 2, 2), (1, 0, 2), "fp32")
>>> x = np.arange(6, dtype=np.float32).reshape(2, 3).view(np.uint32)
>>> image.pack({"x": x}).view(np.float32).tolist()
[0.0, 1.0, 3.0, 4.0, 2.0, 1.0, 5.0, 1.0]

A *strided* image (``strides`` given, one per axis of ``split``, in elements, and its
``origin``) places element ``(i0, i1, ...)`` of the split matrix at element ``origin +
i0 * strides[0] + i1 * strides[1] + ...`` of the stored image: what a three-level AGCU
pattern walks beyond a transpose (a negative stride reads the halves of a block in the
other order, a stride larger than the axis below leaves a gap). Its ``extent`` (elements;
at least the last element's + 1) is the bytes it occupies.

>>> swapped = Image((4, 2), (Piece("x", (0, 0), (4, 2)),), (2, 2, 2), None, "fp32",
...                 strides=(-4, 2, 1), origin=4)
>>> swapped.byte_offsets().tolist()     # rows 2 and 3 first, then rows 0 and 1
[[16, 20], [24, 28], [0, 4], [8, 12]]
>>> swapped.unpack_matrix(swapped.pack({"x": np.arange(8, dtype=np.uint32)})).tolist()
[[0, 1], [2, 3], [4, 5], [6, 7]]
"""

from dataclasses import dataclass

import numpy as np

from .models.pcu_reference import bf16_words

__all__ = ["Piece", "Image", "LayoutError", "padded_row"]

FORMATS = ("bf16", "fp32")


def padded_row(length, lanes):
    """The stored length of a row of ``length`` values that the AGCUs stream as whole
    AXI beats of BF16 (``2 * lanes`` values): ``length`` rounded up to a multiple of
    ``2 * lanes``. The padding words enter a reducing PCU as its reduction's identity
    (the PCU's ``row_pad`` field, ``docs/pcu.md``)."""
    beat = 2 * lanes
    return -(-length // beat) * beat


class LayoutError(ValueError):
    """Data that does not fit an image (one line)."""


@dataclass(frozen=True)
class Piece:
    """``tensor`` (a name; None for a constant ``value``) at ``at`` of size ``size``;
    ``part``: the piece is rows ``part .. part + size[0]`` of the tensor seen as a matrix
    of ``size[1]`` columns (one head of a ``(heads, rows, dim)`` tensor, say), None: the
    whole tensor."""
    tensor: str
    at: tuple
    size: tuple
    value: float = 0.0
    part: int = None


@dataclass(frozen=True)
class Image:
    shape: tuple
    pieces: tuple
    split: tuple = None
    perm: tuple = None
    format: str = "fp32"
    strides: tuple = None
    origin: int = 0
    extent: int = None

    def __post_init__(self):
        if self.format not in FORMATS:
            raise LayoutError(f"image format {self.format!r} is not one of "
                              f"{', '.join(FORMATS)}")
        if self.split is not None and int(np.prod(self.split)) != int(np.prod(self.shape)):
            raise LayoutError(f"image split {self.split} does not hold shape {self.shape}")
        if self.strides is not None:
            if self.split is None or self.perm is not None or \
                    len(self.strides) != len(self.split):
                raise LayoutError(f"image strides {self.strides}: one per axis of a split "
                                  f"(not with a perm), split {self.split}")
            low, high = self._reach()
            if low < 0 or high >= self.stored:
                raise LayoutError(f"image strides {self.strides} from {self.origin} reach "
                                  f"elements {low} to {high}, outside its {self.stored}")
            if len(set(self._strided_positions().tolist())) != self.elements:
                raise LayoutError(f"image strides {self.strides} of split {self.split} "
                                  f"place two elements at one position")

    @property
    def elements(self):
        return int(np.prod(self.shape))

    @property
    def stored(self):
        """Elements the image occupies: its ``elements``, or a strided image's
        ``extent`` (default: its last element's + 1)."""
        if self.strides is None:
            return self.elements
        return self.extent if self.extent is not None else self._reach()[1] + 1

    def _reach(self):
        """The lowest and highest element positions of a strided image."""
        steps = [(n - 1) * s for n, s in zip(self.split, self.strides, strict=True)]
        return (self.origin + sum(min(0, step) for step in steps),
                self.origin + sum(max(0, step) for step in steps))

    def _strided_positions(self):
        """Element positions of a strided image, in the logical matrix's order."""
        index = np.indices(self.split, dtype=np.int64).reshape(len(self.split), -1)
        return self.origin + np.tensordot(np.asarray(self.strides, np.int64), index, 1)

    @property
    def nbytes(self):
        return self.stored * (2 if self.format == "bf16" else 4)

    @property
    def words(self):
        """32-bit words of the image (BF16 images hold an even number of elements)."""
        return -(-self.nbytes // 4)

    def describe(self):
        if self.strides is not None:
            return (f"{self.format} {list(self.shape)} as {list(self.split)} strides "
                    f"{list(self.strides)} from {self.origin} of {self.stored}")
        tiling = f" as {list(self.split)} perm {list(self.perm)}" if self.split else ""
        return f"{self.format} {list(self.shape)}{tiling}"

    # -- JSON (the program manifest) ---------------------------------------------------
    def to_json(self):
        strided = {"strides": list(self.strides), "origin": self.origin,
                   "extent": self.stored} if self.strides is not None else {}
        return {"shape": list(self.shape), "format": self.format,
                "split": list(self.split) if self.split else None,
                "perm": list(self.perm) if self.perm else None, **strided,
                "pieces": [{"tensor": p.tensor, "at": list(p.at), "size": list(p.size),
                            "value": p.value, **({"part": p.part} if p.part is not None
                                                  else {})} for p in self.pieces]}

    @classmethod
    def from_json(cls, data):
        try:
            pieces = tuple(Piece(p["tensor"], tuple(p["at"]), tuple(p["size"]),
                                 float(p.get("value", 0.0)), p.get("part"))
                           for p in data["pieces"])
            strides = data.get("strides")
            return cls(tuple(data["shape"]), pieces,
                       tuple(data["split"]) if data.get("split") else None,
                       tuple(data["perm"]) if data.get("perm") else None, data["format"],
                       tuple(strides) if strides else None, int(data.get("origin", 0)),
                       data.get("extent"))
        except (KeyError, TypeError, ValueError) as error:
            raise LayoutError(f"malformed tensor layout in the manifest: {error}") from None

    # -- addresses ----------------------------------------------------------------------
    def byte_offsets(self):
        """The byte offset in the image of every element of the logical ``shape`` matrix
        (an int64 matrix of ``shape``): where a producer must write element ``(r, c)``
        for a consumer that reads this image."""
        size = 2 if self.format == "bf16" else 4
        if self.strides is not None:
            return (self._strided_positions() * size).reshape(self.shape)
        position = self._arrange(np.arange(self.elements, dtype=np.int64).reshape(
            self.shape))
        offsets = np.empty(self.elements, np.int64)
        offsets[position] = np.arange(self.elements, dtype=np.int64) * size
        return offsets.reshape(self.shape)

    # -- packing -------------------------------------------------------------------------
    def _arrange(self, matrix):
        if self.split is not None:
            matrix = matrix.reshape(self.split)
            if self.perm is not None:
                matrix = matrix.transpose(self.perm)
        return np.ascontiguousarray(matrix).reshape(-1)

    def pack(self, arrays):
        """The image's uint32 words from ``{tensor: uint32 words}`` (BF16 images take
        words with the BF16 in the high half, as :func:`rdu.models.pcu_reference.bf16_words`)."""
        if self.strides is not None:
            flat = np.zeros(self.stored, np.uint32)
            flat[self._strided_positions()] = self.matrix(arrays).reshape(-1)
        else:
            flat = self._arrange(self.matrix(arrays))
        if self.format == "fp32":
            return flat
        halves = np.ascontiguousarray((flat >> 16).astype("<u2"))
        if halves.size % 2:
            halves = np.append(halves, np.zeros(1, "<u2"))
        return halves.view("<u4").astype(np.uint32)

    def matrix(self, arrays):
        """The image's logical ``shape`` matrix (uint32 words) before tiling: the pieces
        on zeros."""
        matrix = np.zeros(self.shape, np.uint32)
        for piece in self.pieces:
            rows, cols = piece.size
            r0, c0 = piece.at
            if piece.tensor is None:
                word = (bf16_words(np.float32(piece.value)) if self.format == "bf16"
                        else np.float32(piece.value).view(np.uint32))
                matrix[r0:r0 + rows, c0:c0 + cols] = word
                continue
            if piece.tensor not in arrays:
                raise LayoutError(f"image needs tensor {piece.tensor!r}")
            values = np.asarray(arrays[piece.tensor], np.uint32)
            if piece.part is not None:
                if values.size % cols:
                    raise LayoutError(f"tensor {piece.tensor!r} ({values.size} elements) "
                                      f"is not a matrix of {cols} columns")
                values = values.reshape(-1, cols)[piece.part:piece.part + rows]
            if values.size != rows * cols:
                raise LayoutError(f"tensor {piece.tensor!r} has {values.size} elements, its "
                                  f"place in the image holds {rows * cols}")
            matrix[r0:r0 + rows, c0:c0 + cols] = values.reshape(rows, cols)
        return matrix

    def unpack_matrix(self, words):
        """The logical ``shape`` matrix (uint32 words; BF16 in the high half) of the
        image's ``words``: the inverse of :meth:`pack`."""
        words = np.asarray(words, np.uint32)
        if self.format == "bf16":
            flat = words.view("<u2")[:self.stored].astype(np.uint32) << 16
        else:
            flat = words[:self.stored]
        if flat.size != self.stored:
            raise LayoutError(f"{words.size} words do not hold a {self.describe()} image")
        if self.strides is not None:
            return flat[self._strided_positions()].reshape(self.shape)
        if self.split is None:
            return flat.reshape(self.shape)
        arranged_shape = (tuple(self.split[i] for i in self.perm) if self.perm
                          else self.split)
        matrix = flat.reshape(arranged_shape)
        if self.perm is not None:
            matrix = matrix.transpose(np.argsort(self.perm))
        return matrix.reshape(self.shape)

    def unpack(self, words, tensor):
        """The uint32 words of ``tensor`` (its piece, or its parts stacked as rows of a
        matrix) from the image's ``words``."""
        return self.tensor_of(self.unpack_matrix(words), tensor)

    def tensor_of(self, matrix, tensor):
        """The uint32 words of ``tensor`` (as :meth:`unpack`) from the image's logical
        ``shape`` matrix."""
        pieces = [piece for piece in self.pieces if piece.tensor == tensor]
        if not pieces:
            raise LayoutError(f"image holds no tensor {tensor!r}")
        if pieces[0].part is None:
            (r0, c0), (rows, cols) = pieces[0].at, pieces[0].size
            return matrix[r0:r0 + rows, c0:c0 + cols]
        cols = pieces[0].size[1]
        out = np.zeros((max(p.part + p.size[0] for p in pieces), cols), np.uint32)
        for piece in pieces:
            (r0, c0), (rows, _) = piece.at, piece.size
            out[piece.part:piece.part + rows] = matrix[r0:r0 + rows, c0:c0 + cols]
        return out

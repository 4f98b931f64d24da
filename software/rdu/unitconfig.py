"""Encode and decode a unit's configuration words with its ``lib.data`` layout.

The compiler encodes with :func:`pack_config`; the functional model
(:mod:`rdu.models.array`) and tools decode with :func:`unpack_config`. Both use the very
layouts the hardware stores (``hdl.pcu_config.pcu_config_layout``, ``hdl.pmu.pmu_config_layout``,
``hdl.switch.switch_config_layout``, ``hdl.agcu.agcu_config_layout``), packed from bit 0
of word 0 (``docs/bitstream.md``).

>>> from amaranth.lib import data
>>> layout = data.StructLayout({"a": 4, "b": data.ArrayLayout(8, 2)})
>>> unpack_config(layout, pack_config(layout, {"a": 3, "b": [1, 255]}))
{'a': 3, 'b': [1, 255]}
"""

from amaranth.hdl import Shape
from amaranth.lib import data

from hdl.interfaces import WORD_BITS, config_words

__all__ = ["pack_config", "unpack_config", "layout_words", "code_name"]

_MASK32 = (1 << WORD_BITS) - 1


def layout_words(layout):
    """Number of 32-bit configuration words of ``layout``."""
    return config_words(layout)


def pack_config(layout, fields):
    """The configuration words of ``fields`` (nested dicts and lists; missing fields are
    zero) packed by the ``lib.data`` ``layout``."""
    layout = data.Layout.cast(layout)
    value = layout.const(fields).as_value().value
    return [(value >> (WORD_BITS * i)) & _MASK32 for i in range(config_words(layout))]


def _decode(shape, value):
    if isinstance(shape, data.StructLayout):
        return {name: _decode(field.shape, (value >> field.offset) & ((1 << field.width) - 1))
                for name, field in shape}
    if isinstance(shape, data.ArrayLayout):
        elem = data.Layout.cast(shape.elem_shape) if isinstance(
            shape.elem_shape, data.Layout) else shape.elem_shape
        width = Shape.cast(elem).width
        return [_decode(elem, (value >> (i * width)) & ((1 << width) - 1))
                for i in range(shape.length)]
    if isinstance(shape, data.Layout):
        raise TypeError(f"Layout {shape!r} is not a struct or array layout")
    shape = Shape.cast(shape)
    if shape.signed and value >> (shape.width - 1):
        value -= 1 << shape.width
    return value


def unpack_config(layout, words):
    """The fields of configuration ``words`` decoded by ``layout``: nested dicts (structs)
    and lists (arrays) of ints (signed fields sign-extended).

    Fewer words than the layout needs are zero-extended; bits past the layout are
    ignored (the hardware does not store them).
    """
    layout = data.Layout.cast(layout)
    words = list(words)
    if len(words) > config_words(layout):
        raise ValueError(f"{len(words)} configuration words for a layout of "
                         f"{config_words(layout)} words")
    value = 0
    for index, word in enumerate(words):
        if not isinstance(word, int) or not 0 <= word <= _MASK32:
            raise ValueError(f"Configuration word {index} is {word!r}, not a 32-bit "
                             f"unsigned int")
        value |= word << (WORD_BITS * index)
    return _decode(layout, value & ((1 << layout.size) - 1))


def code_name(codes, value):
    """The name of ``value`` in ``codes`` (an enum or a class of integer constants)."""
    members = getattr(codes, "__members__", None) or {
        name: member for name, member in vars(codes).items()
        if name.isupper() and isinstance(member, int)}
    for name, member in members.items():
        if member == value:
            return name
    return f"unknown code {value}"

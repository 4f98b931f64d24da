"""The AGCU's encoder: the load and store nodes on one AGCU -> ``hdl.agcu`` words.

IR data: a :class:`rdu.ir.Load` or :class:`rdu.ir.Store` has an
:class:`rdu.ir.AccessPattern` over *bytes* (``start`` the byte address, strides in bytes,
``counts`` in beats; ``docs/agcu.md``), ``config["bf16"]``: a load that expands packed
BF16 (each AXI beat becomes two vector beats), and ``config["position_stride"]`` (bytes,
default 0): the pattern moves by ``position * position_stride`` at each launch (the
launch's position, ``docs/agcu.md``, **Positioned patterns**).
"""

import operator

from hdl.agcu import POSITION_BITS, POSITION_STRIDE_BITS, agcu_config_layout
from hdl.interfaces import WORD_BITS

from ..unitconfig import pack_config
from .pcu import UnitConfigError

__all__ = ["fields", "encode", "pattern_fields", "beats", "check_position",
           "position_stride_beats", "IDLE_PATTERN", "MAX_POSITION"]

#: The largest launch position (``RDUSystem.position``).
MAX_POSITION = (1 << POSITION_BITS) - 1

IDLE_PATTERN = {"base": 0, "count": [0, 0, 0], "stride": [0, 0, 0]}


def pattern_fields(pattern, where):
    if any(count > 0xFFFF for count in pattern.counts):
        raise UnitConfigError(f"{where}: loop counts {pattern.counts} exceed the AGCU's "
                              f"16-bit counts")
    return {"base": pattern.start, "count": list(pattern.counts),
            "stride": list(pattern.strides)}


def check_position(value, where="position"):
    """``value`` as the launch position (an integer ``0 .. MAX_POSITION``); a
    ``ValueError`` of one line otherwise."""
    try:
        position = operator.index(value)
    except TypeError:
        position = None
    if position is None or isinstance(value, bool) or not 0 <= position <= MAX_POSITION:
        raise ValueError(f"{where} must be an integer from 0 to {MAX_POSITION}, not {value!r}")
    return position


def position_stride_beats(node, beat):
    """The position stride of a Load or Store ``node`` in beats of ``beat`` bytes (the
    configuration field); :class:`UnitConfigError` when it is not whole beats or too
    large for the field."""
    stride = node.config.get("position_stride", 0)
    limit = 1 << (POSITION_STRIDE_BITS - 1)
    if stride % beat or not -limit <= stride // beat < limit:
        raise UnitConfigError(f"{node.name}: position stride {stride} bytes is not a "
                              f"multiple of the {beat}-byte beat between "
                              f"{-limit * beat} and {(limit - 1) * beat}")
    return stride // beat


def fields(load=None, store=None, *, lanes):
    """Fields of the AGCU of a ``lanes``-lane machine running ``load`` (a Load node or
    None) and ``store``."""
    beat = lanes * WORD_BITS // 8
    result = {"load_enable": 0, "store_enable": 0, "wait_done": 0, "load_bf16": 0,
              "store_bf16": 0, "load": dict(IDLE_PATTERN), "store": dict(IDLE_PATTERN),
              "load_position_stride": 0, "store_position_stride": 0}
    if load is not None:
        result.update(load_enable=1, load_bf16=int(bool(load.config.get("bf16"))),
                      load=pattern_fields(load.pattern, load.name),
                      load_position_stride=position_stride_beats(load, beat))
    if store is not None:
        result.update(store_enable=1, store_bf16=int(bool(store.config.get("bf16"))),
                      store=pattern_fields(store.pattern, store.name),
                      store_position_stride=position_stride_beats(store, beat))
    return result


def encode(load=None, store=None, *, lanes):
    return pack_config(agcu_config_layout(), fields(load, store, lanes=lanes))


def beats(fields):
    """Vector beats one run of decoded AGCU ``fields`` moves on its busier stream (an AXI
    beat of BF16 is two vector beats, ``docs/agcu.md``); 0 for an idle AGCU."""
    def pattern(side):
        total = 1
        for count in fields[side]["count"]:
            total *= count
        return total * (2 if fields[f"{side}_bf16"] else 1)
    return max(pattern("load") if fields["load_enable"] else 0,
               pattern("store") if fields["store_enable"] else 0)

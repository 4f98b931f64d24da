"""The AGCU's encoder: the load and store nodes on one AGCU -> ``hdl.agcu`` words.

IR data: a :class:`rdu.ir.Load` or :class:`rdu.ir.Store` has an
:class:`rdu.ir.AccessPattern` over *bytes* (``start`` the byte address, strides in bytes,
``counts`` in beats; ``docs/agcu.md``) and ``config["bf16"]``: a load that expands packed
BF16 (each AXI beat becomes two vector beats).
"""

from hdl.agcu import agcu_config_layout

from ..unitconfig import pack_config
from .pcu import UnitConfigError

__all__ = ["fields", "encode", "pattern_fields", "beats", "IDLE_PATTERN"]

IDLE_PATTERN = {"base": 0, "count": [0, 0, 0], "stride": [0, 0, 0]}


def pattern_fields(pattern, where):
    if any(count > 0xFFFF for count in pattern.counts):
        raise UnitConfigError(f"{where}: loop counts {pattern.counts} exceed the AGCU's "
                              f"16-bit counts")
    return {"base": pattern.start, "count": list(pattern.counts),
            "stride": list(pattern.strides)}


def fields(load=None, store=None):
    """Fields of the AGCU running ``load`` (a Load node or None) and ``store``."""
    result = {"load_enable": 0, "store_enable": 0, "wait_done": 0, "load_bf16": 0,
              "store_bf16": 0, "load": dict(IDLE_PATTERN), "store": dict(IDLE_PATTERN)}
    if load is not None:
        result.update(load_enable=1, load_bf16=int(bool(load.config.get("bf16"))),
                      load=pattern_fields(load.pattern, load.name))
    if store is not None:
        result.update(store_enable=1, store_bf16=int(bool(store.config.get("bf16"))),
                      store=pattern_fields(store.pattern, store.name))
    return result


def encode(load=None, store=None):
    return pack_config(agcu_config_layout(), fields(load, store))


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

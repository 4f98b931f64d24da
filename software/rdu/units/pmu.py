"""The PMU's encoder: a buffer node's configuration -> ``hdl.pmu`` configuration words.

IR data (:attr:`rdu.ir.Buffer.config`): ``write`` and ``read``, each an
:class:`rdu.ir.AccessPattern` over PMU words plus its ``lane_stride`` (``write_lanes``,
``read_lanes``); ``buffers``, ``buffer_words``, ``read_repeat``, ``read_passes``,
``skew_shift`` (0 or log2 of the row pitch), ``predicate`` (``(low, high)`` or None) and
``read_gate``. Values the mapping fixes (:class:`rdu.ir.BlockOffset`) must be resolved
by :mod:`rdu.compiler.bind` first.
"""

from hdl.pmu import ADDRESS_BITS, BOUND_BITS, MAX_BUFFERS, pmu_config_layout

from ..unitconfig import pack_config
from .pcu import UnitConfigError

__all__ = ["fields", "encode", "idle", "beats", "READ_REPEAT_LIMIT"]

#: The most read passes over one buffer before it is released (``read_repeat``'s width).
READ_REPEAT_LIMIT = (1 << pmu_config_layout()["read_repeat"].shape.width) - 1


def _generator(pattern, lane_stride, where, side):
    limit = (1 << BOUND_BITS) - 1
    if any(count > limit for count in pattern.counts):
        raise UnitConfigError(f"{where}: {side} loop counts {pattern.counts} exceed the "
                              f"PMU's {BOUND_BITS}-bit bounds")
    mask = (1 << ADDRESS_BITS) - 1
    return {"start": pattern.start & mask, "stride": [s & mask for s in pattern.strides],
            "bound": list(pattern.counts), "lane_stride": lane_stride & mask}


def fields(config, where="pmu"):
    """The ``pmu_config_layout`` fields of IR ``config``."""
    buffers = config.get("buffers", 1)
    if not 1 <= buffers <= MAX_BUFFERS:
        raise UnitConfigError(f"{where}: {buffers} buffers; a PMU rotates 1 to {MAX_BUFFERS}")
    result = {"buffers": buffers, "buffer_words": config["buffer_words"],
              "read_repeat": config.get("read_repeat", 1),
              "read_passes": config.get("read_passes", 0),
              "skew_shift": config.get("skew_shift", 0),
              "read_gate": int(bool(config.get("read_gate")))}
    if config.get("predicate") is not None:
        low, high = config["predicate"]
        result.update(predicate_enable=1, predicate_low=low, predicate_high=high)
    if config.get("write") is not None:
        result["write_enable"] = 1
        result["write"] = _generator(config["write"], config.get("write_lanes", 1), where,
                                     "write")
    if config.get("read") is not None:
        result["read_enable"] = 1
        result["read"] = _generator(config["read"], config.get("read_lanes", 1), where,
                                    "read")
    if result["read_repeat"] > READ_REPEAT_LIMIT:
        raise UnitConfigError(f"{where}: {result['read_repeat']} read passes over a buffer; "
                              f"at most {READ_REPEAT_LIMIT}")
    if result["read_passes"] > (1 << 16) - 1:
        raise UnitConfigError(f"{where}: {result['read_passes']} read passes; at most 65535")
    return result


def encode(config, where="pmu"):
    return pack_config(pmu_config_layout(), fields(config, where))


def idle():
    return pack_config(pmu_config_layout(), {})


def beats(fields):
    """Vector beats one run of decoded PMU ``fields`` reads (a beat each, at best one a
    cycle): a read pass over a buffer (the read pattern's iterations), ``read_repeat``
    passes a buffer, ``read_passes`` buffers; or the beats it writes when it only
    writes. 0 for an idle PMU."""
    def pattern(side):
        total = 1
        for bound in fields[side]["bound"]:
            total *= bound
        return total
    if fields["read_enable"]:
        return (pattern("read") * max(1, fields["read_repeat"]) *
                max(1, fields["read_passes"]))
    return pattern("write") if fields["write_enable"] else 0

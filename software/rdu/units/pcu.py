"""The PCU's encoder and decoder: a compute node's configuration -> ``hdl.pcu`` configuration
words (:func:`encode`), decoded fields -> named fields (:func:`named_fields`).

IR data (:attr:`rdu.ir.Compute.config`):

* ``mode``: ``"systolic"`` or ``"simd"``;
* ``trips``: iterations of the three counters, innermost first (counter ``n`` runs
  ``min 0, max trips[n], stride 1``);
* SIMD only: ``stages`` (a list of ``(op, src_a, src_b, src_c, constant)`` with
  :class:`hdl.fp.Op` and :class:`hdl.pcu_config.Source` names or codes; missing stages pass
  their input through), ``emit_every``, ``vector_out``, ``scalar_in``, ``reduce``
  (:class:`hdl.pcu_config.Reduce` name), ``tail`` (:class:`hdl.pcu_config.Tail` name),
  ``emit_outer`` and ``acc_stage`` (the index of the stage whose ``REG`` is the
  accumulator memory, or None; counter 0 runs at most :data:`hdl.pcu_config.ACC_DEPTH`),
  ``tail_bf16`` (round the tail's output to BF16), ``row_pad`` (the padding words at the
  end of each row on ``vector_in0``, 0 to ``2 * lanes - 1``: they enter as stage 0's
  constant, the identity of the reduction it accumulates).
"""

from hdl.fp import Op
from hdl.pcu_config import (
    ACC_DEPTH,
    COUNTER_BITS,
    Mode,
    Reduce,
    Source,
    Tail,
    pcu_config_layout,
    row_pad_bits,
)

from ..models.pcu_reference import trip_count
from ..unitconfig import code_name, pack_config

__all__ = ["fields", "encode", "idle", "named_fields", "beats", "UnitConfigError"]


class UnitConfigError(ValueError):
    """IR data a unit cannot hold (says which node and field)."""


def _code(enum, value, where):
    if isinstance(value, str):
        try:
            return enum[value.upper()]
        except KeyError:
            raise UnitConfigError(f"{where}: {value!r} is not a {enum.__name__}") from None
    return enum(value)


def _counters(trips, where):
    trips = list(trips) + [1] * (3 - len(trips))
    limit = (1 << COUNTER_BITS) - 1
    for trip in trips:
        if not isinstance(trip, int) or not 1 <= trip <= limit:
            raise UnitConfigError(f"{where}: a counter runs {trip} iterations; the PCU's "
                                  f"{COUNTER_BITS}-bit counters take 1 to {limit}")
    return [{"min": 0, "max": trip, "stride": 1} for trip in trips]


def fields(config, stages, where="pcu"):
    """The ``pcu_config_layout`` fields of IR ``config`` for a PCU of ``stages`` stages."""
    if config.get("mode") == "systolic":
        # group_rows: a tile's group spans row blocks of A (hdl.pcu_config.Mode)
        mode = Mode.SYSTOLIC_ROWS if config.get("group_rows") else Mode.SYSTOLIC
        return {"mode": mode, "counters": _counters(config["trips"], where)}
    if config.get("mode") != "simd":
        raise UnitConfigError(f"{where}: mode {config.get('mode')!r} is not systolic or simd")
    program = list(config.get("stages", ()))
    if len(program) > stages:
        raise UnitConfigError(f"{where}: {len(program)} SIMD stages, the PCU has {stages}")
    encoded = []
    for index in range(stages):
        op, a, b, c, constant = (program[index] if index < len(program)
                                 else ("PASS", "PREV", "PREV", "PREV", 0))
        encoded.append({"op": _code(Op, op, where), "src_a": _code(Source, a, where),
                        "src_b": _code(Source, b, where), "src_c": _code(Source, c, where),
                        "constant": int(constant) & 0xFFFFFFFF})
    return {
        "mode": Mode.SIMD, "counters": _counters(config["trips"], where),
        "scalar_in": int(bool(config.get("scalar_in"))),
        "emit_every": int(bool(config.get("emit_every"))),
        "vector_out": int(bool(config.get("vector_out", True))),
        "reduce": _code(Reduce, config.get("reduce", "NONE"), where),
        "tail": _code(Tail, config.get("tail", "NONE"), where),
        "stages": encoded,
        "emit_outer": int(bool(config.get("emit_outer"))),
        "acc_stage": _acc_stage(config, program, where),
        "tail_bf16": int(bool(config.get("tail_bf16"))),
        "row_pad": int(config.get("row_pad", 0)),
    }


def _acc_stage(config, program, where):
    """The ``acc_stage`` field of IR ``config["acc_stage"]`` (a stage index, or None)."""
    stage = config.get("acc_stage")
    if stage is None:
        return 0
    if not 0 <= stage < len(program):
        raise UnitConfigError(f"{where}: accumulator stage {stage}: the program has "
                              f"{len(program)} stages")
    inner = config["trips"][0]
    if inner > ACC_DEPTH:
        raise UnitConfigError(f"{where}: accumulator stage over {inner} iterations of "
                              f"counter 0; the accumulator memory holds {ACC_DEPTH}")
    return stage + 1


def encode(config, lanes, stages, where="pcu"):
    """Configuration words of IR ``config``."""
    encoded = fields(config, stages, where)
    pad = encoded.get("row_pad", 0)
    if not 0 <= pad < 1 << row_pad_bits(lanes) or pad >= 2 * lanes:
        raise UnitConfigError(f"{where}: {pad} padding words a row; a row is padded to "
                              f"whole beats of {2 * lanes} values (0 to {2 * lanes - 1})")
    return pack_config(pcu_config_layout(lanes, stages), encoded)


def idle(lanes, stages):
    """Words of an unused PCU (all zero: nothing survives from a previous kernel)."""
    return pack_config(pcu_config_layout(lanes, stages), {})


def named_fields(fields):
    """Decoded PCU ``fields`` with the mode, ops, sources, reduction and tail named
    (``rdu inspect``)."""
    named = dict(fields)
    named["mode"] = code_name(Mode, fields["mode"])
    named["reduce"] = code_name(Reduce, fields["reduce"])
    named["tail"] = code_name(Tail, fields["tail"])
    named["stages"] = [{**stage, "op": code_name(Op, stage["op"]),
                        **{f"src_{x}": code_name(Source, stage[f"src_{x}"]) for x in "abc"}}
                       for stage in fields["stages"]]
    return named


def beats(fields):
    """Iterations one run of decoded PCU ``fields`` takes (a beat each, at best one a
    cycle): its counter chain's (:func:`rdu.models.pcu_reference.trip_count`); 0 for a
    PCU whose counters do not run (an idle PCU's are all zero)."""
    trips = 1
    for counter in fields["counters"]:
        try:
            trips *= trip_count(counter)
        except ValueError:
            return 0
    return trips

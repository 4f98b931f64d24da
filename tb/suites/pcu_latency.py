"""SIMD PCU timing on the pipelined FP operators (``PCU(fp_latency=...)``): the latency
and the interval of beats through configured stages, one run per case on one PCU."""

import numpy as np

from .common import pack_vector
from .pcu import random_operands, write_config


def timing_case(ops, *, reduce=0, src_b=3, constant=0x3F800000):
    """A case of :func:`simd_timing_cases`: a stage per op of ``ops`` (names of
    :class:`hdl.fp.Op`) on ``PREV`` and ``src_b`` (``CONST`` 1.0 by default; ``REG``
    makes a loop-carried operand), ``c`` the constant, every beat emitted."""
    from hdl.fp import Op
    return {"mode": 0, "emit_every": 1, "vector_out": 1, "reduce": reduce,
            "stages": [{"op": int(Op[op]), "src_a": 0, "src_b": src_b, "src_c": 3,
                        "constant": constant} for op in ops]}


async def simd_timing_cases(bench, *, lanes, stages, cases, beats):
    """Run each configuration of ``cases`` (:func:`timing_case`) on ``beats`` random
    vectors without stalls, outputs checked against the model; returns, per case, the
    cycles at which each beat crossed ``vector_in0`` and ``vector_out``."""
    from rdu.models import pcu_reference as pcu_model

    from hdl.pcu_config import pcu_config_layout
    rng = np.random.default_rng(bench.rng.getrandbits(64))
    layout = pcu_config_layout(lanes, stages)
    source, sink = bench.source("vector_in0"), bench.sink("vector_out")
    scalars = bench.sink("scalar_out")
    ctrl_in, ctrl_out = bench.source("control_in"), bench.sink("control_out")
    results = []
    for case in cases:
        config = dict(case, counters=[{"min": 0, "max": beats, "stride": 1}] +
                      [{"min": 0, "max": 1, "stride": 1}] * 2)
        vectors = random_operands(rng, beats * lanes)[0].reshape(beats, lanes)
        expected = pcu_model.run_simd(config, lanes, vectors)
        await write_config(bench, layout, config)
        marks = {"in": [], "out": []}
        source.on_transfer = lambda item, cycle, marks=marks: marks["in"].append(cycle)
        sink.on_transfer = lambda item, cycle, marks=marks: marks["out"].append(cycle)
        ctrl_in.send(0)
        await bench.cycles(3)
        source.send_all(pack_vector(v) for v in vectors)
        sink.expect_all(pack_vector(v) for v in expected["vector_out"])
        scalars.expect_all(int(word) for word in expected["scalar_out"])
        ctrl_out.expect(1)
        await bench.streams_done(timeout=50 * beats + 500)
        results.append(marks)
    return results

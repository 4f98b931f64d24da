"""The PCU's counter chain: three nested counters that sequence a run."""

from amaranth import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .pcu_config import COUNTER_BITS, COUNTERS, counter_layout

__all__ = ["chain_status_layout", "CounterChain"]


def chain_status_layout():
    """What the counter chain tells the PCU's bodies about the current iteration.

    ``values``: the counters (0 innermost); ``last``: bit ``n`` set when counter ``n`` is
    at its last value (its next step wraps it); ``first_inner`` / ``first_outer``: counter
    0 / counter 1 at its ``min``; ``last_all``: every counter at its last value (the run's
    last iteration)."""
    return data.StructLayout({
        "values": data.ArrayLayout(unsigned(COUNTER_BITS), COUNTERS),
        "last": unsigned(COUNTERS),
        "first_inner": unsigned(1),
        "first_outer": unsigned(1),
        "last_all": unsigned(1),
    })


class CounterChain(wiring.Component):
    """Three nested counters (counter 0 innermost), each counting ``min, min + stride,
    ...`` while below ``max``: one iteration per ``step``, the run's iterations in the
    order the reference's ``rdu.models.pcu_reference.iterations`` lists them.

    See also: the configuration (``counters`` of :func:`hdl.pcu_config.pcu_config_layout`,
    ``docs/pcu.md``), the PCU that holds it (:class:`hdl.pcu.PCU`), the reference
    (``rdu.models.pcu_reference.iterations`` / ``trip_count``), tests
    ``tests/test_pcu_components.py``.

    Attributes
    ----------
    config : In(ArrayLayout(counter_layout(), COUNTERS))
        The counters' ``min``, ``max`` and ``stride``.
    load : In(1)
        Set every counter to its ``min`` (on the next edge).
    step : In(1)
        Advance by one iteration (counter 0 by ``stride``; a counter that wraps to its
        ``min`` carries into the next). ``load`` wins.
    status : Out(chain_status_layout())
        The current iteration (combinational from the counters and ``config``).
    bad : Out(1)
        A counter has ``stride == 0`` or ``max <= min``.
    """

    def __init__(self):
        super().__init__({
            "config": In(data.ArrayLayout(counter_layout(), COUNTERS)),
            "load": In(1),
            "step": In(1),
            "status": Out(chain_status_layout()),
            "bad": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        values = [Signal(COUNTER_BITS, name=f"counter{n}") for n in range(COUNTERS)]
        last = [Signal(name=f"counter{n}_last") for n in range(COUNTERS)]
        bad = Const(0)
        for n in range(COUNTERS):
            counter = self.config[n]
            bad = bad | (counter.stride == 0) | (counter.max <= counter.min)
            m.d.comb += [last[n].eq(values[n] + counter.stride >= counter.max),
                         self.status.values[n].eq(values[n]),
                         self.status.last[n].eq(last[n])]
        m.d.comb += [
            self.bad.eq(bad),
            self.status.first_inner.eq(values[0] == self.config[0].min),
            self.status.first_outer.eq(values[1] == self.config[1].min),
            self.status.last_all.eq(last[0] & last[1] & last[2]),
        ]
        with m.If(self.load):
            for n in range(COUNTERS):
                m.d.sync += values[n].eq(self.config[n].min)
        with m.Elif(self.step):
            carry = Const(1)
            for n in range(COUNTERS):
                counter = self.config[n]
                with m.If(carry):
                    m.d.sync += values[n].eq(
                        Mux(last[n], counter.min, values[n] + counter.stride))
                carry = carry & last[n]
        return m

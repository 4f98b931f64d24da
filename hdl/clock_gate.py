"""Gated clocks for simulation builds: a unit's rarely used logic clocked only when it
is in use.

Verilator evaluates the logic feeding a flip-flop whenever that flip-flop's clock
ticks, whether its inputs changed or not, so an idle unit costs as much as a busy one
(``docs/simulation-speed.md``: the PCU's special-function unit was a third of an idle
4x4 system). Logic whose registers and inputs all live in a gated clock domain is
evaluated only on that domain's edges.

Gating is a property of the *elaboration platform*: :class:`GatedClocks` asks for it,
and ``rdu.sim.verilator.build`` elaborates with it. Any other platform (``None`` for
the Amaranth simulator, the FPGA flow, the Verilog ``rdu verilog`` ships) gets the plain
``sync`` domain, and the design is cycle for cycle the same: a gated domain's clock
ticks on every ``sync`` edge while its enable is high, and the enable is a quasi-static
configuration bit that is high whenever the unit has work.
"""

from amaranth import ClockDomain, ClockSignal, ResetSignal, Signal

__all__ = ["GatedClocks", "gates_clocks", "gated_domain"]


class GatedClocks:
    """Elaboration platform of simulation builds: units gate the clocks of their idle
    logic (:func:`gated_domain`)."""
    gate_clocks = True


def gates_clocks(platform):
    """Whether ``platform`` asks for gated clocks."""
    return bool(getattr(platform, "gate_clocks", False))


def gated_domain(m, platform, name, enable):
    """The clock domain for logic that only needs clocking while ``enable`` is high.

    With :class:`GatedClocks`, a local domain ``name`` clocked by ``clk & gate``,
    where ``gate`` is ``enable`` registered on the falling edge of ``clk`` (so it is
    stable while ``clk`` is high and the gated clock has no glitches); its reset is
    ``sync``'s. ``enable`` must rise at least half a cycle before the first edge that
    must reach the domain, which a configuration bit does. Otherwise ``"sync"``.

    Returns the domain's name."""
    if not gates_clocks(platform):
        return "sync"
    latch = f"{name}_gate"
    falling = ClockDomain(latch, clk_edge="neg", async_reset=True, local=True)
    # the falling-edge domain's clock is ``clk`` itself: name it so, or the unit's
    # ``clk`` would be shown under the latch domain's name in its module and waves
    falling.clk, falling.rst = Signal(name="clk"), Signal(name="rst")
    m.domains += [falling, ClockDomain(name, async_reset=True, local=True)]
    gate = Signal(name=f"{name}_enable")
    m.d[latch] += gate.eq(enable)
    m.d.comb += [
        ClockSignal(latch).eq(ClockSignal("sync")),
        ResetSignal(latch).eq(ResetSignal("sync")),
        ClockSignal(name).eq(ClockSignal("sync") & gate),
        ResetSignal(name).eq(ResetSignal("sync")),
    ]
    return name

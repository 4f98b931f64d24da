"""The Verilog top level of a component: its ports, a clock and an asynchronous reset.

Every Verilog module that ``rdu.sim.verilator.generate_verilog`` writes (the systems,
the IP block and each shared unit module: what Verilator builds and ``rdu verilog``
ships; the FPGA flow's pin harness, ``rdu.apps.fpga``, is converted on its own) is a
:class:`VerilogTop` around the component. The ``sync`` domain's reset is asynchronous:
``rst`` resets every flip-flop as soon as it rises and must be released synchronously
with ``clk`` (by the integrator's reset synchroniser; the testbenches change it between
clock edges). At every clock edge a design held in reset for one edge or more behaves
exactly as with Amaranth's default synchronous reset, which the Amaranth simulator tier
keeps.

Why: with a synchronous reset every flip-flop's next-state logic reads the top-level
``rst`` input combinationally, and Verilator evaluates all logic that depends on a
top-level input in its input-combinational region on every ``eval()`` (twice per clock
cycle) besides the clocked region. An asynchronous reset is an edge trigger instead,
and the next-state logic runs once per cycle (``docs/simulation-speed.md``).
"""

from amaranth import ClockDomain, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In

__all__ = ["VerilogTop"]


def _member_value(interface, path):
    for part in path:
        interface = interface[part] if isinstance(part, int) else getattr(interface, part)
    return interface


class VerilogTop(wiring.Component):
    """``component``'s ports, plus ``clk`` and ``rst`` (active high, asynchronous) of
    the ``sync`` domain it runs in.

    Parameters
    ----------
    component : wiring.Component
        The design; its signature must not have members named ``clk`` or ``rst``.
    """
    def __init__(self, component):
        if not isinstance(component, wiring.Component):
            raise TypeError(f"VerilogTop wraps a wiring.Component, not {component!r}")
        members = dict(component.signature.members.items())
        for name in ("clk", "rst"):
            if name in members:
                raise ValueError(f"component {component!r} already has a port named "
                                 f"{name!r}")
        self._component = component
        super().__init__({"clk": In(1), "rst": In(1), **members})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = sync = ClockDomain("sync", async_reset=True, local=True)
        m.d.comb += [sync.clk.eq(self.clk), sync.rst.eq(self.rst)]
        m.submodules.core = core = self._component
        for path, member, outer in self.signature.flatten(self):
            if path[0] in ("clk", "rst"):
                continue
            inner = _member_value(core, path)
            m.d.comb += inner.eq(outer) if member.flow == In else outer.eq(inner)
        return m

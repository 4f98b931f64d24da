"""AXI4 buffer: a StreamFIFO on each of the five channels (a register slice)."""

from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .interfaces import AXI4Signature, axi4_layouts
from .stream_fifo import StreamFIFO

__all__ = ["AXIBuffer"]


class AXIBuffer(wiring.Component):
    """Decouples an AXI4 manager from a subordinate with a FIFO per channel.

    It cuts every combinational path between the two sides (timing closure between
    an AGCU and the memory controller) and absorbs ``depth`` items per channel.

    Parameters
    ----------
    addr_width, data_width, id_width : int
        As in :class:`hdl.interfaces.AXI4Signature`.
    depth : int
        Items per channel FIFO.

    Attributes
    ----------
    sub : In(AXI4Signature)
        Subordinate side: the manager connects here.
    mgr : Out(AXI4Signature)
        Manager side: connects to the memory.
    """

    def __init__(self, *, addr_width=32, data_width=256, id_width=4, depth=2):
        signature = AXI4Signature(addr_width=addr_width, data_width=data_width,
                                  id_width=id_width)
        self._layouts = axi4_layouts(addr_width, data_width, id_width)
        self._depth = depth
        super().__init__({"sub": In(signature), "mgr": Out(signature)})

    def elaborate(self, platform):
        m = Module()
        for name in ("aw", "w", "ar"):
            fifo = m.submodules[f"{name}_fifo"] = StreamFIFO(self._layouts[name], self._depth)
            wiring.connect(m, wiring.flipped(getattr(self.sub, name)), fifo.i)
            wiring.connect(m, fifo.o, wiring.flipped(getattr(self.mgr, name)))
        for name in ("b", "r"):
            fifo = m.submodules[f"{name}_fifo"] = StreamFIFO(self._layouts[name], self._depth)
            wiring.connect(m, wiring.flipped(getattr(self.mgr, name)), fifo.i)
            wiring.connect(m, fifo.o, wiring.flipped(getattr(self.sub, name)))
        return m

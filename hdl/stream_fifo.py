"""Stream FIFOs: the per-port buffers of every unit and every switch hop."""

from amaranth import Module, Mux, Shape, Signal
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamFIFO"]


class StreamFIFO(wiring.Component):
    """Synchronous first-in first-out buffer between two ``lib.stream`` interfaces.

    One item in and one item out per cycle, concurrently; a write into an empty FIFO
    is visible at the output on the next cycle. ``i.ready`` depends only on the
    occupancy and ``o.valid`` only on the occupancy, so neither side has a
    combinational path to the other (safe to chain around a mesh).

    Storage is a ``lib.memory`` array with an asynchronous read port (distributed RAM
    on an FPGA).

    Parameters
    ----------
    shape : ShapeLike
        Payload shape (a plain shape or a ``lib.data`` layout).
    depth : int
        Number of items held, at least 1.

    Attributes
    ----------
    i : In(stream.Signature(shape))
        Write side.
    o : Out(stream.Signature(shape))
        Read side.
    level : Out(range(depth + 1))
        Number of items held.
    flush : In(1)
        Only with ``flush=True``: empty the FIFO at the next edge (an item offered in
        the same cycle is dropped too).
    """
    def __init__(self, shape, depth, *, flush=False):
        if not isinstance(depth, int) or isinstance(depth, bool):
            raise TypeError(f"FIFO depth must be an integer, not {depth!r}")
        if depth < 1:
            raise ValueError(f"FIFO depth must be at least 1, not {depth}")
        self._shape = shape
        self._depth = depth
        self._flush = bool(flush)
        members = {
            "i": In(stream.Signature(shape)),
            "o": Out(stream.Signature(shape)),
            "level": Out(range(depth + 1)),
        }
        if flush:
            members["flush"] = In(1)
        super().__init__(members)

    @property
    def depth(self):
        return self._depth

    @property
    def shape(self):
        return self._shape

    def elaborate(self, platform):
        m = Module()
        depth = self._depth
        width = Shape.cast(self._shape).width

        m.submodules.storage = storage = memory.Memory(shape=width, depth=depth, init=[])
        write_port = storage.write_port()
        read_port = storage.read_port(domain="comb")

        write_ptr = Signal(range(depth))
        read_ptr = Signal(range(depth))
        push = Signal()
        pop = Signal()

        m.d.comb += [
            self.i.ready.eq(self.level != depth),
            self.o.valid.eq(self.level != 0),
            push.eq(self.i.valid & self.i.ready),
            pop.eq(self.o.valid & self.o.ready),
            write_port.addr.eq(write_ptr),
            write_port.data.eq(self.i.payload),
            write_port.en.eq(push),
            read_port.addr.eq(read_ptr),
            self.o.payload.eq(read_port.data),
        ]

        def advance(pointer):
            return Mux(pointer == depth - 1, 0, pointer + 1)

        with m.If(push):
            m.d.sync += write_ptr.eq(advance(write_ptr))
        with m.If(pop):
            m.d.sync += read_ptr.eq(advance(read_ptr))
        with m.If(push & ~pop):
            m.d.sync += self.level.eq(self.level + 1)
        with m.Elif(pop & ~push):
            m.d.sync += self.level.eq(self.level - 1)
        if self._flush:
            with m.If(self.flush):
                m.d.sync += [self.level.eq(0), read_ptr.eq(0), write_ptr.eq(0)]
        return m


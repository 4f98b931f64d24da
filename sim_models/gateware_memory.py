"""Behavioural gateware memory: the alternative to the Python models, for comparison.

:class:`GatewareMemory` is an AXI4 subordinate in Amaranth (so it runs inside
Verilator with the design): one channel, a fixed read latency, token-bucket bandwidth
per direction, ``lib.memory`` storage. It exists to measure what gateware models would
buy in simulation speed (``benchmarks/bandwidth.py --compare-gateware``); the project
uses the Python models (``docs/memory.md`` gives the measurements and the reasons:
storage capacity and backdoor access). Its capacity is small by construction: Amaranth
emits the memory's initial contents word by word, so 32 K beats (1 MiB) already take
~35 s to convert.

:class:`AGCUWithGatewareMemory` is an AGCU whose ``axi`` port is wired to one.
"""

from amaranth import Module, Signal, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from hdl.agcu import AGCU
from hdl.interfaces import AXI4Signature, AXIResp
from hdl.stream_fifo import StreamFIFO

__all__ = ["GatewareMemory", "AGCUWithGatewareMemory"]


class GatewareMemory(wiring.Component):
    """AXI4 subordinate: fixed latency, token-bucket bandwidth, on-chip storage.

    Parameters
    ----------
    addr_width, data_width, id_width : int
        As in :class:`hdl.interfaces.AXI4Signature`.
    base, size : int
        Address window in bytes (``size`` a multiple of the beat); outside it ``DECERR``,
        a burst running past its end ``SLVERR``.
    latency : int
        Cycles from a read address handshake to the first data beat (at least 3).
    bandwidth : (int, int)
        Bytes per cycle as a fraction ``(numerator, denominator)``, per direction.
    write_latency : int
        Cycles from the last write beat to the write response.
    outstanding : int
        Bursts queued per direction.

    Attributes
    ----------
    axi : In(AXI4Signature)
    error_count : Out(16)
        Errored bursts so far (the error status).
    """

    def __init__(self, *, addr_width=32, data_width=256, id_width=4, base=0, size=131072,
                 latency=100, bandwidth=(32, 1), write_latency=20, outstanding=32):
        beat = data_width // 8
        if size % beat or size < beat:
            raise ValueError(f"Size must be a positive multiple of the {beat}-byte beat, "
                             f"not {size}")
        if latency < 3:
            raise ValueError(f"Latency must be at least 3 cycles, not {latency}")
        self._beat = beat
        self._base = base
        self._size = size
        self._latency = latency
        self._bandwidth = tuple(bandwidth)
        self._write_latency = write_latency
        self._outstanding = outstanding
        self._addr_width = addr_width
        self._data_width = data_width
        self._id_width = id_width
        super().__init__({
            "axi": In(AXI4Signature(addr_width=addr_width, data_width=data_width,
                                    id_width=id_width)),
            "error_count": Out(16),
        })

    def elaborate(self, platform):
        m = Module()
        beat = self._beat
        shift = beat.bit_length() - 1
        depth = self._size // beat
        numerator, denominator = self._bandwidth
        cost = beat * denominator
        axi = self.axi

        m.submodules.storage = storage = memory.Memory(
            shape=self._data_width, depth=depth, init=[])
        read_port = storage.read_port(domain="comb")
        write_port = storage.write_port()

        now = Signal(32)
        m.d.sync += now.eq(now + 1)

        request = data.StructLayout({"id": unsigned(self._id_width),
                                     "index": unsigned(32), "len": unsigned(8),
                                     "resp": unsigned(2), "time": unsigned(32)})

        def decode(channel, fifo):
            index = Signal(32)
            end = Signal(self._addr_width + 9)
            m.d.comb += [
                index.eq((channel.payload.addr - self._base) >> shift),
                end.eq(channel.payload.addr + ((channel.payload.len + 1) << shift)),
                fifo.i.valid.eq(channel.valid),
                channel.ready.eq(fifo.i.ready),
                fifo.i.payload.id.eq(channel.payload.id),
                fifo.i.payload.index.eq(index),
                fifo.i.payload.len.eq(channel.payload.len),
                fifo.i.payload.time.eq(now),
            ]
            with m.If((channel.payload.addr < self._base) |
                      (channel.payload.addr >= self._base + self._size)):
                m.d.comb += fifo.i.payload.resp.eq(AXIResp.DECERR)
            with m.Elif(end > self._base + self._size):
                m.d.comb += fifo.i.payload.resp.eq(AXIResp.SLVERR)
            return channel.valid & channel.ready & (fifo.i.payload.resp != AXIResp.OKAY)

        def bucket(name, spend):
            credit = Signal(range(2 * cost + numerator + 1), name=name)
            with m.If(spend):
                m.d.sync += credit.eq(credit + numerator - cost)
            with m.Elif(credit < 2 * cost):
                m.d.sync += credit.eq(credit + numerator)
            return credit >= cost

        # reads
        m.submodules.ar_fifo = ar_fifo = StreamFIFO(request, self._outstanding)
        read_error = decode(axi.ar, ar_fifo)
        head = ar_fifo.o.payload
        read_beat = Signal(8)
        read_spend = Signal()
        read_credit = bucket("read_credit", read_spend)
        m.d.comb += [
            read_port.addr.eq(head.index + read_beat),
            axi.r.valid.eq(ar_fifo.o.valid & (now - head.time >= self._latency - 1) &
                           read_credit),
            axi.r.payload.id.eq(head.id),
            axi.r.payload.resp.eq(head.resp),
            axi.r.payload.last.eq(read_beat == head.len),
            read_spend.eq(axi.r.valid & axi.r.ready),
        ]
        with m.If(head.resp == AXIResp.OKAY):
            m.d.comb += axi.r.payload.data.eq(read_port.data)
        with m.If(read_spend):
            with m.If(axi.r.payload.last):
                m.d.sync += read_beat.eq(0)
                m.d.comb += ar_fifo.o.ready.eq(1)
            with m.Else():
                m.d.sync += read_beat.eq(read_beat + 1)

        # writes
        m.submodules.aw_fifo = aw_fifo = StreamFIFO(request, self._outstanding)
        write_error = decode(axi.aw, aw_fifo)
        whead = aw_fifo.o.payload
        write_beat = Signal(8)
        write_spend = Signal()
        write_credit = bucket("write_credit", write_spend)
        m.submodules.b_fifo = b_fifo = StreamFIFO(request, self._outstanding)
        m.d.comb += [
            axi.w.ready.eq(aw_fifo.o.valid & write_credit & b_fifo.i.ready),
            write_spend.eq(axi.w.valid & axi.w.ready),
            write_port.addr.eq(whead.index + write_beat),
            write_port.data.eq(axi.w.payload.data),
            write_port.en.eq(Signal.cast(write_spend & (whead.resp == AXIResp.OKAY))
                             .replicate(len(write_port.en))),
            b_fifo.i.payload.id.eq(whead.id),
            b_fifo.i.payload.resp.eq(whead.resp),
            b_fifo.i.payload.time.eq(now),
        ]
        with m.If(write_spend):
            with m.If(write_beat == whead.len):
                m.d.sync += write_beat.eq(0)
                m.d.comb += [aw_fifo.o.ready.eq(1), b_fifo.i.valid.eq(1)]
            with m.Else():
                m.d.sync += write_beat.eq(write_beat + 1)
        m.d.comb += [
            axi.b.valid.eq(b_fifo.o.valid &
                           (now - b_fifo.o.payload.time >= self._write_latency)),
            axi.b.payload.id.eq(b_fifo.o.payload.id),
            axi.b.payload.resp.eq(b_fifo.o.payload.resp),
            b_fifo.o.ready.eq(axi.b.valid & axi.b.ready),
        ]
        m.d.sync += self.error_count.eq(self.error_count + read_error + write_error)
        return m


class AGCUWithGatewareMemory(wiring.Component):
    """An :class:`hdl.agcu.AGCU` with its ``axi`` port on a :class:`GatewareMemory`.

    Every AGCU port except ``axi`` is a port of this component, under the same name.
    ``memory`` holds :class:`GatewareMemory` keyword arguments.
    """

    def __init__(self, *, memory=None):
        self._agcu = AGCU()
        self._memory_args = dict(memory or {})
        members = {name: member for name, member in self._agcu.signature.members.items()
                   if name != "axi"}
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.agcu = agcu = self._agcu
        m.submodules.memory = mem = GatewareMemory(**self._memory_args)
        wiring.connect(m, agcu.axi, mem.axi)
        for name, member in self.signature.members.items():
            if member.is_signature:
                wiring.connect(m, wiring.flipped(getattr(self, name)), getattr(agcu, name))
            elif member.flow == Out:
                m.d.comb += getattr(self, name).eq(getattr(agcu, name))
            else:
                m.d.comb += getattr(agcu, name).eq(getattr(self, name))
        return m

"""AXI4 test drivers built on the stream agents of :mod:`rdu.sim.agents`.

* :class:`AXICodec` packs and unpacks the five channel payloads as raw integers, from
  the same ``lib.data`` layouts the gateware uses (:func:`hdl.interfaces.axi4_layouts`).
* :class:`AXIRandomManager` drives an AXI4 subordinate port of the design with random
  bursts (random lengths, addresses, data, strobes; random valid/ready stalls on every
  channel) and checks every read and every write response against a reference memory.

Both tiers run them: they only use :class:`rdu.sim.bench.Bench` sources and sinks.
"""

from dataclasses import dataclass

from amaranth.lib import data

from hdl.interfaces import AXIBurst, AXIResp, axi4_layouts

__all__ = ["AXICodec", "AXIRandomManager", "ReferenceMemory"]


class _StructCodec:
    def __init__(self, layout):
        layout = data.Layout.cast(layout)
        self.fields = [(name, field.offset, (1 << field.width) - 1)
                       for name, field in layout]

    def pack(self, **values):
        word = 0
        for name, offset, mask in self.fields:
            value = values.get(name, 0)
            word |= (value & mask) << offset
        return word

    def unpack(self, word):
        return {name: (word >> offset) & mask for name, offset, mask in self.fields}


class AXICodec:
    """Raw-integer packing of the AXI4 channel payloads.

    Parameters
    ----------
    addr_width, data_width, id_width : int
        As in :class:`hdl.interfaces.AXI4Signature`.
    """

    def __init__(self, *, addr_width=32, data_width=256, id_width=4):
        self.addr_width = addr_width
        self.data_width = data_width
        self.id_width = id_width
        self.beat_bytes = data_width // 8
        self.size = self.beat_bytes.bit_length() - 1
        for name, layout in axi4_layouts(addr_width, data_width, id_width).items():
            setattr(self, name, _StructCodec(layout))


class ReferenceMemory:
    """A byte-addressed dictionary memory: the golden model of the random tests."""

    def __init__(self):
        self.bytes = {}

    def write(self, address, payload, strobe):
        for index, byte in enumerate(payload):
            if strobe >> index & 1:
                self.bytes[address + index] = byte

    def read(self, address, count):
        return bytes(self.bytes.get(address + index, 0) for index in range(count))


@dataclass
class _Txn:
    kind: str           # "read" or "write"
    id: int
    addr: int
    beats: int
    expect_resp: int
    expected: list      # read: expected beat data (None for an error burst)
    issued_cycle: int
    received: int = 0


class AXIRandomManager:
    """Random AXI4 traffic on the subordinate port at ``path`` with a reference check.

    Reads and writes are outstanding concurrently (up to ``outstanding`` each); a new
    transaction never overlaps an outstanding write (or a write an outstanding read),
    so the reference memory's content at issue time is the only correct answer.

    Parameters
    ----------
    bench : rdu.sim.bench.Bench
    path : str
        Path of the AXI4 interface on the design (its subordinate side: the design
        receives ``aw``/``w``/``ar`` and drives ``b``/``r``).
    codec : AXICodec
    windows : list of (base, size)
        Mapped windows to draw legal addresses from (beat aligned).
    error_windows : list of (base, size, resp)
        Address windows that must answer ``resp`` (e.g. unmapped -> ``DECERR``);
        a fraction ``error_rate`` of the transactions is aimed there.
    stall : str
        Stall pattern of the manager's valids and readies (every channel).
    """

    def __init__(self, bench, path, codec, windows, *, error_windows=(), error_rate=0.0,
                 stall="random", max_beats=16, outstanding=4, id_count=None):
        self.bench = bench
        self.codec = codec
        self.windows = list(windows)
        self.error_windows = list(error_windows)
        self.error_rate = error_rate
        self.max_beats = max_beats
        self.outstanding = outstanding
        self.id_count = id_count or (1 << codec.id_width)
        self.reference = ReferenceMemory()
        self.aw = bench.source(f"{path}.aw", stall)
        self.w = bench.source(f"{path}.w", stall)
        self.ar = bench.source(f"{path}.ar", stall)
        self.b = bench.sink(f"{path}.b", stall)
        self.r = bench.sink(f"{path}.r", stall)
        for sink in (self.b, self.r):
            sink.checked = False
        self.b.on_transfer = self._on_b
        self.r.on_transfer = self._on_r
        self.reads = {}      # id -> [txn, ...] in issue order
        self.writes = {}
        self.completed = {"read": 0, "write": 0, "error": 0, "beats": 0}
        self.latencies = []

    # -- response checking -------------------------------------------------------------

    def _pop(self, table, ident, what, cycle):
        queue = table.get(ident)
        if not queue:
            raise AssertionError(f"{what} with ID {ident} at cycle {cycle} matches no "
                                 f"outstanding transaction")
        return queue[0]

    def _on_b(self, payload, cycle):
        fields = self.codec.b.unpack(payload)
        txn = self._pop(self.writes, fields["id"], "write response", cycle)
        if fields["resp"] != txn.expect_resp:
            raise AssertionError(f"write of {txn.beats} beats at {txn.addr:#x} (ID {txn.id}) "
                                 f"answered resp {fields['resp']}, expected {txn.expect_resp}")
        self.writes[txn.id].pop(0)
        self.completed["write"] += 1
        self.completed["error"] += txn.expect_resp != AXIResp.OKAY

    def _on_r(self, payload, cycle):
        fields = self.codec.r.unpack(payload)
        txn = self._pop(self.reads, fields["id"], "read beat", cycle)
        index = txn.received
        where = (f"read of {txn.beats} beats at {txn.addr:#x} (ID {txn.id}), beat {index}, "
                 f"cycle {cycle}")
        if fields["resp"] != txn.expect_resp:
            raise AssertionError(f"{where}: resp {fields['resp']}, expected {txn.expect_resp}")
        if txn.expected is not None and fields["data"] != txn.expected[index]:
            raise AssertionError(f"{where}: data {fields['data']:#x}, expected "
                                 f"{txn.expected[index]:#x} (corrupted)")
        last = index == txn.beats - 1
        if fields["last"] != last:
            raise AssertionError(f"{where}: last={fields['last']}, expected {int(last)}")
        if index == 0:
            self.latencies.append(cycle - txn.issued_cycle)
        txn.received += 1
        self.completed["beats"] += 1
        if last:
            self.reads[txn.id].pop(0)
            self.completed["read"] += 1
            self.completed["error"] += txn.expect_resp != AXIResp.OKAY

    # -- issuing -----------------------------------------------------------------------

    def _busy_ranges(self, *tables):
        for table in tables:
            for queue in table.values():
                for txn in queue:
                    yield txn.addr, txn.addr + txn.beats * self.codec.beat_bytes

    def _overlaps(self, start, end, *tables):
        return any(start < busy_end and busy_start < end
                   for busy_start, busy_end in self._busy_ranges(*tables))

    def _count(self, table):
        return sum(len(queue) for queue in table.values())

    def _draw(self):
        rng = self.bench.rng
        beat = self.codec.beat_bytes
        beats = rng.randint(1, self.max_beats)
        if self.error_windows and rng.random() < self.error_rate:
            base, size, resp = rng.choice(self.error_windows)
            beats = max(beats, 2)       # so that a burst at a region's end runs past it
            addr = base + rng.randrange(0, max(1, size // beat)) * beat
            return addr, beats, resp
        base, size = rng.choice(self.windows)
        # stay inside the window and inside one 4 KiB page (an AXI4 rule)
        while True:
            addr = base + rng.randrange(0, size // beat - beats + 1) * beat
            if addr // 4096 == (addr + beats * beat - 1) // 4096:
                return addr, beats, AXIResp.OKAY

    def issue_read(self):
        addr, beats, resp = self._draw()
        return self.read_at(addr, beats, resp=resp)

    def read_at(self, addr, beats, *, resp=AXIResp.OKAY, ident=None):
        """Queue a read burst checked against the reference (unless it overlaps a write:
        then nothing is queued and False is returned)."""
        end = addr + beats * self.codec.beat_bytes
        if self._overlaps(addr, end, self.writes):
            return False
        if ident is None:
            ident = self.bench.rng.randrange(self.id_count)
        expected = None
        if resp == AXIResp.OKAY:
            raw = self.reference.read(addr, end - addr)
            beat = self.codec.beat_bytes
            expected = [int.from_bytes(raw[i * beat:(i + 1) * beat], "little")
                        for i in range(beats)]
        txn = _Txn("read", ident, addr, beats, resp, expected, self.bench.cycle)
        self.reads.setdefault(ident, []).append(txn)
        self.ar.send(self.codec.ar.pack(id=ident, addr=addr, len=beats - 1,
                                        size=self.codec.size, burst=AXIBurst.INCR))
        return True

    def issue_write(self):
        rng = self.bench.rng
        addr, beats, resp = self._draw()
        beat = self.codec.beat_bytes
        end = addr + beats * beat
        if self._overlaps(addr, end, self.writes, self.reads):
            return False
        ident = rng.randrange(self.id_count)
        txn = _Txn("write", ident, addr, beats, resp, None, self.bench.cycle)
        self.writes.setdefault(ident, []).append(txn)
        self.aw.send(self.codec.aw.pack(id=ident, addr=addr, len=beats - 1,
                                        size=self.codec.size, burst=AXIBurst.INCR))
        full = (1 << beat) - 1
        for index in range(beats):
            value = rng.getrandbits(self.codec.data_width)
            strobe = full if rng.random() < 0.7 else rng.getrandbits(beat)
            if resp == AXIResp.OKAY:
                self.reference.write(addr + index * beat, value.to_bytes(beat, "little"),
                                     strobe)
            self.w.send(self.codec.w.pack(data=value, strb=strobe,
                                          last=int(index == beats - 1)))
        return True

    async def run(self, transactions, timeout=200_000):
        """Issue ``transactions`` random reads and writes; wait for every response."""
        rng = self.bench.rng
        issued = 0
        start = self.bench.cycle
        while issued < transactions:
            if rng.random() < 0.5:
                if self._count(self.reads) < self.outstanding and self.issue_read():
                    issued += 1
            elif self._count(self.writes) < self.outstanding and self.issue_write():
                issued += 1
            await self.bench.cycles(1)
            if self.bench.cycle - start > timeout:
                raise AssertionError(f"AXI manager: {issued} of {transactions} issued "
                                     f"after {timeout} cycles")
        while self._count(self.reads) or self._count(self.writes):
            if self.bench.cycle - start > timeout:
                raise AssertionError(
                    f"AXI manager: {self._count(self.reads)} reads and "
                    f"{self._count(self.writes)} writes still outstanding after {timeout} "
                    f"cycles")
            await self.bench.cycles(1)
        await self.bench.streams_done(timeout=1000)
        return dict(self.completed)

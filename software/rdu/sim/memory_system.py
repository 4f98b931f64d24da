"""HBM, DDR and the host link behind AXI4 subordinate ports, with an address map.

:class:`MemorySystem` holds the region models of :mod:`sim_models.memory` and decodes
addresses between them. :meth:`MemorySystem.attach` connects it to an AXI4 manager
port of the design under test (an AGCU's ``axi``) through the bench's stream agents,
so the same model runs in the Amaranth simulator and under cocotb + Verilator. Several
ports may be attached; they share the regions (and their channel bandwidth).

Protocol (per port)
-------------------
* ``ar``/``aw`` accepted while fewer than ``max_reads``/``max_writes`` bursts of that
  port are outstanding; by default ``w`` accepted only for bursts whose ``aw`` was
  accepted, or (``write_order="w_first"``) ``aw`` only once write data is waiting.
* responses return in request order (legal for any ID assignment); a read burst's
  beats are never interleaved with another burst's.
* errors, with an entry in :attr:`MemorySystem.errors` (cycle, port, kind, address):
  ``DECERR`` for a burst starting outside every region; ``SLVERR`` for a burst running
  past the end of its region, crossing a 4 KiB boundary, not ``INCR``, or narrower than
  the bus. Errored reads return ``len + 1`` beats of zeroes, errored writes consume their
  data and change nothing. Nothing ever wraps around.
* injected faults (``faults``, :class:`FaultInjector`): chosen or random (seeded) read
  and write bursts that would have been answered ``OKAY`` are answered ``SLVERR`` or
  ``DECERR`` instead, as an errored burst above, with an error record whose reason
  names the burst (``injected fault (read burst 3)``).
"""

from collections import deque
from dataclasses import dataclass

import numpy as np

from hdl.interfaces import AXIBurst, AXIResp
from sim_models.memory import ddr_model, hbm_model, host_link_model

from .agents import StreamSink, StreamSource
from .axi import AXICodec

__all__ = ["AXIErrorRecord", "FaultInjector", "MemorySystem", "default_memory_system"]

#: Cycles from the address handshake to an error response.
ERROR_LATENCY = 2


@dataclass(frozen=True)
class AXIErrorRecord:
    """One errored burst: what the error status of the memory system reports."""
    cycle: int
    port: str
    kind: str         # "read" or "write"
    address: int
    beats: int
    resp: int
    reason: str

    def __str__(self):
        name = {AXIResp.SLVERR: "SLVERR", AXIResp.DECERR: "DECERR"}[self.resp]
        return (f"{name} on {self.kind} of {self.beats} beats at {self.address:#x} "
                f"(port {self.port}, cycle {self.cycle}): {self.reason}")


class FaultInjector:
    """Error responses on chosen or random AXI bursts, for reliability tests.

    ``spec`` is a dict: ``"read"`` and ``"write"`` are each a probability (a float in
    ``[0, 1]``: every burst of that kind is faulted with it, drawn from ``seed``) or a
    list of burst indices (the ``n``-th read or write burst the memory system accepts,
    counted from 0 over all its ports in handshake order); ``"resp"`` is ``"SLVERR"``
    (default) or ``"DECERR"``; ``"seed"`` seeds the draws (default 0). A faulted burst
    is answered like any errored burst: a read returns zeroes with ``resp`` on every
    beat, a write consumes its data, changes nothing and is answered ``resp``. Only
    bursts that would have been answered ``OKAY`` are faulted. Example:
    ``{"read": 0.01, "write": [0, 5], "resp": "DECERR", "seed": 7}``.
    """

    KINDS = ("read", "write")

    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise TypeError(f"Faults must be a dict, not {spec!r}")
        unknown = set(spec) - {"read", "write", "resp", "seed"}
        if unknown:
            raise ValueError(f"Unknown fault option {sorted(unknown)[0]!r}; expected read, "
                             f"write, resp, seed")
        resp = spec.get("resp", "SLVERR")
        if resp not in ("SLVERR", "DECERR"):
            raise ValueError(f"Fault response must be 'SLVERR' or 'DECERR', not {resp!r}")
        self.resp = AXIResp[resp]
        self.rules = {}
        for kind in self.KINDS:
            rule = spec.get(kind, 0.0)
            if isinstance(rule, (list, tuple, set)):
                if not all(isinstance(i, int) and i >= 0 for i in rule):
                    raise ValueError(f"Fault {kind} bursts must be non-negative integers, "
                                     f"not {rule!r}")
                rule = frozenset(rule)
            elif isinstance(rule, (int, float)) and not isinstance(rule, bool) and \
                    0 <= rule <= 1:
                rule = float(rule)
            else:
                raise ValueError(f"Fault {kind} must be a probability in [0, 1] or a list "
                                 f"of burst indices, not {rule!r}")
            self.rules[kind] = rule
        self.rng = np.random.default_rng(spec.get("seed", 0))
        self.counts = {kind: 0 for kind in self.KINDS}
        self.injected = []          # (kind, burst index)

    def __call__(self, kind):
        """Whether the next burst of ``kind`` is faulted: ``(resp, reason)`` or ``None``."""
        index = self.counts[kind]
        self.counts[kind] += 1
        rule = self.rules[kind]
        if isinstance(rule, frozenset):
            hit = index in rule
        else:
            hit = rule > 0 and self.rng.random() < rule
        if not hit:
            return None
        self.injected.append((kind, index))
        return self.resp, f"injected fault ({kind} burst {index})"


class _GatedSink(StreamSink):
    """A sink whose ``ready`` is its stall pattern AND a capacity gate."""

    def __init__(self, name, stall, gate):
        super().__init__(name, stall)
        self.gate = gate
        self.checked = False

    def drive(self):
        allowed = self.stall.next()
        return 1 if allowed and self.gate() else 0


class _TickingSource(StreamSource):
    """A source that advances its port's clock after every edge."""

    def __init__(self, name, stall, tick):
        super().__init__(name, stall)
        self.tick = tick

    def edge(self, valid, ready, cycle):
        moved = super().edge(valid, ready, cycle)
        self.tick(cycle + 1)
        return moved


class _ReadBurst:
    __slots__ = ("id", "beats", "ready", "data", "resp", "sent", "arrival")

    def __init__(self, ident, beats, ready, data, resp, arrival):
        self.arrival = arrival
        self.id = ident
        self.beats = beats
        self.ready = ready
        self.data = data
        self.resp = resp
        self.sent = 0


class _Port:
    """AXI4 subordinate front end of one manager port."""

    def __init__(self, system, bench, path, codec, stall, max_reads, max_writes,
                 write_order):
        if write_order not in ("aw_first", "w_first"):
            raise ValueError(f"Write order must be 'aw_first' or 'w_first', not "
                             f"{write_order!r}")
        self.write_order = write_order
        self.w_buffer = deque()       # w_first: beats not yet claimed by an aw
        self.system = system
        self.path = path
        self.codec = codec
        self.max_reads = max_reads
        self.max_writes = max_writes
        self.reads = deque()          # _ReadBurst, in arrival order
        self.writes = deque()         # [aw fields, beats received, resp, region, chunks]
        self.b_pending = deque()      # (due cycle, id, resp)
        self.cycle = 0
        self.read_bursts = []         # (address, beats) of every ar, in order
        self.write_bursts = []        # (address, beats) of every aw, in order
        self.traffic = {"r_beats": 0, "r_first": None, "r_last": None,
                        "w_beats": 0, "w_first": None, "w_last": None}
        self.read_latencies = []      # per burst: first r handshake - ar handshake
        self._r_arrivals = deque()    # per queued r beat: its burst's ar cycle, or None
        self.ar = bench.agents.add_sink(_GatedSink(
            f"{path}.ar", bench._stall(stall, f"{path}.ar", "sink"),
            lambda: len(self.reads) < self.max_reads))
        self.aw = bench.agents.add_sink(_GatedSink(
            f"{path}.aw", bench._stall(stall, f"{path}.aw", "sink"),
            self._aw_open))
        self.w = bench.agents.add_sink(_GatedSink(
            f"{path}.w", bench._stall(stall, f"{path}.w", "sink"), self._w_open))
        self.r = bench.agents.add_source(_TickingSource(
            f"{path}.r", bench._stall(stall, f"{path}.r", "source"), self._tick))
        self.b = bench.agents.add_source(StreamSource(
            f"{path}.b", bench._stall(stall, f"{path}.b", "source")))
        self.r.on_transfer = self._on_r_sent
        self.ar.on_transfer = self._on_ar
        self.aw.on_transfer = self._on_aw
        self.w.on_transfer = self._on_w

    def reset(self):
        """Forget every burst in flight (the manager was reset). An item the ``r`` or
        ``b`` source is presenting stays until taken (``valid`` is never withdrawn);
        a design held in reset takes and drops it."""
        for queue in (self.reads, self.writes, self.b_pending, self.w_buffer,
                      self._r_arrivals):
            queue.clear()
        for source in (self.r, self.b):
            head = source.queue[0] if source._presenting and source.queue else None
            source.queue.clear()
            if head is not None:
                source.queue.append(head)

    # -- address decode ----------------------------------------------------------------

    def _decode(self, fields, kind, cycle):
        """Return ``(region, resp)`` for a burst; record an error when not OKAY."""
        address, beats = fields["addr"], fields["len"] + 1
        region = self.system.region_at(address)
        reason = None
        if region is None:
            resp, reason = AXIResp.DECERR, "address is not mapped"
        else:
            resp = AXIResp.SLVERR
            end = address + beats * self.codec.beat_bytes
            if fields["burst"] != AXIBurst.INCR:
                reason = f"burst type {fields['burst']} is not INCR"
            elif fields["size"] != self.codec.size:
                reason = f"size {fields['size']} is not the bus width {self.codec.size}"
            elif address % self.codec.beat_bytes:
                reason = "address is not aligned to the beat"
            elif end > region.end:
                reason = f"burst runs past the end of {region.name} at {region.end:#x}"
            elif address // 4096 != (end - 1) // 4096:
                reason = "burst crosses a 4 KiB boundary"
            else:
                resp = AXIResp.OKAY
                fault = self.system.faults(kind) if self.system.faults else None
                if fault is not None:
                    resp, reason = fault
        if reason is not None:
            self.system.errors.append(AXIErrorRecord(cycle, self.path, kind, address, beats,
                                                     resp, reason))
            region = None
        return region, resp

    # -- reads -------------------------------------------------------------------------

    def _on_ar(self, payload, cycle):
        fields = self.codec.ar.unpack(payload)
        beats = fields["len"] + 1
        self.read_bursts.append((fields["addr"], beats))
        region, resp = self._decode(fields, "read", cycle)
        beat = self.codec.beat_bytes
        if region is None:
            ready = [cycle + ERROR_LATENCY] * beats
            data = [0] * beats
        else:
            ready = region.schedule_read(fields["addr"], beats, cycle)
            raw = region.read_bytes(fields["addr"], beats * beat)
            data = [int.from_bytes(raw[i * beat:(i + 1) * beat], "little")
                    for i in range(beats)]
        self.reads.append(_ReadBurst(fields["id"], beats, ready, data, resp, cycle))

    def _on_r_sent(self, item, cycle):
        traffic = self.traffic
        if traffic["r_first"] is None:
            traffic["r_first"] = cycle
        traffic["r_last"] = cycle
        traffic["r_beats"] += 1
        arrival = self._r_arrivals.popleft() if self._r_arrivals else None
        if arrival is not None:
            self.read_latencies.append(cycle - arrival)

    def _tick(self, cycle):
        """Move due read beats and write responses to the ``r``/``b`` sources."""
        self.cycle = cycle
        reads = self.reads
        # at most one beat per cycle enters the queue: the r source sends one per cycle
        if reads and len(self.r.queue) < 2:
            burst = reads[0]
            if burst.ready[burst.sent] <= cycle:
                index = burst.sent
                last = index == burst.beats - 1
                self.r.send(self.codec.r.pack(id=burst.id, data=burst.data[index],
                                              resp=burst.resp, last=int(last)))
                self._r_arrivals.append(burst.arrival if index == 0 else None)
                burst.sent += 1
                if last:
                    reads.popleft()
        pending = self.b_pending
        if pending and pending[0][0] <= cycle:
            _, ident, resp = pending.popleft()
            self.b.send(self.codec.b.pack(id=ident, resp=resp))

    # -- writes ------------------------------------------------------------------------

    def _incomplete(self):
        for entry in self.writes:
            if entry[1] < entry[0]["len"] + 1:
                return entry
        return None

    def _aw_open(self):
        if len(self.writes) >= self.max_writes:
            return False
        # w_first: like a subordinate that waits for WVALID before AWREADY
        return self.write_order == "aw_first" or bool(self.w_buffer)

    def _w_open(self):
        if self.write_order == "w_first" and len(self.w_buffer) < 64:
            return True
        return self._incomplete() is not None

    def _on_aw(self, payload, cycle):
        fields = self.codec.aw.unpack(payload)
        self.write_bursts.append((fields["addr"], fields["len"] + 1))
        region, resp = self._decode(fields, "write", cycle)
        self.writes.append([fields, 0, resp, region, []])
        while self.w_buffer and self._incomplete() is not None:
            self._take_w(*self.w_buffer.popleft())

    def _on_w(self, payload, cycle):
        if self._incomplete() is None:
            self.w_buffer.append((payload, cycle))
        else:
            self._take_w(payload, cycle)

    def _take_w(self, payload, cycle):
        entry = self._incomplete()
        fields, index, resp, region, chunks = entry
        traffic = self.traffic
        if traffic["w_first"] is None:
            traffic["w_first"] = cycle
        traffic["w_last"] = cycle
        traffic["w_beats"] += 1
        beat = self.codec.beat_bytes
        w = self.codec.w.unpack(payload)
        last = index == fields["len"]
        if w["last"] != last:
            self.system.errors.append(AXIErrorRecord(
                cycle, self.path, "write", fields["addr"], fields["len"] + 1, AXIResp.SLVERR,
                f"WLAST={w['last']} on beat {index}"))
            entry[2] = resp = AXIResp.SLVERR
        chunks.append((w["data"].to_bytes(beat, "little"), w["strb"]))
        entry[1] = index + 1
        if not last:
            return
        # the whole burst is here: commit it and schedule its response
        while self.writes and self.writes[0][1] == self.writes[0][0]["len"] + 1:
            fields, _, resp, region, chunks = self.writes.popleft()
            address = fields["addr"]
            if region is not None and resp == AXIResp.OKAY:
                full = (1 << beat) - 1
                if all(strobe == full for _, strobe in chunks):
                    region.write_bytes(address, b"".join(data for data, _ in chunks))
                else:
                    for k, (data, strobe) in enumerate(chunks):
                        region.write_bytes(address + k * beat, data, strobe)
                due = region.schedule_write(address, len(chunks), cycle)
            else:
                due = cycle + ERROR_LATENCY
            due = max(due, self.b_pending[-1][0] if self.b_pending else 0)
            self.b_pending.append((due, fields["id"], resp))


class MemorySystem:
    """Memory regions behind an address map, attachable to AXI4 manager ports.

    Parameters
    ----------
    regions : list of MemoryModel
        Non-overlapping regions (default: :func:`default_memory_system`'s HBM, DDR and
        host link).
    beat_bytes : int
        AXI data bus width in bytes.
    faults : dict or FaultInjector, optional
        Error responses to inject (:class:`FaultInjector`).

    Attributes
    ----------
    errors : list of AXIErrorRecord
        Every errored burst, in order (the error status).
    """

    def __init__(self, regions, *, beat_bytes=32, faults=None):
        regions = sorted(regions, key=lambda region: region.base)
        for first, second in zip(regions, regions[1:], strict=False):
            if second.base < first.end:
                raise ValueError(f"Regions {first.name} and {second.name} overlap")
        self.regions = regions
        self.beat_bytes = beat_bytes
        self.errors = []
        self.ports = {}
        self.faults = (faults if isinstance(faults, FaultInjector) or faults is None
                       else FaultInjector(faults))

    def clear(self):
        """Zero every region's contents and forget the error records (a fresh memory;
        timing state and traffic statistics are kept)."""
        for region in self.regions:
            region.storage.pages.clear()
        self.errors.clear()

    def reset_ports(self):
        """Forget the bursts in flight on every port (the design was reset)."""
        for port in self.ports.values():
            port.reset()

    def __getitem__(self, name):
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(f"No memory region named {name!r}")

    def region_at(self, address):
        for region in self.regions:
            if address in region:
                return region
        return None

    def attach(self, bench, path="axi", *, stall="none", addr_width=32, id_width=4,
               max_reads=32, max_writes=32, write_order="aw_first"):
        """Serve the AXI4 manager port at ``path`` of the design under ``bench``.

        ``stall`` is the pattern of this side's ``ready`` (``ar``, ``aw``, ``w``) and
        ``valid`` (``r``, ``b``). ``write_order`` is ``"aw_first"`` (``w`` accepted only
        for bursts whose ``aw`` was taken) or ``"w_first"`` (``aw`` accepted only once
        write data is waiting: the other order a subordinate may impose; a manager must
        work with both).
        """
        codec = AXICodec(addr_width=addr_width, data_width=self.beat_bytes * 8,
                         id_width=id_width)
        port = _Port(self, bench, path, codec, stall, max_reads, max_writes, write_order)
        self.ports[path] = port
        return port

    # -- backdoor ----------------------------------------------------------------------

    def _region_for(self, address, count):
        region = self.region_at(address)
        if region is None or address + count > region.end:
            raise ValueError(f"Backdoor access of {count} bytes at {address:#x} is not "
                             f"inside one memory region")
        return region

    def load(self, address, payload):
        """Backdoor: write a bytes-like object or numpy array at ``address`` (no timing)."""
        if isinstance(payload, np.ndarray):
            payload = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
        else:
            payload = np.frombuffer(memoryview(payload).cast("B"), dtype=np.uint8)
        self._region_for(address, payload.size).write_bytes(address, payload)

    def dump(self, address, count, dtype=np.uint8):
        """Backdoor: ``count`` bytes at ``address`` as a numpy array of ``dtype``."""
        raw = self._region_for(address, count).read_bytes(address, count)
        return np.frombuffer(raw, dtype=dtype).copy()


def default_memory_system(**overrides):
    """HBM + DDR + host link with the scaled defaults, at the :mod:`rdu.memory_map` bases.

    ``overrides`` maps ``"hbm"``, ``"ddr"`` or ``"host"`` to keyword arguments of
    :func:`hbm_model`, :func:`ddr_model` or :func:`host_link_model`.
    """
    return MemorySystem([hbm_model(**overrides.get("hbm", {})),
                         ddr_model(**overrides.get("ddr", {})),
                         host_link_model(**overrides.get("host", {}))])

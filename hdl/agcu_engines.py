"""The AGCU's engines: the burst generator, the AXI read and write engines and the data
path pieces between memory beats and the array's streams.

Each is a ``wiring.Component`` that :class:`hdl.agcu.AGCU` instantiates as a submodule
and that a test can simulate alone (``tests/test_agcu_engines.py``); ``docs/agcu.md``
describes how they fit together.

* :class:`AffineBurstGenerator`: a three-level affine pattern -> AXI INCR bursts;
* :class:`ReadEngine`: a generator, ``ar`` issue (at most ``max_outstanding`` bursts in
  flight), ``r`` into the read buffer, read response errors;
* :class:`WriteEngine`: a generator, ``aw`` issue, ``w`` beats with ``last`` on each
  burst's final beat (independently of the ``aw`` handshake), write response errors;
* :class:`BF16Expander`: one read beat of ``2 * lanes`` packed BF16 values -> two vector
  beats whose lanes hold ``value << 16``;
* :class:`BF16Packer`: two vector beats -> one write beat of their lanes' high halves;
* :class:`WordSerializer`: read beats -> ``lanes`` 32-bit words each, a given number in
  all (program and argument loads).
"""

from types import SimpleNamespace

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .interfaces import WORD_BITS, AXIBurst, AXIResp, axi4_layouts
from .stream_fifo import StreamFIFO

__all__ = ["BURST_BOUNDARY", "DMA_WINDOWS", "burst_pattern_layout", "dma_window_layout",
           "dma_windows_layout", "window_allows", "AffineBurstGenerator", "ReadEngine",
           "WriteEngine", "BF16Expander", "BF16Packer", "WordSerializer"]

#: AXI4 bursts never cross a 4 KiB boundary.
BURST_BOUNDARY = 4096
#: Memory windows an AGCU checks its bursts against (``dma_windows_layout``).
DMA_WINDOWS = 4


def dma_window_layout(addr_width=32):
    """One memory window: bytes ``[base, base + size)``, readable (``read``) and/or
    writable (``write``); neither: the window is off."""
    return data.StructLayout({"base": unsigned(addr_width), "size": unsigned(addr_width),
                              "read": unsigned(1), "write": unsigned(1)})


def dma_windows_layout(addr_width=32, count=DMA_WINDOWS):
    """The windows of a launch: ``enable`` (0, the reset value: every address allowed)
    and ``count`` :func:`dma_window_layout` s."""
    return data.StructLayout({"enable": unsigned(1),
                              "window": data.ArrayLayout(dma_window_layout(addr_width),
                                                         count)})


def window_allows(windows, addr, beats, beat_shift, access, end=None):
    """A 1-bit value: the burst of ``beats`` beats at byte ``addr`` may be issued under
    ``windows`` (a :func:`dma_windows_layout` view): windows off, or the whole burst
    inside one window with ``access`` (``"read"`` or ``"write"``) permission. ``end``:
    ``addr + (beats << beat_shift)`` (one bit wider than the address), if known."""
    if end is None:
        end = addr + (beats << beat_shift)          # one bit wider than the address
    inside = []
    for window in windows.window:
        limit = window.base + window.size           # one bit wider too
        inside.append(getattr(window, access) & (addr >= window.base) & (end <= limit))
    return ~windows.enable | Cat(*inside).any()


def burst_pattern_layout(addr_width=32):
    """The pattern an :class:`AffineBurstGenerator` walks: ``base``, ``count`` (3 x 32
    bit) and ``stride`` (3 x signed 32 bit), innermost level first."""
    return data.StructLayout({
        "base": unsigned(addr_width),
        "count": data.ArrayLayout(unsigned(32), 3),
        "stride": data.ArrayLayout(signed(32), 3),
    })


class AffineBurstGenerator(wiring.Component):
    """Three-level affine address generator with burst coalescing.

    Stage 1 walks the pattern and emits *runs*: when ``stride[0]`` equals the beat
    size, as many beats of the innermost row as fit before the row end, the next
    4 KiB boundary and ``max_burst``; otherwise one beat. Stage 2 merges a run into
    the open burst when it starts where the open burst ends, in the same 4 KiB page,
    and the sum stays within ``max_burst`` (e.g. rows laid end to end); otherwise it
    emits the open burst. One run per cycle.

    Each cycle's decisions compare registers (the beats left in the row, counted down;
    the position in the page; the open burst's end and room, kept with it) and each
    candidate next address is one adder from registers, so that no carry chain waits
    for another (this was the AGCU's critical path); the runs and bursts, and their
    cycles, are those of computing the run first and then its end.

    Parameters
    ----------
    addr_width : int
    beat_bytes : int
        Bytes per beat (a power of two).
    max_burst : int
        Longest burst in beats (at most 256).
    access : None, "read" or "write"
        With an access, each burst is checked against ``windows`` (:func:`window_allows`)
        as it enters the output FIFO, from registers, and leaves with the result.

    Attributes
    ----------
    start : In(1)
        Pulse: load ``pattern`` and start.
    stop : In(1)
        Stop walking the pattern and drop the open burst (an abort); the bursts already
        in the output FIFO still leave on ``bursts``. 0: no effect.
    pattern : In(...)
        ``base``, ``count`` (3 x 32 bit) and ``stride`` (3 x signed 32 bit).
    bursts : Out(stream.Signature(...))
        ``addr`` and ``len`` (beats - 1) of each burst; with ``access``, ``allowed``:
        the windows allowed it when it was queued (they must not change while a pattern
        runs, so this is their answer for the burst at the head too).
    windows : In(dma_windows_layout(addr_width))
        Only with ``access``.
    idle : Out(1)
        Not started, or every burst has been handed out.
    wrapped : Out(1)
        A computed address left ``[0, 2**addr_width)`` (it was used modulo
        ``2**addr_width``); cleared by ``start``.
    """

    def __init__(self, *, addr_width=32, beat_bytes=32, max_burst=16, access=None):
        if not 1 <= max_burst <= 256:
            self._MustUse__silence = True     # a rejected object is not an unused one
            raise ValueError(f"Maximum burst must be between 1 and 256 beats, not {max_burst}")
        if access not in (None, "read", "write"):
            self._MustUse__silence = True
            raise ValueError(f"Access must be None, 'read' or 'write', not {access!r}")
        self._addr_width = addr_width
        self._beat_bytes = beat_bytes
        self._max_burst = max_burst
        self.access = access
        fields = {"addr": unsigned(addr_width), "len": unsigned(8)}
        if access is not None:
            fields["allowed"] = unsigned(1)
        self.burst_layout = data.StructLayout(fields)
        members = {
            "start": In(1),
            "stop": In(1),
            "pattern": In(burst_pattern_layout(addr_width)),
            "bursts": Out(stream.Signature(self.burst_layout)),
            "idle": Out(1),
            "wrapped": Out(1),
        }
        if access is not None:
            members["windows"] = In(dma_windows_layout(addr_width))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        aw = self._addr_width
        beat = self._beat_bytes
        max_burst = self._max_burst

        pattern = Signal.like(self.pattern)
        running = Signal()
        contiguous = Signal()   # stride[0] is one beat (latched with the pattern)
        # beats left in the row, rows left in the plane, planes left (with the current
        # one): "not the last" is a test of the bits above bit 0, no carry chain
        left = [Signal(32, name=f"left{k}") for k in range(3)]
        row = Signal(aw)        # address of beat (i2, i1, 0)
        plane = Signal(aw)      # address of beat (i2, 0, 0)
        addr = Signal(aw)       # address of beat (i2, i1, i0)
        run = Signal(range(max(max_burst, BURST_BOUNDARY // beat) + 1))
        state = SimpleNamespace(pattern=pattern, running=running, contiguous=contiguous,
                                left=left, row=row, plane=plane, addr=addr, run=run)
        stage1 = self._run(m, state)

        # stage 2: the open burst and the output FIFO
        m.submodules.out_fifo = out_fifo = StreamFIFO(self.burst_layout, 2)
        wiring.connect(m, out_fifo.o, wiring.flipped(self.bursts))
        open_valid = Signal()
        open_addr = Signal(aw)
        open_beats = Signal(range(max_burst + 1))
        # open_addr + open_beats beats (exact: a burst ends at 2**aw at most), and
        # max_burst - open_beats: kept in registers (updated with the burst) so that the
        # merge test and the window check are compares of registers
        open_end = Signal(aw + 1)
        room = Signal(range(max_burst + 1), init=max_burst)
        merge = Signal()
        m.d.comb += merge.eq(open_valid & (addr == open_end[:aw]) &
                             (addr[12:] == open_addr[12:]) & stage1.fits(room))
        take = Signal()
        m.d.comb += [
            take.eq(running & (~open_valid | merge | out_fifo.i.ready)),
            out_fifo.i.payload.addr.eq(open_addr),
            out_fifo.i.payload.len.eq(open_beats - 1),
        ]
        if self.access is not None:
            # checked from the open burst's registers, not on the FIFO's head (the
            # check's adders and compares were the read engine's critical path)
            # (the queued len + 1 is 256 for no beats: only with a count of 0)
            beat_shift = beat.bit_length() - 1
            end = Mux(open_beats == 0, open_addr + (256 << beat_shift), open_end)
            m.d.comb += out_fifo.i.payload.allowed.eq(window_allows(
                self.windows, open_addr, None, beat_shift, self.access, end=end))
        with m.If(take):
            with m.If(merge):
                m.d.sync += [open_beats.eq(open_beats + run), room.eq(room - run)]
            with m.Else():
                m.d.comb += out_fifo.i.valid.eq(open_valid)
                m.d.sync += [open_valid.eq(1), open_addr.eq(addr), open_beats.eq(run),
                             room.eq(max_burst - run)]
            # merged or opened, the burst now ends where the run does
            m.d.sync += open_end.eq(stage1.run_end)
        with m.Elif(~running & open_valid):
            m.d.comb += out_fifo.i.valid.eq(1)
            with m.If(out_fifo.i.ready):
                m.d.sync += open_valid.eq(0)
        self._advance(m, state, stage1, take)

        with m.If(self.stop):
            m.d.sync += [running.eq(0), open_valid.eq(0)]
        with m.If(self.start):
            m.d.sync += [pattern.eq(self.pattern), running.eq(1), open_valid.eq(0),
                         contiguous.eq(self.pattern.stride[0] == beat),
                         row.eq(self.pattern.base), plane.eq(self.pattern.base),
                         addr.eq(self.pattern.base), self.wrapped.eq(0)]
            m.d.sync += [left[k].eq(self.pattern.count[k]) for k in range(3)]
        m.d.comb += self.idle.eq(~running & ~open_valid & (out_fifo.level == 0))
        return m

    def _run(self, m, state):
        """Stage 1: the run starting at ``addr`` (``state.run``), where it ends
        (``run_end``, exact: one bit wider than the address), whether the row goes on
        after it (``in_row``) and then the beats left in it (``row_after``), and
        ``fits(room)``: the run fits in ``room`` beats.

        Each bound is compared with registers directly (beats left in the row, beats to
        the page's end, ``max_burst``) and each end address is an adder from registers,
        in parallel, so that no carry chain waits for another."""
        aw = self._addr_width
        beat = self._beat_bytes
        beat_shift = beat.bit_length() - 1
        max_burst = self._max_burst
        page_beats = BURST_BOUNDARY // beat
        addr, left, contiguous, run = state.addr, state.left, state.contiguous, state.run
        page_bits = page_beats.bit_length() - 1
        # beats left in the row, when fewer than 2 ** len(run) (``short``)
        short = Signal()
        row_beats = left[0][:len(run)]
        # page_pos: beats from the page's start; to_page = page_beats - page_pos
        page_pos = addr[beat_shift:12]
        ends_row = Signal()     # the row ends the run (run = the beats left in it)
        ends_page = Signal()    # else the page (run = to_page), else max_burst

        def reaches_page_end(beats):
            # beats >= to_page, one adder: page_pos + beats >= page_beats
            return (page_pos + beats)[page_bits:].any()

        m.d.comb += [
            short.eq(left[0][len(run):] == 0),
            ends_row.eq(contiguous & short & (row_beats <= max_burst) &
                        (page_pos + row_beats <= page_beats)),
            ends_page.eq(contiguous & ~ends_row & reaches_page_end(max_burst)),
        ]
        with m.If(~contiguous):
            m.d.comb += run.eq(1)
        with m.Elif(ends_row):
            m.d.comb += run.eq(row_beats)
        with m.Elif(ends_page):
            m.d.comb += run.eq(page_beats - page_pos)
        with m.Else():
            m.d.comb += run.eq(max_burst)
        run_end = Signal(max(aw, len(run) + beat_shift) + 1)
        next_page = Cat(addr[:beat_shift], Const(0, 12 - beat_shift), addr[12:] + 1)
        with m.If(~contiguous):
            m.d.comb += run_end.eq(addr + beat)
        with m.Elif(ends_row):
            m.d.comb += run_end.eq(addr + (row_beats << beat_shift))
        with m.Elif(ends_page):
            m.d.comb += run_end.eq(next_page)
        with m.Else():
            m.d.comb += run_end.eq(addr + (max_burst << beat_shift))
        in_row = Signal()
        m.d.comb += in_row.eq(Mux(contiguous, ~ends_row, left[0][1:].any()))

        def fits(room):
            # run <= room, the run being the least of its bounds
            return Mux(contiguous,
                       (short & (row_beats <= room)) | reaches_page_end(room) |
                       (room == max_burst),
                       room != 0)
        # the beats left in the row after a run that does not end it: each candidate
        # subtraction from registers, the bound selecting
        row_after = Signal(32)
        m.d.comb += row_after.eq(Mux(~contiguous, left[0] - 1,
                                     Mux(ends_page, left[0] + page_pos - page_beats,
                                         left[0] - max_burst)))
        return SimpleNamespace(run_end=run_end, in_row=in_row, fits=fits, row_after=row_after)

    def _advance(self, m, state, stage1, take):
        """Stage 1 advance on ``take``: the next beat's address and the loop counters.
        The next address is computed exactly (signed, wider than the address) so that
        leaving the address space is reported on ``wrapped``, not hidden."""
        aw = self._addr_width
        pattern, left, addr = state.pattern, state.left, state.addr
        row, plane = state.row, state.plane
        step = [addr + pattern.stride[0], row + pattern.stride[1],
                plane + pattern.stride[2]]
        next_addr = Signal(signed(max(len(stage1.run_end), *(len(s) for s in step)) + 1))
        with m.If(take):
            with m.If(stage1.in_row):
                m.d.comb += next_addr.eq(Mux(state.contiguous, stage1.run_end, step[0]))
                m.d.sync += left[0].eq(stage1.row_after)
            with m.Elif(left[1][1:].any()):
                m.d.comb += next_addr.eq(step[1])
                m.d.sync += [left[0].eq(pattern.count[0]), left[1].eq(left[1] - 1),
                             row.eq(step[1])]
            with m.Elif(left[2][1:].any()):
                m.d.comb += next_addr.eq(step[2])
                m.d.sync += [left[0].eq(pattern.count[0]), left[1].eq(pattern.count[1]),
                             left[2].eq(left[2] - 1), plane.eq(step[2]), row.eq(step[2])]
            with m.Else():
                m.d.comb += next_addr.eq(addr)
                m.d.sync += state.running.eq(0)
            m.d.sync += addr.eq(next_addr[:aw])
            # outside [0, 2**aw): a bit at or above bit aw set (the sign bit included)
            with m.If(next_addr[aw:].any()):
                m.d.sync += self.wrapped.eq(1)



def _check_positive(component, name, value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        component._MustUse__silence = True     # a rejected object is not an unused one
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


class ReadEngine(wiring.Component):
    """The AGCU's read side: bursts of a pattern on ``ar``, their beats from ``r`` into a
    buffer, out on ``data`` in order (every burst has ID 0).

    Parameters
    ----------
    addr_width, id_width : int
        AXI address and ID widths.
    beat_bytes : int
        Bytes per beat (the data bus is ``8 * beat_bytes`` bits).
    max_burst : int
        Longest burst in beats.
    max_outstanding : int
        Bursts in flight (``ar`` taken, last ``r`` beat not yet).
    buffer_depth : int
        Beats buffered between ``r`` and ``data``.

    Attributes
    ----------
    start : In(1)
        Pulse: start reading ``pattern``.
    abort_cmd : In(1)
        Level: issue no burst beyond those the generator already handed out (its
        ``stop``); the bursts issued are still answered and their beats still leave on
        ``data`` (the AGCU drops them). A burst ``windows`` refuse is dropped.
    windows : In(dma_windows_layout(addr_width))
        A burst is offered on ``ar`` only if :func:`window_allows` it (read); must not
        change while a command runs (the generator checks each burst as it queues it).
    denied, denied_addr : Out(1), Out(addr_width)
        The generator's next burst is refused by ``windows`` (it waits, never offered
        on ``ar``), and its address.
    pattern : In(burst_pattern_layout(addr_width))
    ar : Out(stream.Signature(...))
        The AXI read-address channel (``INCR`` bursts of whole beats).
    r : In(stream.Signature(...))
        The AXI read-data channel (ready while the buffer has room).
    data : Out(stream.Signature(8 * beat_bytes))
        The beats read, in order.
    idle : Out(1)
        Every burst handed out and answered, the buffer empty.
    wrapped : Out(1)
        The pattern left the address space (the generator's ``wrapped``).
    slverr, decerr : Out(1)
        An ``r`` beat taken this cycle was answered ``SLVERR`` / ``DECERR``.
    """

    def __init__(self, *, addr_width=32, id_width=4, beat_bytes=32, max_burst=16,
                 max_outstanding=16, buffer_depth=32):
        _check_positive(self, "Maximum outstanding bursts", max_outstanding)
        _check_positive(self, "Buffer depth", buffer_depth)
        self.addr_width = addr_width
        self.beat_bytes = beat_bytes
        self.max_burst = max_burst
        self.max_outstanding = max_outstanding
        self.buffer_depth = buffer_depth
        layouts = axi4_layouts(addr_width, 8 * beat_bytes, id_width)
        super().__init__({
            "start": In(1),
            "abort_cmd": In(1),
            "windows": In(dma_windows_layout(addr_width)),
            "denied": Out(1),
            "denied_addr": Out(addr_width),
            "pattern": In(burst_pattern_layout(addr_width)),
            "ar": Out(stream.Signature(layouts["ar"])),
            "r": In(stream.Signature(layouts["r"])),
            "data": Out(stream.Signature(8 * beat_bytes)),
            "idle": Out(1),
            "wrapped": Out(1),
            "slverr": Out(1),
            "decerr": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        max_out = self.max_outstanding
        m.submodules.read_gen = read_gen = AffineBurstGenerator(
            addr_width=self.addr_width, beat_bytes=self.beat_bytes, max_burst=self.max_burst,
            access="read")
        m.submodules.read_fifo = read_fifo = StreamFIFO(8 * self.beat_bytes,
                                                        self.buffer_depth)
        m.d.comb += [read_gen.start.eq(self.start), read_gen.pattern.eq(self.pattern),
                     read_gen.stop.eq(self.abort_cmd), self.wrapped.eq(read_gen.wrapped),
                     read_gen.windows.eq(self.windows)]
        ar, r = self.ar, self.r
        reads_in_flight = Signal(range(max_out + 1))
        ar_go = Signal()
        head = read_gen.bursts.payload
        allowed = Signal()
        m.d.comb += [
            allowed.eq(head.allowed),
            self.denied.eq(read_gen.bursts.valid & ~allowed),
            self.denied_addr.eq(head.addr),
            ar.valid.eq(read_gen.bursts.valid & allowed & (reads_in_flight < max_out)),
            ar.payload.addr.eq(head.addr),
            ar.payload.len.eq(head.len),
            ar.payload.size.eq(self.beat_bytes.bit_length() - 1),
            ar.payload.burst.eq(AXIBurst.INCR),
            read_gen.bursts.ready.eq((ar.ready & allowed & (reads_in_flight < max_out)) |
                                     (self.abort_cmd & ~allowed)),
            ar_go.eq(ar.valid & ar.ready),
        ]
        r_last = Signal()
        r_go = r.valid & r.ready
        m.d.comb += [
            read_fifo.i.valid.eq(r.valid),
            read_fifo.i.payload.eq(r.payload.data),
            r.ready.eq(read_fifo.i.ready),
            r_last.eq(r_go & r.payload.last),
            self.slverr.eq(r_go & (r.payload.resp == AXIResp.SLVERR)),
            self.decerr.eq(r_go & (r.payload.resp == AXIResp.DECERR)),
        ]
        m.d.sync += reads_in_flight.eq(reads_in_flight + ar_go - r_last)
        wiring.connect(m, read_fifo.o, wiring.flipped(self.data))
        m.d.comb += self.idle.eq(read_gen.idle & (reads_in_flight == 0) &
                                 (read_fifo.level == 0))
        return m


class WriteEngine(wiring.Component):
    """The AGCU's write side: bursts of a pattern on ``aw``, the beats of ``data`` on
    ``w`` (``last`` on each burst's final beat), ``b`` responses counted.

    A burst leaves the generator into two queues at once: its address for ``aw`` and its
    length for the ``w`` sender. ``w`` therefore never waits for the ``aw`` handshake
    (AXI4 forbids a manager to make WVALID wait for AWREADY).

    Parameters
    ----------
    addr_width, id_width, beat_bytes, max_burst : int
        As for :class:`ReadEngine`.
    max_outstanding : int
        Bursts issued (queued for ``aw``/``w`` or waiting for ``b``) at a time; also the
        depth of the length queue.

    Attributes
    ----------
    start : In(1)
        Pulse: start writing ``pattern``.
    abort_cmd : In(1)
        Level: issue no burst beyond those the generator already handed out (its
        ``stop``) and send the ``w`` beats still owed with all byte strobes clear
        (memory unchanged), without taking ``data``; a beat of ``data`` already offered
        on ``w`` and not yet taken stays offered until taken or withdrawn (``w`` is
        held until ready). A burst ``windows`` refuse is dropped.
    windows : In(dma_windows_layout(addr_width))
        A burst is queued for ``aw`` (and its beats owed on ``w``) only if
        :func:`window_allows` it (write); must not change while a command runs (the
        generator checks each burst as it queues it).
    denied, denied_addr : Out(1), Out(addr_width)
        The generator's next burst is refused by ``windows`` (it waits, never queued),
        and its address.
    pattern : In(burst_pattern_layout(addr_width))
    aw, w : Out(stream.Signature(...))
        The AXI write-address and write-data channels (all byte strobes set).
    b : In(stream.Signature(...))
        The AXI write-response channel (always ready).
    data : In(stream.Signature(8 * beat_bytes))
        The beats to write; ``ready`` is the ``w`` handshake (it rises only with
        ``valid``).
    burst_waiting : Out(1)
        A burst's length is queued: ``w`` takes a beat of ``data`` as soon as it is
        valid (the BF16 packer's cue to take a first half).
    holding : Out(1)
        A beat of ``data`` was offered on ``w`` and not taken (it must stay offered:
        the source of ``data`` keeps it, also while aborting).
    idle : Out(1)
        Every burst handed out, written and answered.
    wrapped, slverr, decerr : Out(1)
        As for :class:`ReadEngine` (``b`` responses).
    """

    def __init__(self, *, addr_width=32, id_width=4, beat_bytes=32, max_burst=16,
                 max_outstanding=16):
        _check_positive(self, "Maximum outstanding bursts", max_outstanding)
        self.addr_width = addr_width
        self.beat_bytes = beat_bytes
        self.max_burst = max_burst
        self.max_outstanding = max_outstanding
        layouts = axi4_layouts(addr_width, 8 * beat_bytes, id_width)
        super().__init__({
            "start": In(1),
            "abort_cmd": In(1),
            "windows": In(dma_windows_layout(addr_width)),
            "denied": Out(1),
            "denied_addr": Out(addr_width),
            "pattern": In(burst_pattern_layout(addr_width)),
            "aw": Out(stream.Signature(layouts["aw"])),
            "w": Out(stream.Signature(layouts["w"])),
            "b": In(stream.Signature(layouts["b"])),
            "data": In(stream.Signature(8 * self.beat_bytes)),
            "burst_waiting": Out(1),
            "holding": Out(1),
            "idle": Out(1),
            "wrapped": Out(1),
            "slverr": Out(1),
            "decerr": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        max_out = self.max_outstanding
        m.submodules.write_gen = write_gen = AffineBurstGenerator(
            addr_width=self.addr_width, beat_bytes=self.beat_bytes, max_burst=self.max_burst,
            access="write")
        m.submodules.write_lengths = write_lengths = StreamFIFO(8, max_out)
        m.submodules.write_addresses = write_addresses = StreamFIFO(data.StructLayout({
            "addr": unsigned(self.addr_width), "len": unsigned(8)}), 2)
        m.d.comb += [write_gen.start.eq(self.start), write_gen.pattern.eq(self.pattern),
                     write_gen.stop.eq(self.abort_cmd), self.wrapped.eq(write_gen.wrapped),
                     write_gen.windows.eq(self.windows),
                     self.burst_waiting.eq(write_lengths.o.valid)]
        aw, w, b = self.aw, self.w, self.b
        writes_in_flight = Signal(range(max_out + 1))
        issue = Signal()
        head = write_gen.bursts.payload
        allowed = Signal()
        m.d.comb += [
            allowed.eq(head.allowed),
            self.denied.eq(write_gen.bursts.valid & ~allowed),
            self.denied_addr.eq(head.addr),
            issue.eq(write_gen.bursts.valid & allowed & (writes_in_flight < max_out) &
                     write_addresses.i.ready & write_lengths.i.ready),
            write_gen.bursts.ready.eq(issue | (self.abort_cmd & ~allowed)),
            write_addresses.i.valid.eq(issue),
            write_addresses.i.payload.addr.eq(head.addr),
            write_addresses.i.payload.len.eq(head.len),
            write_lengths.i.valid.eq(issue),
            write_lengths.i.payload.eq(write_gen.bursts.payload.len),
            aw.valid.eq(write_addresses.o.valid),
            aw.payload.addr.eq(write_addresses.o.payload.addr),
            aw.payload.len.eq(write_addresses.o.payload.len),
            aw.payload.size.eq(self.beat_bytes.bit_length() - 1),
            aw.payload.burst.eq(AXIBurst.INCR),
            write_addresses.o.ready.eq(aw.ready),
        ]
        write_data_taken = Signal()
        w_beat = Signal(8)
        # abort: zero-strobe beats instead of data, except a data beat already offered
        # (AXI holds WDATA/WSTRB until WREADY)
        data_offered = Signal()
        flush = Signal()
        m.d.comb += flush.eq(self.abort_cmd & ~data_offered)
        m.d.sync += data_offered.eq(w.valid & ~w.ready & ~flush)
        m.d.comb += self.holding.eq(data_offered)
        m.d.comb += [
            w.valid.eq(write_lengths.o.valid & (self.data.valid | flush)),
            w.payload.data.eq(Mux(flush, 0, self.data.payload)),
            w.payload.strb.eq(Mux(flush, 0, (1 << self.beat_bytes) - 1)),
            w.payload.last.eq(w_beat == write_lengths.o.payload),
            write_data_taken.eq(w.valid & w.ready),
            self.data.ready.eq(write_data_taken & ~flush),
        ]
        with m.If(write_data_taken):
            with m.If(w.payload.last):
                m.d.sync += w_beat.eq(0)
                m.d.comb += write_lengths.o.ready.eq(1)
            with m.Else():
                m.d.sync += w_beat.eq(w_beat + 1)
        m.d.comb += [
            b.ready.eq(1),
            self.slverr.eq(b.valid & (b.payload.resp == AXIResp.SLVERR)),
            self.decerr.eq(b.valid & (b.payload.resp == AXIResp.DECERR)),
            self.idle.eq(write_gen.idle & (writes_in_flight == 0) &
                         (write_lengths.level == 0) & (write_addresses.level == 0)),
        ]
        m.d.sync += writes_in_flight.eq(writes_in_flight + issue - b.valid)
        return m


class BF16Expander(wiring.Component):
    """Packed BF16 read beats -> vector beats.

    A beat on ``i`` holds ``2 * lanes`` BF16 values (value ``v`` in bits ``16v..16v+15``);
    it leaves on ``o`` as two beats, values ``0..lanes-1`` then ``lanes..2*lanes-1``, lane
    ``l`` holding ``value << 16``. The input beat is taken with the second (one output
    beat per cycle, no bubble).

    Attributes
    ----------
    i : In(stream.Signature(32 * lanes))
    o : Out(stream.Signature(32 * lanes))
    clear : In(1)
        Start over at a first half (a new command).
    """

    def __init__(self, lanes=8):
        self.lanes = lanes
        super().__init__({
            "i": In(stream.Signature(lanes * WORD_BITS)),
            "o": Out(stream.Signature(lanes * WORD_BITS)),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        second_half = Signal()
        half_bits = self.lanes * 16
        packed = self.i.payload
        for lane in range(self.lanes):
            m.d.comb += self.o.payload.word_select(lane, WORD_BITS).eq(Mux(
                second_half,
                packed[half_bits + 16 * lane:half_bits + 16 * (lane + 1)],
                packed[16 * lane:16 * (lane + 1)]) << 16)
        with m.If(self.clear):
            m.d.sync += second_half.eq(0)
        m.d.comb += [self.o.valid.eq(self.i.valid),
                     self.i.ready.eq(self.o.ready & second_half)]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += second_half.eq(~second_half)
        return m


class BF16Packer(wiring.Component):
    """Vector beats -> packed BF16 write beats.

    Two beats on ``i`` make one beat on ``o``: the high halves of the first beat's lanes
    in the low half of the word, the second's in the high half. A first half is taken
    only while ``burst_waiting`` (a write burst waits for data), so none is held between
    kernels.

    Attributes
    ----------
    i : In(stream.Signature(32 * lanes))
    o : Out(stream.Signature(32 * lanes))
    burst_waiting : In(1)
        The write side will take the next write beat.
    clear : In(1)
        Drop a held first half (a new command).
    """

    def __init__(self, lanes=8):
        self.lanes = lanes
        super().__init__({
            "i": In(stream.Signature(lanes * WORD_BITS)),
            "o": Out(stream.Signature(lanes * WORD_BITS)),
            "burst_waiting": In(1),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        half_bits = self.lanes * 16
        low_half = Signal(half_bits)
        low_held = Signal()
        high_halves = Signal(half_bits)
        vector = Value.cast(self.i.payload)
        m.d.comb += high_halves.eq(Cat(*(
            vector[WORD_BITS * lane + 16:WORD_BITS * (lane + 1)]
            for lane in range(self.lanes))))
        with m.If(self.clear):
            m.d.sync += low_held.eq(0)
        take_low = Signal()
        taken = Signal()
        m.d.comb += [
            take_low.eq(~low_held & self.burst_waiting),
            self.o.valid.eq(low_held & self.i.valid),
            self.o.payload.eq(Cat(low_half, high_halves)),
            taken.eq(self.o.valid & self.o.ready),
            self.i.ready.eq(take_low | taken),
        ]
        with m.If(self.i.valid & take_low):
            m.d.sync += [low_half.eq(high_halves), low_held.eq(1)]
        with m.If(taken):
            m.d.sync += low_held.eq(0)
        return m


class WordSerializer(wiring.Component):
    """Beats of ``lanes`` 32-bit words -> one word per cycle, ``count`` words in all.

    A beat is taken with its last word, or with the last of ``count`` (the rest of that
    beat is dropped).

    Attributes
    ----------
    i : In(stream.Signature(32 * lanes))
    o : Out(stream.Signature(32))
        Word ``k`` of a beat is bits ``32k..32k+31``.
    load : In(1)
        Pulse: serialize ``count`` words from the next beat on.
    count : In(32)
    """

    def __init__(self, lanes=8):
        self.lanes = lanes
        super().__init__({
            "i": In(stream.Signature(lanes * WORD_BITS)),
            "o": Out(stream.Signature(WORD_BITS)),
            "load": In(1),
            "count": In(32),
        })

    def elaborate(self, platform):
        m = Module()
        word_index = Signal(range(self.lanes))
        words_left = Signal(32)
        with m.If(self.load):
            m.d.sync += words_left.eq(self.count)
        m.d.comb += [
            self.o.payload.eq(self.i.payload.word_select(word_index, WORD_BITS)),
            self.o.valid.eq(self.i.valid & (words_left != 0)),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += words_left.eq(words_left - 1)
            with m.If((word_index == self.lanes - 1) | (words_left == 1)):
                m.d.sync += word_index.eq(0)
                m.d.comb += self.i.ready.eq(1)
            with m.Else():
                m.d.sync += word_index.eq(word_index + 1)
        return m

"""Simulator-independent stream agents: source and sink drivers, scoreboard, watchdog.

The agents are plain Python state machines stepped once per clock cycle by a
backend (:mod:`rdu.sim.amaranth_bench` for the Amaranth simulator, :mod:`rdu.sim.cocotb_bench`
for cocotb + Verilator). Each cycle the backend

1. asks every agent what to drive (:meth:`drive`), and applies it;
2. lets the design settle and samples every signal the agents watch;
3. at the clock edge hands the sampled values back (:meth:`edge`).

A transfer happens on an edge where the sampled ``valid`` and ``ready`` are both
high. Because both backends run exactly this loop, a test body written against
:class:`rdu.sim.bench.Bench` behaves the same in both tiers, cycle for cycle.
"""

from collections import deque

from .stalls import NoStall

__all__ = ["HarnessError", "ScoreboardError", "WatchdogTimeout",
           "Scoreboard", "StreamSource", "StreamSink", "AgentGroup"]


class HarnessError(AssertionError):
    """Base class of test failures raised by the harness."""


class ScoreboardError(HarnessError):
    """An item was lost, duplicated, reordered, corrupted, or left over."""


class WatchdogTimeout(HarnessError):
    """No stream made progress for too long: names the stalled interfaces."""


def _fmt(item):
    if isinstance(item, int):
        return hex(item)
    return repr(item)


class Scoreboard:
    """In-order checker of one stream's items against a list of expected items.

    Parameters
    ----------
    name : str
        Stream name used in messages.
    fmt : callable
        Formats an item for messages (default: hex for integers).
    """

    def __init__(self, name, fmt=_fmt):
        self.name = name
        self.fmt = fmt
        self.pending = deque()
        self.received = []

    def expect(self, item):
        self.pending.append(item)

    def expect_all(self, items):
        for item in items:
            self.expect(item)

    def got(self, item, cycle):
        index = len(self.received)
        if not self.pending:
            dup = item in self.received[-8:]
            raise ScoreboardError(
                f"{self.name}: item #{index} {self.fmt(item)} at cycle {cycle} was not "
                f"expected (all {index} expected items already received"
                f"{'; it duplicates a recent item' if dup else ''})")
        expected = self.pending[0]
        if item != expected:
            later = [n for n, pending in enumerate(self.pending) if pending == item]
            if later:
                kind = (f"lost or reordered: it is expected {later[0]} items later, "
                        f"so {later[0]} items before it are missing or out of order")
            elif item in self.received[-8:]:
                kind = "duplicated: it repeats a recent item"
            else:
                kind = "corrupted: it matches no expected item"
            raise ScoreboardError(
                f"{self.name}: item #{index} at cycle {cycle} is {self.fmt(item)}, expected "
                f"{self.fmt(expected)} ({kind})")
        self.pending.popleft()
        self.received.append(item)

    @property
    def satisfied(self):
        return not self.pending

    def check_done(self):
        if self.pending:
            raise ScoreboardError(
                f"{self.name}: {len(self.pending)} expected items never arrived "
                f"(received {len(self.received)}); next expected {self.fmt(self.pending[0])}")


class StreamSource:
    """Drives items into a stream (``valid``/``payload`` out, ``ready`` in).

    Parameters
    ----------
    name : str
        Path of the stream on the design (e.g. ``"i"`` or ``"west.vector_in"``).
    stall : StallPattern
        When the source may present an item; a presented item stays until taken
        (valid is never withdrawn, as the stream contract requires).
    """

    def __init__(self, name, stall=None):
        self.name = name
        self.stall = stall if stall is not None else NoStall()
        self.queue = deque()
        self.sent = 0
        self._presenting = False
        self.wait_cycles = 0       # consecutive cycles valid was high without ready
        self.on_transfer = None    # optional callback(item, cycle)

    def send(self, item):
        self.queue.append(item)

    def send_all(self, items):
        self.queue.extend(items)

    @property
    def idle(self):
        return not self.queue

    def drive(self):
        """Return ``(valid, payload)`` for this cycle."""
        if not self._presenting and self.queue and self.stall.next():
            self._presenting = True
        if self._presenting:
            return 1, self.queue[0]
        return 0, None

    def edge(self, valid, ready, cycle):
        if valid and ready:
            item = self.queue.popleft()
            self.sent += 1
            self._presenting = False
            self.wait_cycles = 0
            if self.on_transfer is not None:
                self.on_transfer(item, cycle)
            return True
        if valid:
            self.wait_cycles += 1
        return False

    def describe_stall(self):
        if self.idle:
            return None
        if self.wait_cycles:
            return (f"source {self.name!r}: {len(self.queue)} items not sent (sent "
                    f"{self.sent}); valid held {self.wait_cycles} cycles with ready low")
        return f"source {self.name!r}: {len(self.queue)} items not sent (sent {self.sent})"


class StreamSink:
    """Accepts items from a stream and checks them with a :class:`Scoreboard`.

    Parameters
    ----------
    name : str
        Path of the stream on the design.
    stall : StallPattern
        When the sink raises ``ready``.
    scoreboard : Scoreboard, optional
        Created if not given; ``sink.expect_all(...)`` fills it.
    """

    def __init__(self, name, stall=None, scoreboard=None):
        self.name = name
        self.stall = stall if stall is not None else NoStall()
        self.scoreboard = scoreboard if scoreboard is not None else Scoreboard(f"sink {name!r}")
        self.items = []
        self.idle_cycles = 0
        self.on_transfer = None
        self.checked = True        # compare against the scoreboard

    def expect(self, item):
        self.scoreboard.expect(item)

    def expect_all(self, items):
        self.scoreboard.expect_all(items)

    @property
    def idle(self):
        return self.scoreboard.satisfied

    def drive(self):
        """Return ``ready`` for this cycle."""
        return 1 if self.stall.next() else 0

    def edge(self, valid, ready, payload, cycle):
        if valid and ready:
            self.items.append(payload)
            self.idle_cycles = 0
            if self.checked:
                self.scoreboard.got(payload, cycle)
            if self.on_transfer is not None:
                self.on_transfer(payload, cycle)
            return True
        if not valid:
            self.idle_cycles += 1
        return False

    def describe_stall(self):
        if self.idle:
            return None
        return (f"sink {self.name!r}: {len(self.scoreboard.pending)} expected items not "
                f"received (got {len(self.items)}); valid low for {self.idle_cycles} cycles")


class AgentGroup:
    """All agents of one bench, stepped together, with the watchdog.

    Parameters
    ----------
    watchdog : int
        Fail when no stream transfers anything for this many cycles while some agent
        still has work.
    """

    def __init__(self, watchdog=2000):
        self.sources = []
        self.sinks = []
        self.watchdog = watchdog
        self.cycle = 0
        self.transfers = 0
        self._last_progress = 0

    def add_source(self, source):
        self.sources.append(source)
        return source

    def add_sink(self, sink):
        self.sinks.append(sink)
        return sink

    @property
    def idle(self):
        return all(agent.idle for agent in self.sources + self.sinks)

    def drive(self):
        """Values to drive this cycle: ``{(path, field): value}``."""
        values = {}
        for source in self.sources:
            valid, payload = source.drive()
            values[(source.name, "valid")] = valid
            if payload is not None:
                values[(source.name, "payload")] = payload
        for sink in self.sinks:
            values[(sink.name, "ready")] = sink.drive()
        return values

    def watched(self):
        """Signals to sample each cycle: ``[(path, field)]``."""
        fields = []
        for source in self.sources:
            fields += [(source.name, "valid"), (source.name, "ready")]
        for sink in self.sinks:
            fields += [(sink.name, "valid"), (sink.name, "ready"), (sink.name, "payload")]
        return fields

    def skip_edge(self):
        """Count an edge on which the agents drove nothing (the first one of a run, so
        that agents attached before it start together in both backends)."""
        self.cycle += 1
        self._last_progress = self.cycle

    def edge(self, sampled):
        """Process one clock edge given ``{(path, field): value}`` sampled before it."""
        progress = False
        for source in self.sources:
            if (source.name, "valid") not in sampled:
                continue        # attached during this cycle: it starts next cycle
            progress |= source.edge(sampled[(source.name, "valid")],
                                    sampled[(source.name, "ready")], self.cycle)
        for sink in self.sinks:
            if (sink.name, "valid") not in sampled:
                continue
            progress |= sink.edge(sampled[(sink.name, "valid")], sampled[(sink.name, "ready")],
                                  sampled[(sink.name, "payload")], self.cycle)
        if progress:
            self.transfers += 1
        if progress or self.idle:
            self._last_progress = self.cycle
        elif not self.idle and self.cycle - self._last_progress >= self.watchdog:
            raise WatchdogTimeout(self.stall_report(
                f"watchdog: no stream transfer for {self.watchdog} cycles (cycle {self.cycle})"))
        self.cycle += 1

    def stall_report(self, headline):
        lines = [headline]
        for agent in self.sources + self.sinks:
            described = agent.describe_stall()
            if described:
                lines.append("  " + described)
        return "\n".join(lines)

    def check_done(self):
        for sink in self.sinks:
            sink.scoreboard.check_done()
        for source in self.sources:
            if not source.idle:
                raise ScoreboardError(f"source {source.name!r}: {len(source.queue)} items "
                                      f"were never accepted")

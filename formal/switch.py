"""``hdl.switch``: the crossbar, multicast and merge logic of one switch network.

The harness builds one network of a switch with ``Switch._network`` (the code every
network of ``hdl.switch.Switch`` is made of: input FIFOs, crossbar, merges, "taken"
flags) around narrow payloads and a symbolic, constant configuration; ``enable`` is
arbitrary but, once high, stays high (it is held low until the array starts), and
no configuration write happens. The configuration register and the other two networks
of a full ``Switch`` are left out (they are the same code with wider payloads).

Every input ``i`` offers arbitrary ``valid``; its payload is a tag ``(i, k)``: the input
index and the item's sequence number on that input (the crossbar never looks into
payloads, so tagging them loses nothing). For each output the harness keeps an
independent reference of the merge position (the order of ``docs/switch.md``) and of
the next expected sequence number from each input, and asserts on every transfer that
the item comes from the right input (the select input of a plain output, the current
merge input of a merge output) and is the next one of that input: items leave in the
configured merge order, each input's items in order, none duplicated, none skipped.
Each output keeps ``valid`` and ``payload`` while stalled; an unrouted output stays
silent; an input item is popped only after every output routed to it took it.
"""

from amaranth import C, Cat, Elaboratable, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream

from formal.common import (
    AnyConst,
    AnySeq,
    Assert,
    Assume,
    fifo_invariants,
    no_reset,
    open_submodule,
    stream_stable,
)
from hdl.switch import MERGE_BITS, Source, Switch, decode_route

__all__ = ["SwitchNetworkHarness"]

INPUTS = Source.LOCAL          # north, east, south, west, local


class _ConfigWrite:
    def __init__(self):
        self.write = Signal()
        self.clear = Signal()


class _NetworkHost:
    """Stands in for ``self`` of ``Switch._network``: ``cfg.write`` (and ``cfg.clear``,
    held 0 like ``write``: the configuration is given directly) and the FIFO depth are
    all it reads; ``enable`` is what the harness gives the network as its ``enable``
    (the switch gives its registered copy of the port)."""

    def __init__(self, fifo_depth):
        self.enable = Signal()
        self.cfg = _ConfigWrite()
        self._fifo_depth = fifo_depth


class SwitchNetworkHarness(Elaboratable):
    """Parameters: ``outputs`` (number of outputs), ``seq_bits`` (sequence-number bits
    per input, counted modulo ``2**seq_bits``, which must exceed the FIFO depth),
    ``max_count`` (largest merge count considered), ``fifo_depth``."""

    def __init__(self, inputs=INPUTS, outputs=3, seq_bits=4, max_count=3, fifo_depth=2,
                 config=None, invariants=False):
        self.invariants = invariants
        # config: None for a symbolic configuration, else a list (one per output) of
        # (select, [count per input]) that fixes it
        self.config = config
        self.inputs = inputs
        self.outputs = outputs
        self.seq_bits = seq_bits
        self.max_count = max_count
        self.fifo_depth = fifo_depth

    def elaborate(self, platform):
        INPUTS = self.inputs       # noqa: N806 (shadows the module constant on purpose)
        m = Module()
        no_reset(m)
        seq_bits = self.seq_bits
        tag_bits = 3 + seq_bits
        host = _NetworkHost(self.fifo_depth)

        # constant configuration: selects valid (0..5), merge counts 0..max_count
        selects, merges = [], []
        for o in range(self.outputs):
            select = Signal(3, name=f"select{o}")
            if self.config is None:
                m.d.comb += [select.eq(AnyConst(3)), Assume(select <= INPUTS)]
            else:
                m.d.comb += select.eq(self.config[o][0])
            counts = Signal(data.ArrayLayout(unsigned(MERGE_BITS), INPUTS), name=f"counts{o}")
            for i in range(INPUTS):
                if self.config is None:
                    m.d.comb += [counts[i].eq(AnyConst(MERGE_BITS)),
                                 Assume(counts[i] <= self.max_count)]
                else:
                    m.d.comb += counts[i].eq(self.config[o][1][i])
            selects.append(select)
            merges.append(counts)

        # enable: arbitrary until it rises, then high; no configuration write
        enabled = Signal()
        m.d.sync += enabled.eq(enabled | host.enable)
        m.d.comb += [host.enable.eq(AnySeq(1)), Assume(~enabled | host.enable),
                     host.cfg.write.eq(0), host.cfg.clear.eq(0)]

        inputs = [stream.Signature(tag_bits).flip().create(path=(f"in{i}",))
                  for i in range(INPUTS)]
        outputs = [stream.Signature(tag_bits).create(path=(f"out{o}",))
                   for o in range(self.outputs)]
        stall = Signal(32)
        self.build_network(m, host, tag_bits, inputs, outputs, selects, merges, stall)

        # inputs: arbitrary valid, payload = (input index, sequence number)
        sent = []
        for i, port in enumerate(inputs):
            count = Signal(seq_bits, name=f"sent{i}")
            m.d.comb += [port.valid.eq(AnySeq(1)), port.payload.eq(Cat(count, C(i, 3)))]
            with m.If(port.valid & port.ready):
                m.d.sync += count.eq(count + 1)
            # sequence numbers wrap modulo 2**seq_bits: an input FIFO (depth 2) never
            # holds two items with the same tag, so wrapping loses nothing
            sent.append(count)

        references = []
        for o, port in enumerate(outputs):
            m.d.comb += port.ready.eq(AnySeq(1))
            counts = merges[o]
            listed = Cat(*(counts[i] != 0 for i in range(INPUTS)))
            is_merge = listed.any()
            # reference merge position
            current = Signal(range(INPUTS), name=f"ref_current{o}")
            taken = Signal(MERGE_BITS, name=f"ref_taken{o}")
            started = Signal(name=f"ref_started{o}")
            first = Signal(range(INPUTS), name=f"ref_first{o}")
            for step in range(INPUTS - 1, -1, -1):
                with m.If(listed[step]):
                    m.d.comb += first.eq(step)
            position = Mux(started, current, first)
            count_now = Mux(started, taken, 0)
            expected_input = Mux(is_merge, position, selects[o] - 1)
            count_of_position = Signal(MERGE_BITS, name=f"ref_count{o}")
            with m.Switch(position):
                for i in range(INPUTS):
                    with m.Case(i):
                        m.d.comb += count_of_position.eq(counts[i])
            next_input = Signal(range(INPUTS), name=f"ref_next{o}")
            with m.Switch(position):
                for i in range(INPUTS):
                    with m.Case(i):
                        for step in range(INPUTS, 0, -1):    # nearest listed one wins
                            index = (i + step) % INPUTS
                            with m.If(listed[index]):
                                m.d.comb += next_input.eq(index)
            expected_seq = [Signal(seq_bits, name=f"ref_seq{o}_{i}") for i in range(INPUTS)]
            references.append((started, current, taken, expected_seq, count_of_position))
            transfer = port.valid & port.ready
            tag_input = port.payload[seq_bits:]
            tag_seq = port.payload[:seq_bits]
            with m.If(host.enable):
                m.d.sync += started.eq(1)
            with m.If(transfer):
                m.d.comb += [
                    Assert(tag_input == expected_input,
                           f"out{o}: item from the wrong input (merge order or select)"),
                ]
                with m.Switch(tag_input):
                    for i in range(INPUTS):
                        with m.Case(i):
                            m.d.comb += Assert(tag_seq == expected_seq[i],
                                               f"out{o}: item of input {i} duplicated, "
                                               f"skipped or out of order")
                            m.d.sync += expected_seq[i].eq(expected_seq[i] + 1)
                with m.If(is_merge):
                    with m.If(count_now + 1 == count_of_position):
                        m.d.sync += [current.eq(next_input), taken.eq(0)]
                    with m.Else():
                        m.d.sync += [current.eq(position), taken.eq(count_now + 1)]
            with m.Elif(started == 0):
                m.d.sync += [current.eq(first), taken.eq(0)]
            routed = is_merge | (selects[o] != Source.NONE)
            m.d.comb += Assert(~port.valid | (routed & host.enable),
                               f"out{o}: valid on an unrouted or disabled output")
            stream_stable(m, port, f"out{o}", enable=host.enable)
        if self.invariants:
            self.assert_invariants(m, enabled, sent, references, seq_bits)
        return m

    def assert_invariants(self, m, enabled, sent, references, seq_bits):
        """The network's state, read from its signals, against the harness's counters
        and reference: each input FIFO holds the tags ``sent - level .. sent - 1`` in
        order; except in the first cycle (``written``: the FIFOs are empty), a merge
        never enabled is at its first input with that input's count to take, and the
        source register is the route's; once started, a merge output's position is a
        listed input, its position (one-hot) is the reference's and the items it still
        takes from it are the input's count minus the reference's;
        ``taken[o][i]`` only for a held item of a member input, and output o expects
        from input i the head's sequence number, plus one once it took the head."""
        driven = {signal.name: signal for signal in m._driving.keys()}
        written = driven["net_written"]
        # no configuration write here: ``written`` is the first cycle, before any enable
        m.d.comb += Assert(~written | ~enabled, "written after enable")
        heads = []
        levels = []
        for i, count in enumerate(sent):
            component = m._named_submodules[f"net_fifo{i}"][0]
            _, fifo = open_submodule(m, f"net_fifo{i}")
            level = component.level
            slots, _head = fifo_invariants(m, component, fifo, f"in{i}: ")
            for contents, position, held in slots:
                with m.If(held):
                    m.d.comb += Assert(
                        contents == Cat((count - level + position)[:seq_bits], C(i, 3)),
                        f"in{i}: FIFO slot does not hold its tag")
            heads.append((count - level)[:seq_bits])
            levels.append(level)
            m.d.comb += Assert(~written | (level == 0), f"in{i}: an item right after a write")
        for o, (started, current, taken, expected_seq, count_of_position) in enumerate(references):
            member = driven[f"net_member{o}"]
            flags = driven[f"net_taken{o}"]
            m.d.comb += Assert(started == enabled, f"out{o}: reference started != enabled")
            merging = driven[f"net_merging{o}"]
            # the registered input and source are the configuration's, except in the
            # cycle after a write (reset), when the input FIFOs are empty
            position = driven[f"net_merge_input{o}"]
            remaining = driven[f"net_merge_remaining{o}"]
            first = driven[f"net_first{o}"]
            counts = driven[f"counts{o}"]
            count_of_first = 0
            for i in range(len(sent)):
                count_of_first = count_of_first | Mux(
                    first[i], counts[MERGE_BITS * i:MERGE_BITS * (i + 1)], 0)
            with m.If(~written):
                m.d.comb += [
                    Assert(enabled | ((position == first) & (remaining == count_of_first)),
                           f"out{o}: merge never enabled not at its first input"),
                    Assert(driven[f"net_source{o}"] == Mux(driven[f"net_is_merge{o}"], position,
                                                           driven[f"net_plain{o}"]),
                           f"out{o}: source register is not the route's"),
                ]
            with m.If(started & merging.any()):
                m.d.comb += [
                    Assert(merging.bit_select(current, 1), f"out{o}: merge at an unlisted input"),
                    Assert(taken < count_of_position, f"out{o}: merge count beyond the input's"),
                    Assert(position == C(1, len(sent)) << current,
                           f"out{o}: merge input is not the reference's"),
                    Assert(remaining == (count_of_position - taken)[:MERGE_BITS],
                           f"out{o}: merge count is not the reference's"),
                ]
            for i in range(len(sent)):
                m.d.comb += Assert(~flags[i] | (member[i] & (levels[i] != 0)),
                                   f"out{o}: taken flag without a held item of a member")
                with m.If(member[i]):
                    m.d.comb += Assert(expected_seq[i] == (heads[i] + flags[i])[:seq_bits],
                                       f"out{o}: expects the wrong item of input {i}")

    def build_network(self, m, host, shape, inputs, outputs, selects, merges, stall):
        # the configuration is constant here: its decode needs no register
        routes = [decode_route(m, "net", o, selects[o], merges[o]) for o in range(len(outputs))]
        Switch._network(host, m, "net", shape, inputs, outputs, routes, merges, stall,
                        host.enable)

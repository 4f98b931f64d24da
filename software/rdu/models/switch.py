"""The switch's functional model (``hdl/switch.py``): one network of one switch.

:class:`SwitchNetworkModel` routes the heads of its five input queues to its outputs
by the switch's configuration (multicast: an item leaves its input when every output
it is routed to took it; merge: the inputs take turns, ``count`` items each).
"""

from hdl.switch import NARROW_OUTPUTS, VECTOR_OUTPUTS

from .shared import Unit

__all__ = ["SwitchNetworkModel", "DIRECTION_NAMES"]

#: Input names of a switch network by index (hdl.switch.Port: the four directions,
#: then the unit's output).
DIRECTION_NAMES = NARROW_OUTPUTS


def _output_names(outputs):
    return VECTOR_OUTPUTS if len(outputs) == len(VECTOR_OUTPUTS) else NARROW_OUTPUTS


class SwitchNetworkModel(Unit):
    """One network of one switch: routes the heads of its input FIFOs to its outputs."""

    def __init__(self, name, inputs, outputs, selects, merges):
        self.name = name
        self.inputs = inputs            # 5 queues: north, east, south, west, local
        self.outputs = outputs          # destination queue per output (None: unconnected)
        self.merge = [any(counts) for counts in merges]
        self.counts = merges
        self.members = [[] for _ in inputs]
        for out, select in enumerate(selects):
            if self.merge[out]:
                for source, count in enumerate(merges[out]):
                    if count:
                        self.members[source].append(out)
            elif 1 <= select <= len(inputs):
                self.members[select - 1].append(out)
        self.full_mask = [sum(1 << out for out in members) for members in self.members]
        self.taken = [0] * len(inputs)
        self.current = [None] * len(outputs)
        self.remaining = [0] * len(outputs)
        for out in range(len(outputs)):
            if self.merge[out]:
                first = next(s for s, count in enumerate(merges[out]) if count)
                self.current[out], self.remaining[out] = first, merges[out][first]
        self.routed = [s for s in range(len(inputs)) if self.members[s]]
        self.forwarded = 0

    def active(self):
        """Whether any input is routed (a network without routes never moves items)."""
        return bool(self.routed)

    def _advance(self, out):
        counts = self.counts[out]
        source = self.current[out]
        for offset in range(1, len(counts) + 1):
            candidate = (source + offset) % len(counts)
            if counts[candidate]:
                self.current[out], self.remaining[out] = candidate, counts[candidate]
                return

    def step(self):
        moved = 0
        progress = True
        inputs, outputs, members = self.inputs, self.outputs, self.members
        while progress:
            progress = False
            for source in self.routed:
                queue = inputs[source].items
                while queue:
                    item = queue[0]
                    taken = self.taken[source]
                    for out in members[source]:
                        if taken >> out & 1:
                            continue
                        dest = outputs[out]
                        if dest is None or len(dest.items) >= dest.capacity:
                            continue
                        if self.merge[out]:
                            if self.current[out] != source:
                                continue
                            self.remaining[out] -= 1
                            if self.remaining[out] == 0:
                                self._advance(out)
                        dest.items.append(item)
                        taken |= 1 << out
                        moved += 1
                        progress = True
                    if taken == self.full_mask[source]:
                        queue.popleft()
                        self.taken[source] = 0
                    else:
                        self.taken[source] = taken
                        break
        self.forwarded += moved
        return moved

    def busy(self):
        return any(queue.items for source, queue in enumerate(self.inputs)
                   if self.members[source])

    def blocked(self):
        """Routed inputs held up by full destinations (explained by their consumers)."""
        found = []
        for source, queue in enumerate(self.inputs):
            if queue.items and self.members[source]:
                full = [self.outputs[out].name for out in self.members[source]
                        if not self.taken[source] >> out & 1 and
                        self.outputs[out] is not None and self.outputs[out].full()]
                if full:
                    found.append(f"{self.name} input {DIRECTION_NAMES[source]} waits on "
                                 f"{', '.join(full)}")
        return found

    def leftovers(self):
        return [f"{self.name} input {DIRECTION_NAMES[source]}: {len(queue.items)} unrouted "
                f"items" for source, queue in enumerate(self.inputs)
                if queue.items and not self.members[source]]

    def waits(self):
        found = []
        for source, queue in enumerate(self.inputs):
            if not queue.items:
                continue
            where = f"{self.name} input {DIRECTION_NAMES[source]} holds {len(queue.items)}"
            if not self.members[source]:
                continue
            for out in self.members[source]:
                if self.taken[source] >> out & 1:
                    continue
                if self.outputs[out] is None:
                    names = _output_names(self.outputs)
                    found.append(f"{where} items for the unconnected output {names[out]}")
                elif self.merge[out] and self.current[out] != source and \
                        not self.outputs[out].full():
                    names = _output_names(self.outputs)
                    found.append(f"{where} items, merge output {names[out]} waits on "
                                 f"{DIRECTION_NAMES[self.current[out]]}")
        return found


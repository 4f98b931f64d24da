"""The host protocol: the typed messages between the runtime and the host bodies.

The runtime (:mod:`rdu.runtime`) writes a run's plan into a file, a host body
(:mod:`rdu.sim.host`, :mod:`rdu.sim.ip_host`; under cocotb or on the native runner,
:mod:`rdu.sim.native`) reads it, runs it and returns what it measured. Both sides use
these dataclasses; on the wire each is the JSON object of :meth:`Message.to_json`
(tagged with ``"kind"`` where a list holds several kinds of message).

Host schedule (``schedule.json``, :class:`HostSchedule`): :class:`WriteStep`,
:class:`CopyStep`, :class:`LaunchStep`; each ends as a :class:`WriteDone`,
:class:`CopyDone` or :class:`LaunchDone`.

Orchestrated schedule (``plan.json``, :class:`OrchestrationPlan`): the memory images
(:class:`MemoryImage`), the schedule's address, the launches whose outputs are read
after the end (:class:`PlannedLaunch`) and the cycles allowed. Generation
(``generation.json``, :class:`GenerationPlan`): that plan run once per token.
"""

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import ClassVar

__all__ = ["Message", "WriteStep", "CopyStep", "LaunchStep", "HostSchedule", "WriteDone",
           "CopyDone", "LaunchDone", "MemoryImage", "PlannedLaunch", "OrchestrationPlan",
           "GenerationPlan", "step_from_json", "done_from_json"]


class Message:
    """A dataclass that travels as a JSON object: its fields, and ``"kind"`` when the
    class names one."""

    kind: ClassVar[str] = None

    def to_json(self):
        """The JSON object (a dict of plain values) of this message."""
        data = {} if self.kind is None else {"kind": self.kind}
        for item in fields(self):
            data[item.name] = _plain(getattr(self, item.name))
        return data

    @classmethod
    def from_json(cls, data):
        """The message of the JSON object ``data`` (its ``"kind"``, if any, checked)."""
        if cls.kind is not None and data.get("kind", cls.kind) != cls.kind:
            raise ValueError(f"a {cls.__name__} message has kind {cls.kind!r}, "
                             f"not {data['kind']!r}")
        return cls(**{item.name: data[item.name] for item in fields(cls)
                      if item.name in data})


def _plain(value):
    if isinstance(value, Message):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _by_kind(classes, data, what):
    for cls in classes:
        if cls.kind == data.get("kind"):
            return cls.from_json(data)
    raise ValueError(f"unknown {what} kind {data.get('kind')!r}; expected one of "
                     f"{', '.join(cls.kind for cls in classes)}")


# -- host schedule ---------------------------------------------------------------------------

@dataclass
class WriteStep(Message):
    """The host writes the array ``key`` of the schedule's ``writes`` file at
    ``address`` (backdoor, no cycles)."""
    kind: ClassVar[str] = "write"
    address: int
    key: str


@dataclass
class CopyStep(Message):
    """AGCU ``COPY`` jobs ``[[agcu, src, dst, length]]`` issued on one edge; ``timeout``
    cycles for all to finish."""
    kind: ClassVar[str] = "copy"
    jobs: list
    timeout: int


@dataclass
class LaunchStep(Message):
    """Load and execute the program saved in ``dir`` (its outputs go to
    ``<dir>/outputs.npz``); ``timeout`` cycles for its execution."""
    kind: ClassVar[str] = "launch"
    dir: str
    timeout: int


#: The steps of a host schedule.
STEPS = (WriteStep, CopyStep, LaunchStep)


def step_from_json(data):
    """The :class:`WriteStep`, :class:`CopyStep` or :class:`LaunchStep` of ``data``."""
    return _by_kind(STEPS, data, "schedule step")


@dataclass
class HostSchedule(Message):
    """A host schedule: its ``steps`` in order and the ``.npz`` file of their writes."""
    steps: list
    writes: str

    @classmethod
    def from_json(cls, data):
        return cls([step_from_json(step) for step in data["steps"]], data["writes"])

    def save(self, path):
        Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path):
        return cls.from_json(json.loads(Path(path).read_text()))


@dataclass
class WriteDone(Message):
    """A :class:`WriteStep` done."""
    kind: ClassVar[str] = "write"


@dataclass
class CopyDone(Message):
    """A :class:`CopyStep` done: ``cycles`` from the edge that accepted its commands to
    the last ``done``, the host's ``launch_cycles`` before it, each AGCU's cycles."""
    kind: ClassVar[str] = "copy"
    cycles: int
    launch_cycles: int
    agcu_cycles: dict = field(default_factory=dict)


@dataclass
class LaunchDone(Message):
    """A :class:`LaunchStep` done: ``launch`` is the launch's report
    (:meth:`rdu.sim.host.HostDriver.run`)."""
    kind: ClassVar[str] = "launch"
    launch: dict


def done_from_json(data):
    """The :class:`WriteDone`, :class:`CopyDone` or :class:`LaunchDone` of ``data``."""
    return _by_kind((WriteDone, CopyDone, LaunchDone), data, "step result")


# -- orchestrated schedule -------------------------------------------------------------------

@dataclass
class MemoryImage(Message):
    """The array ``key`` of the plan's ``writes`` file, written at ``address``."""
    address: int
    key: str


@dataclass
class PlannedLaunch(Message):
    """A launch of an orchestrated schedule: the program saved in ``dir`` and its
    outputs ``{name: [address, words]}`` read after the end."""
    dir: str
    outputs: dict


@dataclass
class OrchestrationPlan(Message):
    """An orchestrated schedule: every memory image (the ``writes`` file holds them and
    the schedule's words, ``"schedule"``), the schedule's ``address``, its launches and
    the ``timeout`` in cycles; ``watchdog_cycles`` (default: half the timeout) and the
    orchestrator's command ``capacity`` (default: the hardware's) are optional."""
    writes: str
    address: int
    memory: list
    launches: list
    timeout: int
    watchdog_cycles: int = None
    capacity: int = None

    @classmethod
    def from_json(cls, data):
        return cls(data["writes"], data["address"],
                   [MemoryImage.from_json(image) for image in data["memory"]],
                   [PlannedLaunch.from_json(launch) for launch in data["launches"]],
                   data["timeout"], data.get("watchdog_cycles"), data.get("capacity"))

    def to_json(self):
        data = super().to_json()
        for name in ("watchdog_cycles", "capacity"):
            if data[name] is None:
                del data[name]
        return data

    def save(self, path):
        Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path):
        return cls.from_json(json.loads(Path(path).read_text()))


# -- generation: one orchestrated schedule per token -----------------------------------------

@dataclass
class GenerationPlan(Message):
    """The runs of :func:`rdu.sim.orchestrated.run_generation` over an
    :class:`OrchestrationPlan`: the ``arrays`` file holds ``"table0"``, ``"table1"``, ...
    (uint32, one row of words per token id, written at ``token_addresses[i]`` before a
    run) and ``"words"`` (the
    logits' word indices in the logits output); run ``r`` is at position ``r``, its
    input token ``prompt[r]`` while there is one, else the token run ``r - 1`` chose;
    ``logits[r]`` is ``[address, words]`` of the logits output at position ``r``;
    ``read_back``: ``[[address, words]]`` read after the last run."""
    arrays: str
    token_addresses: list
    prompt: list
    count: int
    logits: list
    read_back: list = field(default_factory=list)

    def save(self, path):
        Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path):
        return cls.from_json(json.loads(Path(path).read_text()))

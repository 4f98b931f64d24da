"""Token generation: one orchestrated schedule run once per token on one persistent
machine and memory (``docs/orchestrator.md``, **Generation: one schedule per token**).

:func:`run_generation` checks its arguments, places the schedule once
(:func:`rdu.runtime.orchestrate.orchestrate`) and hands the runs to the back end
(:meth:`rdu.runtime.Backend.run_generation`). Run ``r`` is at launch position ``r``; its
input token is ``prompt[r]`` while there is one, else the token run ``r - 1`` chose
(greedy: :func:`rdu.sim.orchestrated.next_token`).
"""

import operator
from dataclasses import dataclass, field

import numpy as np

from hdl.orchestrator import ScheduleOp

from ..program import ProgramError
from ..sim.orchestrated import next_token
from ..units.agcu import check_position
from .backend import RunOptions, backend_named, names_text
from .launch import orchestrating_backends
from .orchestrate import orchestrate
from .results import RunFailure, ScheduleResult
from .steps import Launch, check_machine, check_steps

__all__ = ["TokenInput", "LogitsOutput", "GenerationRun", "GenerationResult", "Generation",
           "run_generation", "next_token"]


@dataclass(frozen=True)
class TokenInput:
    """Where a run's input token goes: before the run of token ``t`` the host writes
    ``table[t]`` (uint32 words; ``table`` is tokens x words) at ``address``."""
    address: int
    table: object


@dataclass(frozen=True)
class LogitsOutput:
    """Where a run's logits are: the FP32 words ``words`` (an index array, one per
    token id) of output ``output`` of the ``launch``-th :class:`Launch` of the steps
    (0-based among the launches), at the run's position."""
    launch: int
    output: str
    words: object


@dataclass
class GenerationRun:
    """One run: its ``position``, its input ``token``, its ``logits`` (float32, one per
    token id), ``cycles`` (RTL: the orchestrator's start to done, ``orch.cycles``;
    ``None`` on the model) and ``steps``: the :class:`ScheduleResult` of the run (each
    launch's ``load_cycles``, ``cycles`` and ``memory_bytes`` where the back end has
    them; launches' ``outputs`` are not read, only the logits)."""
    position: int
    token: int
    logits: np.ndarray
    cycles: int = None
    steps: ScheduleResult = None

    @property
    def chosen(self):
        """The token this run generates: the argmax of its logits (lowest index on ties)."""
        return next_token(self.logits.view(np.uint32))


@dataclass
class GenerationResult:
    """What :func:`run_generation` returns: ``tokens`` (the generated ids), ``runs``
    (one :class:`GenerationRun` each), the back end's name, the wall-clock and build
    seconds; :meth:`read` reads the memory after the last run."""
    tokens: list
    runs: list
    sim: str
    seconds: float = 0.0
    build_seconds: float = 0.0
    reader: object = field(default=None, repr=False)

    def read(self, address, words):
        """``words`` uint32 words of memory at ``address`` after the last run (the RTL
        back ends: inside a region asked for with ``read_back``)."""
        return np.asarray(self.reader(int(address), int(words)), np.uint32)


@dataclass
class Generation:
    """The checked runs a back end makes: the token inputs (``inputs``: ``[(address,
    table)]``, each written before a run), the ``prompt``, ``count``, per run the
    ``[address, words]`` of the logits output at its position (``logits``), the logits'
    word indices (``words``) and the regions to read after the last run
    (``read_back``)."""
    inputs: list
    prompt: list
    count: int
    logits: list
    words: np.ndarray
    read_back: list

    @property
    def vocabulary(self):
        """Token ids the tables hold."""
        return self.inputs[0][1].shape[0]

    def writes(self, token):
        """``[(address, words)]`` the host writes before a run of ``token``."""
        return [(address, table[token]) for address, table in self.inputs]

    @property
    def runs(self):
        """``len(prompt) + count - 1``: the last generated token is not fed back."""
        return len(self.prompt) + self.count - 1

    def next_input(self, position, chosen):
        """The input token of the run after the one at ``position``, which chose
        ``chosen``."""
        return self.prompt[position + 1] if position + 1 < len(self.prompt) else chosen

    def result(self, runs, sim, seconds=0.0, build_seconds=0.0, reader=None):
        """The :class:`GenerationResult` of ``runs`` (checked: each run's input token is
        the one its predecessor's logits choose)."""
        for previous, run in zip(runs, runs[1:], strict=False):
            expected = self.next_input(previous.position, previous.chosen)
            if run.token != expected:
                raise RunFailure(f"generation run at position {run.position} had input "
                                 f"token {run.token}, not {expected}", "generation")
        tokens = [run.chosen for run in runs[len(self.prompt) - 1:]]
        return GenerationResult(tokens, runs, sim, seconds, build_seconds, reader)


def _integer(value, what, low=0):
    try:
        number = operator.index(value)
    except TypeError:
        number = None
    if number is None or isinstance(value, bool) or number < low:
        raise ValueError(f"{what} must be an integer of at least {low}, not {value!r}")
    return number


def _tables(token_input, machine):
    """``[(address, uint32 table)]`` of ``token_input`` (a :class:`TokenInput` or a
    list of them: the images that hold the token), checked."""
    inputs = [token_input] if isinstance(token_input, TokenInput) else list(token_input) \
        if isinstance(token_input, (list, tuple)) else None
    if not inputs or not all(isinstance(item, TokenInput) for item in inputs):
        raise ValueError(f"token_input must be a TokenInput(address, table) or a list of "
                         f"them, not {type(token_input).__name__}")
    tables = [_table(item, machine) for item in inputs]
    if len({table.shape[0] for _, table in tables}) != 1:
        raise ValueError(f"token input tables of {sorted({t.shape[0] for _, t in tables})} "
                         f"rows: each holds every token id")
    return tables


def _table(token_input, machine):
    """The token input's ``(address, uint32 table)``, checked."""
    address = _integer(token_input.address, "token input address")
    table = np.asarray(token_input.table)
    if table.ndim != 2 or 0 in table.shape or table.dtype.kind not in "ui" or \
            table.min() < 0 or table.max() >= 1 << 32:
        raise ValueError(f"token input table must be a 2-D array of uint32 words (tokens x "
                         f"words), not {table.dtype} of shape {table.shape}")
    nbytes = 4 * table.shape[1]
    if address % 4 or not any(region.base <= address and address + nbytes <= region.end
                              for region in machine.regions()):
        raise ValueError(f"token input at {address:#x} ({nbytes} bytes) is not word-aligned "
                         f"inside one of the machine's memory regions")
    return address, table.astype(np.uint32)


def _logits(logits, programs, vocabulary, runs):
    """``(per-run [address, words] of the logits output, word indices)``, checked."""
    if not isinstance(logits, LogitsOutput):
        raise ValueError(f"logits must be a LogitsOutput(launch, output, words), not "
                         f"{type(logits).__name__}")
    launch = _integer(logits.launch, "logits launch")
    if launch >= len(programs):
        raise ValueError(f"logits launch {launch}: the schedule has {len(programs)} "
                         f"launch{'es' if len(programs) > 1 else ''} (0-based)")
    program = programs[launch]
    if logits.output not in program.outputs:
        raise ValueError(f"logits output {logits.output!r} is not an output of launch "
                         f"{launch} ({program.name!r}): it has {', '.join(program.outputs)}")
    words = np.asarray(logits.words)
    if words.ndim != 1 or words.size != vocabulary or (words.size and words.dtype.kind
                                                       not in "ui"):
        raise ValueError(f"logits words must be {vocabulary} integer indices (one per row "
                         f"of the token input table), not {words.dtype} of shape "
                         f"{words.shape}")
    size = program.outputs[logits.output][1]
    if words.min() < 0 or words.max() >= size:
        raise ValueError(f"logits words {words.min()} .. {words.max()} are outside output "
                         f"{logits.output!r} of launch {launch} ({size} words)")
    per_run = [[int(v) for v in program.at_position(position).outputs[logits.output]]
               for position in range(runs)]
    return per_run, words.astype(np.int64)


def _generation(programs, machine, token_input, logits, prompt, count, read_back):
    """The checked :class:`Generation`; a one-line ``ValueError`` for a bad argument."""
    inputs = _tables(token_input, machine)
    table = inputs[0][1]
    prompt = [_integer(token, f"prompt token {index}") for index, token
              in enumerate(prompt)]
    if not prompt:
        raise ValueError("a generation needs a prompt of at least one token")
    for index, token in enumerate(prompt):
        if token >= table.shape[0]:
            raise ValueError(f"prompt token {index} ({token}) is outside the token input "
                             f"table's {table.shape[0]} rows")
    count = _integer(count, "count (new tokens)", 1)
    runs = len(prompt) + count - 1
    try:
        check_position(runs - 1, f"the last run's position ({runs} runs)")
        for program in programs:
            program.at_position(runs - 1)
    except (ValueError, ProgramError) as error:
        raise ValueError(f"{runs} runs need positions 0 .. {runs - 1}: {error}") from None
    per_run, words = _logits(logits, programs, table.shape[0], runs)
    regions = []
    for item in read_back:
        try:
            where, size = item
        except (TypeError, ValueError):
            raise ValueError(f"read_back takes (address, words) pairs, not {item!r}") from None
        regions.append([_integer(where, "read_back address"),
                        _integer(size, "read_back words", 1)])
    return Generation(inputs, prompt, count, per_run, words, regions)


def _check_token_span(generation, plan):
    """A ``ValueError`` when the token input would overwrite the schedule's commands or a
    bitstream (placed by :func:`orchestrate` at the top of HBM): the host writes it
    before every run."""
    spans = [(plan.address, 4 * len(plan.words))] + [
        (command.src, command.length) for command in plan.commands
        if command.op == ScheduleOp.PROGRAM_LOAD]
    for address, table in generation.inputs:
        nbytes = 4 * table.shape[1]
        for base, size in spans:
            if address < base + size and base < address + nbytes:
                raise ValueError(f"token input at {address:#x} ({nbytes} bytes) overlaps "
                                 f"the schedule's commands or a bitstream at {base:#x}")


def run_generation(steps, sim="model", *, token_input, logits, prompt, count, machine=None,
                   seed=1, work_dir=None, timeout=None, progress=False, windows=True,
                   read_back=()):
    """Run the orchestrated schedule ``steps`` once per token, greedy, on one machine
    and memory kept from run to run.

    Every image, bitstream, :class:`Write` and the schedule are written into memory once,
    before the first run. Run ``r`` (``r = 0 .. len(prompt) + count - 2``) is at launch
    position ``r`` (``docs/agcu.md``, **Positioned patterns**): the host writes the
    token input's row of its input token (``prompt[r]`` while ``r < len(prompt)``, else
    the token run ``r - 1`` generated), starts the orchestrator, reads the logits and
    chooses their argmax (the lowest index on ties). Nothing else is rewritten between
    runs: what a run stores (a KV cache row at its position) is there for the next.

    Parameters
    ----------
    steps : list
        :class:`Launch`, :class:`Copy`, :class:`Write` (and :class:`rdu.schedule.Command`)
        as :func:`run_schedule` takes them; run orchestrated (``docs/orchestrator.md``).
    sim : str
        A back end that runs orchestrated schedules: ``model``, ``verilator`` or
        ``native`` (``ip`` runs none).
    token_input : TokenInput or list of TokenInput
        ``address`` and ``table`` (uint32, V x words): row ``t`` is token ``t``'s input
        (a list: every image that holds the token, each written before a run).
    logits : LogitsOutput
        ``launch`` (0-based among the launches), ``output`` and ``words`` (V indices of
        its FP32 words): the logits, read at each run's position.
    prompt : list of int
        At least one token id, each a row of the table.
    count : int
        New tokens, at least 1 (the last one is not fed back: HF's ``max_new_tokens``).
    machine : Machine, optional
        Default: the first launch's.
    seed, work_dir, timeout, progress, windows
        As :func:`run_schedule` (``timeout``: cycles allowed per run).
    read_back : list of (address, words)
        Regions the RTL back ends read after the last run for
        :meth:`GenerationResult.read` (the model reads any).

    Returns
    -------
    GenerationResult
        ``tokens`` (``count`` ids) and per run its position, input token, logits
        (float32, V), ``cycles`` and per-step figures.

    Raises
    ------
    ValueError
        A bad argument, in one line (a token outside the table, an empty prompt, a count
        below 1, a logits launch or output that does not exist, more runs than a
        positioned table has entries, a back end that runs no orchestrated schedule).
    RunFailure
        A run that failed, in one line naming the run's position, the command and the
        unit.
    """
    backend = backend_named(sim)
    if not backend.orchestrates:
        raise ValueError(f"generation runs an orchestrated schedule: sim "
                         f"{names_text(orchestrating_backends())}, not {sim!r}")
    steps = [Launch(step.program.at_position(0)) if isinstance(step, Launch) else step
             for step in steps]
    programs = [step.program for step in steps if isinstance(step, Launch)]
    if not programs:
        raise ValueError("a schedule needs at least one launch")
    machine = check_machine(programs, machine)
    check_steps(steps, machine, "orchestrated")
    generation = _generation(programs, machine, token_input, logits, prompt, count,
                             read_back)
    plan = orchestrate(steps, machine)
    _check_token_span(generation, plan)
    options = RunOptions(seed=seed, work_dir=work_dir, timeout=timeout, progress=progress,
                         windows=windows)
    return backend.run_generation(steps, plan, generation, machine, options)

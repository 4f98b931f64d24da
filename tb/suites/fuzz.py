"""Configuration fuzzing: damaged bitstreams of small compiled kernels of every kernel
family (:data:`TARGETS`), run on the functional model and on the RTL
(:class:`hdl.system.RDUSystem` through the host driver), outcomes compared.

Every case must end in a loader, unit or AGCU error status, a watchdog stop, or
outputs; where both the model and the RTL produce outputs they must be equal (no
silent disagreement). ``tests/test_fuzz.py`` runs small campaigns, ``benchmarks/fuzz.py``
larger ones; damaged orchestrator schedules are :mod:`tb.suites.fuzz_schedule`, the IP's
AXI4-Lite registers :mod:`tb.suites.fuzz_axi`.
"""

import random
import re
from dataclasses import dataclass, field

import numpy as np
from amaranth.hdl import Shape
from amaranth.lib import data
from rdu.bitstream import BitstreamError, Geometry, payload_crc, read_bitstream, write_bitstream
from rdu.compiler.families.attention import ATTENTION
from rdu.compiler.families.matmul import MATMUL
from rdu.compiler.families.mlp import MLP
from rdu.compiler.families.rows import ROWS
from rdu.frontend import gemm
from rdu.frontend.kernels import KERNELS
from rdu.machine import Machine
from rdu.mapper import ArrayGeometry
from rdu.models.machine import FunctionalMachine
from rdu.models.shared import CommandError, LoaderError, ModelDeadlock, ModelError, UnitError
from rdu.program import Program
from rdu.sim.host import HostDriver, RunError
from rdu.sim.memory_system import FaultInjector

__all__ = ["GEOMETRY", "SHAPES", "leaves", "flip_fix_crc", "mutate", "base_programs",
           "fuzz_programs", "verdict", "run_rtl", "ACCEPTED",
           "model_outcome", "rtl_outcome", "run_cases", "OUTCOMES", "CORRESPONDING",
           "FuzzTarget", "TARGETS", "SMALL_MACHINE", "KERNEL_MACHINE", "select_targets",
           "damaged_programs", "STOPS"]

#: The fuzzed machine: 2x2 (PCU, PMU checkerboard), 4 lanes, 16 KiB PMUs.
GEOMETRY = ArrayGeometry(2, 2, 4, pmu_words=4096)
SHAPES = ((4, 4, 8), (5, 7, 9))
#: Outcome names shared by both sides (the model's error classes map onto them).
OUTCOMES = ("outputs", "loader", "unit_error", "agcu_error", "deadlock", "hw_watchdog",
            "host_watchdog", "no_end", "other")
#: (Orchestrator schedules, :mod:`tb.suites.fuzz_schedule`, add ``request``: the
#: orchestrator refused a command, and ``stuck``: an AGCU busy at start.)
#: The RTL outcomes that correspond to a model outcome (the model's deadlock is the
#: array's watchdog; a run the model stops after ``max_items`` never ends on the RTL).
CORRESPONDING = {"outputs": {"outputs"}, "loader": {"loader"},
                 "unit_error": {"unit_error"}, "agcu_error": {"agcu_error"},
                 "deadlock": {"hw_watchdog"}, "no_end": {"host_watchdog", "hw_watchdog"},
                 "request": {"request"}, "stuck": {"stuck"}}


def leaves(shape, base=0):
    """``(bit offset, width)`` of every leaf field of a layout."""
    if isinstance(shape, data.StructLayout):
        for _, field in shape:
            yield from leaves(field.shape, base + field.offset)
    elif isinstance(shape, data.ArrayLayout):
        elem = shape.elem_shape
        width = elem.size if isinstance(elem, data.Layout) else Shape.cast(elem).width
        for index in range(shape.length):
            yield from leaves(elem, base + index * width)
    else:
        yield base, Shape.cast(shape).width


def flip_fix_crc(rng, words):
    """One or two bits flipped anywhere; mostly with the CRC recomputed."""
    words = list(words)
    for _ in range(rng.randrange(1, 3)):
        words[rng.randrange(len(words))] ^= 1 << rng.randrange(32)
    if rng.random() < 0.7 and words[1] >> 16 == 5:
        words[4] = payload_crc(words[5:5 + words[3]])
    return words


def mutate(rng, words, field_leaves, geometry):
    """A damaged bitstream: field values changed (CRC recomputed), bits flipped
    (CRC recomputed or not), header words changed, truncated or extended.
    ``field_leaves`` maps a unit kind to its :func:`leaves`."""
    kind = rng.random()
    if kind < 0.5:
        _, records = read_bitstream(words)
        for _ in range(rng.randrange(1, 4)):
            record = rng.choice(records)
            value = sum(word << (32 * i) for i, word in enumerate(record.words))
            offset, width = rng.choice(field_leaves[record.kind])
            old = (value >> offset) & ((1 << width) - 1)
            new = rng.choice([0, 1, (1 << width) - 1, rng.getrandbits(width),
                              (old + 1) % (1 << width), max(old - 1, 0)])
            value = (value & ~(((1 << width) - 1) << offset)) | new << offset
            record.words = [(value >> (32 * i)) & 0xFFFF_FFFF
                            for i in range(len(record.words))]
        if rng.random() < 0.1:                    # a record's word count changed
            record = rng.choice(records)
            record.words = record.words[:rng.randrange(len(record.words) + 1)]
        return write_bitstream(geometry, records)
    if kind < 0.85:
        return flip_fix_crc(rng, words)
    words = list(words)
    if kind < 0.92:
        return words[:rng.randrange(1, len(words))]
    return words + [rng.getrandbits(32) for _ in range(rng.randrange(1, 4))]


def base_programs(seed, shapes=SHAPES):
    """The undamaged GEMMs of :func:`fuzz_programs`: ``shapes`` compiled for
    :data:`GEOMETRY`, random inputs (seed ``seed + index``) packed."""
    bases = []
    for index, shape in enumerate(shapes):
        program = gemm.compile_gemm(*shape, GEOMETRY)
        a, b = gemm.random_inputs(*shape, seed + index)
        gemm.pack_inputs(program, a, b)
        bases.append(program)
    return bases


def fuzz_programs(count, seed, shapes=SHAPES):
    """``count`` programs ``fuzz<i>``: the :func:`base_programs` in turn (``meta["base"]``
    is the index), bitstreams damaged by :func:`mutate` (seeded)."""
    return damaged_programs(base_programs(seed, shapes), count, seed)


def damaged_programs(bases, count, seed, prefix="fuzz"):
    """``count`` programs ``<prefix><i>``: the undamaged ``bases`` (one machine) in turn
    (``meta["base"]`` is the index), bitstreams damaged by :func:`mutate` (seeded)."""
    rng = random.Random(seed)
    machine = bases[0].machine
    layouts = FunctionalMachine(machine).array.layouts
    field_leaves = {kind: list(leaves(data.Layout.cast(layout)))
                    for kind, layout in layouts.items()}
    geometry = Geometry(machine.rows, machine.cols, machine.lanes)
    programs = []
    for index in range(count):
        base = bases[index % len(bases)]
        programs.append(Program(
            name=f"{prefix}{index}", machine=base.machine,
            bitstream=mutate(rng, base.bitstream, field_leaves, geometry),
            bitstream_address=base.bitstream_address, inputs=dict(base.inputs),
            outputs=dict(base.outputs), execute=list(base.execute),
            meta={**base.meta, "base": index % len(bases)}))
    return programs


# -- the fuzzed kernels of every family -----------------------------------------------------

#: The 2x2 PCU/PMU machine of :data:`GEOMETRY` (two AGCUs): the GEMM campaign's.
SMALL_MACHINE = Machine(GEOMETRY.rows, GEOMETRY.cols, GEOMETRY.lanes, pmu_bytes=16384)
#: The default 4x4 machine with four AGCUs: what the fused attention and MLP kernels need
#: (``KERNELS["attention"].machine``; the Verilator build of the attention tests).
KERNEL_MACHINE = Machine(**KERNELS["attention"].machine)


@dataclass(frozen=True)
class FuzzTarget:
    """What one campaign damages: kernel ``kernel`` (a :data:`KERNELS` name) compiled for
    ``machine`` at each shape of ``shapes`` (keyword dicts), undamaged inputs of the
    seed; ``family``: the kernel family object its programs belong to (checked)."""
    name: str
    family: object
    kernel: str
    machine: Machine
    shapes: tuple = field(default_factory=tuple)

    def bases(self, seed):
        """The undamaged programs (inputs of ``seed + index`` packed)."""
        kernel = KERNELS[self.kernel]
        programs = []
        for index, shape in enumerate(self.shapes):
            program, _ = kernel.random_program(self.machine, seed + index, **shape)
            if program.meta["group"] != self.family.name:
                raise ValueError(f"{self.name}: {program.name} is of family "
                                 f"{program.meta['group']}, not {self.family.name}")
            programs.append(program)
        return programs

    def programs(self, count, seed):
        """``count`` damaged programs ``<name><i>`` (:func:`damaged_programs`)."""
        return damaged_programs(self.bases(seed), count, seed, prefix=self.name)


#: Every fuzzed kernel: each family's kernels at small shapes (GEMM and linear-relu on
#: the 2x2 machine, the fused row, MLP and attention kernels on the 4x4 one).
TARGETS = (
    FuzzTarget("gemm", MATMUL, "gemm", SMALL_MACHINE,
               tuple(dict(m=m, n=n, k=k) for m, n, k in SHAPES)),
    FuzzTarget("linear_relu", MATMUL, "linear_relu", SMALL_MACHINE,
               (dict(m=4, n=4, k=8), dict(m=5, n=6, k=9))),
    FuzzTarget("softmax", ROWS, "softmax", KERNEL_MACHINE,
               (dict(m=3, n=16), dict(m=2, n=32))),
    FuzzTarget("mlp", MLP, "mlp", KERNEL_MACHINE, (dict(m=2, d=16, f=32),)),
    FuzzTarget("attention_decode", ATTENTION, "attention", KERNEL_MACHINE,
               (dict(seq=8, dim=16, heads=2, kv_heads=1),
                dict(seq=13, dim=16, heads=1, kv_heads=1))),
    FuzzTarget("attention_prefill", ATTENTION, "attention", KERNEL_MACHINE,
               (dict(mode="prefill", seq=8, dim=16, heads=1, kv_heads=1),
                dict(mode="prefill", seq=6, dim=16, heads=2, kv_heads=1, causal=True))),
)


def select_targets(name, families):
    """The :data:`TARGETS` a ``--family`` choice names: ``"all"``, a target's own name, or
    a registered family's name (``families``: :data:`rdu.compiler.families.FAMILIES`;
    the targets whose family is that object)."""
    chosen = [target for target in TARGETS if name in ("all", target.name)]
    for family in families:
        if family.name == name:
            chosen = [target for target in TARGETS if target.family is family]
    return chosen


def model_outcome(program, max_items=200_000, windows=False):
    """``(outcome, outputs or message)`` of ``program`` on a fresh functional model;
    ``windows``: confined to its manifest's memory windows (as ``HostDriver(windows=True)``
    confines the RTL's launch)."""
    try:
        outputs, _ = FunctionalMachine(program.machine, max_items=max_items).run_program(
            program, windows=True if windows else None)
    except LoaderError as error:
        return "loader", str(error)
    except CommandError as error:
        return "agcu_error", str(error)
    except UnitError as error:
        return "unit_error", str(error)
    except ModelDeadlock as error:
        return "deadlock", str(error)
    except ModelError as error:
        return ("no_end" if "max_items" in str(error) else "other"), str(error)
    except BitstreamError as error:
        return "loader", str(error)
    return "outputs", {name: np.asarray(words, np.uint32) for name, words in outputs.items()}


_RTL_PATTERNS = (
    ("loader", r": bitstream rejected by the configuration loader: "),
    ("hw_watchdog", r": hardware watchdog: "),
    ("host_watchdog", r": watchdog: (AGCUs? [\d, ]+ still busy|the array still moving)"),
    ("agcu_error", r": (program load on )?AGCU \d+ ended "),
    ("unit_error", r": (PCU|PMU)\(\d+,\d+\) error "),
)


#: RTL outcomes that end a damaged configuration acceptably (besides equal outputs)
STOPS = ("loader", "unit_error", "agcu_error", "hw_watchdog", "host_watchdog")
#: Acceptable verdicts of :func:`verdict` / :func:`run_rtl`
ACCEPTED = ("equal", "equal on fresh SRAM", "stop")


def verdict(program, model, result):
    """How an RTL ``result`` of :func:`run_cases` compares with the model's
    ``(outcome, outputs or message)``: ``"equal"`` (both outputs, equal), ``"stop"``
    (the RTL ended in an error status or a watchdog stop), ``"DIFFERENT"`` (both
    outputs, different), ``"OUTPUTS, MODEL STOPPED"``, ``"OTHER"``."""
    outcome, detail = model
    if result["outcome"] == "outputs":
        if outcome != "outputs":
            return "OUTPUTS, MODEL STOPPED"
        same = all(np.array_equal(np.asarray(result["outputs"][name], np.uint32), detail[name])
                   for name in program.outputs)
        return "equal" if same else "DIFFERENT"
    return "stop" if result["outcome"] in STOPS else "OTHER"


def run_rtl(built, programs, models, work_dir, *, seed, perf_counters, faults=None,
            native=False, timeout=6000, recover="reset", windows=False):
    """Run ``programs`` in one Verilator simulation (:func:`run_cases`) and compare each
    with its model outcome (``models``). A case whose outputs differ is run again alone
    in a fresh simulation: the PMU SRAM is not cleared by reset, and a damaged read
    pattern that reads words this program never wrote sees the previous case's data
    where the model (a fresh machine) sees zeroes; equal outputs then give ``"equal on
    fresh SRAM"``. ``native``: on the native runner (:mod:`rdu.sim.native`; no
    ``faults``) instead of cocotb; ``timeout``: the host's watchdog of each launch in
    cycles; ``recover``, ``windows``: :func:`run_cases`'s. Returns ``(results, verdicts,
    stats)``."""
    from pathlib import Path

    from rdu.sim.native import run_native
    from rdu.sim.runner import run_verilator
    run = run_native if native else run_verilator
    work_dir = Path(work_dir)
    dirs = [str(program.save(work_dir / program.name)) for program in programs]
    stats = run(built, run_cases, work_dir / "run", seed=seed, watchdog=10**9,
                program_dirs=dirs, perf_counters=perf_counters, faults=faults,
                case_timeout=timeout, recover=recover, windows=windows)
    results = stats.result
    verdicts = []
    for index, (program, model, result) in enumerate(zip(programs, models, results,
                                                         strict=True)):
        found = verdict(program, model, result) if model is not None else None
        if found == "DIFFERENT":
            alone = run(built, run_cases, work_dir / f"alone_{program.name}", seed=seed,
                        watchdog=10**9, program_dirs=[dirs[index]],
                        perf_counters=perf_counters, case_timeout=timeout,
                        windows=windows).result[0]
            if verdict(program, model, alone) == "equal":
                found = "equal on fresh SRAM"
        verdicts.append(found)
    return results, verdicts, stats


def rtl_outcome(message):
    """The outcome name of a :class:`RunError` message of the host driver (a watchdog
    stop whose message names a unit's error status counts as that unit error)."""
    if re.search(r"watchdog: .*; (PCU|PMU)\(\d+,\d+\) error ", message):
        return "unit_error"
    for outcome, pattern in _RTL_PATTERNS:
        if re.search(pattern, message):
            return outcome
    return "other"


async def run_cases(bench, program_dirs, *, timeout=6000, watchdog_cycles=1500,
                    faults=None, perf_counters=None, load_timeout=20_000, case_timeout=None,
                    recover="reset", windows=False):
    """Bench body: run the saved programs one after the other on one system, each from a
    clean machine (memory zeroed, system reset after every case) and catch each
    :class:`RunError`. ``faults`` is ``None`` or one fault specification (or ``None``)
    per program; ``case_timeout`` (when given) replaces ``timeout`` (the runners take
    ``timeout`` for themselves). ``recover="abort"``: no reset after a case unless the
    host driver's abort left the machine unsettled (``"reset": True`` then). Returns
    one ``{"outcome", "message"}`` or ``{"outcome": "outputs", "outputs", "cycles"}``
    per program. ``windows``: each launch confined to its manifest's memory windows
    (``HostDriver(windows=True)``)."""
    if recover not in ("reset", "abort"):
        raise ValueError(f"recover must be 'reset' or 'abort', not {recover!r}")
    timeout = case_timeout or timeout
    programs = [Program.load(directory) for directory in program_dirs]
    driver = HostDriver(bench, programs[0].machine, perf_counters=perf_counters,
                        windows=windows)
    results = []
    for index, program in enumerate(programs):
        driver.mem.clear()
        spec = faults[index] if faults else None
        driver.mem.faults = FaultInjector(spec) if spec else None
        try:
            launch = await driver.run(program, timeout=timeout, load_timeout=load_timeout,
                                      watchdog_cycles=watchdog_cycles)
            results.append({"outcome": "outputs", "outputs": launch["outputs"],
                            "cycles": launch["cycles"]})
        except RunError as error:
            message = str(error)
            results.append({"outcome": rtl_outcome(message), "message": message})
        if recover == "abort" and "aborted: " not in results[-1].get("message", ""):
            # a settled machine still holds the words a damaged bitstream configured
            # into units the next one does not configure (config_clear leaves them,
            # and the model starts each case fresh): the flush clears them
            await driver.abort()
        if recover == "reset" or await driver.unsettled():
            results[-1]["reset"] = recover == "abort"
            await driver.reset()
    return results

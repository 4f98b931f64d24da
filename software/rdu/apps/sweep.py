"""Design-space sweeps: many kernels, shapes, machines, tiers and seeds in one command.

A sweep is a grid (:class:`Grid`: from a TOML file, :func:`load_grid`, or the options of
``rdu sweep``) expanded into :class:`Point` s: kernel x shape x machine x tier x seed.
Each point is compiled, run and checked against numpy by the same path as ``rdu run``
(:func:`rdu.runtime.run_kernel`) in :func:`run_point`, which returns one row of the
results table (:func:`columns`): the point, its status, its one-line error, and the
measured figures (cycles, configuration cycles, utilisation, HBM bytes and share of the
HBM peak, the roofline's bound, what binds and the share of it achieved
(:mod:`rdu.roofline`), simulation and compile time), with a reference to its program
file (manifest and bitstream, readable with ``rdu inspect``).

:func:`run_sweep` runs the points not yet in the table as Ray tasks (one task per point,
with its own seed and resource request): on a local Ray started for the sweep (the
default) or on a cluster (``address``). Ray is imported only here, only when a sweep
runs: ``rdu run`` and ``rdu compile`` never need it. Rows are appended to a CSV table by
the driver as the tasks finish, one line each, flushed: the table is the sweep's state,
so a sweep run again skips the points already recorded (resume), and a point whose
worker died is retried by Ray and recorded once. Verilator builds are keyed by the
machine (:func:`rdu.sim.verilator.build`'s cache and its lock file): one build task per
machine of the RTL points runs first and those points start when it has ended (other
points use the CPUs meanwhile); a node that gets such a point without the build makes
it under the cache's lock, so each node builds each configuration once.

Statuses: ``ok`` (result checked), ``wrong`` (the result differs from numpy),
``compile_error`` (the compiler refused the point: the kernel does not fit that machine,
an answer of the design space) and ``run_error`` (the run failed, or the worker did).
"""

import csv
import hashlib
import io
import itertools
import json
import os
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import hdl
from hdl.system import RDUSystem

from ..frontend.kernels import KERNELS, get_kernel
from ..machine import MACHINE_OPTIONS, Machine
from ..runtime import BACKENDS, SIMULATORS, roofline, run_kernel
from ..sim.native import build_native
from ..sim.verilator import build

__all__ = ["Point", "Grid", "GridError", "load_grid", "run_point", "run_sweep",
           "read_table", "Table", "columns", "FIGURES", "STATUSES", "SweepError", "summarize",
           "compare_tables", "VOLATILE"]

STATUSES = ("ok", "wrong", "compile_error", "run_error")


class GridError(ValueError):
    """A grid that cannot be expanded (one line: which key, what is wrong)."""


class SweepError(RuntimeError):
    """A sweep that cannot run (no Ray, a cluster that cannot be reached...)."""


#: The tiers whose points wait for the Verilator build of their machine's system (one
#: build task per machine; it also links the native runner when a point of that machine
#: needs it).
RTL_TIERS = tuple(name for name, backend in BACKENDS.items()
                  if backend.timed and backend.design is RDUSystem)


def shape_params():
    """Every kernel shape parameter (table columns), in a fixed order."""
    return sorted({p for kernel in KERNELS.values() for p in kernel.params})


# -- points ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Point:
    """One run of a sweep. ``params``: the kernel's shape as ``((name, value), ...)``;
    ``machine``: every machine option (:data:`rdu.machine.MACHINE_OPTIONS`, in their
    units: ``pmu_kib``...) as ``((option, value), ...)``."""
    kernel: str
    params: tuple
    machine: tuple
    tier: str
    seed: int

    @property
    def key(self):
        """A stable identifier of the point (the table's ``point`` column)."""
        text = json.dumps([self.kernel, list(self.params), list(self.machine), self.tier,
                           self.seed])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def build_machine(self):
        options = MACHINE_OPTIONS
        return Machine(**{options[name][0]: value * options[name][1]
                          for name, value in self.machine})

    def label(self):
        shape = " ".join(f"{name.upper()}={value}" for name, value in self.params)
        machine = dict(self.machine)
        return (f"{self.kernel} {shape} on {machine['rows']}x{machine['cols']} "
                f"lanes={machine['lanes']} pmu={machine['pmu_kib']}KiB "
                f"agcus={machine['agcus']} ({self.tier}, seed {self.seed})")

    def columns(self):
        """The identity columns of this point's row."""
        row = {"point": self.key, "kernel": self.kernel}
        params = dict(self.params)
        row.update({name: params.get(name) for name in shape_params()})
        row.update(dict(self.machine))
        row.update({"tier": self.tier, "seed": self.seed})
        return row

    def to_json(self):
        return {"kernel": self.kernel, "params": dict(self.params),
                "machine": dict(self.machine), "tier": self.tier, "seed": self.seed}

    @classmethod
    def from_json(cls, data):
        return cls(data["kernel"], tuple(data["params"].items()),
                   tuple(data["machine"].items()), data["tier"], data["seed"])


@dataclass
class Grid:
    """kernels x shapes x machines x tiers x seeds.

    ``shapes``: per kernel, a list of ``{param: value}``; ``machine``: per machine
    option, a list of values (an option left out keeps the default machine's value):
    the machines are the product of those lists, unless ``machines`` lists them one by
    one (each a ``{option: value}``, the same defaults)."""
    kernels: list
    shapes: dict
    machine: dict = field(default_factory=dict)
    tiers: list = field(default_factory=lambda: ["model"])
    seeds: list = field(default_factory=lambda: [1])
    machine_list: list = None

    def machines(self):
        reference = Machine()
        options = MACHINE_OPTIONS
        defaults = {name: getattr(reference, field_) // scale
                    for name, (field_, scale, _) in options.items()}
        if self.machine_list is not None:
            return [tuple({**defaults, **chosen}.items()) for chosen in self.machine_list]
        values = [self.machine.get(name) or [defaults[name]] for name in options]
        return [tuple(zip(options, combination, strict=True))
                for combination in itertools.product(*values)]

    def points(self):
        """Every point, kernel-major (a kernel's shapes, then machines, tiers, seeds)."""
        machines = self.machines()
        return [Point(kernel, tuple(shape.items()), machine, tier, seed)
                for kernel in self.kernels for shape in self.shapes[kernel]
                for machine in machines for tier in self.tiers for seed in self.seeds]


def _int_list(value, where):
    values = value if isinstance(value, list) else [value]
    for item in values:
        if not isinstance(item, int) or isinstance(item, bool) or item < 1:
            raise GridError(f"{where}: expected positive integers, not {item!r}")
    if not values:
        raise GridError(f"{where}: an empty list")
    return list(dict.fromkeys(values))


def _shapes(kernel, spec, where):
    """A kernel's shapes from ``{param: [values]}`` (their product) or a list of
    ``{param: value}`` tables."""
    params = kernel.params
    if isinstance(spec, list):
        shapes = []
        for index, item in enumerate(spec):
            if not isinstance(item, dict):
                raise GridError(f"{where}[{index}]: expected a table of "
                                f"{', '.join(params)}, not {item!r}")
            extra = sorted(set(item) - set(params))
            missing = [p for p in params if p not in item]
            if extra or missing:
                raise GridError(f"{where}[{index}]: {kernel.name} takes "
                                f"{', '.join(params)}" + (f"; unknown {extra[0]!r}" if extra
                                                          else f"; missing {missing[0]!r}"))
            shapes.append({p: _int_list(item[p], f"{where}[{index}].{p}")[0]
                           for p in params})
        return shapes
    if not isinstance(spec, dict):
        raise GridError(f"{where}: expected a table or a list of tables, not {spec!r}")
    missing = [p for p in params if p not in spec]
    if missing:
        raise GridError(f"{where}: no values for {missing[0]!r} ({kernel.name} takes "
                        f"{', '.join(params)})")
    lists = [_int_list(spec[p], f"{where}.{p}") for p in params]
    return [dict(zip(params, values, strict=True)) for values in itertools.product(*lists)]


def make_grid(data, where="grid"):
    """A :class:`Grid` from a dict of the TOML form (see ``docs/sweep.md``)::

        kernels = ["gemm", "softmax"]
        tiers = ["model"]
        seeds = [1, 2]
        [shape]              # product over each kernel's own parameters
        m = [16, 64]
        n = [16, 64]
        k = [16, 64]
        [shape.softmax]      # a kernel's own entry replaces [shape] for it
        m = [4, 8]
        n = [32]
        [machine]            # product; an option left out: the default machine's
        rows = [2, 4]
        lanes = [4, 8]

    or, instead of ``[machine]``, a list: ``machines = [{rows = 2, cols = 2}, {}]``.
    """
    known = {"kernels", "shape", "machine", "machines", "tiers", "seeds"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GridError(f"{where}: unknown key {unknown[0]!r} (known: "
                        f"{', '.join(sorted(known))})")
    kernels_ = KERNELS
    names = data.get("kernels")
    if not names:
        raise GridError(f"{where}: no kernels (known: {', '.join(sorted(kernels_))})")
    names = names if isinstance(names, list) else [names]
    for name in names:
        if name not in kernels_:
            raise GridError(f"{where}: unknown kernel {name!r} (known: "
                            f"{', '.join(sorted(kernels_))})")
    names = list(dict.fromkeys(names))
    shape = data.get("shape", {})
    if not isinstance(shape, dict):
        raise GridError(f"{where}: shape must be a table, not {shape!r}")
    common = {key: value for key, value in shape.items() if key not in kernels_}
    params = set(shape_params())
    for key in common:
        if key not in params:
            raise GridError(f"{where}: shape.{key} is neither a shape parameter "
                            f"({', '.join(sorted(params))}) nor a kernel")
    shapes = {}
    for name in names:
        kernel = kernels_[name]
        if name in shape:
            shapes[name] = _shapes(kernel, shape[name], f"{where}: shape.{name}")
        else:
            shapes[name] = _shapes(kernel, {p: v for p, v in common.items()
                                            if p in kernel.params}, f"{where}: shape")
    machine = data.get("machine", {})
    if not isinstance(machine, dict):
        raise GridError(f"{where}: machine must be a table, not {machine!r}")
    options = MACHINE_OPTIONS
    for key in machine:
        if key not in options:
            raise GridError(f"{where}: unknown machine option {key!r} (known: "
                            f"{', '.join(options)})")
    machine = {key: _int_list(value, f"{where}: machine.{key}")
               for key, value in machine.items()}
    machine_list = data.get("machines")
    if machine_list is not None:
        if data.get("machine"):
            raise GridError(f"{where}: give machine (a product) or machines (a list), "
                            f"not both")
        if not isinstance(machine_list, list) or not machine_list:
            raise GridError(f"{where}: machines must be a list of tables")
        for index, chosen in enumerate(machine_list):
            if not isinstance(chosen, dict):
                raise GridError(f"{where}: machines[{index}] is not a table")
            for key, value in chosen.items():
                if key not in options:
                    raise GridError(f"{where}: machines[{index}]: unknown machine option "
                                    f"{key!r} (known: {', '.join(options)})")
                if isinstance(value, list) or _int_list(value, f"{where}: machines"
                                                               f"[{index}].{key}") != [value]:
                    raise GridError(f"{where}: machines[{index}].{key}: one integer, "
                                    f"not {value!r}")
    tiers = data.get("tiers", ["model"])
    tiers = tiers if isinstance(tiers, list) else [tiers]
    if not tiers:
        raise GridError(f"{where}: tiers is an empty list")
    for tier in tiers:
        if tier not in SIMULATORS:
            raise GridError(f"{where}: unknown tier {tier!r} (known: "
                            f"{', '.join(SIMULATORS)})")
    seeds = data.get("seeds", [1])
    seeds = seeds if isinstance(seeds, list) else [seeds]
    if not seeds:
        raise GridError(f"{where}: seeds is an empty list")
    for seed in seeds:
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise GridError(f"{where}: seeds must be integers >= 0, not {seed!r}")
    return Grid(names, shapes, machine, list(dict.fromkeys(tiers)),
                list(dict.fromkeys(seeds)), machine_list)


def load_grid(path, overrides=None):
    """The grid of TOML file ``path`` (``None``: an empty one), with ``overrides``
    (``{"kernels": [...], "shape": {...}, "machine": {...}, ...}``, from options)
    replacing its entries key by key (tables merged; ``machine`` options replace the
    file's ``machines`` list)."""
    data = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise GridError(f"{path}: no such file") from None
        except tomllib.TOMLDecodeError as error:
            raise GridError(f"{path}: not valid TOML ({error})") from None
    for key, value in (overrides or {}).items():
        if key == "machine":
            data.pop("machines", None)        # options replace the file's machine list
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return make_grid(data, str(path) if path else "grid")


# -- one point ---------------------------------------------------------------------------

#: The measured columns of a row, in table order (after the point's own columns).
FIGURES = ("ok", "cycles", "config_cycles", "utilization", "macs", "peak_macs_per_cycle",
           "hbm_bytes", "hbm_peak_share", "bound_cycles", "binding", "roofline_share",
           "max_abs_err", "pcus_used", "bitstream_words",
           "compile_seconds", "sim_seconds", "sim_cycles_per_second",
           "verilator_build_seconds", "switch_vector_stall_cycles",
           "switch_scalar_stall_cycles", "switch_control_stall_cycles",
           "pmu_read_stall_cycles", "wall_seconds")


def columns():
    """The table's columns, in order: the point (its key, kernel, every shape parameter
    of the registry, every machine option, tier, seed), status, error, :data:`FIGURES`,
    node, program file, finish time."""
    options = list(MACHINE_OPTIONS)
    return ("point", "kernel", *shape_params(), *options, "tier", "seed", "status",
            "error", *FIGURES, "node", "program", "finished")


def _one_line(error):
    text = str(error).strip()
    first = text.splitlines()[0] if text else type(error).__name__
    return f"{type(error).__name__}: {first}"


def run_point(point, out_dir, *, timeout=None, node=None, keep_runs=False):
    """Compile, run and check ``point``; return its row (a dict over :func:`columns`).

    Never raises for a failure of the point itself: a compile or run failure is a row
    with its status and one-line error. ``out_dir``: where the program file
    (``programs/<point>.rdu``) and, for the RTL, the run's files (``runs/<point>``,
    removed after a clean run unless ``keep_runs``) go. ``timeout``: the RTL watchdog
    in cycles (default: the runtime's estimate)."""
    start = time.perf_counter()
    out_dir = Path(out_dir).resolve()
    row = dict.fromkeys(columns())
    row.update(point.columns())
    row["node"] = node
    try:
        kernel = get_kernel(point.kernel)
        machine = point.build_machine()
        compile_start = time.perf_counter()
        program = kernel.compile(machine, **dict(point.params))
        row["compile_seconds"] = round(time.perf_counter() - compile_start, 3)
        bound = roofline([program])              # the program's roofline, run or not
    except Exception as error:          # noqa: BLE001 - recorded, the sweep goes on
        row.update(status="compile_error", error=_one_line(error))
        return _finish(row, start)
    row["bitstream_words"] = len(program.bitstream)
    row["pcus_used"] = program.meta.get("pcus")
    row.update(bound_cycles=bound.bound_cycles, binding=bound.binding)
    programs = out_dir / "programs"
    programs.mkdir(parents=True, exist_ok=True)
    path = programs / f"{point.key}.rdu"
    program.write(path)
    row["program"] = str(path)
    run_dir = out_dir / "runs" / point.key
    try:
        inputs = kernel.random_inputs(program, point.seed)
        figures, _, _ = run_kernel(kernel, program, inputs, point.tier, seed=point.seed,
                                   work_dir=run_dir, timeout=timeout)
    except Exception as error:          # noqa: BLE001
        row.update(status="run_error", error=_one_line(error))
        return _finish(row, start)
    row.update({name: figures[name] for name in FIGURES if name in figures})
    row["roofline_share"] = figures["roofline"]["share"]
    if figures["ok"]:
        row["status"] = "ok"
        if not keep_runs:
            shutil.rmtree(run_dir, ignore_errors=True)
    else:
        row.update(status="wrong", error=f"{', '.join(kernel.outputs)} differs from numpy "
                                         f"(max |err| {figures['max_abs_err']:.3g})")
    return _finish(row, start)


def _finish(row, start):
    row["wall_seconds"] = round(time.perf_counter() - start, 3)
    row["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return row


# -- the table ---------------------------------------------------------------------------

class Table:
    """The CSV results table at ``path``: one row per point, appended as points finish.

    A line cut short (the writer was killed mid-line) is dropped when the table is
    opened, so its point runs again. Written only by the sweep's driver."""

    def __init__(self, path):
        self.path = Path(path)
        self.rows = []
        if self.path.exists():
            raw = self.path.read_bytes()
            if raw and not raw.endswith(b"\n"):
                raw = raw[:raw.rfind(b"\n") + 1]
                self.path.write_bytes(raw)
            reader = csv.DictReader(io.StringIO(raw.decode()))
            if raw and reader.fieldnames != list(columns()):
                raise SweepError(f"{self.path}: not a table of this sweep's columns (header "
                                 f"{','.join((reader.fieldnames or [])[:4])}...)")
            self.rows = list(reader)

    def done(self):
        """``{point key: status}`` of every recorded point."""
        return {row["point"]: row["status"] for row in self.rows}

    def drop(self, keys):
        """Remove the rows of ``keys`` (to run those points again)."""
        keys = set(keys)
        self.rows = [row for row in self.rows if row["point"] not in keys]
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        with open(tmp, "w", newline="") as stream:
            writer = csv.DictWriter(stream, columns())
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(tmp, self.path)

    def append(self, row):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists() or self.path.stat().st_size == 0
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, columns())
        if new:
            writer.writeheader()
        writer.writerow({name: "" if row.get(name) is None else row[name]
                         for name in columns()})
        with open(self.path, "a", newline="") as stream:
            stream.write(buffer.getvalue())       # one write per row, then flushed
            stream.flush()
            os.fsync(stream.fileno())
        self.rows.append({name: "" if row.get(name) is None else str(row[name])
                          for name in columns()})


#: Columns kept as text (the others are numbers, ``ok`` a bool).
TEXT = ("point", "kernel", "tier", "status", "error", "node", "program", "finished",
        "binding")


def _typed(name, text):
    if text == "":
        return None
    if name in TEXT:
        return text
    if name == "ok":
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_table(path):
    """The rows of a results table as dicts of typed values (``None`` for empty)."""
    return [{name: _typed(name, value) for name, value in row.items()}
            for row in Table(path).rows]


#: Columns that differ between two runs of the same point by nature: times, where it ran.
VOLATILE = ("compile_seconds", "sim_seconds", "sim_cycles_per_second", "wall_seconds",
            "verilator_build_seconds", "node", "program", "finished")


def compare_tables(path, reference):
    """Compare the points two tables share, column by column (:data:`VOLATILE` ones
    aside). Returns ``{"common", "same", "only_here", "only_reference",
    "differences": [(point, column, here, reference), ...]}``."""
    here = {row["point"]: row for row in Table(path).rows}
    there = {row["point"]: row for row in Table(reference).rows}
    common = sorted(set(here) & set(there))
    differences = []
    for key in common:
        for name in columns():
            if name not in VOLATILE and here[key][name] != there[key][name]:
                differences.append((key, name, here[key][name], there[key][name]))
    return {"common": len(common), "same": len(common) - len({d[0] for d in differences}),
            "only_here": len(set(here) - set(there)),
            "only_reference": len(set(there) - set(here)), "differences": differences}


# -- the engine --------------------------------------------------------------------------

def _import_ray():
    try:
        import ray
    except ImportError:
        raise SweepError("rdu sweep needs Ray: pip install 'rdu-sim[sweep]' (or "
                         "pip install ray)") from None
    return ray


def _ray_point(point_json, out_dir, timeout, build=None):
    """The Ray task of one point (runs in a worker; records the node it ran on).
    ``build``: the result of the point's :func:`_ray_build` task (Ray starts the point
    only once that task has ended)."""
    import ray
    node = ray.get_runtime_context().get_node_id()[:8]
    return run_point(Point.from_json(point_json), out_dir, timeout=timeout, node=node)


def _ray_build(point_json, native=False):
    """The Ray task that builds (or finds in the cache) the Verilator model of a point's
    machine before the RTL points of that machine are started, so that they do not hold
    CPUs while one of them builds; with ``native`` it also links the native runner
    (:func:`rdu.sim.native.build_native`). Never raises: a machine the RTL cannot have
    is each point's own ``run_error``. Returns ``(node, seconds, error)``."""
    import ray
    node = ray.get_runtime_context().get_node_id()[:8]
    try:
        point = Point.from_json(point_json)
        built = build(RDUSystem, **point.build_machine().system_params())
        if native:
            build_native(built)
        return node, built.seconds, None
    except Exception as error:          # noqa: BLE001 - the points report it
        return node, 0.0, _one_line(error)


def _code_paths():
    """Where this process found ``rdu`` and ``hdl``: the workers import the same."""
    paths = [str(Path(__file__).resolve().parents[2]),        # the one holding rdu/
             str(Path(hdl.__file__).resolve().parent.parent)]
    return os.pathsep.join(dict.fromkeys(paths))


class Progress:
    """``[sweep] 120/200 done, 3 failed, 1m05s left`` on one updating line of stderr (a
    line every 10 s when stderr is not a terminal); "failed": any status but ``ok``."""

    def __init__(self, total, enabled=True, stream=None):
        self.total, self.enabled = total, enabled
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.perf_counter()
        self.shown = 0.0
        self.done = self.failed = 0

    def update(self, final=False):
        if not self.enabled:
            return
        now = time.perf_counter()
        if not final and not self.tty and now - self.shown < 10:
            return
        self.shown = now
        elapsed = now - self.start
        if self.done:
            left = elapsed / self.done * (self.total - self.done)
            eta = f"{int(left // 60)}m{int(left % 60):02d}s left"
        else:
            eta = "time left unknown"
        line = (f"[sweep] {self.done}/{self.total} done, {self.failed} failed, "
                + (f"{elapsed:.0f} s" if final else eta))
        if self.tty:
            print(f"\r{line:<79}", end="\n" if final else "", file=self.stream, flush=True)
        else:
            print(line, file=self.stream, flush=True)


def run_sweep(points, table_path, *, address=None, workers=None, cpus=1, resources=None,
              timeout=None, retry_failed=False, progress=True, max_retries=3):
    """Run the ``points`` not yet in the table at ``table_path`` as Ray tasks; append a
    row per point as it finishes. Returns :func:`summarize` of the points.

    Parameters
    ----------
    address : str, optional
        A Ray cluster to join (``ray start --head`` prints it); default: start Ray on
        this machine for the sweep (with ``workers`` CPUs, default all) and stop it at
        the end. When Ray is already initialised in this process, that one is used.
    cpus : float
        CPUs each point asks for (its Ray ``num_cpus``).
    resources : dict, optional
        Custom Ray resources each point asks for (e.g. ``{"rtl": 1}``: only nodes that
        offer them run points).
    timeout : int, optional
        RTL watchdog in cycles per point.
    retry_failed : bool
        Run again the points recorded with a status other than ``ok``.
    max_retries : int
        Times Ray runs a point again whose worker or node died.
    """
    table = Table(table_path)
    keys = {point.key for point in points}
    if retry_failed:
        table.drop([key for key, status in table.done().items()
                    if key in keys and status != "ok"])
    done = table.done()
    todo = [point for point in points if point.key not in done]
    start = time.perf_counter()
    if todo:
        _run_ray(todo, table, address=address, workers=workers, cpus=cpus,
                 resources=resources, timeout=timeout, progress=progress,
                 max_retries=max_retries)
    summary = summarize(points, table)
    summary.update(ran=len(todo), skipped=len(points) - len(todo),
                   wall_seconds=round(time.perf_counter() - start, 2))
    return summary


def _run_ray(todo, table, *, address, workers, cpus, resources, timeout, progress,
             max_retries):
    ray = _import_ray()
    started = False
    if not ray.is_initialized():
        runtime_env = {"env_vars": {"PYTHONPATH": _code_paths()}}
        options = dict(runtime_env=runtime_env, log_to_driver=False,
                       logging_level="WARNING")
        try:
            if address:
                ray.init(address=address, **options)
            else:
                ray.init(address="local", num_cpus=workers or os.cpu_count(),
                         include_dashboard=False,
                         object_store_memory=128 << 20, **options)
        except (ConnectionError, RuntimeError, ValueError) as error:
            raise SweepError(f"cannot start or join Ray"
                             f"{f' at {address}' if address else ''}: "
                             f"{_one_line(error)}") from None
        started = True
    try:
        task, build_task = ray.remote(_ray_point), ray.remote(_ray_build)
        out_dir = str(table.path.resolve().parent / f"{table.path.stem}.points")
        options = dict(num_cpus=cpus, resources=resources or {}, max_retries=max_retries,
                       retry_exceptions=False)
        builds = {}                      # machine -> the ref of its build task
        for point in todo:
            if point.tier in RTL_TIERS and point.machine not in builds:
                native = any(p.machine == point.machine and BACKENDS[p.tier].native
                             for p in todo)
                builds[point.machine] = build_task.options(
                    **options, name=f"rdu-build {point.label()}").remote(point.to_json(),
                                                                          native)
        pending = {}
        for point in todo:
            ref = task.options(**options, name=f"rdu-point {point.label()}").remote(
                point.to_json(), out_dir, timeout,
                builds.get(point.machine) if point.tier in RTL_TIERS else None)
            pending[ref] = point
        bar = Progress(len(todo), progress)
        bar.update()
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                point = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as error:
                    row = dict.fromkeys(columns())
                    row.update(point.columns(), status="run_error",
                               error=f"the worker failed: {_one_line(error)}")
                    _finish(row, time.perf_counter())
                table.append(row)
                bar.done += 1
                bar.failed += row["status"] != "ok"
            bar.update()
        bar.update(final=True)
    finally:
        if started:
            ray.shutdown()


def summarize(points, table):
    """Counts of the points' statuses in ``table`` (points not recorded: ``missing``)."""
    done = table.done()
    counts = dict.fromkeys(STATUSES, 0)
    missing = 0
    for point in points:
        status = done.get(point.key)
        if status is None:
            missing += 1
        else:
            counts[status] = counts.get(status, 0) + 1
    return {"points": len(points), **counts, "missing": missing, "table": str(table.path)}

"""Composition of Experts: experts at rest in DDR (or host memory), an HBM cache of them.

The scenario of ``docs/coe.md`` (issue #14, the SN40L paper's second claim):

* ``N`` experts, each one linear layer ``relu(x W_e + b_e)`` (the ``linear_relu``
  kernel, one program: the compiler does not fuse two matmuls, and a two-layer MLP
  would need a host-side repack of the FP32 column-tiled output between the layers);
  the weights ``W_e`` (K x N) and bias ``b_e`` are BF16, packed once into the
  program's B image and placed at rest in DDR (``source="ddr"``) or in the host
  window behind the host link (``source="host"``, the GPU-system baseline);
* a router on the host: ``argmax`` of the row mean of ``x @ W_router`` (float64 of the
  BF16 values; its cost is not counted: it is the same for both sources);
* a seeded request trace: request ``r`` draws a topic from a Zipf law over the experts
  and its tokens around that topic's router column, so the router's choice is skewed;
* HBM holds ``C`` cache slots with least-recently-used replacement. A miss copies the
  expert's image from its place at rest into the slot it gets, with AGCU ``COPY``
  commands (``agcus`` of them in parallel), then the expert runs: the one compiled
  program relocated to read its weights from that slot (:func:`rdu.relocate.
  relocate_image`, one program per slot).

Every request's output is checked against numpy (bit-exact against the hardware's
arithmetic, and within the budget of float64 of the same BF16 inputs).

Cycles: on the RTL (``sim="verilator"``) every copy and launch is measured. On the
functional model (no cycles) the trace's cycles are composed from per-primitive costs
(:class:`Costs`): measured on the RTL once by :func:`measure_costs` (cached as JSON),
else :func:`analytic_costs` from the memory models' parameters.
"""

import copy
import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sim_models.memory import ddr_model, hbm_model, host_link_model

from ..frontend.kernels import get_kernel
from ..layout import Image
from ..machine import Machine
from ..models import pcu_reference as pcu_model
from ..relocate import relocate_image
from ..runtime import Copy, Launch, Write, backend_named, run_schedule
from ..sim.verilator import project_root

__all__ = ["CoEConfig", "CoEError", "LRUCache", "lru_trace", "Scenario", "Costs",
           "analytic_costs", "measure_costs", "run_coe", "SMALL_MACHINE", "LINKS"]

PAGE = 4096
#: Alignment of an expert's place at rest and of a cache slot (one 16-beat burst).
SLOT_ALIGN = 512
#: The smallest machine the expert kernel fits: 1 systolic PCU + 1 epilogue PCU.
SMALL_MACHINE = Machine(2, 2, 4, pmu_bytes=16384)
#: Host-link bandwidths in bytes per cycle at the model's HBM scale (32 B/cycle =
#: 1.8 TB/s): PCIe Gen4 x16 (DGX A100, ~32 GB/s) and Gen5 x16 (DGX H100, ~64 GB/s).
LINKS = {"gen4": 32e9 / 1.8e12 * 32, "gen5": 64e9 / 1.8e12 * 32}


class CoEError(ValueError):
    """A scenario that cannot be built (one line: which option, why)."""


@dataclass
class CoEConfig:
    experts: int = 8
    requests: int = 30
    cache: int = 2
    source: str = "ddr"
    seed: int = 1
    m: int = 4            # tokens per request
    n: int = 32           # expert output features
    k: int = 64           # expert input features
    zipf: float = 1.2     # skew of the topics: P(rank i) ~ 1 / i**zipf
    agcus: int = 1        # AGCUs per copy
    link: str = "gen4"    # host link of the baseline

    def check(self, machine):
        for name in ("experts", "requests", "cache", "m", "n", "k", "agcus"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise CoEError(f"--{name} must be a positive integer, not {value!r}")
        if self.source not in ("ddr", "host"):
            raise CoEError(f"--source must be ddr or host, not {self.source!r}")
        if self.link not in LINKS:
            raise CoEError(f"--link must be one of {', '.join(LINKS)}, not {self.link!r}")
        if self.agcus > machine.agcus:
            raise CoEError(f"--agcus {self.agcus}: the machine has {machine.agcus} AGCUs")
        if not self.zipf >= 0:
            raise CoEError(f"--zipf must be >= 0, not {self.zipf}")


class LRUCache:
    """``slots`` HBM slots holding experts, least recently used evicted first."""

    def __init__(self, slots):
        self.slots = slots
        self.held = OrderedDict()            # expert -> slot, least recent first

    def access(self, expert):
        """``(hit, slot, evicted expert or None)`` of one use of ``expert``."""
        if expert in self.held:
            self.held.move_to_end(expert)
            return True, self.held[expert], None
        evicted = None
        if len(self.held) < self.slots:
            slot = len(self.held)
        else:
            evicted, slot = self.held.popitem(last=False)
        self.held[expert] = slot
        return False, slot, evicted


def lru_trace(choices, slots):
    """``[(hit, slot, evicted)]`` of an LRU cache of ``slots`` over ``choices``."""
    cache = LRUCache(slots)
    return [cache.access(expert) for expert in choices]


@dataclass
class Costs:
    """Cycles of the primitives a trace is composed of: a copy of one expert image from
    DDR and over the host link into HBM, one expert launch (program load + execute)."""
    copy_ddr: float
    copy_host: float
    kernel: float
    method: str = "analytic"

    def copy(self, source):
        return self.copy_ddr if source == "ddr" else self.copy_host


def _memory_overrides(config):
    return {"host": {"bytes_per_cycle": LINKS[config.link]}}


def analytic_costs(scenario):
    """Costs from the memory models' parameters (``sim_models.memory``): a copy is the
    source's first-access latency + bytes / the bottleneck bandwidth + the HBM write
    latency; a launch streams the bitstream and the B image (BF16: one vector beat per
    cycle into the array) plus an HBM latency each. An estimate: the RTL measures."""
    machine, config = scenario.machine, scenario.config
    beat = machine.beat_bytes
    hbm = hbm_model(beat_bytes=beat).timing
    ddr = ddr_model(beat_bytes=beat).timing
    host = host_link_model(beat_bytes=beat, bytes_per_cycle=LINKS[config.link]).timing
    port = beat * config.agcus                 # one beat per cycle per AGCU port
    nbytes = scenario.image_bytes

    def copy(timing):
        bandwidth = min(timing.channels * timing.bytes_per_cycle, port,
                        hbm.channels * hbm.bytes_per_cycle)
        return timing.miss_latency + nbytes / bandwidth + hbm.write_latency

    meta = scenario.program.meta
    load = 4 * len(scenario.program.bitstream) / beat + hbm.miss_latency
    # a systolic tile's k steps: one a column tile (row-grouped: one a row tile)
    steps = meta["k_pad"] * meta["col_tiles"] * meta.get("row_group", 1) * meta["passes"]
    execute = (steps + 2 * hbm.miss_latency
               + meta["m_pad"] * meta["n_pad"] * 4 / beat)
    return Costs(copy(ddr), copy(host), load + execute, "analytic")


def measure_costs(scenario, *, cache_dir=None, progress=False):
    """Costs measured on the RTL: one copy of an expert image from DDR and one from the
    host window into an HBM slot, each followed by a launch of the expert; cached in
    ``cache_dir`` (default ``build/coe``) by machine, shape, link and AGCUs."""
    config = scenario.config
    key = (f"{scenario.machine.describe()}-{config.m}x{config.n}x{config.k}-"
           f"{config.link}-a{config.agcus}").replace(" ", "").replace(",", "_")
    cache_dir = Path(cache_dir or project_root() / "build" / "coe")
    path = cache_dir / f"costs-{key}.json"
    if path.exists():
        return Costs(**json.loads(path.read_text()))
    slot = scenario.slot_address(0)
    steps = []
    for source in ("ddr", "host"):
        rest = scenario.rest_address(0, source)
        steps += [Write(rest, scenario.images[0]),
                  Copy(rest, slot, scenario.image_bytes, config.agcus),
                  Launch(scenario.launch_program(0, 0, scenario.requests[0]["x_image"]))]
    results = run_schedule(steps, "verilator", work_dir=cache_dir / f"measure-{key}",
                           memory=_memory_overrides(config), progress=progress)
    copies = [r.cycles for r in results if r.kind == "copy"]
    launches = [r.cycles for r in results if r.kind == "launch"]
    costs = Costs(copies[0], copies[1], max(launches), "rtl")
    cache_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(costs)))
    return costs


@dataclass
class Scenario:
    """A built CoE scenario: the program, the experts' images, the trace."""
    config: CoEConfig
    machine: Machine
    program: object = None
    images: list = field(default_factory=list)     # per expert: B image words
    weights: list = field(default_factory=list)    # per expert: (W words, bias words)
    requests: list = field(default_factory=list)   # per request: dict
    image_bytes: int = 0
    slot_bytes: int = 0
    slot_base: int = 0

    # -- placement ---------------------------------------------------------------------
    def rest_address(self, expert, source=None):
        region = self.machine.region(source or self.config.source)
        return region.base + expert * self.slot_bytes

    def slot_address(self, slot):
        return self.slot_base + slot * self.slot_bytes

    def footprint(self):
        """Experts each tier holds on this machine (HBM: the slots that fit beside the
        program's images and bitstream)."""
        hbm = self.machine.region("hbm")
        return {"expert_bytes": self.image_bytes, "slot_bytes": self.slot_bytes,
                "hbm_experts": (hbm.end - self.slot_base) // self.slot_bytes,
                "ddr_experts": self.machine.ddr_bytes // self.slot_bytes,
                "host_experts": self.machine.host_bytes // self.slot_bytes}

    def launch_program(self, slot, expert, x_image):
        program = self.slot_programs[slot]
        launch = _clone(program)
        launch.inputs["a"] = (program.inputs["a"][0], x_image)
        launch.name = f"expert{expert}_slot{slot}"
        return launch


def _clone(program):
    clone = copy.copy(program)
    clone.inputs = dict(program.inputs)
    return clone


def build(config, machine=None):
    """The scenario of ``config`` on ``machine`` (default :data:`SMALL_MACHINE`)."""
    machine = machine or SMALL_MACHINE
    config.check(machine)
    kernel = get_kernel("linear_relu")
    program = kernel.compile(machine, m=config.m, n=config.n, k=config.k)
    scenario = Scenario(config, machine, program)
    b_layout = Image.from_json(program.meta["images"]["b"])
    a_layout = Image.from_json(program.meta["images"]["a"])
    beat = machine.beat_bytes
    scenario.image_bytes = -(-b_layout.nbytes // beat) * beat
    scenario.slot_bytes = -(-scenario.image_bytes // SLOT_ALIGN) * SLOT_ALIGN
    reserved = program.bitstream_address + 4 * len(program.bitstream)
    scenario.slot_base = -(-reserved // PAGE) * PAGE
    hbm = machine.region("hbm")
    fits = (hbm.end - scenario.slot_base) // scenario.slot_bytes
    if config.cache > fits:
        raise CoEError(f"--cache {config.cache}: HBM holds {fits} slots of "
                       f"{scenario.slot_bytes} bytes beside the program")
    region = machine.region(config.source)
    if config.experts * scenario.slot_bytes > region.size:
        raise CoEError(f"--experts {config.experts}: {config.source.upper()} "
                       f"({region.size} bytes) holds {region.size // scenario.slot_bytes} "
                       f"experts of {scenario.slot_bytes} bytes")
    rng = np.random.default_rng(config.seed)
    words = b_layout.words
    padded = scenario.image_bytes // 4
    for _ in range(config.experts):
        w = pcu_model.bf16_words(rng.standard_normal((config.k, config.n)) / np.sqrt(config.k))
        bias = pcu_model.bf16_words(0.1 * rng.standard_normal(config.n))
        image = np.zeros(padded, np.uint32)
        image[:words] = b_layout.pack({"b": w, "bias": bias})
        scenario.weights.append((w, bias))
        scenario.images.append(image)
    # router and trace
    router = pcu_model.bf16_words(rng.standard_normal((config.k, config.experts)))
    scenario.router = router
    router_f = router.view(np.float32).astype(np.float64)
    ranks = np.arange(1, config.experts + 1, dtype=np.float64) ** -config.zipf
    popularity = rng.permutation(config.experts)       # topic of rank i
    for _ in range(config.requests):
        topic = int(popularity[rng.choice(config.experts, p=ranks / ranks.sum())])
        centre = router_f[:, topic] / np.linalg.norm(router_f[:, topic])
        x = pcu_model.bf16_words(rng.standard_normal((config.m, config.k)) * 0.3
                                 + 2.0 * centre)
        logits = (x.view(np.float32).astype(np.float64) @ router_f).mean(axis=0)
        scenario.requests.append({
            "topic": topic, "expert": int(np.argmax(logits)), "x": x,
            "x_image": a_layout.pack({"a": x})})
    scenario.slot_programs = [relocate_image(program, "b", scenario.slot_address(s))
                              for s in range(config.cache)]
    return scenario


def schedule(scenario):
    """``(steps, per-request records)``: the experts placed at rest (host writes), then
    per request an optional copy (a miss) and the expert's launch."""
    config = scenario.config
    steps = [Write(scenario.rest_address(e), image)
             for e, image in enumerate(scenario.images)]
    cache = LRUCache(config.cache)
    records = []
    for index, request in enumerate(scenario.requests):
        expert = request["expert"]
        hit, slot, evicted = cache.access(expert)
        if not hit:
            steps.append(Copy(scenario.rest_address(expert), scenario.slot_address(slot),
                              scenario.image_bytes, config.agcus))
        steps.append(Launch(scenario.launch_program(slot, expert, request["x_image"])))
        records.append({"request": index, "expert": expert, "hit": hit, "slot": slot,
                        "evicted": evicted})
    return steps, records


def check_request(scenario, request, outputs):
    """``(ok, max_abs_err)`` of one request's output words against numpy."""
    kernel = get_kernel("linear_relu")
    program = _clone(scenario.program)
    w, bias = scenario.weights[request["expert"]]
    inputs = {"a": request["x"], "b": w, "bias": bias}
    kernel.pack(program, inputs)
    return kernel.check(program, inputs, kernel.unpack(program, outputs))


def run_coe(config, sim="model", *, machine=None, costs=None, progress=False,
            work_dir=None):
    """Build, run and check the scenario; return the report (a dict)."""
    scenario = build(config, machine)
    steps, records = schedule(scenario)
    results = run_schedule(steps, sim, memory=_memory_overrides(config), progress=progress,
                           work_dir=work_dir)
    launches = [r for r in results if r.kind == "launch"]
    copies = [r for r in results if r.kind == "copy"]
    ok, worst = True, 0.0
    for record, request, launch in zip(records, scenario.requests, launches, strict=True):
        good, error = check_request(scenario, request, launch.launch.outputs)
        record["ok"] = bool(good)
        ok, worst = ok and good, max(worst, error)
    misses = sum(not r["hit"] for r in records)
    if backend_named(sim).timed:
        switch = sum(r.cycles for r in copies)
        kernel_cycles = sum(r.cycles for r in launches)
        method = "rtl"
    else:
        if costs is None:
            costs = analytic_costs(scenario)
        switch = misses * costs.copy(config.source)
        kernel_cycles = len(launches) * costs.kernel
        method = f"composed ({costs.method} primitive costs)"
    agree = sum(r["topic"] == r["expert"] for r in scenario.requests)
    return {
        "ok": bool(ok),
        "sim": sim,
        "experts": config.experts, "requests": config.requests, "cache": config.cache,
        "source": config.source, "link": config.link if config.source == "host" else None,
        "seed": config.seed, "expert_shape": f"x {config.m}x{config.k} @ W {config.k}x"
                                             f"{config.n} + bias, relu",
        "machine": scenario.machine.describe(),
        "cycles": int(round(switch + kernel_cycles)),
        "switch_cycles": int(round(switch)),
        "kernel_cycles": int(round(kernel_cycles)),
        "hits": config.requests - misses, "misses": misses,
        "hit_rate": round((config.requests - misses) / config.requests, 4),
        "cycle_method": method,
        "footprint": scenario.footprint(),
        "router_agreement": round(agree / config.requests, 4),
        "max_abs_err": worst,
        "trace": records,
    }

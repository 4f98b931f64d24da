"""The GEMM kernel: C = A B with A (M x K) and B (K x N) in BF16 in HBM, C in FP32.

Dataflow (``docs/compiler.md`` has the walkthrough):

* ``P`` PCUs (every PCU of the array, fewer when M is small) run in systolic mode; PCU
  ``p`` computes the ``lanes``-row block ``b(p)`` of every *pass* (``P * lanes`` rows
  of C), one ``lanes x lanes`` tile per column tile, ``K`` beats per tile;
* one AGCU streams the pass's rows of A (row-major) into the vector network, multicast
  to ``P`` PMUs; each PMU keeps its own ``lanes x K`` panel (the address predicate) and
  reads it back column by column (a transpose through its diagonal banks) once per
  column tile, into its PCU's ``vector_in0``; two buffers let the next pass's panel
  load while this pass computes;
* another AGCU streams B, column tile by column tile (``K`` rows of ``lanes`` values),
  multicast to every PCU's ``vector_in1``, once per pass: all PCUs work in lockstep;
* the PCUs' result rows are merged by the switches (a statically sequenced merge) into
  one stream per AGCU and stored; the merge order decides which PCU computes which
  row block, so each store is a plain affine pattern.

Tensors in HBM use layouts chosen by the compiler (the runtime packs and unpacks them):
A row-major ``(Mp, Kp)`` packed BF16; B packed by column tile ``(Np / lanes, Kp,
lanes)`` packed BF16 (the AGCUs' ``load_bf16`` mode expands them into the lanes' high
halves); C packed by column tile ``(Np / lanes, Mp, lanes)`` FP32. Padding (K to
``2 * lanes``, N to ``lanes``, M to the pass height) is zero.
"""

import functools
import random
from dataclasses import dataclass, replace

import numpy as np

from hdl.agcu import agcu_config_layout
from hdl.pcu import Mode, pcu_config_layout
from hdl.pmu import pmu_config_layout
from hdl.switch import Port, VectorOutput, switch_config_layout

from . import pcu_model
from .bitstream import Geometry, Record, UnitKind, write_bitstream
from .ir import AccessPattern, Kernel
from .machine import Machine
from .mapper import (
    DIRECTIONS,
    ArrayGeometry,
    MappingError,
    Placement,
    Site,
    route_kernel,
)
from .memory_map import HBM
from .program import Program
from .unitconfig import pack_config

__all__ = ["GemmPlan", "plan_gemm", "compile_gemm", "map_gemm", "pack_inputs",
           "unpack_output", "random_inputs", "exact_reference", "reference", "check_result",
           "encode_switches"]

WORD = 4
BF16 = 2
PAGE = 4096


def _pow2_at_least(value):
    return 1 << max(0, (value - 1).bit_length())


def _ceil(a, b):
    return -(-a // b)


@dataclass(frozen=True)
class GemmPlan:
    """Tiling of one GEMM on one array (all sizes in elements unless named otherwise)."""
    m: int
    n: int
    k: int
    lanes: int
    pcus: int               # PCUs used
    k_pad: int              # K padded to 2 * lanes (whole AXI beats of BF16)
    k_pitch: int            # PMU row pitch: a power of two >= k_pad (diagonal banks)
    col_tiles: int          # Np / lanes
    passes: int             # Mp / rows_per_pass
    buffers: int            # PMU buffers per panel (2: load overlaps compute)
    stages: int = 4

    @property
    def rows_per_pass(self):
        return self.pcus * self.lanes

    @property
    def m_pad(self):
        return self.passes * self.rows_per_pass

    @property
    def n_pad(self):
        return self.col_tiles * self.lanes

    @property
    def macs(self):
        return self.m * self.n * self.k

    @property
    def panel_words(self):
        return self.lanes * self.k_pitch


def plan_gemm(m, n, k, geometry=None, stages=4):
    """Choose the tiling; raise ``ValueError``/:class:`MappingError` (one line) when the
    shape is invalid or does not fit."""
    geometry = geometry or ArrayGeometry()
    for name, value in (("M", m), ("N", n), ("K", k)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"GEMM {name} must be a positive integer, not {value!r}")
    lanes = geometry.lanes
    available = geometry.capacity()["pcu"]
    if available == 0 or geometry.capacity()["pmu"] == 0:
        raise MappingError(f"GEMM needs at least one PCU and one PMU; the "
                           f"{geometry.rows}x{geometry.cols} array has "
                           f"{available} PCUs and {geometry.capacity()['pmu']} PMUs")
    pcus = min(available, geometry.capacity()["pmu"], _ceil(m, lanes))
    # K padded to 2 * lanes: one AXI beat of packed BF16 is two vector beats
    k_pad = _ceil(k, 2 * lanes) * 2 * lanes
    k_pitch = max(lanes, _pow2_at_least(k_pad))
    buffers = 2 if 2 * lanes * k_pitch <= geometry.pmu_words else 1
    if lanes * k_pitch > geometry.pmu_words:
        raise MappingError(
            f"GEMM K={k} does not fit: a {lanes}-row A panel needs {lanes * k_pitch} PMU "
            f"words (row pitch {k_pitch}), a PMU holds {geometry.pmu_words} "
            f"(K <= {geometry.pmu_words // lanes})")
    col_tiles = _ceil(n, lanes)
    passes = _ceil(m, pcus * lanes)
    limit = (1 << 16) - 1
    if k_pad > limit or col_tiles > limit or passes > limit:
        raise MappingError(f"GEMM {m}x{n}x{k}: a loop count exceeds the 16-bit counters "
                           f"(K beats {k_pad}, column tiles {col_tiles}, passes {passes})")
    return GemmPlan(m, n, k, lanes, pcus, k_pad, k_pitch, col_tiles, passes, buffers, stages)


def gemm_kernel(plan):
    """The IR of the plan: loads, panels, matmuls, merged stores."""
    lanes, pcus = plan.lanes, plan.pcus
    kernel = Kernel(f"gemm_{plan.m}x{plan.n}x{plan.k}")
    a = kernel.tensor("a", (plan.m_pad, plan.k_pad), "fp32")
    b = kernel.tensor("b", (plan.col_tiles, plan.k_pad, lanes), "fp32")
    c = kernel.tensor("c", (plan.col_tiles, plan.m_pad, lanes), "fp32")
    beats = plan.k_pad // lanes
    a_stream = kernel.load(a, AccessPattern(0, (beats, plan.rows_per_pass, plan.passes),
                                            (1, beats, beats * plan.rows_per_pass)),
                           name="load_a")
    b_stream = kernel.load(b, AccessPattern(0, (plan.k_pad, plan.col_tiles, plan.passes),
                                            (1, plan.k_pad, 0)), name="load_b")
    launch = kernel.output(kernel.nodes["load_b"], "control_out")
    results = []
    for p in range(pcus):
        panel = kernel.buffer(f"a_panel{p}", plan.panel_words, [a_stream],
                              buffers=plan.buffers)
        result = kernel.compute(f"matmul{p}", "matmul", [panel, b_stream])
        kernel.connect(launch, kernel.nodes[f"matmul{p}"], "control_in")
        results.append(result)
    groups = [results[g::2] for g in range(min(2, pcus))]
    for g, members in enumerate(groups):
        stream = members[0] if len(members) == 1 else kernel.merge(
            f"c_rows{g}", members, [lanes] * len(members))
        # the pattern is finalised after mapping (the merge order picks the rows)
        kernel.store(stream, c, AccessPattern(0, (1, 1, 1), (1, 1, 1)), name=f"store_c{g}")
    return kernel


#: Random paired placements tried per PCU count before using one PCU fewer.
PLACEMENT_TRIES = 1500


def _paired_placement(geometry, kernel, pcus, rng):
    """Each matmul on a random PCU with its A panel on a random adjacent PMU; loads and
    stores on random AGCU slots. None when the pairing runs out of PMUs."""
    placement = Placement()
    sites = geometry.sites("pcu")
    rng.shuffle(sites)
    free_pmus = {(site.row, site.col) for site in geometry.sites("pmu")}
    chosen = []
    for site in sites:
        if len(chosen) == pcus:
            break
        near = [(site.row + dr, site.col + dc) for dr, dc in DIRECTIONS.values()]
        near = [pos for pos in near if pos in free_pmus]
        if near:
            pos = rng.choice(near)
            free_pmus.discard(pos)
            chosen.append((site, Site("pmu", *pos)))
    if len(chosen) < pcus:
        return None
    for p, (pcu_site, pmu_site) in enumerate(chosen):
        placement.sites[f"matmul{p}"] = pcu_site
        placement.sites[f"a_panel{p}"] = pmu_site
    for slot, names in (("load", ["load_a", "load_b"]),
                        ("store", [n for n in ("store_c0", "store_c1") if n in kernel.nodes])):
        slots = [site for site in geometry.sites("agcu") if site.slot == slot]
        rng.shuffle(slots)
        for name, site in zip(names, slots, strict=False):
            placement.sites[name] = site
    return placement


@functools.lru_cache(maxsize=64)
def _search_placement(geometry, pcus, kernel_shape):
    """A routable placement for ``pcus`` matmuls (seeded: the same every time), or None.
    ``kernel_shape`` only keys the cache (the kernel's structure depends on ``pcus``)."""
    plan = kernel_shape
    kernel = gemm_kernel(plan)
    rng = random.Random(f"gemm-{geometry.rows}x{geometry.cols}-{pcus}")
    for _ in range(PLACEMENT_TRIES):
        placement = _paired_placement(geometry, kernel, pcus, rng)
        if placement is None:
            continue
        try:
            route_kernel(kernel, geometry, placement, attempts=40)
        except MappingError:
            continue
        return placement
    return None


def map_gemm(plan, geometry):
    """Place and route the GEMM with as many PCUs as the network can connect (trying
    ``plan.pcus`` first, then one fewer, ...); return ``(plan, kernel, mapping)``."""
    for pcus in range(plan.pcus, 0, -1):
        trial = replace(plan, pcus=pcus, passes=_ceil(plan.m, pcus * plan.lanes))
        structure = replace(trial, m=pcus * plan.lanes, n=plan.lanes, k=plan.lanes,
                            k_pad=plan.lanes, k_pitch=plan.lanes, col_tiles=1, passes=1)
        placement = _search_placement(geometry, pcus, structure)
        if placement is None:
            continue
        kernel = gemm_kernel(trial)
        return trial, kernel, route_kernel(kernel, geometry, placement, attempts=40)
    raise MappingError(f"GEMM {plan.m}x{plan.n}x{plan.k}: no routable placement on the "
                       f"{geometry.rows}x{geometry.cols} array, even with one PCU")


# -- encoding ---------------------------------------------------------------------------

#: The mapper's port names -> hdl.switch input indices (Port) and route codes (Source).
_IN_PORT = {port.name.lower(): port for port in Port}


def _out_index(port):
    """The switch output index of a mapper output port (``"local.vector_in1"`` is the
    PCU's second vector input; every other local port is output ``LOCAL0`` / ``LOCAL``)."""
    if port in _IN_PORT and port != "local":
        return int(_IN_PORT[port])
    return VectorOutput.LOCAL1 if port == "local.vector_in1" else VectorOutput.LOCAL0


def encode_switches(mapping):
    """Switch configurations (field dicts by grid position) of a mapping's routes."""
    layout = switch_config_layout()
    has_merge = "vector_merge" in dict(layout)
    geometry = mapping.geometry
    configs = {}
    for row in range(geometry.rows):
        for col in range(geometry.cols):
            outputs = {"vector": len(VectorOutput), "scalar": len(Port), "control": len(Port)}
            fields = {network: [0] * outs for network, outs in outputs.items()}
            if has_merge:
                for network, outs in outputs.items():
                    fields[f"{network}_merge"] = [[0] * len(Port) for _ in range(outs)]
            configs[row, col] = fields
    for route in mapping.routes:
        for switch, outs in route.hops.items():
            for out_port, in_port in outs.items():
                configs[switch][route.network][_out_index(out_port)] = _IN_PORT[in_port].source
        for switch, outs in route.merges.items():
            if not has_merge:
                raise MappingError(f"stream {route.stream!r} merges at switch {switch}, "
                                   f"but hdl.switch has no merge support")
            for out_port, counts in outs.items():
                entry = configs[switch][f"{route.network}_merge"][_out_index(out_port)]
                for in_port, count in counts.items():
                    if count > 255:
                        raise MappingError(f"merge {route.stream!r} takes {count} items "
                                           f"per turn at switch {switch}; at most 255")
                    entry[_IN_PORT[in_port]] = count
    return configs


def _agcu_index(geometry, site):
    side = "west" if site.col < 0 else "east"
    return geometry.agcu_rows.index((side, site.row))


def _pattern(base, counts, strides):
    return {"base": base, "count": list(counts), "stride": list(strides)}


_IDLE_PATTERN = {"base": 0, "count": [0, 0, 0], "stride": [0, 0, 0]}


def _machine_and_geometry(geometry, machine, stages, agcus):
    if machine is None:
        geometry = geometry or ArrayGeometry()
        machine = Machine(geometry.rows, geometry.cols, geometry.lanes, stages=stages,
                          pmu_bytes=geometry.pmu_words * WORD, agcus=agcus,
                          agcu_positions=tuple(tuple(p) for p in geometry.agcu_rows[:agcus]))
    elif geometry is None:
        geometry = ArrayGeometry(machine.rows, machine.cols, machine.lanes,
                                 pmu_words=machine.pmu_bytes // WORD,
                                 agcu_rows=tuple(machine.positions()))
    return geometry, machine


def compile_gemm(m, n, k, geometry=None, *, stages=4, agcus=2, machine=None):
    """Compile ``C = A B`` for ``machine`` (an :class:`rdu.machine.Machine`; or for the
    mapper's ``geometry`` with ``stages`` and ``agcus``); return a :class:`Program` (no
    images yet: :func:`pack_inputs` adds them)."""
    geometry, machine = _machine_and_geometry(geometry, machine, stages, agcus)
    stages, agcus = machine.stages, machine.agcus
    if not machine.compute:
        raise MappingError("GEMM needs PCUs: this machine has PMUs only")
    plan, kernel, mapping = map_gemm(plan_gemm(m, n, k, geometry, stages), geometry)
    lanes, beat = plan.lanes, plan.lanes * WORD
    sites = mapping.placement.sites

    # memory: A, B, C, then the bitstream, each on its own 4 KiB page
    a_bytes = plan.m_pad * plan.k_pad * BF16
    b_bytes = plan.col_tiles * plan.k_pad * lanes * BF16
    c_bytes = plan.col_tiles * plan.m_pad * beat
    a_addr = HBM.base
    b_addr = a_addr + _ceil(a_bytes, PAGE) * PAGE
    c_addr = b_addr + _ceil(b_bytes, PAGE) * PAGE
    bitstream_addr = c_addr + _ceil(c_bytes, PAGE) * PAGE
    hbm = machine.region("hbm")
    needed = bitstream_addr + PAGE * 4 - HBM.base
    if needed > hbm.size:
        raise MappingError(f"GEMM {m}x{n}x{k} needs {needed} bytes of HBM (A, B, C and the "
                           f"bitstream), the machine has {hbm.size}: raise --hbm-mib to at "
                           f"least {_ceil(needed, 1 << 20)}")

    # which row block each PCU computes: the merge order of its store
    block_of, store_rows = {}, {}
    next_block = 0
    route_by_stream = {route.stream: route for route in mapping.routes}
    for g in range(min(2, plan.pcus)):
        store = kernel.nodes[f"store_c{g}"]
        stream = store.inputs[0]
        if hasattr(stream, "inputs"):
            order = route_by_stream[stream.name].order
            producers = [stream.inputs[i].source.node for i in order]
        else:
            producers = [stream.source.node]
        store_rows[g] = (next_block * lanes, len(producers) * lanes)
        for name in producers:
            block_of[name] = next_block
            next_block += 1

    agcu_fields = {index: {"load_enable": 0, "store_enable": 0, "wait_done": 0, "load_bf16": 0,
                           "load": dict(_IDLE_PATTERN), "store": dict(_IDLE_PATTERN)}
                   for index in range(agcus)}
    beats = plan.k_pad // lanes
    rows = plan.rows_per_pass
    # A and B are packed BF16: the AGCUs expand each AXI beat into two vector beats
    load_a = agcu_fields[_agcu_index(geometry, sites["load_a"])]
    load_a.update(load_enable=1, load_bf16=1, load=_pattern(
        a_addr, (beats // 2, rows, plan.passes),
        (beat, plan.k_pad * BF16, rows * plan.k_pad * BF16)))
    load_b = agcu_fields[_agcu_index(geometry, sites["load_b"])]
    load_b.update(load_enable=1, load_bf16=1, load=_pattern(
        b_addr, (plan.k_pad // 2, plan.col_tiles, plan.passes),
        (beat, plan.k_pad * lanes * BF16, 0)))
    for g, (first_row, count) in store_rows.items():
        fields = agcu_fields[_agcu_index(geometry, sites[f"store_c{g}"])]
        fields.update(store_enable=1, store=_pattern(
            c_addr + first_row * beat, (count, plan.col_tiles, plan.passes),
            (beat, plan.m_pad * beat, rows * beat)))

    records = []
    pcu_layout = pcu_config_layout(lanes, stages)
    pmu_layout = pmu_config_layout()
    counters = [{"min": 0, "max": plan.k_pad, "stride": 1},
                {"min": 0, "max": plan.col_tiles, "stride": 1},
                {"min": 0, "max": plan.passes, "stride": 1}]
    units = {}
    for p in range(plan.pcus):
        block = block_of[f"matmul{p}"]
        pcu_site, pmu_site = sites[f"matmul{p}"], sites[f"a_panel{p}"]
        units[pcu_site.row, pcu_site.col] = (UnitKind.PCU, pack_config(
            pcu_layout, {"mode": Mode.SYSTOLIC, "counters": counters}))
        low = block * plan.panel_words
        units[pmu_site.row, pmu_site.col] = (UnitKind.PMU, pack_config(pmu_layout, {
            "write_enable": 1, "read_enable": 1, "predicate_enable": 1,
            "skew_shift": plan.k_pitch.bit_length() - 1,
            "buffers": plan.buffers, "read_repeat": 1, "read_passes": plan.passes,
            "buffer_words": plan.panel_words,
            "predicate_low": low, "predicate_high": low + plan.panel_words,
            "write": {"start": 0, "stride": [lanes, plan.k_pitch, 0],
                      "bound": [beats, rows, 1], "lane_stride": 1},
            "read": {"start": low, "stride": [1, 0, 0],
                     "bound": [plan.k_pad, plan.col_tiles, 1], "lane_stride": plan.k_pitch},
        }))
    switch_configs = encode_switches(mapping)
    switch_layout = switch_config_layout()
    for row in range(geometry.rows):
        for col in range(geometry.cols):
            kind = UnitKind[geometry.unit_at(row, col).upper()]
            layout = pcu_layout if kind == UnitKind.PCU else pmu_layout
            kind, words = units.get((row, col), (kind, pack_config(layout, {})))
            records.append(Record(kind, row, col, words))
            records.append(Record(UnitKind.SWITCH, row, col,
                                  pack_config(switch_layout, switch_configs[row, col])))
    agcu_layout = agcu_config_layout()
    for index, fields in agcu_fields.items():
        records.append(Record(UnitKind.AGCU, 0, index, pack_config(agcu_layout, fields)))
    bitstream = write_bitstream(Geometry(geometry.rows, geometry.cols, lanes), records)

    execute = sorted({_agcu_index(geometry, sites[name]) for name in sites
                      if name.startswith(("load_", "store_"))})
    meta = {
        "kernel": "gemm", "m": m, "n": n, "k": k, "lanes": lanes, "pcus": plan.pcus,
        "k_pad": plan.k_pad, "m_pad": plan.m_pad, "n_pad": plan.n_pad,
        "k_pitch": plan.k_pitch, "passes": plan.passes, "col_tiles": plan.col_tiles,
        "buffers": plan.buffers, "macs": plan.macs,
        "peak_macs_per_cycle": geometry.capacity()["pcu"] * lanes * lanes,
        "placement": {name: str(site) for name, site in sites.items()},
        "row_blocks": {name: block for name, block in block_of.items()},
        "mapping": mapping.report(),
    }
    tensors = {
        "a": {"role": "input", "dtype": "bf16", "shape": [m, k], "address": a_addr,
              "words": a_bytes // WORD,
              "layout": f"row-major ({plan.m_pad}, {plan.k_pad}) packed BF16, zero padded"},
        "b": {"role": "input", "dtype": "bf16", "shape": [k, n], "address": b_addr,
              "words": b_bytes // WORD,
              "layout": f"column tiles ({plan.col_tiles}, {plan.k_pad}, {lanes}) packed "
                        f"BF16, zero padded"},
        "c": {"role": "output", "dtype": "fp32", "shape": [m, n], "address": c_addr,
              "words": c_bytes // WORD,
              "layout": f"column tiles ({plan.col_tiles}, {plan.m_pad}, {lanes}) FP32"},
    }
    program = Program(kernel.name, machine, bitstream, bitstream_addr,
                      inputs={"a": (a_addr, None), "b": (b_addr, None)},
                      outputs={"c": (c_addr, plan.col_tiles * plan.m_pad * lanes)},
                      execute=execute, meta=meta, tensors=tensors, kernel="gemm",
                      params={"m": m, "n": n, "k": k})
    program.meta["addresses"] = {"a": a_addr, "b": b_addr, "c": c_addr}
    return program


# -- tensors ----------------------------------------------------------------------------

def random_inputs(m, n, k, seed):
    """BF16 A (M x K) and B (K x N) as uint32 words (BF16 in the high half), seeded."""
    rng = np.random.default_rng(seed)
    return (pcu_model.bf16_words(rng.standard_normal((m, k))),
            pcu_model.bf16_words(rng.standard_normal((k, n))))


def pack_inputs(program, a_words, b_words):
    """Add A and B, in the kernel's layouts, to ``program.inputs``."""
    meta = program.meta
    m, n, k, lanes = meta["m"], meta["n"], meta["k"], meta["lanes"]
    a_words, b_words = np.asarray(a_words, np.uint32), np.asarray(b_words, np.uint32)
    if a_words.shape != (m, k) or b_words.shape != (k, n):
        raise ValueError(f"GEMM {m}x{n}x{k} takes A {(m, k)} and B {(k, n)}, got "
                         f"{a_words.shape} and {b_words.shape}")
    a_pad = np.zeros((meta["m_pad"], meta["k_pad"]), np.uint32)
    a_pad[:m, :k] = a_words
    b_pad = np.zeros((meta["k_pad"], meta["n_pad"]), np.uint32)
    b_pad[:k, :n] = b_words
    b_packed = b_pad.reshape(meta["k_pad"], meta["col_tiles"], lanes).transpose(1, 0, 2)
    program.inputs["a"] = (meta["addresses"]["a"], _bf16_image(a_pad))
    program.inputs["b"] = (meta["addresses"]["b"], _bf16_image(b_packed))
    return program


def _bf16_image(words):
    """Packed BF16 memory image (value ``i`` in bytes ``2i, 2i+1``) as uint32 words."""
    halves = np.ascontiguousarray((np.asarray(words, np.uint32) >> 16).astype("<u2"))
    return halves.reshape(-1).view("<u4").astype(np.uint32)


def unpack_output(program, c_words):
    """The (M, N) float32 result from the packed C words."""
    meta = program.meta
    lanes = meta["lanes"]
    c = np.asarray(c_words, np.uint32).reshape(meta["col_tiles"], meta["m_pad"], lanes)
    c = c.transpose(1, 0, 2).reshape(meta["m_pad"], meta["n_pad"])
    return c[:meta["m"], :meta["n"]].view(np.float32)


def exact_reference(a_words, b_words, k_pad=None):
    """What the hardware computes, bit for bit: the PCUs' systolic arithmetic
    (:func:`rdu.pcu_model.systolic_accumulate`: per element, the first product, then an
    FP32 add of each further product in k order) over K zero-padded to ``k_pad``.
    uint32 words."""
    a = np.asarray(a_words, np.uint32)
    b = np.asarray(b_words, np.uint32)
    k_len = a.shape[1]
    k_pad = k_pad or k_len
    a_columns = np.zeros((k_pad, a.shape[0]), np.uint32)
    a_columns[:k_len] = a.T
    b_rows = np.zeros((k_pad, b.shape[1]), np.uint32)
    b_rows[:k_len] = b
    return pcu_model.systolic_accumulate(a_columns, b_rows)


def reference(a_words, b_words):
    """numpy float32 matmul of the BF16 inputs."""
    return np.asarray(a_words, np.uint32).view(np.float32) @ \
        np.asarray(b_words, np.uint32).view(np.float32)


def check_result(c, a_words, b_words):
    """``(ok, max_abs_err)``: every element within the FP32 accumulation budget
    ``K * 2^-22 * (|A| |B|)`` of numpy's float64 product of the same BF16 inputs."""
    a = np.asarray(a_words, np.uint32).view(np.float32)
    b = np.asarray(b_words, np.uint32).view(np.float32)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    error = np.abs(c.astype(np.float64) - ref)
    budget = a.shape[1] * 2.0 ** -22 * (np.abs(a64) @ np.abs(b64)) + 1e-30
    ok = bool(np.all(error <= budget)) and c.shape == ref.shape
    return ok, float(error.max()) if error.size else 0.0

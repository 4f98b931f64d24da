"""The native runner: a Verilated system with its memory models in C++, no Python per cycle.

Under cocotb every clock cycle runs Python: the stream agents of the AXI ports drive
and sample their signals through VPI and step the memory models. On the 4x4 system
that is three quarters of the time (``docs/simulation-speed.md``). Here the memory
side (:mod:`sim_models.memory` and :mod:`rdu.sim.memory_system`, ported line by line
to ``native_runner.cpp``) runs in C++ inside the clock loop, and the model is a shared
library in the Python process (``ctypes``): Python acts once per host action (set a
signal, read one, run some cycles), as a host driver does. The host's wait loops
(:meth:`rdu.sim.bench.Bench.advance_until_change`: run until a done or watchdog bit
changes)
run in C++ too, so a kernel's run is a handful of calls whatever its length.

* :func:`build_native` links the shared library from a cached
  :func:`rdu.sim.verilator.build` (the very objects cocotb runs; seconds);
* :class:`NativeBench` is a :class:`rdu.sim.bench.Bench` on it: the same test body
  (:func:`rdu.sim.host.run_programs`...) runs unchanged and takes the same cycles;
* :class:`NativeMemorySystem` stands in for :class:`rdu.sim.memory_system.MemorySystem`
  (backdoor loads and dumps, region statistics, error records);
* :func:`run_native` is :func:`rdu.sim.runner.run_verilator` for this tier.

Supported: what the runtime's host driver uses: AXI ports with the default protocol
(``stall="none"``, ``write_order="aw_first"``, no injected faults) and no Python
stream agents; anything else is refused with a message naming the cocotb tier. Waves:
from a build with waves (:func:`rdu.sim.verilator.build` ``waves=True``), ``dump.fst``
(``dump.vcd`` without the FST libraries) in the run's directory, as under cocotb.
"""

import ctypes
import fcntl
import hashlib
import os
import subprocess
import time
from pathlib import Path

import numpy as np

from .agents import HarnessError, WatchdogTimeout
from .axi import AXICodec
from .bench import Bench
from .cpp_loop import cxx_name, top_ports
from .memory_system import AXIErrorRecord
from .runner import BodyError, BodyStats
from .seed import get_seed
from .verilator import ensure_verilator, fst_supported

__all__ = ["NativeError", "build_native", "NativeBench", "NativeMemorySystem", "run_native"]

_SOURCE = Path(__file__).with_name("native_runner.cpp")

#: Field order of the payload layout table (``enum Field`` in ``native_runner.cpp``).
_FIELDS = (("ar", ("addr", "len", "size", "burst", "id")),
           ("aw", ("addr", "len", "size", "burst", "id")),
           ("w", ("data", "strb", "last")),
           ("r", ("id", "data", "resp", "last")),
           ("b", ("id", "resp")))

#: Reason codes of an errored burst (``enum Reason``), formatted as memory_system does.
_REASONS = {
    1: lambda system, detail, record: "address is not mapped",
    2: lambda system, detail, record: f"burst type {detail} is not INCR",
    3: lambda system, detail, record: (f"size {detail} is not the bus width "
                                       f"{(system.beat_bytes).bit_length() - 1}"),
    4: lambda system, detail, record: "address is not aligned to the beat",
    5: lambda system, detail, record: (f"burst runs past the end of "
                                       f"{system.regions[detail].name} at "
                                       f"{system.regions[detail].end:#x}"),
    6: lambda system, detail, record: "burst crosses a 4 KiB boundary",
    7: lambda system, detail, record: (f"WLAST={0 if detail == record[4] - 1 else 1} on "
                                       f"beat {detail}"),
}


class NativeError(RuntimeError):
    """The native runner cannot run this (a build problem or an unsupported option)."""


def build_native(built, *, tag="native"):
    """Link (or reuse) the native runner of ``built`` in ``built.build_dir/<tag>/``;
    return the path of its shared library."""
    ensure_verilator()
    build_dir = Path(built.build_dir)
    out = build_dir / tag
    out.mkdir(parents=True, exist_ok=True)
    # one linker per build directory at a time (pytest-xdist workers, Ray workers)
    with open(out / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _link_native(built, build_dir, out)


def _link_native(built, build_dir, out):
    library = out / "librdu_native.so"
    stamp = out / "source.stamp"
    source = _SOURCE.read_text()
    if library.exists() and stamp.exists() and stamp.read_text() == str(hash_text(source)):
        return library
    # the model and the libraries of its hierarchical blocks (rdu.sim.verilator.HIER_BLOCK)
    objects = [build_dir / "Vtop__ALL.a", *sorted(build_dir.glob("V*/lib*.a"))]
    if not objects[0].exists():
        raise NativeError(f"the build of {built.toplevel} has no compiled model "
                          f"({objects[0]}); rebuild it")
    ports = top_ports(Path(built.verilog).read_text(), built.toplevel)
    (out / "ports.inc").write_text("".join(
        f'PORT("{name}", {cxx_name(name)}, {width}, {int(is_input)})\n'
        for name, width, is_input in ports))
    root = Path(os.environ["VERILATOR_ROOT"])
    include = [f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}", f"-I{build_dir}",
               f"-I{out}"]
    # Verilator's runtime again, position-independent (the build's verilated.o uses
    # thread-local storage a shared library cannot): a few seconds
    runtime, defines, libraries = [], [], []
    names = ["verilated", "verilated_threads"]
    if built.waves:                     # the writer the build was traced for
        fst = fst_supported()
        names.append("verilated_fst_c" if fst else "verilated_vcd_c")
        defines.append("-DRDU_TRACE_FST" if fst else "-DRDU_TRACE_VCD")
        libraries += ["-lz", "-llz4"] if fst else []
    for name in names:
        runtime.append(out / f"{name}.o")
        _compile(["g++", "-O2", "-std=c++20", "-fPIC", "-c", *include,
                  str(root / "include" / f"{name}.cpp"), "-o", str(runtime[-1])], out,
                 built.toplevel)
    # linked under another name and renamed: a process that has the old library loaded
    # keeps its file
    partial = out / "librdu_native.so.partial"
    _compile(["g++", "-O2", "-std=c++20", "-shared", "-fPIC", *defines, *include,
              str(_SOURCE), *map(str, runtime), *map(str, objects), "-Wl,-Bsymbolic",
              "-pthread", "-latomic", *libraries, "-o", str(partial)], out, built.toplevel)
    partial.replace(library)
    stamp.write_text(str(hash_text(source)))
    return library


def _compile(command, out, toplevel):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode:
        (out / "build.log").write_text(" ".join(command) + "\n" + result.stdout +
                                       result.stderr)
        raise NativeError(f"building the native runner of {toplevel} failed; see "
                          f"{out / 'build.log'}")


def hash_text(text):
    return hashlib.sha256(text.encode()).hexdigest()[:16]


_LIBRARIES = {}


def _library(path):
    """The loaded library at ``path`` with its function signatures (loaded once)."""
    path = str(path)
    if path in _LIBRARIES:
        return _LIBRARIES[path]
    lib = ctypes.CDLL(path)
    handle, i64, u64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64
    int_p, u32_p = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_uint32)
    signatures = {
        "rdu_open": (handle, []),
        "rdu_close": (None, [handle]),
        "rdu_port_count": (ctypes.c_int, [handle]),
        "rdu_port_name": (ctypes.c_char_p, [handle, ctypes.c_int, int_p, int_p]),
        "rdu_set64": (None, [handle, ctypes.c_int, u64]),
        "rdu_set_words": (None, [handle, ctypes.c_int, u32_p]),
        "rdu_get64": (u64, [handle, ctypes.c_int]),
        "rdu_get_words": (None, [handle, ctypes.c_int, u32_p]),
        "rdu_start": (None, [handle, ctypes.c_int]),
        "rdu_limits": (None, [handle, i64, i64]),
        "rdu_cycles": (ctypes.c_int, [handle, i64]),
        "rdu_cycle": (i64, [handle]),
        "rdu_advance_until_change": (i64, [handle, int_p, ctypes.c_int, i64]),
        "rdu_region": (ctypes.c_int, [handle, ctypes.c_char_p, u64, u64, ctypes.c_int,
                                      ctypes.c_int, u64, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_double, u64, ctypes.c_int, ctypes.c_int]),
        "rdu_attach": (ctypes.c_int, [handle, ctypes.c_char_p, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_int, int_p]),
        "rdu_reset_ports": (None, [handle]),
        "rdu_mem_write": (None, [handle, ctypes.c_int, u64, ctypes.c_void_p, u64]),
        "rdu_mem_read": (None, [handle, ctypes.c_int, u64, ctypes.c_void_p, u64]),
        "rdu_mem_clear": (None, [handle]),
        "rdu_region_stats": (None, [handle, ctypes.c_int, ctypes.POINTER(u64)]),
        "rdu_error_count": (ctypes.c_int, [handle]),
        "rdu_error": (None, [handle, ctypes.c_int, ctypes.POINTER(i64)]),
        "rdu_port_queues": (None, [handle, ctypes.c_int, ctypes.POINTER(i64)]),
        "rdu_trace_open": (ctypes.c_int, [handle, ctypes.c_char_p]),
    }
    for name, (restype, argtypes) in signatures.items():
        function = getattr(lib, name)
        function.restype, function.argtypes = restype, argtypes
    _LIBRARIES[path] = lib
    return lib


class NativeBench(Bench):
    """A :class:`rdu.sim.bench.Bench` on the native runner's shared library.

    Parameters
    ----------
    library : path
        From :func:`build_native`.
    seed, watchdog : as :class:`rdu.sim.bench.Bench` (``watchdog``: cycles without any
        AXI transfer while a response waits, as the Python agents' watchdog).
    timeout : int
        Hard limit of the run in cycles (the cocotb tier's ``TB_TIMEOUT``).
    waves : path, optional
        Write waves there (FST or VCD, as the build was traced; one clock = 10 time
        units), from reset on. The library must come from a build with waves.
    """

    tier = "native"

    def __init__(self, library, *, seed=None, watchdog=2000, timeout=10_000_000,
                 waves=None):
        super().__init__(seed=seed, watchdog=watchdog)
        self.lib = _library(library)
        self.handle = self.lib.rdu_open()
        self.lib.rdu_limits(self.handle, watchdog, timeout)
        if waves is not None:
            status = self.lib.rdu_trace_open(self.handle, os.fsencode(waves))
            if status:
                self.close()
                raise NativeError(
                    f"cannot write waves to {waves}: " +
                    ("the native runner was linked from a build without waves"
                     if status == -1 else "the file could not be opened"))
        self.watchdog = watchdog
        self._ports = {}
        width, is_input = ctypes.c_int(), ctypes.c_int()
        for index in range(self.lib.rdu_port_count(self.handle)):
            name = self.lib.rdu_port_name(self.handle, index, ctypes.byref(width),
                                          ctypes.byref(is_input)).decode()
            self._ports[name] = (index, width.value, bool(is_input.value))
        self._started = None
        self._memory = None
        self._read_at = -1            # cycle of the last read(): no set() after it

    def close(self):
        if self.handle:
            self.lib.rdu_close(self.handle)
            self.handle = None

    def _port(self, path):
        name = path.replace(".", "__")
        try:
            return self._ports[name]
        except KeyError:
            raise AttributeError(f"design has no port {name!r} (path {path!r})") from None

    # -- Bench primitives -------------------------------------------------------------------
    async def start(self, reset_cycles=2):
        """Hold reset for ``reset_cycles`` edges and release it (the memory ports start
        on the next edge, as :meth:`rdu.sim.cocotb_bench.CocotbBench.start`)."""
        self.lib.rdu_start(self.handle, reset_cycles)
        self._started = time.perf_counter()

    @property
    def elapsed(self):
        return time.perf_counter() - self._started

    @property
    def cycle(self):
        return self.lib.rdu_cycle(self.handle)

    async def cycles(self, count=1):
        self._status(self.lib.rdu_cycles(self.handle, count))

    async def advance_until_change(self, paths, limit):
        """:meth:`rdu.sim.bench.Bench.advance_until_change` in C++: no Python per cycle."""
        if limit <= 1:
            await self.cycles(1)
            return 1
        ports = [self._port(path) for path in paths]
        for path, port in zip(paths, ports, strict=True):
            if port[1] > 64:
                raise NativeError(f"advance_until_change watches signals of up to 64 bits, "
                                  f"not {path!r} ({port[1]} bits)")
        watched = (ctypes.c_int * len(paths))(*(port[0] for port in ports))
        advanced = self.lib.rdu_advance_until_change(self.handle, watched, len(paths), limit)
        self._status(-advanced if advanced < 0 else 0)
        return advanced

    def _status(self, status):
        if status == 1:
            raise WatchdogTimeout(self._stall_report())
        if status == 2:
            raise HarnessError(f"hard timeout: the run reached its limit of {self.cycle} "
                               f"cycles")

    def set(self, path, value):
        if self._read_at == self.cycle:
            raise RuntimeError(f"set({path!r}) after read() in the same cycle: advance with "
                               f"cycles() first (the simulator is in its read-only phase)")
        index, width, is_input = self._port(path)
        if not is_input:
            raise AttributeError(f"port {path!r} is an output of the design")
        value = int(value) & ((1 << width) - 1)
        if width <= 64:
            self.lib.rdu_set64(self.handle, index, value)
        else:
            words = (ctypes.c_uint32 * ((width + 31) // 32))(
                *((value >> (32 * i)) & 0xFFFFFFFF for i in range((width + 31) // 32)))
            self.lib.rdu_set_words(self.handle, index, words)

    async def read(self, path):
        index, width, _ = self._port(path)
        self._read_at = self.cycle
        if width <= 64:
            return self.lib.rdu_get64(self.handle, index)
        words = (ctypes.c_uint32 * ((width + 31) // 32))()
        self.lib.rdu_get_words(self.handle, index, words)
        return sum(word << (32 * i) for i, word in enumerate(words))

    async def reset(self, cycles=2):
        self.set("rst", 1)
        await self.cycles(cycles)
        self.set("rst", 0)

    def source(self, path, stall="none"):
        raise NativeError(f"the native runner has no Python stream agents (source "
                          f"{path!r}): run this body under cocotb")

    def sink(self, path, stall="none"):
        raise NativeError(f"the native runner has no Python stream agents (sink "
                          f"{path!r}): run this body under cocotb")

    def memory_system(self, system):
        """The native copy of ``system`` (its regions and their contents) that serves
        this bench's AXI ports."""
        if self._memory is None:
            self._memory = NativeMemorySystem(self, system)
        return self._memory

    def _stall_report(self):
        lines = [f"watchdog: no stream transfer for {self.watchdog} cycles "
                 f"(cycle {self.cycle})"]
        if self._memory is not None:
            lines += self._memory.stalled()
        return "\n".join(lines)


class _NativeRegion:
    """A region of :class:`NativeMemorySystem`: name, bounds and live statistics."""

    def __init__(self, system, index, model):
        self._system, self._index = system, index
        self.name, self.base, self.size = model.name, model.base, model.size
        self.timing = model.timing

    @property
    def end(self):
        return self.base + self.size

    def __contains__(self, address):
        return self.base <= address < self.end

    @property
    def stats(self):
        out = (ctypes.c_uint64 * 4)()
        self._system.lib.rdu_region_stats(self._system.handle, self._index, out)
        return dict(zip(("read_beats", "write_beats", "row_hits", "row_misses"),
                        map(int, out), strict=True))


class NativeMemorySystem:
    """The memory system of a :class:`NativeBench`: the regions of a
    :class:`rdu.sim.memory_system.MemorySystem` (their timing and the contents loaded
    so far) served from C++. The same interface as far as the host driver uses it:
    :meth:`attach`, :meth:`load`, :meth:`dump`, :attr:`errors`, :attr:`regions`,
    :meth:`reset_ports`, :meth:`clear`."""

    def __init__(self, bench, system):
        if system.faults is not None:
            raise NativeError("the native runner does not inject AXI faults: run under "
                              "cocotb (--sim verilator)")
        self.bench, self.lib, self.handle = bench, bench.lib, bench.handle
        self.beat_bytes = system.beat_bytes
        self.regions = []
        self.ports = {}
        self._errors = []
        for model in system.regions:
            timing = model.timing
            if model.beat_bytes != system.beat_bytes:
                raise NativeError(f"region {model.name} has {model.beat_bytes}-byte beats, "
                                  f"the bus {system.beat_bytes}")
            index = self.lib.rdu_region(
                self.handle, model.name.encode(), model.base, model.size, timing.channels,
                timing.banks, timing.row_bytes, timing.hit_latency, timing.miss_latency,
                float(timing.bytes_per_cycle), timing.interleave, timing.write_latency,
                model.beat_bytes)
            region = _NativeRegion(self, index, model)
            self.regions.append(region)
            for page, store in model.storage.pages.items():       # contents so far
                self._write(region, model.base + page * model.storage.page_bytes, store)

    def __getitem__(self, name):
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(f"No memory region named {name!r}")

    def region_at(self, address):
        for region in self.regions:
            if address in region:
                return region
        return None

    def attach(self, bench, path="axi", *, stall="none", addr_width=32, id_width=4,
               max_reads=32, max_writes=32, write_order="aw_first"):
        """Serve the AXI4 manager port at ``path`` (as
        :meth:`rdu.sim.memory_system.MemorySystem.attach`, default protocol only)."""
        if stall != "none" or write_order != "aw_first":
            raise NativeError(f"the native runner serves AXI ports with stall 'none' and "
                              f"write order 'aw_first', not {stall!r}/{write_order!r}: run "
                              f"under cocotb (--sim verilator)")
        codec = AXICodec(addr_width=addr_width, data_width=self.beat_bytes * 8,
                         id_width=id_width)
        layout = []
        for channel, names in _FIELDS:
            fields = {name: (offset, mask.bit_length())
                      for name, offset, mask in getattr(codec, channel).fields}
            for name in names:
                layout += fields[name]
        table = (ctypes.c_int * len(layout))(*layout)
        index = self.lib.rdu_attach(self.handle, path.replace(".", "__").encode(), max_reads,
                                    max_writes, self.beat_bytes, table)
        if index < 0:
            raise AttributeError(f"design has no AXI4 manager port {path!r}")
        self.ports[path] = index
        return index

    def reset_ports(self):
        self.lib.rdu_reset_ports(self.handle)

    def clear(self):
        self.lib.rdu_mem_clear(self.handle)
        self._errors.clear()

    @property
    def errors(self):
        """Every errored burst so far (:class:`rdu.sim.memory_system.AXIErrorRecord`)."""
        count = self.lib.rdu_error_count(self.handle)
        names = {index: path for path, index in self.ports.items()}
        out = (ctypes.c_int64 * 8)()
        while len(self._errors) < count:
            self.lib.rdu_error(self.handle, len(self._errors), out)
            cycle, port, kind, address, beats, resp, reason, detail = map(int, out)
            text = _REASONS[reason](self, detail, tuple(map(int, out)))
            self._errors.append(AXIErrorRecord(cycle, names[port], ("read", "write")[kind],
                                               address, beats, resp, text))
        return self._errors

    def stalled(self):
        """Lines naming the ports whose responses wait (for the watchdog's report)."""
        lines = []
        out = (ctypes.c_int64 * 4)()
        for path, index in self.ports.items():
            self.lib.rdu_port_queues(self.handle, index, out)
            r_items, b_items, reads, writes = map(int, out)
            if r_items:
                lines.append(f"  source '{path}.r': {r_items} items not sent ({reads} read "
                             f"bursts open)")
            if b_items:
                lines.append(f"  source '{path}.b': {b_items} items not sent ({writes} "
                             f"write bursts open)")
        return lines

    # -- backdoor ---------------------------------------------------------------------------
    def _region_for(self, address, count):
        region = self.region_at(address)
        if region is None or address + count > region.end:
            raise ValueError(f"Backdoor access of {count} bytes at {address:#x} is not "
                             f"inside one memory region")
        return region

    def _write(self, region, address, payload):
        payload = np.ascontiguousarray(payload, dtype=np.uint8)
        self.lib.rdu_mem_write(self.handle, region._index, address,
                               payload.ctypes.data_as(ctypes.c_void_p), payload.size)

    def load(self, address, payload):
        """Backdoor: write a bytes-like object or numpy array at ``address``."""
        if isinstance(payload, np.ndarray):
            payload = np.ascontiguousarray(payload).view(np.uint8).reshape(-1)
        else:
            payload = np.frombuffer(memoryview(payload).cast("B"), dtype=np.uint8)
        self._write(self._region_for(address, payload.size), address, payload)

    def dump(self, address, count, dtype=np.uint8):
        """Backdoor: ``count`` bytes at ``address`` as a numpy array of ``dtype``."""
        region = self._region_for(address, count)
        out = np.zeros(count, dtype=np.uint8)
        self.lib.rdu_mem_read(self.handle, region._index, address,
                              out.ctypes.data_as(ctypes.c_void_p), count)
        return out.view(dtype).copy()


def run_native(built, body, test_dir=None, *, seed=None, watchdog=2000, timeout=10_000_000,
               **params):
    """Run ``body(bench, **params)`` on the native runner of ``built``; return a
    :class:`rdu.sim.runner.BodyStats` as :func:`rdu.sim.runner.run_verilator` does
    (tier ``"native"``). A body that raises becomes a :class:`rdu.sim.runner.BodyError`
    with its message, type name and cycle, as under cocotb."""
    library = build_native(built)
    seed = get_seed() if seed is None else seed
    waves = None
    if built.waves:                     # as cocotb: dump.<format> in the run's directory
        directory = Path(test_dir) if test_dir else Path.cwd()
        directory.mkdir(parents=True, exist_ok=True)
        waves = directory / f"dump.{'fst' if fst_supported() else 'vcd'}"
    bench = NativeBench(library, seed=seed, watchdog=watchdog, timeout=timeout, waves=waves)
    try:
        coroutine = _run(bench, body, params)
        try:
            coroutine.send(None)
        except StopIteration as stop:
            result = stop.value
        else:
            coroutine.close()
            raise NativeError("the body awaited something other than the bench "
                              "(a cocotb trigger?): run it under cocotb")
        return BodyStats("native", bench.cycle, bench.elapsed, seed, result,
                         {"test_dir": os.fspath(test_dir) if test_dir else None})
    except NativeError:
        raise
    except Exception as error:          # as cocotb_entry reports a body's exception
        raise BodyError(str(error), type(error).__name__, bench.cycle, test_dir) from None
    finally:
        bench.close()


async def _run(bench, body, params):
    await bench.start()
    return await body(bench, **params)

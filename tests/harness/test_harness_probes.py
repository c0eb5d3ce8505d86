"""The harness's own tests: every probe FAILs against a server that cheats in its one way,
and every probe PASSes against retained itself (and, with HARNESS_STAND_IN=1, against the
honest stand-in the broken servers derive from).

Real subprocesses over real stdio, real files; the probes run two at a time so
the suite stays short on two cores.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

from harness.adapters.retained import RetainedAdapter
from harness.probes import FAIL, PASS, PROBES, Context, Outcome
from harness.runner import run_all, run_probe

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "harness_fixtures"
JOBS = 2

# Each probe and the servers built to cheat on exactly what it checks.
BROKEN = [
    ("ack_readback", "ack_before_write.py"),
    ("restart", "loses_on_restart.py"),
    ("foreign_field", "drops_foreign_fields.py"),
    ("foreign_record", "rewrites_foreign.py"),
    ("concurrent", "drops_concurrent.py"),
    ("large_record", "truncates_large.py"),
    ("idempotent_retry", "ignores_op_id.py"),
    ("idempotent_retry", "op_id_in_memory.py"),
    ("torn_tail", "glues_torn_tail.py"),
    ("tamper_detect", "blind_verify.py"),
    ("search_accounting", "bad_accounting.py"),
    ("bad_input", "writes_bad_input.py"),
    ("bad_input", "crashes_on_bad_input.py"),
    ("every_reply", "drops_bad_lines.py"),
]
CASES = [f"{probe}-{script.removesuffix('.py')}" for probe, script in BROKEN]


def _env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("RETAINED_DIR", "MEMORY_FILE_PATH")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


async def _run_cases(root: Path) -> dict[str, Outcome]:
    results: dict[str, Outcome] = {}
    limiter = anyio.CapacityLimiter(JOBS)

    async def one(case: str, probe: str, script: str) -> None:
        async with limiter:
            probe_root = root / case
            probe_root.mkdir()
            command = [sys.executable, str(FIXTURES / script)]
            results[case] = await run_probe(probe, Context(RetainedAdapter(), command, probe_root, _env()))

    async with anyio.create_task_group() as group:
        for case, (probe, script) in zip(CASES, BROKEN, strict=True):
            group.start_soon(one, case, probe, script)
    return results


@pytest.fixture(scope="module")
def broken_outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    return anyio.run(_run_cases, tmp_path_factory.mktemp("broken"))


def test_every_probe_has_a_broken_server() -> None:
    assert sorted({probe for probe, _ in BROKEN}) == sorted(PROBES)
    for _, script in BROKEN:
        assert (FIXTURES / script).is_file()


@pytest.mark.parametrize("case", CASES)
def test_probe_fails_against_the_server_that_cheats_on_it(case: str, broken_outcomes: dict[str, Outcome]) -> None:
    """A probe never shown failing proves nothing: each one catches its cheat."""
    outcome = broken_outcomes[case]
    assert outcome.status == FAIL, f"{case}: {outcome.status} {outcome.evidence}"
    assert outcome.evidence and "harness error" not in outcome.evidence


def _run_all(command: list[str], tmp: Path):
    return anyio.run(lambda: run_all(RetainedAdapter(), command, list(PROBES), jobs=JOBS, keep=tmp, env=_env()))


@pytest.mark.skipif(
    not os.environ.get("HARNESS_STAND_IN"),
    reason="retained itself is the honest server here; HARNESS_STAND_IN=1 runs the stand-in too",
)
def test_every_probe_passes_against_the_honest_stand_in(tmp_path: Path) -> None:
    """The stand-in differs from each broken server only by its cheat, so the probes are fair."""
    report = _run_all([sys.executable, str(FIXTURES / "fake_retained.py")], tmp_path)
    bad = [f"{o.name}: {o.status} {o.evidence}" for o in report.outcomes if o.status != PASS]
    assert not bad, "\n".join(bad)


def test_every_probe_passes_against_retained(tmp_path: Path) -> None:
    """The full harness run against ``python -m retained``: every probe PASSes."""
    report = _run_all([sys.executable, "-m", "retained"], tmp_path)
    bad = [f"{o.name}: {o.status} {o.evidence}" for o in report.outcomes if o.status != PASS]
    assert not bad, "\n".join(bad)


@pytest.mark.skipif(
    not os.environ.get("HARNESS_SERVER_MEMORY"),
    reason="installs @modelcontextprotocol/server-memory with npm; HARNESS_SERVER_MEMORY=1 runs it",
)
def test_server_memory_gives_no_proof_and_drops_foreign_lines(tmp_path: Path) -> None:
    """The reference server as the README table reports it: no proof, a foreign line rewritten away, no verify."""
    from harness.adapters.server_memory import ServerMemoryAdapter

    adapter = ServerMemoryAdapter()
    names = ["ack_readback", "foreign_record", "tamper_detect", "large_record"]
    report = anyio.run(lambda: run_all(adapter, adapter.command(None), names, jobs=JOBS, keep=tmp_path, env=_env()))
    got = {o.name: o for o in report.outcomes}
    assert got["ack_readback"].status == FAIL and "no proof" in got["ack_readback"].evidence
    assert got["foreign_record"].status == FAIL
    assert got["tamper_detect"].status == "SKIP"
    assert got["large_record"].status == PASS

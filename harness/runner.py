"""Runs the probes against one server command, a bounded number at a time."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from . import __version__
from .adapters.base import Adapter, NotApplicable
from .mcpio import ServerStartError
from .probes import FAIL, PASS, PROBES, SKIP, Context, Outcome, Verdict

PROBE_TIMEOUT_S = 180.0
"""Longest one probe may take, its server starts included."""

_STORE_ENV_VARS = ("RETAINED_DIR", "MEMORY_FILE_PATH")


@dataclass
class RunReport:
    adapter: str
    command: list[str]
    server: str
    server_info: str = ""
    outcomes: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def counts(self) -> dict[str, int]:
        return {status: sum(1 for o in self.outcomes if o.status == status) for status in (PASS, FAIL, SKIP)}

    @property
    def failed(self) -> bool:
        return self.counts[FAIL] > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "harness": __version__,
            "adapter": self.adapter,
            "command": self.command,
            "server": self.server,
            "server_info": self.server_info,
            "probes": [asdict(o) | {"seconds": round(o.seconds, 2)} for o in self.outcomes],
            "counts": self.counts,
            "seconds": round(self.seconds, 2),
        }


def _unwrap(exc: BaseException) -> BaseException:
    """The first meaningful exception inside (possibly nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup):
        verdicts = [e for e in exc.exceptions if isinstance(e, Verdict)]
        exc = verdicts[0] if verdicts else exc.exceptions[0]
    return exc


async def run_probe(name: str, ctx: Context, timeout: float = PROBE_TIMEOUT_S) -> Outcome:
    probe = PROBES[name]
    started = time.monotonic()
    try:
        try:
            with anyio.fail_after(timeout):
                status, evidence = await probe(ctx)
        except BaseExceptionGroup as group:
            raise _unwrap(group) from None
    except Verdict as verdict:
        status, evidence = verdict.status, verdict.evidence
    except NotApplicable as exc:
        status, evidence = SKIP, str(exc)
    except ServerStartError as exc:
        status, evidence = FAIL, str(exc)
    except TimeoutError:
        status, evidence = FAIL, f"the probe did not finish within {timeout:g} s"
    except Exception as exc:  # noqa: BLE001 - the harness's edge: report what went wrong, never hide it
        status, evidence = FAIL, f"harness error {type(exc).__name__}: {exc}"
    return Outcome(name, status, evidence, time.monotonic() - started)


async def run_all(
    adapter: Adapter,
    command: list[str],
    names: list[str],
    *,
    jobs: int = 2,
    keep: Path | None = None,
    timeout: float = PROBE_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> RunReport:
    """Run the named probes, ``jobs`` at a time, each in its own temp root.

    Servers get ``env`` (default: this process's environment) without any
    store variable, and then their adapter's store variable.
    """
    describe = getattr(adapter, "describe", None)
    shown = " ".join("python" if part == sys.executable else part for part in command)
    report = RunReport(adapter.name, command, describe() if describe else shown)
    base_env = {key: value for key, value in (os.environ if env is None else env).items() if key not in _STORE_ENV_VARS}
    root = Path(tempfile.mkdtemp(prefix="retained-harness-", dir=keep))
    os.chmod(root, 0o700)
    results: dict[str, Outcome] = {}
    limiter = anyio.CapacityLimiter(max(1, jobs))
    started = time.monotonic()

    start_failed: list[str] = []

    async def one(name: str) -> None:
        async with limiter:
            if start_failed:
                results[name] = Outcome(name, FAIL, f"not run: the server did not start in {start_failed[0]}")
                return
            probe_root = root / name
            probe_root.mkdir(mode=0o700)
            ctx = Context(adapter, command, probe_root, base_env)
            results[name] = await run_probe(name, ctx, timeout)
            if results[name].evidence.startswith(ServerStartError.prefix) and not ctx.seen:
                start_failed.append(name)
            if ctx.seen and not report.server_info:
                report.server_info = ctx.seen[0]

    try:
        async with anyio.create_task_group() as group:
            for name in names:
                group.start_soon(one, name)
    finally:
        if keep is None:
            shutil.rmtree(root, ignore_errors=True)
    report.outcomes = [results[name] for name in names]
    report.seconds = time.monotonic() - started
    return report


def render(report: RunReport) -> str:
    width = max(len(o.name) for o in report.outcomes) if report.outcomes else 10
    lines = [f"retained-harness: adapter {report.adapter}, server {report.server_info or '?'} ({report.server})"]
    for outcome in report.outcomes:
        lines.append(f"{outcome.status} {outcome.name:<{width}}  {outcome.evidence}")
    counts = report.counts
    lines.append(
        f"{len(report.outcomes)} probes: {counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped "
        f"({report.seconds:.1f} s)"
    )
    return "\n".join(lines)


def markdown(report: RunReport) -> str:
    """The result table as Markdown, for the README."""
    counts = report.counts
    title = (
        f"**{report.server_info or 'unnamed server'}** ({report.server}), adapter `{report.adapter}`: "
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped"
    )
    lines = [
        title,
        "",
        "| probe | result | evidence |",
        "|---|---|---|",
    ]
    for outcome in report.outcomes:
        evidence = outcome.evidence.replace("|", "\\|")
        lines.append(f"| `{outcome.name}` | {outcome.status} | {evidence} |")
    return "\n".join(lines)

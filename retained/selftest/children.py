"""Child processes for the checks that need a real second process."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterable
from pathlib import Path

from retained.selftest.context import CheckFailed, Context

# Every child process gets this long; a healthy one needs well under a second.
CHILD_TIMEOUT_S = 60.0
# retained's parent directory (this file is retained/selftest/children.py),
# put on a child's sys.path so the child imports this very copy of retained
# (installed or not) without reading or changing the environment.
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


def _child(ctx: Context, code: str, *args: str, stdin: int = subprocess.DEVNULL) -> subprocess.Popen[bytes]:
    """Start a child Python process running ``code`` with retained importable."""
    prelude = f"import sys\nsys.path.insert(0, {_PACKAGE_PARENT!r})\n"
    return subprocess.Popen(
        [ctx.python, "-c", prelude + code, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ctx.work,
    )


def _finish(proc: subprocess.Popen[bytes], what: str, ok_codes: Iterable[int] | None = (0,), input: bytes | None = None) -> bytes:
    """Wait for a child; its stdout, or CheckFailed with its last stderr line (``ok_codes`` None: any status)."""
    try:
        out, err = proc.communicate(input, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise CheckFailed(f"{what} (pid {proc.pid}) did not finish within {CHILD_TIMEOUT_S:g} s") from None
    except BaseException:
        proc.kill()  # interrupted: leave no child behind
        proc.communicate()
        raise
    if ok_codes is not None and proc.returncode not in ok_codes:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise CheckFailed(f"{what} (pid {proc.pid}) exited with status {proc.returncode}: {tail[0][:200]}")
    return out


def signal_name(status: int | None) -> str:
    if status is not None and status < 0:
        try:
            return signal.Signals(-status).name
        except ValueError:
            pass
    return f"status {status}"

"""``retained sync``: the command over ``Store.sync`` (publish, pull, findings; or restore)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

REMOTE_SETTING = "RETAINED_SYNC_REMOTE"
MACHINE_SETTING = "RETAINED_MACHINE"
KEY_SETTING = "RETAINED_SYNC_KEY_FILE"


def register(command: Callable[..., argparse.ArgumentParser], **edge: Any) -> None:
    """Add ``retained sync``; ``edge``: the command line's ``emit``, ``open_store`` and ``usage_error`` (given, not
    imported: commands.py imports this module)."""
    p = command("sync", "publish this store to object storage (S3, R2, MinIO, SeaweedFS), pull and verify the others, "
                "report forks and rollbacks", "retained sync --remote s3://team-memory/retained", partial(cmd_sync, **edge))
    p.add_argument("--remote", metavar="URL", help=f"s3://BUCKET/PREFIX (default: ${REMOTE_SETTING}); endpoint, region and "
                   "credentials come from the usual AWS settings (AWS_ENDPOINT_URL, AWS_PROFILE, ~/.aws)")
    p.add_argument("--endpoint-url", metavar="URL", help="the S3 endpoint (default: AWS_ENDPOINT_URL, else AWS)")
    p.add_argument("--machine", help=f"this machine's name in what it publishes (default: ${MACHINE_SETTING}, else the host name)")
    p.add_argument("--restore", metavar="STORE_ID", help="rebuild a lost store from the bucket into --dir (an empty directory)")
    p.add_argument("--key-file", metavar="FILE", help=f"seal every object with the key in FILE (64 hex digits; default: "
                   f"${KEY_SETTING}); the bucket's owner sees only ciphertext; needs the encrypt extra")
    p.add_argument("--no-pull", action="store_true", help="publish only; do not fetch other stores")
    p.add_argument("--no-publish", action="store_true", help="pull only; publish nothing")


def _progress() -> Callable[[str, int, int], None] | None:
    if not sys.stderr.isatty():
        return None
    last = [0.0]

    def report(label: str, done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 1.0 or done >= total:
            last[0] = now
            sys.stderr.write(f"sync {label}: {done}/{total} bytes ({100 * done // max(total, 1)}%)\n")
            sys.stderr.flush()

    return report


def text(report: dict[str, Any]) -> str:
    lines = []
    restored = report.get("restored")
    if restored:
        lines.append(f"restored store {restored['store_id']} ({restored.get('machine')}): seq {restored['seq']}, "
                     f"{restored['bytes']} bytes from {len(restored['segments'])} segment(s); index rebuilt; "
                     f"verify {'ok' if report['verify']['ok'] else 'FOUND PROBLEMS'}")
    pub = report.get("published")
    if pub:
        head = pub.get("head") or {}
        lines.append(f"published store {report['store_id']} as {report['machine']}: {pub['records']} new record(s) in "
                     f"{len(pub['segments'])} segment(s)" + (f", {len(pub['adopted'])} adopted" if pub["adopted"] else "")
                     + (f"; head seq {head.get('seq')}" if head else ""))
    for got in report.get("pulled") or ():
        lines.append(f"pulled store {got['store_id']} ({got.get('machine')}): {got['records']} new record(s), "
                     f"now at seq {got.get('seq')}")
    for f in report.get("findings") or ():
        lines.append(f"FINDING {f.get('kind')}: {f.get('message')}")
    lines.append("ok" if report.get("ok") else "sync found problems: nothing was overwritten on either side")
    return "\n".join(lines)


def cmd_sync(args: argparse.Namespace, *, emit: Callable[..., None], open_store: Callable[..., Any],
             usage_error: type[Exception]) -> int:
    remote = args.remote or os.environ.get(REMOTE_SETTING, "").strip()
    if not remote:
        raise usage_error(f"sync needs --remote s3://BUCKET/PREFIX (or {REMOTE_SETTING}); see docs/sync.md")
    options: dict[str, Any] = {"machine": args.machine or os.environ.get(MACHINE_SETTING), "endpoint_url": args.endpoint_url,
                               "restore_id": args.restore or None, "pull": not args.no_pull, "publish_own": not args.no_publish,
                               "progress": _progress()}
    key_file = args.key_file or os.environ.get(KEY_SETTING, "").strip()
    if key_file:
        from retained.sync.sealed import read_key

        options["key"] = read_key(key_file)
    with open_store(args, must_exist=False) as store:
        report = store.sync(remote, **options)
    emit(args, report, lambda: text(report))
    return 0 if report.get("ok") else 1

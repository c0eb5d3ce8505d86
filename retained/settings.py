"""Store settings from the environment: read only by the edges (CLI, server, hooks).

| variable | what | default |
|---|---|---|
| ``RETAINED_DIR`` | the store directory (read by ``retained.paths.store_dir``) | ``~/.retained`` |
| ``RETAINED_SECRETS`` | write guard policy: refuse, redact or off | refuse |
| ``RETAINED_SECRETS_ALLOW`` | a file of literal values never taken for secrets, one per line | none |
| ``RETAINED_RECORD_BYTES_MAX`` | largest encoded record, bytes | 16 MiB |
| ``RETAINED_LOCK_WAIT_S`` | how long a writer waits for the lock | 10 |
| ``RETAINED_GROUP_COMMIT`` | threads of one process share fsyncs: on or off | on |
| ``RETAINED_EMBED_*`` | embeddings (see ``retained.index.hybrid.SETTINGS``) | off |
| ``RETAINED_ANCHOR_DIR`` | where heads are anchored outside the store (``off``: nowhere); see ``retained.core.anchors`` | ``$XDG_STATE_HOME/retained`` |
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retained.core import anchors
from retained.errors import InvalidRecord


def _positive(environ: Mapping[str, str], name: str, kind: type) -> Any:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = kind(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise InvalidRecord(
            f"{name} must be a positive {'whole ' if kind is int else ''}number, found {raw!r}; fix or unset it",
            path=name,
        )
    return value


def guard_from(environ: Mapping[str, str]) -> Any:
    from retained.safety.guard import Guard

    policy = environ.get("RETAINED_SECRETS", "").strip().lower() or "refuse"
    allow: list[str] = []
    allow_file = environ.get("RETAINED_SECRETS_ALLOW", "").strip()
    if allow_file:
        try:
            text = Path(allow_file).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidRecord(
                f"RETAINED_SECRETS_ALLOW names {allow_file}, which cannot be read ({exc.strerror}); fix or unset it",
                path="RETAINED_SECRETS_ALLOW",
            ) from exc
        allow = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return Guard(policy=policy, allow=allow)


def store_options(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """Keyword arguments for ``Store`` from the environment.

    Raises:
        InvalidRecord: a variable is set to something unusable (named).
    """
    default_guard = environ.get("RETAINED_SECRETS", "").strip().lower() in ("", "refuse") and not environ.get(
        "RETAINED_SECRETS_ALLOW"
    )
    options: dict[str, Any] = {
        # None lets the store build its default guard (refuse) on first write.
        "guard": None if default_guard else guard_from(environ),
        "embed_settings": {k: v for k, v in environ.items() if k.startswith("RETAINED_EMBED_")},
        "anchor_dir": anchors.dir_from(environ),
    }
    group = environ.get("RETAINED_GROUP_COMMIT", "").strip().lower()
    if group:
        if group not in ("1", "on", "true", "yes", "0", "off", "false", "no"):
            raise InvalidRecord(
                f"RETAINED_GROUP_COMMIT must be on or off (1/0), found {group!r}; fix or unset it",
                path="RETAINED_GROUP_COMMIT",
            )
        options["group_commit"] = group in ("1", "on", "true", "yes")
    for name, key, kind in (
        ("RETAINED_RECORD_BYTES_MAX", "record_bytes_max", int),
        ("RETAINED_LOCK_WAIT_S", "lock_wait_s", float),
    ):
        value = _positive(environ, name, kind)
        if value is not None:
            options[key] = value
    return options

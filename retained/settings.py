"""Settings from the environment (``RETAINED_*``, each with its default: docs/settings.md), read only by the edges (CLI, server, hooks)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retained.core import anchors
from retained.errors import InvalidRecord
from retained.safety.guard import Guard


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


def _positives(environ: Mapping[str, str], table: tuple[tuple[str, str, type], ...]) -> dict[str, Any]:
    """``{key: value}`` for each ``(variable, key, kind)`` of ``table`` that is set (``_positive``)."""
    found = {key: _positive(environ, name, kind) for name, key, kind in table}
    return {key: value for key, value in found.items() if value is not None}


def guard_from(environ: Mapping[str, str]) -> Any:
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


_ON = ("1", "on", "true", "yes")
_OFF = ("0", "off", "false", "no")


def _switch(environ: Mapping[str, str], name: str, default: bool) -> bool:
    """An on/off variable (1/0, true/false, yes/no too); ``default`` when unset; anything else is refused, named."""
    raw = environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw not in _ON + _OFF:
        raise InvalidRecord(f"{name} must be on or off (1/0), found {raw!r}; fix or unset it", path=name)
    return raw in _ON


def related_on(environ: Mapping[str, str] = os.environ) -> bool:
    """``RETAINED_RELATED``: whether the edges' writes ask for related records (``Store.write(related=...)``)."""
    return _switch(environ, "RETAINED_RELATED", True)


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
    related_on(environ)  # not a Store option (the edges read it), refused here with the others when unusable
    every = _positive(environ, "RETAINED_ANCHOR_EVERY", int)
    every_s = _positive(environ, "RETAINED_ANCHOR_EVERY_S", float)
    if every is not None or every_s is not None:
        options["anchor_every"] = (every or anchors.EVERY_RECORDS, every_s or anchors.EVERY_S)
    if environ.get("RETAINED_GROUP_COMMIT", "").strip():
        options["group_commit"] = _switch(environ, "RETAINED_GROUP_COMMIT", True)
    return options | _positives(environ, (("RETAINED_RECORD_BYTES_MAX", "record_bytes_max", int),
                                          ("RETAINED_LOCK_WAIT_S", "lock_wait_s", float)))


HTTP_SESSION_IDLE_S = 600.0  # an MCP session with no request for this long is closed (its memory freed)


def http_settings(environ: Mapping[str, str] = os.environ) -> tuple[Any, float]:
    """The HTTP servers' bounds (``http_guard.Bounds``) and the MCP session idle time, from the environment.

    Raises:
        InvalidRecord: a variable is set to something unusable (named).
    """
    from retained.http_guard import Bounds

    kwargs = _positives(environ, (("RETAINED_HTTP_HEADER_TIMEOUT_S", "header_read_s", float),
                                  ("RETAINED_HTTP_CONNECTIONS_MAX", "connections_max", int),
                                  ("RETAINED_HTTP_CLIENT_CONNECTIONS_MAX", "client_connections_max", int)))
    idle = _positive(environ, "RETAINED_HTTP_SESSION_IDLE_S", float)
    return Bounds(**kwargs), HTTP_SESSION_IDLE_S if idle is None else idle

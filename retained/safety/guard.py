"""The write guard: credentials and ``<private>`` spans, checked before anything is written (docs/secrets.md).

Pure: no I/O, no environment, no printing. The store builds one :class:`Guard`
from its settings and calls :meth:`Guard.apply` on the caller-set part of a
record before the record is encoded; :meth:`Guard.untouched` lets most
ordinary records skip the full scan.

>>> g = Guard(policy="redact")
>>> r = g.apply({"text": "deploy key AKIA" + "ABCDEFGHIJ234567 <private>my pin</private>ok"})
>>> r.fields["text"], r.private_spans_removed, r.redactions
('deploy key [secret:aws_access_key] ok', 1, [{'path': 'text', 'kind': 'aws_access_key'}])
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

import orjson

from retained import limits
from retained.errors import InvalidRecord, SecretDetected
from retained.safety.credentials import (
    _LONG_TEXT_CHARS,
    _SECRET_KEY_NAME,
    COLON_HINTS,
    EQUALS_HINTS,
    NAME_BEFORE_VALUE,
    NAMED_KEY,
    SPLIT_ENDS,
    SPLIT_HINTS,
    URL_HINTS,
    URL_QUERY_WORDS,
    Finding,
    _assigned_value,
    compiled,
    find_secrets,
    looks_random,
    normalise,
    starts_at,
)

__all__ = ["POLICIES", "Finding", "Guard", "GuardResult", "find_secrets", "looks_random", "remove_private"]

POLICIES = ("refuse", "redact", "off")


def _ending_at(sep: str, ends: tuple[str, ...]) -> re.Pattern[bytes]:
    """A pattern found where one of ``ends`` (each ending with ``sep``) occurs: the regex looks for ``sep``, then looks back.

    What ``credentials.ends_at`` answers, in one pass of the regex engine
    (a text with many ``-``, such as a URL's slugs, costs no loop step each).
    """
    return re.compile(re.escape(sep.encode()) + b"(?:" + b"|".join(b"(?<=" + re.escape(e.encode()) + b")" for e in ends) + b")")


_SPLIT_UNDERSCORE = _ending_at("_", SPLIT_ENDS["_"])  # tested on the record's JSON as it is
_SPLIT_DASH = _ending_at("-", SPLIT_ENDS["-"])
# untouched spells these out (a loop costs more than the tests): keep them in step.
if COLON_HINTS != ("://", "-u ", "key", "basic") or EQUALS_HINTS != ("key", "sig=", "basic") or any(
    not h.startswith("A") for h in SPLIT_HINTS
):
    raise ImportError("guard.untouched spells credentials.COLON_HINTS and EQUALS_HINTS out; update it")
_URL_HINT = re.compile(b"|".join(re.escape(h.encode()) for h in URL_HINTS))  # case-sensitive: a (?i:) part slows it fourfold
# Every hint has a capital, or one of these: a tail in lower case without them
# holds none, and most do (the regex, whose first characters are common letters, is then not run).
_URL_HINT_MARKS = ("_", "~", "==", "gl")  # _url_hints spells these out
if any(h == h.lower() and not any(m in h for m in _URL_HINT_MARKS) for h in URL_HINTS):
    raise ImportError("guard._URL_HINT_MARKS misses a hint of credentials.URL_HINTS; add what marks it")

# Caller fields set through named API arguments; every other key is reported
# as ``fields.<key>`` (how the caller passed it). Mirrors record.API_FIELDS.
_API_FIELDS = frozenset({"kind", "text", "body", "scope", "source", "supersedes", "client_op_id"})
# Passed through as they are: an idempotency key is random by design, and
# scanning it would refuse writes from clients that make good ones.
_UNSCANNED = frozenset({"client_op_id"})


# -- private spans -----------------------------------------------------------

_PRIVATE_TAG = re.compile(r"<\s*(/)?\s*private(?:\s[^<>]*)?\s*>", re.IGNORECASE)


def remove_private(text: str) -> tuple[str, int]:
    """Remove ``<private>…</private>`` spans; return the text and how many were removed.

    >>> remove_private("a<private>b</private>c<PRIVATE >d")
    ('ac', 2)
    """
    if "<" not in text:
        return text, 0
    out: list[str] = []
    depth = 0
    spans = 0
    kept_from = 0
    for tag in _PRIVATE_TAG.finditer(text):
        closing = tag.group(1) is not None
        if not closing:
            if depth == 0:
                out.append(text[kept_from : tag.start()])
                spans += 1
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                kept_from = tag.end()
        # A closing tag at depth 0 has no opener: it is kept as ordinary text.
    if spans == 0:
        return text, 0
    if depth == 0:
        out.append(text[kept_from:])
    # depth > 0: the span never closed, so everything after it is private.
    return "".join(out), spans


# -- the fast test for untouched records --------------------------------------


_NESTED = (dict, list, tuple)
_DIGEST_STRING = re.compile(rb'"[0-9a-f]{64}"')
_TIMESTAMP_STRING = re.compile(rb'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z"')


@functools.cache
def _key_name() -> re.Pattern[str]:
    """credentials._SECRET_KEY_NAME compiled (once a key is looked at), not the lazy wrapper imported: no lookup per key."""
    return compiled(_SECRET_KEY_NAME)


def _keys_inside(value: Any, depth: int) -> int | None:
    """How many dict keys a nested value holds.

    None past the nesting ``apply`` accepts, or for a secret-named key (whose
    value the secret-name rule judges).
    """
    if depth > limits.DEPTH_MAX - 1:
        return None
    n = 0
    if isinstance(value, dict):
        search = _key_name().search
        for key in value:
            if type(key) is not str or search(key):
                return None
        n = len(value)
        items: Iterable[Any] = value.values()
    else:
        items = value
    for item in items:
        if type(item) in _NESTED:
            inner = _keys_inside(item, depth + 1)
            if inner is None:
                return None
            n += inner
    return n
# Token characters (credentials._LONG_RUN) and "\\" (an escape's, counted in) as "a"s, everything else a break.
_RUN_KEEP = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/.~%=\\")
_RUN_CHARS = bytes(b"a"[0] if i in _RUN_KEEP else b" "[0] for i in range(256))

_RUN_16 = b"a" * 16

# URLs in the JSON (credentials.URL_HINTS says what makes one safe). A tail is
# "://" and what follows up to whitespace, a quote, "<" or ">", as
# credentials._generic takes it; an escape's "\\" ends it too (a newline's,
# a tab's, a return's or a quote's: each ends the tail in the text as well).
# Only a tail after a scheme's character is one: credentials._generic skips
# the tokens of a URL's tail only after a scheme (``https://``, not ``"://``
# nor an escape's letter, ``\\n://``). The look-behinds follow the "://", so
# the regex still looks for that first; a tail it leaves in the text between
# the tails makes the record go through the full scan.
_URL_TAIL = re.compile(rb"(://(?<=[A-Za-z0-9+.\-]://)(?<!\\[A-Za-z0-9+.\-]://)[^\s\"'<>\\]+)")
_TAIL_START = re.compile(rb"://[^\s\"'<>\\]")  # a tail _URL_TAIL did not take: after no scheme
# An "@" before the first "/", "?" or "#" after "://": url_password's shape.
_URL_USERINFO = re.compile(rb"://[^\s/?#\"'<>\\]*@")


def _url_hints(tails: bytes) -> bool:
    """Whether the URLs' tails hold what credentials.URL_HINTS lists, or what _generic looks for in a URL.

    A webhook ("hook"), a query parameter named like a secret ("=" and "sig"
    or "auth"; the other names are looked for in the whole text), or a
    rule's hint the other tests do not cover. The tails are short and ASCII.
    """
    text = tails.decode("ascii")  # str: see Guard.untouched
    folded = text.lower()
    if (folded != text or "_" in text or "~" in text or "==" in text or "gl" in text) and (
        _URL_HINT.search(tails) is not None
    ):
        return True
    if "hook" in folded:
        return True
    if "=" in text:
        for word in URL_QUERY_WORDS:
            if word in folded:
                return True
    return False


# -- the guard ---------------------------------------------------------------


class GuardResult:
    """What the guard made of a record's caller fields.

    ``fields`` is a new dict (the input is never changed); ``redactions`` lists
    ``{"path", "kind"}`` for each secret replaced under ``redact``. A plain
    class (a dataclass costs a capture hook more to import than to use).
    """

    __slots__ = ("fields", "private_spans_removed", "redactions")

    def __init__(self, fields: dict[str, Any], private_spans_removed: int = 0,
                 redactions: list[dict[str, str]] | None = None) -> None:
        self.fields = fields
        self.private_spans_removed = private_spans_removed
        self.redactions: list[dict[str, str]] = redactions if redactions is not None else []

    def __repr__(self) -> str:
        return f"GuardResult({self.fields!r}, {self.private_spans_removed!r}, {self.redactions!r})"


class Guard:
    """Checks a record's caller fields before they are written.

    Args:
        policy: ``"refuse"`` (the default: raise on any secret), ``"redact"``
            (replace each secret with ``[secret:<kind>]``) or ``"off"`` (only
            private spans are removed).
        allow: literal values never reported as secrets (false positives).

    Raises:
        InvalidRecord: an unknown policy.
    """

    def __init__(self, policy: str = "refuse", allow: Iterable[str] = frozenset()) -> None:
        if policy not in POLICIES:
            raise InvalidRecord(
                f"secrets policy {policy!r} is not known; expected one of {', '.join(POLICIES)}",
                path="policy",
            )
        self.policy = policy
        self.allow = frozenset(allow)

    def untouched(self, fields: dict[str, Any], encoded: bytes | None = None) -> bool:
        """Whether :meth:`apply` would return ``fields`` as they are: no span, no finding.

        A cheap test on the record's JSON that answers for the common case
        (ASCII prose, ids, digests) in a few microseconds; False means "run
        :meth:`apply`", never "there is a secret". ``encoded`` is
        ``orjson.dumps(fields)`` when the caller has it already.

        It is exact by construction, test by test with ``credentials.quiet``
        (the same exit inside find_secrets): every rule needs a secret's name,
        a run of 16 token characters, a ``:`` beside one of
        ``credentials.COLON_HINTS`` (a URL, ``-u``, a key's name, ``Basic``),
        an ``=`` beside one of ``credentials.EQUALS_HINTS`` (a key's name,
        ``sig=``, ``Basic``), a provider's prefix (a key split by whitespace
        has no long run: ``credentials.SPLIT_HINTS``), a character outside
        ASCII (the normalised text is scanned too), or 4,096 characters; a
        private span needs ``<``; the secret-name rule for values needs a
        nested key with a secret's name. In the JSON there is one ``:`` per
        key, and its punctuation splits runs; the escapes of a newline, a tab
        or a quote only lengthen runs or add a letter, so they are let
        through (any other escape is not). Let through besides: a whole
        string that is an RFC 3339 UTC timestamp (its two ``:``), and a whole
        string of 64 lowercase hex digits (a digest, as in an import's
        provenance); no rule reports either outside a secret-named key.
        A URL's "://" and the runs in its tail are let through on the
        terms credentials.URL_HINTS sets out (a scheme before it, no
        userinfo, no webhook or query secret, no rule's hint in the tail).
        """
        if "client_op_id" in fields:
            fields = {k: v for k, v in fields.items() if k not in _UNSCANNED}
            encoded = None
        try:
            data = encoded if encoded is not None else orjson.dumps(fields)
        except TypeError:  # a non-string key, a bad string: apply() or validation names it
            return False
        # The byte tests first, most telling first: a record that needs the
        # full scan should pay as little as possible for having been tested.
        if len(data) >= _LONG_TEXT_CHARS or not data.isascii():
            return False
        # Substring tests on the text as str: ``bytes.__contains__`` first
        # tries its argument as an integer (on 3.11, a TypeError raised and
        # cleared on every test, a dozen tests a record). The regexes and
        # translations stay on the bytes, where they are the faster.
        text = data.decode("ascii")
        if "<" in text:
            return False
        if "\\" in text and (
            "\\\\" in text
            or text.count("\\") != text.count("\\n") + text.count("\\t") + text.count("\\r") + text.count('\\"')
        ):
            # An escape other than a newline's, a tab's, a return's or a quote's. Those
            # only lengthen a run or add a letter before a word: the tests below stay safe.
            return False
        url = "://" in text
        folded = text.lower()
        if self.policy != "off":
            runs = data
            if url:
                # A URL's tail may hold runs of 16; a rule's match there starts with one of its hints, looked
                # for in the tails alone below. Outside the tails, every match is a run of 16 as before.
                if "@" in text and _URL_USERINFO.search(data) is not None:
                    return False
                parts = _URL_TAIL.split(data)  # the text between the tails, and the tails: one pass
                runs = b" ".join(parts[0::2])
                if runs.find(b"://") >= 0 and _TAIL_START.search(runs) is not None:
                    return False  # a tail after no scheme
                tails = b" ".join(parts[1::2])
            # Runs of token characters, as "a"s: a substring test finds one of
            # 16 without splitting the text (find(), not ``in``: see above).
            if runs.translate(_RUN_CHARS).find(_RUN_16) >= 0 and (
                _DIGEST_STRING.sub(b'""', runs).translate(_RUN_CHARS).find(_RUN_16) >= 0
            ):
                return False
            if ("pass" in folded or "pwd" in folded or "secret" in folded or "token" in folded or "credential" in folded) and (
                url or NAME_BEFORE_VALUE.search(folded) is not None
            ):  # with a URL, any name: a query parameter's (_generic's) may run on ("?tokenId=")
                return False
            if "=" in text and ("key" in folded or "sig=" in folded or "basic" in folded):
                return False  # "api_key=", "sig=", "Basic ...=": an assignment that may hold a secret
            # A provider's prefix: its key may be split by whitespace (credentials._SPLIT_STARTS).
            if (
                ("A" in text and starts_at(text, "A", SPLIT_HINTS))
                or ("_" in text and _SPLIT_UNDERSCORE.search(data) is not None)
                or ("-" in text and _SPLIT_DASH.search(data) is not None)
            ):
                return False
            if url and (
                "-u " in folded or ("=" not in text and ("key" in folded or "basic" in folded)) or _url_hints(tails)
            ):  # (with an "=", "key" and "basic" were looked for above)
                return False  # the colon's hints in the text; _generic's URL checks and the rules' hints in the tails
        keys = len(fields)
        if "[" in text or text.count("{") > 1:  # a nested value (or a bracket in a string): count its keys
            for value in fields.values():
                if type(value) in _NESTED:
                    inner = _keys_inside(value, 1)
                    if inner is None:
                        return False  # too deep (apply() says so) or a secret-named key
                    keys += inner
        if self.policy == "off" or url:
            return True  # a URL's colon hints were judged above, with the other colons'
        colons = text.count(":")
        if colons == keys or colons == keys + 2 * len(_TIMESTAMP_STRING.findall(data)):
            return True
        # More colons than keys: in the text ("Caroline: ...", "at 10:30"). A
        # colon matters only beside one of COLON_HINTS, a "key" only as
        # NAMED_KEY names one (credentials.quiet); a URL's "://" was judged above.
        return not ("-u " in folded or "basic" in folded or ("key" in folded and NAMED_KEY.search(folded) is not None))

    def apply(self, fields: dict[str, Any]) -> GuardResult:
        """Remove private spans and act on secrets; return the fields to store.

        ``fields``: the caller-set part of a record (``text``, ``body``,
        ``scope``, ... and every caller field: dict values, list items and dict
        keys). First the private spans go, whatever the policy (any case,
        nested, an unclosed one to the end of its string); then what is left is
        scanned by ``credentials.find_secrets``, plus a value under a
        secret-named dict key: ``refuse`` raises, ``redact`` puts
        ``[secret:<kind>]`` in each secret's place, ``off`` only removes spans.
        Findings name field paths (``text``, ``fields.<key>.<key>[i]``; a key
        that is a secret in its redacted form), never a value;
        ``client_op_id`` is not scanned.

        Raises:
            SecretDetected: under ``refuse``, naming the first field path and
                kind found (never the value); nothing else happens.
            InvalidRecord: nesting deeper than ``limits.DEPTH_MAX``.
        """
        walk = _Walk(self)
        out: dict[str, Any] = {}
        for key, value in fields.items():
            if key in _UNSCANNED:
                out[key] = value
                continue
            if key in _API_FIELDS:
                new_key, path = key, key
            elif isinstance(key, str):
                new_key, shown = walk.key(key, "fields")
                path = f"fields.{shown}"
            else:
                new_key, path = key, f"fields.{key}"
            out[_unique(out, new_key)] = walk.value(value, path, 0)
        if walk.findings and self.policy == "refuse":
            path, kind = walk.findings[0]
            more = len(walk.findings) - 1
            others = f" and {more} more" if more else ""
            raise SecretDetected(
                f"secret detected in {path}: looks like {kind}{others}; nothing was written; "
                "remove it, wrap it in <private>…</private>, or store it redacted (RETAINED_SECRETS=redact)",
                path=path,
                kind=kind,
                findings=[{"path": p, "kind": k} for p, k in walk.findings],
            )
        redactions = [{"path": p, "kind": k} for p, k in walk.findings] if self.policy == "redact" else []
        return GuardResult(out, walk.spans, redactions)


class _Walk:
    """One pass over a record's fields: builds the cleaned copy and collects findings."""

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.spans = 0
        self.findings: list[tuple[str, str]] = []

    def text(self, text: str, path: str, name: str | None = None) -> tuple[str, str]:
        """Return the string to store and the string safe to show in a path."""
        if len(text) < 8 and "<" not in text:
            # Nothing to remove, and no rule reports a value this short (find_secrets
            # and the secret-name rule both start at 8 characters): most fields
            # of a record (kind, scope, short names) end here.
            return text, text
        text, spans = remove_private(text)
        self.spans += spans
        if self.guard.policy == "off":
            return text, text
        found = find_secrets(text, self.guard.allow)
        # A value stored under a secret-looking key: {"password": "..."}.
        # A JSON value is a literal, never code; prose (with spaces) is not a secret.
        if (
            name is not None
            and not found
            and _key_name().search(name if name.isascii() else normalise(name))
            and text not in self.guard.allow
            and not any(ch.isspace() for ch in text)
            and _assigned_value(text, literal=True)
        ):
            found = [Finding(0, len(text), "assigned_secret")]
        if not found:
            return text, text
        self.findings.extend((path, f.kind) for f in found)
        parts: list[str] = []
        at = 0
        for f in found:
            parts.append(text[at : f.start])
            parts.append(f"[secret:{f.kind}]")
            at = f.end
        parts.append(text[at:])
        redacted = "".join(parts)
        return (redacted if self.guard.policy == "redact" else text), redacted

    def key(self, key: str, path: str) -> tuple[str, str]:
        return self.text(key, f"{path} (a key)")

    def value(self, value: Any, path: str, depth: int, name: str | None = None) -> Any:
        if isinstance(value, str):
            return self.text(value, path, name)[0]
        if isinstance(value, dict):
            self._check_depth(path, depth)
            out: dict[Any, Any] = {}
            for key, item in value.items():
                if isinstance(key, str):
                    new_key, shown = self.key(key, path)
                    out[_unique(out, new_key)] = self.value(item, f"{path}.{shown}", depth + 1, key)
                else:
                    out[key] = self.value(item, f"{path}.{key}", depth + 1)
            return out
        if isinstance(value, (list, tuple)):
            self._check_depth(path, depth)
            items = [self.value(item, f"{path}[{i}]", depth + 1, name) for i, item in enumerate(value)]
            return items if isinstance(value, list) else tuple(items)
        return value

    @staticmethod
    def _check_depth(path: str, depth: int) -> None:
        if depth >= limits.DEPTH_MAX:
            raise InvalidRecord(
                f"field {path}: nested deeper than {limits.DEPTH_MAX} levels; flatten the value; nothing was written",
                path=path,
            )


def _unique(out: dict[Any, Any], key: Any) -> Any:
    """A redacted key that collides with one already there gets a numbered suffix."""
    if key not in out:
        return key
    n = 2
    while f"{key}#{n}" in out:
        n += 1
    return f"{key}#{n}"

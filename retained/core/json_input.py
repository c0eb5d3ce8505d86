"""JSON text a caller gave (a ``--field`` value, an import line): parsed with every integer exact.

One parser for every place caller JSON enters: orjson reads an integer beyond
64 bits as a float, which would store a different number and report success;
here it stays an int, so ``record.make_content`` refuses it by the one
integer rule (``limits.INT_MIN`` .. ``limits.INT_MAX``).

``find`` names the first bad value in a parsed tree: the one walk behind
"field meta.name: holds a lone surrogate" in the store and in the MCP
server's answer to a line its protocol reader refused.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any

import orjson

from retained import limits

# orjson is exact from -2**63 to 2**64 - 1: past them an integer has 20 digits, or 19 after a minus sign:
# a digit or a minus, then 19 digits (one class first: the regex engine skips ahead to it, which an
# alternation of the two made it give up, a third of an import's validation).
_LONG_DIGITS = re.compile(rb"[-\d]\d{19}")


class NotJSON(ValueError):
    """Text that ``loads_exact`` cannot read; ``str()`` says why ("not JSON", "number out of range")."""


def _float_in_range(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJSON("number out of range: too large for a 64-bit float; store it as a string")
    return value


def _no_constant(name: str) -> Any:
    raise NotJSON(f"not JSON: {name} is not a JSON number; store a string or null")


def loads_exact(data: bytes | str) -> Any:
    """Parse JSON text that a caller gave, keeping every integer exact.

    A number past a float's range (``1e400``) or an integer with more digits
    than Python converts is "number out of range"; NaN and Infinity are not
    JSON. A lone surrogate escape is kept, and refused by name when the
    record is encoded.

    Raises:
        NotJSON: the text does not parse; its message says why.
    """
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        pass  # the standard parser below says why, or keeps what orjson refuses (a lone surrogate escape)
    else:
        # orjson is exact within 64 bits; an integer beyond them matches _LONG_DIGITS.
        if not _LONG_DIGITS.search(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")):
            return value
    try:
        return json.loads(data, parse_float=_float_in_range, parse_constant=_no_constant)
    except NotJSON:
        raise
    except RecursionError:
        raise NotJSON(f"not JSON: nested too deep (the store keeps at most {limits.DEPTH_MAX} levels)") from None
    except UnicodeDecodeError:
        raise NotJSON("not JSON: the bytes are not UTF-8") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise NotJSON("number out of range: an integer with thousands of digits; store it as a string") from None
        raise NotJSON("not JSON") from None


def lone_surrogate(value: Any) -> str | None:
    """``U+D800``-style name of the first lone surrogate in a string (not text, cannot be UTF-8), or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return f"U+{ord(value[exc.start]):04X}"
    return None


def find(value: Any, problem: Callable[[Any], str | None], path: str = "") -> tuple[str, str] | None:
    """The first value or key in a parsed JSON tree for which ``problem`` gives a reason: ``(path, reason)``.

    Depth first, each key before its value. A path reads ``meta.tags[2]``; a
    key reads ``meta.k (a key)``, a lone surrogate in it shown escaped.
    """
    reason = problem(value)
    if reason is not None:
        return path, reason
    if isinstance(value, dict):
        for key, item in value.items():
            shown = key.encode("utf-8", "backslashreplace").decode() if isinstance(key, str) else str(key)
            inner = f"{path}.{shown}" if path else shown
            found = find(key, problem, f"{inner} (a key)") or find(item, problem, inner)
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = find(item, problem, f"{path}[{i}]")
            if found:
                return found
    return None

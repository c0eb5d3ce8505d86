"""Credential detection: which parts of a string are secrets, and of what kind.

Pure: no I/O, no environment. :func:`find_secrets` finds, in one string,
provider formats, JWTs, PEM private-key blocks, passwords in URLs and in
``curl -u``, values assigned to secret-looking names, and long random-looking
tokens (:func:`looks_random`); docs/secrets.md lists the kinds. The write
guard (guard.py) applies it to every string of a record.

>>> [(f.kind, f.end - f.start) for f in find_secrets("deploy key AKIA" + "ABCDEFGHIJ234567 today")]
[('aws_access_key', 20)]
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import math
import re
import unicodedata
from collections.abc import Callable, Iterable
from typing import AnyStr, NamedTuple, cast

from retained.errors import InvariantBroken

__all__ = ["GENERIC_CHARS_MAX", "GENERIC_CHARS_MIN", "Finding", "find_secrets", "looks_random"]

# A random-looking token shorter than this is not flagged by shape alone:
# Stripe object ids, ULIDs, YouTube ids and short hashes live below it, and
# generic API keys (32, 40, 64 chars) above it.
GENERIC_CHARS_MIN = 32
# A base64 run this long or longer is taken for data (an image, a file), not a
# credential; the credentials this long (PEM keys, JWTs) have their own rules.
GENERIC_CHARS_MAX = 160


class _Lazy:
    """A pattern compiled on first use: a text that needs no rule never pays for compiling them all."""

    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    def __getattr__(self, name: str) -> object:
        return getattr(self.compiled(), name)

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(*self._args)
        return self._compiled


def compiled(pattern: re.Pattern[str]) -> re.Pattern[str]:
    """The compiled pattern behind ``pattern``, a lazy one compiled now: for a module that holds it across calls.

    A name imported from here keeps the lazy wrapper even after
    ``_compile_lazy``; each use through it is a Python-level lookup.
    """
    return pattern.compiled() if isinstance(pattern, _Lazy) else pattern


def _lazy(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return cast("re.Pattern[str]", _Lazy(pattern, flags))


def _compile_lazy() -> None:
    """Put the compiled patterns in place of the lazy ones (once a text needs them: no lookup per call after that)."""
    here = globals()
    for name, value in list(here.items()):
        if isinstance(value, _Lazy):
            here[name] = re.compile(*value._args)


class Finding(NamedTuple):
    """One secret in one string: where it is (``start``/``end``) and what it is."""

    start: int
    end: int
    kind: str


def _entropy(token: str) -> float:
    counts: dict[str, int] = {}
    for ch in token:
        counts[ch] = counts.get(ch, 0) + 1
    n = len(token)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_CAMEL_PIECES = _lazy(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+")
_HEX_ONLY = _lazy(r"[0-9a-fA-F\-]+")

# Letter pairs common in English (and so in names made of English words):
# about a third of all pairs, yet nine in ten of the pairs in ordinary words.
# A piece of random letters rarely has most of its pairs in this set.
_COMMON_PAIRS = frozenset(
    "th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le "
    "ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur ca el ta la ns di fo ho pe ec "
    "pr no ct us ac ot il tr ly nc et ut ss so rs un lo wa ge ie wh ee wi em ad ol rt po we na "
    "ul ni ts mo ow pa im mi ai sh ir su id os iv ia am fi ci vi pl ig tu ev ld ry mp fe bl ab "
    "gh ty op wo sa ay ex ke fr oo av ag if ap gr od bo sp rd do uc bu ei ov by rm ep tt oc fa "
    "ef cu rn sc gi da yo cr cl du ga qu ue ff ba ey ls va um pp ua up lu go ht ru ug ds lt pi "
    "rc rr eg au ck ew mu br bi pt ak pu ui rg ib tl ny ki rk ys ob mm fu ph og ms ye ud mb ip "
    "ub oi rl gu dr hr cc tw ft wn nu xt ks lb rv nk sk sl sm sn sw ze iz oa oe ya yp bj oj je "
    "ax ix ox yn ym xp ps dl nv ky ws sy".split()
)


def _word_chars(token: str, piece_min: int = 4, common_min: float = 0.75) -> int:
    """How many letters of ``token`` sit in word-like pieces (identifier parts).

    Pieces are split at case changes and non-letters (``getUserID2fa`` gives
    get, User, ID, fa). Pieces of random text are short, a case flip or a
    digit every two or three characters, and their letter pairs are mostly
    uncommon; a piece of ``piece_min`` or more letters whose pairs are mostly
    common ones is taken for a word.
    """
    total = 0
    for piece in _CAMEL_PIECES.findall(token):
        n = len(piece)
        if n < piece_min:
            continue
        low = piece.lower()
        common = sum(low[i : i + 2] in _COMMON_PAIRS for i in range(n - 1))
        if common >= common_min * (n - 1):
            total += n
    return total


_SEPARATORS = _lazy(r"[/\-_]+")


def _structured(token: str) -> bool:
    """Whether a token with separators is mostly words, numbers, hex digests and short parts.

    A path or a name (``pytest-of-dev/pytest-12``, ``ThinkPad-X1-Carbon``) is
    made of such parts; a random base64url string that happens to contain a
    ``-`` or ``_`` is not.
    """
    parts = [p for p in _SEPARATORS.split(token) if p]
    if len(parts) < 3:
        return False
    plain = 0
    for part in parts:
        letters = sum(ch.isalpha() for ch in part)
        if letters <= 3 or _HEX_ONLY.fullmatch(part) or _word_chars(part, 3) >= letters * 0.6:
            plain += len(part)
    return plain >= 0.6 * sum(len(p) for p in parts)


def looks_random(token: str, min_chars: int = GENERIC_CHARS_MIN) -> bool:
    """Whether ``token`` looks like a machine-made secret rather than an identifier.

    True for long strings that mix character classes with high entropy and few
    word-like pieces; False for hex-only strings (digests, SHAs, UUIDs) and
    for identifiers (snake, camel, kebab case), paths and prose.

    >>> looks_random("q8Xr2LmZ0vTn5KfWb7YcJd4HsPa1GeUi")
    True
    >>> looks_random("getUserAccountPreferencesForTenant2Factor")
    False
    """
    n = len(token)
    if n < min_chars:
        return False
    if _HEX_ONLY.fullmatch(token):
        return False
    lower = upper = digit = 0
    for ch in token:
        if "a" <= ch <= "z":
            lower += 1
        elif "A" <= ch <= "Z":
            upper += 1
        elif "0" <= ch <= "9":
            digit += 1
    letters = lower + upper
    classes = (lower > 0) + (upper > 0) + (digit > 0)
    if classes < 2 or letters == 0:
        return False
    if classes == 2 and digit == 0:
        # Letters only in two cases: random only if the case flips often.
        flips = sum(1 for a, b in itertools.pairwise(token) if a.isalpha() and b.isalpha() and a.islower() != b.islower())
        if flips < n * 0.3:
            return False
    if _word_chars(token) > letters * 0.45:
        return False
    if _structured(token):
        return False
    steps = sum(1 for a, b in itertools.pairwise(token) if ord(b) - ord(a) in (1, -1))
    if steps > n * 0.3:
        return False  # runs such as ABCDEF... or 0123456789: an alphabet, not a key
    return _entropy(token) >= min(4.2, 0.78 * math.log2(n))


def _random_body(token: str, before: str = "") -> bool:
    """A looser test for the body of a token whose prefix already says "key"."""
    return looks_random(token, min_chars=16) or (
        len(token) >= 16 and _entropy(token) >= 3.5 and _word_chars(token) <= len(token) * 0.3
    )


# A check gets the secret part of a match and, separately, what the match
# holds before it (a name and an operator, for the rules that have context).
_Check = Callable[[str, str], bool]


class _Rule:
    """One provider format: its pattern (compiled on first use), when to run it, and what to check."""

    __slots__ = ("_pattern", "_pattern_ci", "anchored", "check", "flags", "fold", "gate", "hints", "kind", "source",
                 "span_back")

    def __init__(self, kind: str, source: str, check: _Check | None = None, *, hints: tuple[str, ...], fold: bool = False,
                 gate: bool = True, span_back: int = 0, anchored: bool = False, flags: int = 0) -> None:
        self.kind = kind
        self.source = source  # the pattern; compiled by ``pattern`` when a text first needs it
        self.flags = flags
        self.check = check  # applied to the secret span; False drops the match
        self.hints = hints  # the rule runs only if one of these occurs in the text
        self.gate = gate  # check the hints on long texts too (False: the pattern's literal prefix is as fast)
        self.fold = fold  # hints are lower case and checked on the lower-cased text
        self.span_back = span_back  # the secret starts this many characters before the match
        self.anchored = anchored  # matched only where a hint occurs (found with str.find), not searched
        self._pattern: re.Pattern[str] | None = None
        self._pattern_ci: re.Pattern[str] | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        # Compiled when first needed: most texts are quiet (no rule runs), and a
        # hook process that writes one turn should not compile every format.
        if self._pattern is None:
            self._pattern = re.compile(self.source, self.flags)
        return self._pattern

    @property
    def pattern_ci(self) -> re.Pattern[str] | None:
        """For ``fold`` rules: the same pattern, ignoring case (None for the others)."""
        if self._pattern_ci is None and self.fold:
            self._pattern_ci = re.compile(self.source, self.flags | re.IGNORECASE)
        return self._pattern_ci


def compile_rules() -> None:
    """Compile every rule's pattern now (a long-running server warms up with this; a hook compiles what it uses)."""
    _compile_lazy()
    for rule in _RULES:
        rule.pattern  # noqa: B018 -- the property compiles
        rule.pattern_ci  # noqa: B018


_PLACEHOLDER = _lazy(
    r"(?i)(?:x+|\*+|\.+|_+|-+|#+|0+|1234(?:5678?)?9?|changeme|dummy|redacted|hidden"
    r"|password|passwd|pass|pwd|secret|token|none|null|nil|true|false|undefined"
    r"|(?:your|insert|enter|replace|put|add|my|some|fake|dummy|test)[_\-.][\w.\-]*"
    r"|[\w.\-]*(?:here|example|placeholder|changeme|not[_\-]?needed|not[_\-]?used|unused)[\w.\-]*"
    r"|\$\{?\w+\}?|\$\(.*\)|%\(?\w*\)?[sd]|\{\{.*\}\}|<[^<>]*>|\[secret:\w+\])"
)


def _not_placeholder(value: str, before: str = "") -> bool:
    stripped = value.strip("'\"`")
    if _PLACEHOLDER.fullmatch(stripped):
        return False  # x-es, "changeme", ${VAR}, %(x)s, {{ var }}, <your-key>, [secret:...]
    if stripped[:1] in "${<[(" or stripped[-1:] in "}>)":
        return False  # the start or end of a template expression
    return len(set(stripped)) > 2


_PATH_LIKE = _lazy(r"(?:\.{0,2}/|~/|[A-Za-z]:\\)[\w.\-/\\]*")


def _looks_like_path(value: str) -> bool:
    """./password.txt, /run/secrets/db, ~/.ssh/id_ed25519: a file name, not its content."""
    if not _PATH_LIKE.fullmatch(value):
        return False
    parts = [p for p in re.split(r"[/\\.]", value) if p]
    return all(len(p) < 4 or _word_chars(p, 3, 0.6) >= sum(ch.isalpha() for ch in p) * 0.6 for p in parts)


def _decoded(token: str) -> str | None:
    """The text a base64 token encodes, if it encodes printable UTF-8 text."""
    body = token.rstrip("=")
    if len(body) % 4 == 1:
        return None
    padded = body + "=" * (-len(body) % 4)
    try:
        raw = base64.b64decode(padded, altchars=b"-_" if ("-" in body or "_" in body) else None, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if not text or not all(ch.isprintable() or ch in "\n\r\t" for ch in text):
        return None
    return text


def _basic_credentials(token: str, before: str = "") -> bool:
    decoded = _decoded(token)
    return decoded is not None and ":" in decoded and len(decoded) > 2


_URL_PLACEHOLDER = _lazy(r"(?i)(?:foo|bar|baz|qux|pass(?:word)?|secret|test|guest|demo|admin|user(?:name)?)")


def _url_password(value: str, before: str = "") -> bool:
    # "[secret:" before it: the colon is a redaction marker's (the user part held a disguised colon).
    return _not_placeholder(value) and not _URL_PLACEHOLDER.fullmatch(value) and not before.endswith("[secret:")


_IDENTIFIER_PATH = _lazy(r"[A-Za-z_][A-Za-z0-9_]*(?:(?:\.|::|->)[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?")


_PASSWORD_LIKE = _lazy(r"[A-Za-z0-9!@#$%^&*_\-+.~?]{8,}")


def _mixed(value: str) -> bool:
    """Upper and lower case, and a digit or a symbol: the shape of a password."""
    upper = any(ch.isupper() for ch in value)
    lower = any(ch.islower() for ch in value)
    other = any(not ch.isalpha() for ch in value)
    return upper and lower and other and _word_chars(value, 3, 0.6) < sum(ch.isalpha() for ch in value) * 0.6


_ENV_NAME = _lazy(r"[A-Z0-9_]+=[\"']?\Z")


def _assigned_value(value: str, before: str = "", *, literal: bool = False) -> bool:
    """Whether a value assigned to a secret-looking name is itself a secret.

    ``literal``: the value cannot be code (a JSON value under a key named like
    a secret); an env-file line (``DB_PASSWORD=...``) counts as literal too.
    Without an operator ("password is X", "passwd X") only a value that mixes
    cases and digits or symbols counts: prose and commands follow such names.
    """
    value = value.rstrip(".,:;!?")
    if len(value) < 8 or not _not_placeholder(value):
        return False
    if before and not any(op in before for op in ":="):
        return _PASSWORD_LIKE.fullmatch(value) is not None and _mixed(value)
    if any(ch in value for ch in "()[]{}<>"):
        return False  # a call or an expression, not a literal
    if literal or _ENV_NAME.match(before):
        return True
    if _looks_like_path(value):
        return False
    if len(value) >= 16 and _HEX_ONLY.fullmatch(value) and not value.isdigit():
        return True  # a hex key: its letters can spell pieces such as "bead" or "face"
    # os.environ, settings.API_KEY, rsa.RSAPrivateKey, get_secret: identifiers, not keys.
    return not (_IDENTIFIER_PATH.fullmatch(value) and _word_chars(value, 3, 0.6) >= sum(ch.isalpha() for ch in value) * 0.6)


# Secret-looking names: the end of an identifier such as DB_PASSWORD or
# stripe.api_key. Matched case-insensitively.
_SECRET_NAME = (
    r"(?:pass(?:word|wd|phrase)?|pwd|secret(?:[_.-]?key)?|api[_.-]?key|apikey|access[_.-]?key(?:[_.-]?id)?"
    r"|(?:auth|access|refresh|bearer|session|api|bot|oauth)[_.-]?token|token|client[_.-]?secret"
    r"|private[_.-]?key|credentials?|signing[_.-]?key|encryption[_.-]?key)"
)
_SECRET_KEY_NAME = _lazy(r"(?:^|[_.\-\s])" + _SECRET_NAME + r"\Z", re.IGNORECASE)

# The names assigned_secret reads a value after (with "key", which needs _KEY_PREFIX before it); the cheap exits
# look for the same names (NAME_BEFORE_VALUE).
_VALUE_NAMES = r"pass(?:word|wd|phrase)?|pwd|secret(?:[_.\-]?key)?|token|credentials?"

_B64 = r"A-Za-z0-9+/"
_URLSAFE = r"A-Za-z0-9_\-"

# Ordered: the first rule to claim a span keeps it, so specific rules come
# before the general ones. ``(?P<s>...)`` marks the secret part of a match
# when the match carries context around it. ``hints`` are substrings a match
# must contain (checked on the lower-cased text when ``fold``): a rule whose
# hints are all absent is not run, which keeps the cost per write low.
# Each pattern starts with a literal so that the regex engine can skip
# ahead to it; boundaries are lookbehinds placed after the literal.
# A ``fold`` rule is written in lower case and runs on the lower-cased
# text (the engine then compares plain characters, not case classes); pattern_ci is for text
# whose length changes when lower-cased (a few non-ASCII letters).
_W = r"A-Za-z0-9_"  # an ASCII word character, for boundaries
_RULES: tuple[_Rule, ...] = (
    _Rule(
        # Armour in any case, with any number of dashes or none, words split by
        # spaces ("BEGIN RSA  PRIVATE KEY") and ended by dashes or a line
        # break (not prose: "begin the private key rotation"); the body a run of 32 base64
        # characters or three pieces of 16 or more split by whitespace. The
        # span starts at "begin": the dashes before it are taken in by find_secrets.
        "private_key",
        r"begin[ \t]+(?:[a-z0-9]+[ \t]+){0,3}?private[ \t]*key(?:[ \t]*block)?[ \t]*(?:-+|(?=\r?\n))"
        r".{0,400}?(?:[a-z0-9+/=]{32}|(?:[a-z0-9+/=]{16,}\s+){2}[a-z0-9+/=]{16})"
        r".*?(?:-*[ \t]*end[ \t]+(?:[a-z0-9]+[ \t]+){0,3}?private[ \t]*key(?:[ \t]*block)?[ \t]*-*|\Z)",
        hints=("private",),
        fold=True,
        flags=re.DOTALL,
    ),
    _Rule(
        "aws_access_key",
        r"(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])(?<![A-Za-z0-9]....)[A-Z0-9]{16}(?![A-Za-z0-9])",
        hints=("AKIA", "ASIA", "ABIA", "ACCA", "A3T"), gate=False,
    ),
    _Rule(
        "aws_secret_key",
        r"(?:aws|amazon)[\w.\-]{0,30}?secret[\w.\-]{0,20}[\"']?\s*(?:[:=]|=>|:=)?\s*[\"']?"
        r"(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        hints=("aws", "amazon"),
        fold=True,
    ),
    _Rule("gcp_api_key", rf"AIza(?<![{_W}\-]AIza)[{_URLSAFE}]{{35}}(?![{_W}\-])", hints=("AIza",), gate=False),
    _Rule("gcp_oauth_secret", rf"GOCSPX-(?<![{_W}\-]GOCSPX-)[{_URLSAFE}]{{28}}(?![{_W}\-])", hints=("GOCSPX-",), gate=False),
    _Rule(
        "azure_storage_key",
        rf"accountkey=(?P<s>[{_B64}]{{20,}}={{0,2}})",
        hints=("accountkey=",),
        fold=True,
    ),
    _Rule(
        "azure_shared_access_key",
        rf"sharedaccesskey=(?P<s>[{_B64}]{{20,}}={{0,2}})",
        hints=("sharedaccesskey=",),
        fold=True,
    ),
    _Rule("azure_sas_token", r"sig=(?<=[?&;]sig=)(?P<s>[A-Za-z0-9%+/=]{20,})", hints=("sig=",), fold=True),
    _Rule(
        "azure_storage_key",
        rf"==(?<![{_B64}][{_B64}]{{86}}==)(?<=(?<!sha512-)(?<!sha384-)(?<!base64,)[{_B64}]{{86}}==)(?![{_B64}=])",
        _random_body,
        hints=("==",), gate=False,
        span_back=86,
    ),
    _Rule(
        "azure_client_secret",
        r"Q~(?<=(?<![\w~.\-])[A-Za-z0-9_~.\-]{3}[0-9]Q~)[A-Za-z0-9_~.\-]{31,34}(?![\w~.\-])",
        hints=("Q~",), gate=False,
        span_back=4,
    ),
    _Rule(
        "github_token",
        rf"gh[pousr]_(?<![{_W}]....)[A-Za-z0-9]{{36,251}}(?![{_W}])",
        hints=("ghp_", "gho_", "ghu_", "ghs_", "ghr_"), gate=False,
    ),
    _Rule("github_token", rf"github_pat_(?<![{_W}]github_pat_)[{_W}]{{40,251}}(?![{_W}])", hints=("github_pat_",), gate=False),
    _Rule(
        "gitlab_token",
        rf"gl(?<![{_W}\-]gl)(?:pat|dt|rt|ptt|soat|cbt|oas|imt|ffct|ft|agent)-[{_URLSAFE}.]{{20,}}",
        hints=tuple(f"gl{p}-" for p in ("pat", "dt", "rt", "ptt", "soat", "cbt", "oas", "imt", "ffct", "ft", "agent")),
        gate=False,
    ),
    _Rule(
        "slack_webhook",
        r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+\-]{20,}",
        hints=("hooks.slack.com",), gate=False,
    ),
    _Rule(
        "slack_token",
        r"(?:xox[abposre]-[A-Za-z0-9\-]{15,}|xapp-[0-9]-[A-Za-z0-9\-]{20,})",
        hints=(*(f"xox{c}-" for c in "abposre"), "xapp-"), gate=False,
    ),
    _Rule(
        "stripe_key",
        rf"[sr]k_(?:live|test)_(?<![{_W}]...(?:live|test)_)[A-Za-z0-9]{{16,}}(?![{_W}])",
        hints=("k_live_", "k_test_"),
    ),
    _Rule("stripe_key", rf"whsec_(?<![{_W}]whsec_)[A-Za-z0-9]{{24,}}(?![{_W}])", hints=("whsec_",), gate=False),
    _Rule("anthropic_key", rf"sk-ant-(?<![{_W}\-]sk-ant-)[{_URLSAFE}]{{32,}}", hints=("sk-ant-",), gate=False),
    _Rule(
        "openai_key",
        rf"sk-(?<![{_W}\-]sk-)[A-Za-z0-9]{{20}}T3BlbkFJ[A-Za-z0-9]{{20}}(?![{_W}\-])",
        hints=("sk-",), gate=False,
    ),
    _Rule(
        "openai_key",
        rf"sk-(?<![{_W}\-]sk-)(?:proj-|svcacct-|admin-|None-)?(?P<s>[{_URLSAFE}]{{20,}})",
        _random_body,
        hints=("sk-",), gate=False,
    ),
    _Rule("npm_token", rf"npm_(?<![{_W}]npm_)[A-Za-z0-9]{{36}}(?![{_W}])", hints=("npm_",), gate=False),
    _Rule("pypi_token", rf"pypi-AgEIcHlwaS5vcmc[{_URLSAFE}]{{50,}}", hints=("pypi-AgEI",), gate=False),
    _Rule("huggingface_token", rf"hf_(?<![{_W}]hf_)[A-Za-z]{{34}}(?![{_W}])", hints=("hf_",), gate=False),
    _Rule(
        "sendgrid_key",
        rf"SG\.(?<![{_W}.]SG\.)[{_URLSAFE}]{{22}}\.[{_URLSAFE}]{{43}}(?![{_W}])",
        hints=("SG.",), gate=False,
    ),
    _Rule(
        "jwt",
        rf"eyJ(?<![{_W}\-]eyJ)[{_URLSAFE}]{{10,}}\.eyJ[{_URLSAFE}]{{10,}}\.[{_URLSAFE}]{{10,}}",
        hints=("eyJ",), gate=False,
    ),
    _Rule(
        "url_password",
        r"://(?<=[A-Za-z0-9]://)[^\s:/?#@\"'<>]{1,256}:(?P<s>[^\s/?#@\"'<>]{1,256})@",
        _url_password,
        hints=("://",), gate=False,
    ),
    _Rule(
        "basic_auth",
        r"-u[ \t]+(?<![\w-]-u[ \t])[^\s:'\"]+:(?P<s>[^\s'\"]{4,})",
        _not_placeholder,
        hints=("-u ",),
    ),
    _Rule("mailgun_key", rf"key-(?<![{_W}\-]key-)[0-9a-f]{{32}}(?![{_W}])", hints=("key-",)),
    _Rule("shopify_token", rf"shp(?:at|ca|pa|ss)_(?<![{_W}]shp.._)[0-9a-fA-F]{{32}}(?![{_W}])", hints=("shpat_", "shpca_", "shppa_", "shpss_")),
    _Rule(
        "basic_auth",
        r"basic\s+(?P<s>[A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])",
        _basic_credentials,
        hints=("basic",),
        fold=True,
    ),
    _Rule(
        "bearer_token",
        r"bearer\s+(?P<s>[A-Za-z0-9._~+/\-]{16,}=*)",
        _not_placeholder,
        hints=("bearer",),
        fold=True,
    ),
    _Rule(
        "assigned_secret",
        rf"(?:{_VALUE_NAMES}|key(?:[_.\-]?id)?)"
        r"[\"'`]?(?:\s*(?:=>|:=|[:=])\s*|[ \t]+(?:(?:is|was)[ \t]+)?)[\"'`]?(?P<s>[^\s\"'`,;]{8,200})",
        _assigned_value,
        hints=("pass", "pwd", "secret", "key", "token", "credential"),
        fold=True,
        anchored=True,
    ),
)

# Candidate tokens for the generic rule: runs of base64 / base64url letters.
_TOKEN = _lazy(rf"[{_URLSAFE}+/]{{{GENERIC_CHARS_MIN},}}=*")
# Tokens that look random but are public by design, or are hashes: Stripe
# publishable keys, SRI hashes, file headers in base64 (PNG, JPEG, GIF, WebP,
# PDF, SVG), SSH public keys, IPFS content ids, bech32 addresses.
_PUBLIC_TOKEN = _lazy(
    r"(?:pk_(?:live|test)_|sha(?:1|256|384|512)[-:=]|iVBORw0KGgo|/9j/|R0lGOD|UklGR|JVBERi0|PHN2Zy"
    r"|AAAA(?:B3NzaC1|C3NzaC1|E2VjZHNh)|Qm[1-9A-HJ-NP-Za-km-z]{44}\Z|bafy[a-z2-7]{50,}\Z|bc1[qp][a-z0-9]{38,58}\Z)"
)
# What may precede a public token: a data URI, a hash algorithm (SRI, go.sum
# "h1:"), an integrity attribute, an AWS request id header.
_PUBLIC_BEFORE = _lazy(
    r"(?:base64,|sha(?:1|256|384|512)[-:=]|\bh1:|integrity=[\"']?|x-amz-id-2:\s?)\Z", re.IGNORECASE
)
_URL_REST = _lazy(r"://[^\s\"'<>]+")
_SCHEME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
# Public keys and certificates are not secrets: their bodies are skipped.
_PUBLIC_PEM = _lazy(
    r"-----BEGIN (?![A-Z0-9 ]*PRIVATE)[A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|\Z)", re.DOTALL
)
_QUERY_WORDS = ("token", "secret", "key", "sig", "password", "auth", "credential")
_URL_QUERY_SECRET = _lazy(
    rf"(?i)[?&#](?:[\w.\-]*(?:{'|'.join(_QUERY_WORDS)}|signature)[\w.\-]*)=([^&#\s\"'<>]+)"
)


def _generic(text: str, taken: _Spans, allow: frozenset[str], depth: int) -> Iterable[Finding]:
    """Long random-looking tokens no specific rule claimed."""
    in_url: list[tuple[int, int]] = []
    if "-----BEGIN" in text:
        in_url.extend(m.span() for m in _PUBLIC_PEM.finditer(text))
    for url in _URL_REST.finditer(text) if "://" in text else ():
        begin = url.start()
        while begin > 0 and url.start() - begin < 20 and text[begin - 1] in _SCHEME_CHARS:
            begin -= 1  # back over the scheme: https, git+ssh
        if begin == url.start():
            continue
        in_url.append((begin, url.end()))
        low = url.group().lower()
        if "hook" in low:
            # A webhook URL's path is its credential (Discord, Teams, ...).
            at = url.start()
            for part in re.split(r"([/?#&=])", url.group()):
                if len(part) >= 20 and _random_body(part):
                    yield Finding(at, at + len(part), "webhook_token")
                at += len(part)
        if "=" not in low or not any(w in low for w in _QUERY_WORDS):
            continue  # no parameter that _URL_QUERY_SECRET could match: it needs one of these in its name
        for q in _URL_QUERY_SECRET.finditer(url.group()):
            value = q.group(1)
            if len(value) >= 16 and _not_placeholder(value) and _random_body(value):
                yield Finding(url.start() + q.start(1), url.start() + q.end(1), "high_entropy")
    pieces = [p for p in text.split() if len(p) >= GENERIC_CHARS_MIN]
    if not pieces:
        return  # no run long enough
    in_url.sort()
    skip_starts = [a for a, _ in in_url]
    skip_ends = list(itertools.accumulate((b for _, b in in_url), max))  # spans may nest: a running max
    for tok in _tokens_in(text, pieces, skip_starts, skip_ends):
        start, end = tok.span()
        token = tok.group()
        i = bisect.bisect_right(skip_starts, start)
        if i > 0 and skip_ends[i - 1] > start:
            continue  # ids in URL paths (secrets in URLs are checked above), public PEM bodies
        if token[:1] in "Mb" and not taken.overlaps(start, end) and private_key_body(token):
            yield Finding(start, _blob_end(text, end), "private_key")  # a key's body without its armour
            continue
        if len(token) >= GENERIC_CHARS_MAX:
            continue
        if _HEX_ONLY.fullmatch(token) or taken.overlaps(start, end):
            continue  # digests and ids; or already found by a specific rule
        if _PUBLIC_TOKEN.match(token) or _PUBLIC_BEFORE.search(text, max(0, start - 16), start):
            continue
        if _in_blob(text, start, end):
            continue
        if _path_like(token):
            # A path: each part is judged on its own (a key can still sit in one).
            at = start
            for part in token.split("/"):
                if looks_random(part):
                    yield Finding(at, at + len(part), "high_entropy")
                at += len(part) + 1
            continue
        if not looks_random(token.rstrip("=")):
            continue
        decoded = _decoded(token)
        if decoded is None:
            yield Finding(start, end, "high_entropy")
        elif depth < 1:
            # Base64 of text is encoded text, not a key; it counts only when
            # what it encodes holds a secret (a Kubernetes Secret's data).
            inner = find_secrets(decoded, allow, depth + 1)
            if inner:
                yield Finding(start, end, f"base64_{inner[0].kind}")


def _tokens_in(text: str, pieces: list[str], skip_starts: list[int], skip_ends: list[int]) -> Iterable[re.Match[str]]:
    """``_TOKEN.finditer(text)``, searched only inside ``pieces`` (the text's long whitespace-free pieces, in order).

    A token holds no whitespace, so it lies inside one piece; searching only
    there spares the regex a try at every position of the prose around them
    (a URL or a line of code in a sentence). Each piece is found after the
    one before it: one that held it would have been long too, and found first.
    A piece wholly inside a skipped span (a URL, a public PEM block) is not
    searched: every token in it would be skipped.
    """
    at = 0
    for piece in pieces:
        start = text.find(piece, at)
        at = start + len(piece)
        i = bisect.bisect_right(skip_starts, start)
        if i > 0 and skip_ends[i - 1] >= at:
            continue
        yield from _TOKEN.finditer(text, start, at)


def _path_like(token: str) -> bool:
    """A token with two or more ``/`` that starts like a path or holds words between them."""
    if token.count("/") < 2:
        return False
    if token.startswith(("/", "~", "./", "../")):
        return True
    parts = token.split("/")
    return sum(1 for p in parts if len(p) >= 4 and _word_chars(p, 4) >= 0.6 * len(p)) >= 2


def _in_blob(text: str, start: int, end: int) -> bool:
    """Whether the token is one line of a wrapped base64 block (data, or a PEM body).

    Wrapped base64 has lines of one width (64, 76) and a shorter last line:
    the token must be alone on its line, and the line above must be as long
    (or longer, for a last line), or the line below exactly as long.
    """
    line_start = start
    while line_start > 0 and text[line_start - 1] in " \t\r":
        line_start -= 1
    line_end = end
    while line_end < len(text) and text[line_end] in " \t\r":
        line_end += 1
    if (line_start > 0 and text[line_start - 1] != "\n") or (line_end < len(text) and text[line_end] != "\n"):
        return False  # not alone on its line
    width = end - start
    if line_start > 0:
        above_start = text.rfind("\n", 0, line_start - 1) + 1
        above = text[above_start : line_start - 1].strip()
        if len(above) >= max(48, width) and _TOKEN.fullmatch(above):
            return True
    if line_end < len(text):
        stop = text.find("\n", line_end + 1)
        below = text[line_end + 1 : len(text) if stop == -1 else stop].strip()
        if len(below) == width and width >= 48 and _TOKEN.fullmatch(below):
            return True
    return False


_OPENSSH_MAGIC = b"openssh-key-v1\x00"
_PBES2 = bytes.fromhex("06092a864886f70d01050d")  # the OID of an encrypted PKCS#8 key's scheme
_ARMOUR_DASHES = _lazy(r"-+[ \t]*\Z")


def private_key_body(token: str) -> bool:
    """Whether a base64 token starts as a private key's DER (or an OpenSSH key) does.

    PKCS#1 and SEC 1 keys and PKCS#8 ``PrivateKeyInfo`` are a SEQUENCE whose
    first element is the version, INTEGER 0 or 1, followed by an INTEGER
    (the RSA modulus), a SEQUENCE (the algorithm) or an OCTET STRING (the EC
    key); an encrypted PKCS#8 key names PBES2 near its start. Certificates,
    public keys and other DER start otherwise, and so does random data, but
    for about one token in 10^9.
    """
    head = token[:32]
    try:
        raw = base64.b64decode(head[: len(head) // 4 * 4], validate=True)
    except (binascii.Error, ValueError):
        return False
    if raw.startswith(_OPENSSH_MAGIC):
        return True
    if len(raw) < 8 or raw[0] != 0x30:
        return False
    at = 2
    if raw[1] & 0x80:
        if raw[1] not in (0x81, 0x82):
            return False
        at = 2 + (raw[1] & 0x7F)
    if raw[at : at + 3] in (b"\x02\x01\x00", b"\x02\x01\x01"):
        return len(raw) > at + 3 and raw[at + 3] in (0x02, 0x30, 0x04)
    return _PBES2 in raw


def _blob_end(text: str, end: int) -> int:
    """The end of the wrapped base64 block whose first line ends at ``end``."""
    while True:
        nl = text.find("\n", end, end + 2)  # the line break right after it (\n or \r\n)
        if nl == -1 or text[end:nl].strip():
            return end
        stop = text.find("\n", nl + 1)
        line = text[nl + 1 : len(text) if stop == -1 else stop].rstrip()
        body = line.strip()
        if not body or (_TOKEN.fullmatch(body) is None and _B64_TAIL.fullmatch(body) is None):
            return end
        end = nl + 1 + len(line)


_B64_TAIL = _lazy(r"[A-Za-z0-9+/]{1,31}={0,2}")


# -- disguises: keys split by whitespace, format characters, compatibility forms --

# A provider's key that whitespace splits ("AKIA QX7T Z2K9 ...") still starts
# with its prefix; so does a private key's body (its DER header). The joined
# scan starts where one of these begins a piece of a text.
SPLIT_HINTS = ("AKIA", "ASIA", "AIza")  # tested in any text
# The prefixes with a "_" or "-", by what ends at their first "_" or "-": a
# text is tested at each of its "_" and "-" with one ``endswith`` (`ends_at`).
SPLIT_ENDS = {
    "_": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_", "sk_", "rk_", "whsec_", "npm_", "hf_"),
    "-": ("GOCSPX-", "glpat-", "xoxa-", "xoxb-", "xoxe-", "xoxo-", "xoxp-", "xoxr-", "xoxs-", "xapp-", "sk-", "pypi-"),
}
# Where a split key's run starts (each holds one of SPLIT_HINTS or SPLIT_ENDS
# as guard.untouched looks for them, and one of _SPLIT_GATE as find_secrets does).
_SPLIT_STARTS = (
    *SPLIT_HINTS, "GOCSPX-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-",
    *(f"xox{c}-" for c in "abposre"), "xapp-", "sk_live_", "sk_test_", "rk_live_", "rk_test_", "whsec_", "sk-", "npm_",
    "pypi-AgEI", "hf_",
)
# A private key's body (its DER header), a JWT, a SendGrid key: split only
# where the first piece is 16 characters or more (so a text that holds one
# has a run of 16, and the cheap exits already send it to the full scan).
_SPLIT_HINTS_LONG = ("MII", "MIG", "MC4C", "MHcC", "b3BlbnNzaC1rZXkt", "eyJ", "SG.")
_PIECE = r"A-Za-z0-9_\-+/=.~"
_GAP = r"(?:[ \t]{1,4}|[ \t]*\r?\n[ \t]*)"
_SPLIT = _lazy(
    rf"(?<![A-Za-z0-9_\-+/.~])(?:(?:{'|'.join(map(re.escape, _SPLIT_STARTS))})[{_PIECE}]*"
    rf"|(?:{'|'.join(map(re.escape, _SPLIT_HINTS_LONG))})[{_PIECE}]{{13,}})(?:{_GAP}[{_PIECE}]+){{1,40}}"
)


def ends_at(text: AnyStr, sep: AnyStr, ends: tuple[AnyStr, ...]) -> bool:
    """Whether one of ``ends`` occurs in ``text`` (each ends with ``sep``): one ``endswith`` where ``sep`` occurs.

    Past 64 of ``sep``, the text is searched for each of ``ends`` instead,
    so no text costs a step per character.
    """
    at = text.find(sep)
    for _ in range(64):
        if at == -1:
            return False
        if text.endswith(ends, 0, at + 1):
            return True
        at = text.find(sep, at + 1)
    return at != -1 and any(e in text for e in ends)


def starts_at(text: AnyStr, first: AnyStr, starts: tuple[AnyStr, ...]) -> bool:
    """Whether one of ``starts`` occurs in ``text`` (each starts with ``first``): one ``startswith`` where it occurs."""
    at = text.find(first)
    for _ in range(64):
        if at == -1:
            return False
        if text.startswith(starts, at):
            return True
        at = text.find(first, at + 1)
    return at != -1 and any(h in text for h in starts)


# Bounds on the joined scan, so that a hostile text of many prefixes cannot make it quadratic:
# the runs looked at, the scans of joined pieces, and the length of one run.
_SPLIT_RUNS_MAX = 32
_SPLIT_SCANS_MAX = 96
_SPLIT_CHARS_MAX = 2048
_SPLIT_CHARS_MIN = 20  # the shortest key a provider's rule finds: AKIA and 16


def _in_text(offset: int, starts: list[int], ends: list[int]) -> int:
    """Where an offset into joined pieces lies in the text: pieces start at ``starts`` and end at ``ends`` when joined."""
    i = bisect.bisect_right(ends, offset)
    return starts[i] + offset - (ends[i - 1] if i else 0)


def _split_findings(text: str, found: list[Finding], allow: frozenset[str]) -> list[Finding]:
    """Add the keys that whitespace splits into pieces: each run of pieces from a prefix, joined and scanned.

    The run ends at the first piece that reads as a word (``for``, ``the``);
    each join of its first 2, 3, ... pieces is scanned, and the longest
    finding that starts in the first piece and goes past it is kept, mapped
    back onto the original text (whitespace included).
    """
    spans = _Spans(found)
    scans = 0
    for n, run in enumerate(_SPLIT.finditer(text)):
        if n >= _SPLIT_RUNS_MAX or scans >= _SPLIT_SCANS_MAX:
            break
        pieces = [(m.start(), m.end()) for m in re.finditer(rf"[{_PIECE}]+", run.group())]
        kept = [pieces[0]]
        for a, b in pieces[1:]:
            piece = run.group()[a:b]
            if (piece.isalpha() and piece.islower() and len(piece) >= 3 and _word_chars(piece, 3) == len(piece)) or (
                b - kept[0][0] > _SPLIT_CHARS_MAX
            ):
                break
            kept.append((a, b))
        best: tuple[int, int, str] | None = None
        joined = run.group()[kept[0][0] : kept[0][1]]
        ends = [len(joined)]
        for a, b in kept[1:]:
            joined += run.group()[a:b]
            ends.append(len(joined))
            scans += 1
            for f in _scan(joined, allow, 0)[0]:
                if f.start < ends[0] < f.end and f.kind != "high_entropy" and not f.kind.startswith("base64_"):
                    best = (f.start, f.end, f.kind)  # a provider's format or a key's body, not any long token
        if best is None:
            continue
        starts = [run.start() + a for a, _ in kept]
        start, end = _in_text(best[0], starts, ends), _in_text(best[1] - 1, starts, ends) + 1
        if not spans.overlaps(start, end) and text[start:end] not in allow:
            spans.add(Finding(start, end, best[2]))
    return spans.findings


# Format characters (Unicode category Cf: zero-width spaces and joiners, soft
# hyphens, direction marks and overrides, tag characters), variation
# selectors and the combining grapheme joiner: invisible, so removed before
# the rules look. tests/unit/test_guard_evasions.py checks that every Cf
# character of the running Python is here.
IGNORABLE = _lazy(
    "[\u00ad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)


def normalise(text: str) -> str:
    """What the rules see of a text that is not ASCII: no format characters, compatibility forms folded (NFKC).

    Fullwidth and mathematical letters become ASCII ones, a no-break space a
    space, a zero-width space nothing. For detection only: what is stored is
    the original text (or nothing).

    >>> normalise("AK\u200bIA \uff21\uff22 \U0001d41a")
    'AKIA AB a'
    """
    return unicodedata.normalize("NFKC", IGNORABLE.sub("", text))


# A long text is normalised and scanned again in overlapping pieces, and only the pieces that normalising
# changes: a 4 MB conversation with ten emoji joiners is then scanned once more in two 64 KiB pieces, not
# whole. The overlap is longer than any secret the rules find (a 4096-bit PEM key is about 3.3 KB), so a
# disguised secret lies whole in some piece.
_PIECE_CHARS = 65536
_PIECE_OVERLAP = 8192


def _normalised_findings(text: str, found: list[Finding], allow: frozenset[str]) -> list[Finding]:
    """Add what the rules find in the normalised text, mapped back onto the original."""
    if len(text) <= _PIECE_CHARS:
        return _normalised_piece(text, found, allow)
    spans = _Spans(found)
    at = 0
    while True:
        piece = text[at : at + _PIECE_CHARS]
        if not piece.isascii():
            for f in _normalised_piece(piece, [], allow):
                if not spans.overlaps(at + f.start, at + f.end):
                    spans.add(Finding(at + f.start, at + f.end, f.kind))
        if at + _PIECE_CHARS >= len(text):
            return spans.findings
        at += _PIECE_CHARS - _PIECE_OVERLAP


def _normalised_piece(text: str, found: list[Finding], allow: frozenset[str]) -> list[Finding]:
    """`_normalised_findings` of one text short enough to scan whole."""
    norm = normalise(text)
    in_norm = find_secrets(norm, allow) if norm != text else []
    if not in_norm:
        return found
    # Only a text that holds a disguised secret gets here: map character by character.
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(text):
        if ch < "\x80":
            out.append(ch)
            origin.append(i)
        elif IGNORABLE.match(ch) is None:
            for n in unicodedata.normalize("NFKC", ch):
                out.append(n)
                origin.append(i)
    mapped = "".join(out)
    spans = _Spans(found)
    extra = find_secrets(mapped, allow) if mapped != norm else in_norm
    if extra:
        pairs = [(origin[f.start], origin[f.end - 1] + 1, f.kind) for f in extra]
    else:  # the whole-text and the character-wise forms differ (a combining sequence): the whole string
        pairs = [(0, len(text), in_norm[0].kind)]
    for start, end, kind in pairs:
        if not spans.overlaps(start, end) and text[start:end] not in allow:
            spans.add(Finding(start, end, kind))
    return spans.findings


# A bare "key" counts as a secret's name only after one of these words.
_KEY_WORDS = r"(?:api|access|private|signing|encryption|secret|master|account|license)[_.\- ]?"
_KEY_PREFIX = _lazy(_KEY_WORDS + r"\Z")


_LONG_TEXT_CHARS = 4096
# Every rule needs a ":" or "=" (a name and its value, a URL), a secret's
# name ("password is ...") or a run of 16 or more token characters; a short
# text with none of them is done at once.
_LONG_RUN = _lazy(r"[A-Za-z0-9_\-+/.~%=]{16}")
_NAMES = ("pass", "pwd", "secret", "token", "credential")  # spelled out again in Guard.untouched, where a loop costs more than the test
# Where assigned_secret can start from one of them: the whole name, then a quote, whitespace, "=" or ":"
# (or "\\", an escape in a record's JSON). "compassion", "passed" and "tokens" hold a name but start no match.
NAME_BEFORE_VALUE = _lazy(rf"(?:{_VALUE_NAMES})(?=[\s\"'`=:\\])")
# Likewise "key" beside a colon: only a key named as _KEY_PREFIX says ("api key:"), not "is key:".
NAMED_KEY = _lazy(_KEY_WORDS + "key")


# A short text with no "=", no secret's name and no run of 16 token
# characters can hold a secret only through a ":" and one of these: a
# password in a URL ("://"), curl's "-u user:pass", a key named before a ":"
# ("api key: ..."), an Authorization header's "Basic ...". A colon alone (a
# speaker's "Caroline: ...", a time, "note: ...") leaves the text quiet.
COLON_HINTS = ("://", "-u ", "key", "basic")
# Likewise an "=" matters only beside one of these (or a secret's name): a
# key's name (``api_key=``, ``AccountKey=``), a SAS signature, ``Basic``.
# ``timeout=30`` and ``?page=2`` leave the text quiet; a token with "=" in it
# is a run of 16.
EQUALS_HINTS = ("key", "sig=", "basic")


def quiet(text: str, folded: str) -> bool:
    """Whether no rule of :func:`find_secrets` can match ``text`` (``folded``: its lower case): the cheap exit.

    True for a short text with no secret's name that a value can follow
    (`NAME_BEFORE_VALUE`), no run of 16 token characters (`_has_long_run`),
    either no ``=`` or none of `EQUALS_HINTS`, and either no ``:`` or none of
    `COLON_HINTS` (a "key" only where `NAMED_KEY` finds one); every rule
    needs one of these. (A key split by whitespace and a disguised text are
    find_secrets' own steps, after this.)
    """
    return (  # the tests most likely to fail first: a text that is not quiet should pay little for asking
        len(text) < _LONG_TEXT_CHARS
        and (":" not in text or (not any(h in folded for h in COLON_HINTS if h != "key") and not _named_key(folded)))
        and ("=" not in text or not any(name in folded for name in EQUALS_HINTS))
        and not (any(name in folded for name in _NAMES) and NAME_BEFORE_VALUE.search(folded) is not None)
        and not _has_long_run(text)
    )


def _named_key(folded: str) -> bool:
    return "key" in folded and NAMED_KEY.search(folded) is not None


def _has_long_run(text: str) -> bool:
    """``_LONG_RUN.search(text)``, answered without the regex for ordinary prose.

    Whitespace is outside the token class, so a run of 16 token characters
    needs a whitespace-free piece at least that long; ``str.split`` finds the
    longest piece in C, where the regex would try every start position.
    """
    return max(map(len, text.split()), default=0) >= 16 and _LONG_RUN.search(text) is not None

_HINTS = frozenset(h for rule in _RULES if not rule.fold for h in rule.hints)


def _rules_by_hint(rules: tuple[_Rule, ...]) -> dict[str, tuple[int, ...]]:
    """Each hint's rules, as indexes into ``rules``."""
    out: dict[str, list[int]] = {}
    for i, rule in enumerate(rules):
        for h in rule.hints:
            out.setdefault(h, []).append(i)
    return {h: tuple(found) for h, found in out.items()}


class _HintSet:
    """Which of a set of hints occur in a text, in a few passes over it rather than one per hint.

    A hint that ends with one of ``by`` (``_``, ``-``, ``=``: ``ghp_``,
    ``sk-``, ``==``) is looked for only where that character occurs, all
    such hints with one ``endswith`` there (`ends_at`); one that starts with
    one of ``first`` (``A``: ``AKIA``, ``AIza``) with one ``startswith``
    where that character occurs (`starts_at`); the others (``://``, ``eyJ``)
    with ``in``. ``by=""`` and ``first=""`` (the lower-cased names): ``in``
    for all.
    """

    def __init__(self, hints: Iterable[str], by: str = "_-=", first: str = "A") -> None:
        ends: dict[str, list[str]] = {}
        starts: dict[str, list[str]] = {}
        plain: list[str] = []
        for h in sorted(set(hints)):
            if h[-1] in by:
                ends.setdefault(h[-1], []).append(h)
            elif h[0] in first:
                starts.setdefault(h[0], []).append(h)
            else:
                plain.append(h)
        self.plain = tuple(plain)
        self.ends = {c: tuple(hs) for c, hs in ends.items()}
        self.starts = {c: tuple(hs) for c, hs in starts.items()}

    def any(self, text: str) -> bool:
        """Whether one of the hints occurs in ``text``: the first pass that finds one answers."""
        for h in self.plain:
            if h in text:
                return True
        for c, hs in self.ends.items():
            if ends_at(text, c, hs):
                return True
        return any(starts_at(text, c, hs) for c, hs in self.starts.items())

    def found(self, text: str) -> set[str]:
        """Which of the hints occur in ``text`` (a group found by its one pass is then told apart with ``in``)."""
        out = {h for h in self.plain if h in text}
        for c, hs in self.ends.items():
            if ends_at(text, c, hs):
                out.update(h for h in hs if h in text)
        for c, hs in self.starts.items():
            if starts_at(text, c, hs):
                out.update(h for h in hs if h in text)
        return out


_BY_HINT = _rules_by_hint(_RULES)
_UNGATED = tuple(i for i, r in enumerate(_RULES) if not r.gate)  # run on a long text whatever its hints
_GATE_HINTS = frozenset(h for rule in _RULES if rule.gate and not rule.fold for h in rule.hints)
_FOLDED_HINTS = frozenset(h for rule in _RULES if rule.fold for h in rule.hints)
# What find_secrets looks for before the joined scan: a rule's hint inside
# each of _SPLIT_STARTS (so the rules' own search answers it), and the long starts.
_SPLIT_GATE = frozenset(
    {"AKIA", "ASIA", "AIza", "GOCSPX-", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xapp-",
     "k_live_", "k_test_", "whsec_", "sk-", "npm_", "pypi-AgEI", "hf_", *(f"xox{c}-" for c in "abposre"),
     *_SPLIT_HINTS_LONG}
)
if not _SPLIT_GATE.issubset(_HINTS | set(_SPLIT_HINTS_LONG)) or not all(any(g in h for g in _SPLIT_GATE) for h in _SPLIT_STARTS):
    raise InvariantBroken("credentials: every split start must hold a hint the rules look for")
# The rules' hints and the long split starts (which run no rule: _BY_HINT has none for them).
_FIND_HINTS = _HintSet(_HINTS | set(_SPLIT_HINTS_LONG), first="AM")
_FIND_GATE_HINTS = _HintSet(_GATE_HINTS)
_FIND_FOLDED_HINTS = _HintSet(_FOLDED_HINTS, by="", first="")
_FIND_SPLIT_HINTS = _HintSet(_SPLIT_GATE, first="AM")
# A quiet text has no run of 16, so no long start (each needs a first piece of 16).
_FIND_SPLIT_SHORT = _HintSet(_SPLIT_GATE - set(_SPLIT_HINTS_LONG))

# -- URLs: long runs after "://" that hold no secret --------------------------------

# A short ASCII text that the cheap exits (`quiet`, Guard.untouched) would
# let through but for its URLs (the "://", and runs of 16 or more after it)
# holds no secret when the exits' tests pass on the text without the URLs'
# tails (a tail: "://" and what follows up to whitespace, a quote, "<" or ">",
# as _generic takes it) and besides:
#
# - every "://" follows a scheme's character: only then does _generic skip
#   the tokens of its tail;
# - no "@" between "://" and the first ``/?#``: url_password needs one there;
# - the exits' colon hints other than "://" ("-u ", "key", "basic") are
#   absent from the whole text, the text having a colon;
# - the tails hold no "hook" (_generic takes a webhook's path for its
#   credential), no "=" beside "sig" or "auth" (_generic's query parameters,
#   URL_QUERY_WORDS; its other words are secret names, which the exits look
#   for in the whole text), and none of URL_HINTS.
#
# Why the tails alone: every other rule's match is one run of token
# characters, which cannot cross a tail's "://" or its end; outside the tails
# such a run of 16 fails the exits' run test, and inside one it holds its
# rule's hint. URL_HINTS are the rules' hints (and the long split starts)
# that the exits' other tests do not cover already (a secret's name, "key",
# "basic", "-u ", "sig=", a split key's start). Of the hints looked for in
# the lower-cased text, two need a word the exits exclude (`_URL_IMPLIED`) and
# "bearer"'s token follows whitespace, so it lies outside every tail.
_URL_COVERED_FOLDED = (*_NAMES, "-u ", "key", "basic", "sig=", "hook")
_URL_COVERED = (*SPLIT_HINTS, *SPLIT_ENDS["_"], *SPLIT_ENDS["-"])
_URL_IMPLIED = {"private": "key", "aws": "secret", "amazon": "secret"}


def _url_covered(hint: str) -> bool:
    return any(c in hint.lower() for c in _URL_COVERED_FOLDED) or any(c in hint for c in _URL_COVERED)


URL_HINTS = tuple(sorted(h for h in _HINTS | set(_SPLIT_HINTS_LONG) if h != "://" and not _url_covered(h)))
URL_QUERY_WORDS = tuple(w for w in _QUERY_WORDS if not _url_covered(w))
if {h for h in _FOLDED_HINTS if not _url_covered(h) and h not in _URL_IMPLIED} != {"bearer"} or any(
    implied not in rule.source for hint, implied in _URL_IMPLIED.items() for rule in _RULES if hint in rule.hints
):
    raise InvariantBroken("credentials: a new rule's hint needs a place in the URL exit's notes")


def _anchored_matches(rule: _Rule, text: str, folded: str) -> Iterable[re.Match[str]]:
    """Matches of ``rule`` starting where one of its hints occurs.

    Finding the hints with ``str.find`` and matching only there spares the
    regex a search from every position of the whole text.
    """
    if len(folded) != len(text):
        # Lower-casing changed the length (a few non-ASCII letters): search.
        if rule.pattern_ci is None:
            raise InvariantBroken(f"secret rule {rule.kind}: has hints but no case-insensitive pattern")
        for m in rule.pattern_ci.finditer(text):
            if not m.group().lower().startswith("key") or _KEY_PREFIX.search(text[max(0, m.start() - 14) : m.start()].lower()):
                yield m
        return
    for hint in rule.hints:
        at = folded.find(hint)
        while at != -1:
            if hint != "key" or _KEY_PREFIX.search(folded, max(0, at - 14), at):
                found = rule.pattern.match(folded, at)
                if found is not None:
                    yield found
            at = folded.find(hint, at + 1)


class _Spans:
    """Non-overlapping findings kept in order, so an overlap test is a binary search.

    A text with thousands of matches (pasted logs, a hostile write) then
    costs n log n, not n squared.
    """

    def __init__(self, findings: Iterable[Finding] = ()) -> None:
        self.starts: list[int] = []
        self.findings: list[Finding] = []
        for f in findings:
            self.add(f)

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self.starts, start)
        if i > 0 and self.findings[i - 1].end > start:
            return True
        return i < len(self.starts) and self.starts[i] < end

    def add(self, finding: Finding) -> None:
        i = bisect.bisect_right(self.starts, finding.start)
        self.starts.insert(i, finding.start)
        self.findings.insert(i, finding)


def find_secrets(text: str, allow: frozenset[str] = frozenset(), depth: int = 0) -> list[Finding]:
    """Every secret in ``text``, in order, without overlaps.

    ``allow`` holds literal values that are never reported: a finding whose
    secret part, or whose whole string, is in it is dropped. The text is
    scanned as it is, then for disguises: a provider's key split by
    whitespace (`_split_findings`) and, for a text that is not ASCII, the text
    with format characters removed and compatibility forms folded
    (`normalise`). Spans are always the original text's. What is not taken
    for a secret, and the known limits: docs/secrets.md.
    """
    if len(text) < 8 or text in allow:
        return []
    found, split = _scan(text, allow, depth)
    if depth > 0:
        return found
    if split and _SPLIT.search(text) is not None:
        found = _split_findings(text, found, allow)
    if not text.isascii():
        found = _normalised_findings(text, found, allow)
    return found


def _scan(text: str, allow: frozenset[str], depth: int) -> tuple[list[Finding], bool]:
    """The rules and the generic test on ``text`` as it stands; and whether a split key's start occurs in it."""
    folded = text.lower()
    if quiet(text, folded):
        # No "name: value", URL, "password is ..." or run long enough for a token. A
        # split key is 20 characters or more (AKIA and 16, xoxb- and 15, ...).
        return [], len(text) >= _SPLIT_CHARS_MIN and _FIND_SPLIT_SHORT.any(text)
    if isinstance(_TOKEN, _Lazy):
        _compile_lazy()
    found = _Spans()
    # Which hints occur, found once for all rules. On a short text every rule
    # is gated (a substring test is far cheaper than starting a regex); on a
    # long one, rules whose pattern starts with a literal just search.
    long = len(text) >= _LONG_TEXT_CHARS
    # The rules to run, in their order: those with a hint present; on a long text also the ungated ones.
    run = set(_UNGATED) if long else set()
    hints = (_FIND_GATE_HINTS if long else _FIND_HINTS).found(text)
    split = _FIND_SPLIT_HINTS.any(text) if long else not hints.isdisjoint(_SPLIT_GATE)
    for h in hints:
        run.update(_BY_HINT.get(h, ()))
    for h in _FIND_FOLDED_HINTS.found(folded):
        run.update(_BY_HINT[h])
    for i in sorted(run):
        rule = _RULES[i]
        if rule.anchored:
            matches: Iterable[re.Match[str]] = _anchored_matches(rule, text, folded)
        elif rule.fold:
            if rule.pattern_ci is None:
                raise InvariantBroken(f"secret rule {rule.kind}: folds case but has no case-insensitive pattern")
            matches = rule.pattern.finditer(folded) if len(folded) == len(text) else rule.pattern_ci.finditer(text)
        else:
            matches = rule.pattern.finditer(text)
        for m in matches:
            start, end = m.span("s") if "s" in rule.pattern.groupindex else m.span()
            start -= rule.span_back
            if rule.kind == "private_key" and start > 0 and text[start - 1] in "- \t":
                dashes = _ARMOUR_DASHES.search(text, max(0, start - 64), start)
                start = dashes.start() if dashes is not None else start
            if start == end or found.overlaps(start, end):
                continue
            value = text[start:end]
            if rule.check is not None and not rule.check(value, text[m.start() : start]):
                continue
            if value in allow:
                continue
            found.add(Finding(start, end, rule.kind))
    for f in _generic(text, found, allow, depth):
        if not found.overlaps(f.start, f.end) and text[f.start : f.end] not in allow:
            found.add(f)
    if not found.findings:
        return [], split
    return _relabel(text, found.findings), split


_SERVICE_ACCOUNT = _lazy(r"[\"']type[\"']\s*:\s*[\"']service_account[\"']")


def _relabel(text: str, found: list[Finding]) -> list[Finding]:
    """Name a generic finding by its company: a key in a service-account file, a key beside an AWS key id."""
    kinds = {f.kind for f in found}
    if "private_key" in kinds and _SERVICE_ACCOUNT.search(text):
        found = [Finding(f.start, f.end, "gcp_service_account") if f.kind == "private_key" else f for f in found]
    if "aws_access_key" in kinds:
        found = [
            Finding(f.start, f.end, "aws_secret_key")
            if f.kind == "high_entropy" and f.end - f.start == 40 and "-" not in text[f.start : f.end]
            else f
            for f in found
        ]
    return found

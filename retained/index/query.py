"""The query builder: any user string to a safe FTS5 MATCH expression (`build`, `terms`).

Also owns the text segmentation shared by indexing and querying (CJK runs
become overlapping bigrams, see `segment`), so both sides always agree, and
the subject words a correction is matched by (`subject`, `same_subject`). No
user input reaches the FTS5 query parser as syntax (see `build`).
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = ["MONTHS", "STOP_WORDS", "SUBJECT_WORDS_MAX", "TERMS_MAX", "build", "excerpt", "same_subject", "segment",
           "subject", "terms"]

TERMS_MAX = 32  # bounds the work one query can cause; questions rarely have more content words

# English stop words: function words, question words and auxiliaries. A
# question's content words are what find the record; these match almost
# every record and make bm25 slow (bm25 scores every row a term matches).
STOP_WORDS = frozenset(
    """
a about above after again against all am an and any are aren as at be because been before
being below between both but by can cannot could couldn d did didn do does doesn doing don down
during each few for from further had hadn has hasn have haven having he her here hers herself him
himself his how i if in into is isn it its itself just ll m me might more most mustn my myself
no nor not now of off on once only or other ought our ours ourselves out over own re s same
shan she should shouldn so some such t than that the their theirs them themselves then there
these they this those through to too under until up upon very ve was wasn we were weren what
when where which while who whom why will with won would wouldn y you your yours yourself
yourselves also ever every get got may much must shall us whose yet
""".split()
)

# Month names, and the short forms people write. "may" is also a stop word ("you
# may"); it is kept as a search term when a day or a year stands next to it ("in
# May 2022", "7 May", "May 7th"). The other month names are not stop words.
MONTHS = frozenset(
    "january february march april may june july august september october november december"
    " jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
_DAY_OR_YEAR = re.compile(r"(?:[0-9]{1,2}(?:st|nd|rd|th)?|[0-9]{4})")


# "What kind of art does she make?": before "of", these words frame the
# question and are not its subject; searched, they find "thanks for your
# kind words". Dropped there, with the stop words (query side only).
FRAME_WORDS = frozenset("kind kinds type types sort sorts".split())


def _dated(words: list[str], i: int) -> bool:
    """True when the month name at ``words[i]`` has a day or a year beside it."""
    return any(0 <= j < len(words) and _DAY_OR_YEAR.fullmatch(words[j]) for j in (i - 1, i + 1))


# Irregular English forms porter cannot join ("went" is not stemmed to
# "go"). A question asks "when did she go", the record says "she went": a
# query word with forms here searches for all of them, as one term. Query
# side only, so the index needs no rebuild when the list changes.
_IRREGULAR_GROUPS = """
arise arose arisen|awake awoke awoken|bear bore born|beat beaten|become became|begin began begun|bend bent|
bite bit bitten|bleed bled|blow blew blown|break broke broken|bring brought|build built|burn burnt|buy bought|
catch caught|choose chose chosen|come came|creep crept|deal dealt|dig dug|draw drew drawn|dream dreamt|
drink drank drunk|drive drove driven|eat ate eaten|fall fell fallen|feed fed|feel felt|fight fought|find found|
fly flew flown|forget forgot forgotten|forgive forgave forgiven|freeze froze frozen|give gave given|go went gone|
grow grew grown|hang hung|hear heard|hide hid hidden|hold held|keep kept|know knew known|lead led|leave left|
lend lent|lose lost|make made|mean meant|meet met|pay paid|ride rode ridden|ring rang rung|rise rose risen|
run ran|say said|see saw seen|seek sought|sell sold|send sent|shake shook shaken|shoot shot|show shown|
sing sang sung|sink sank sunk|sit sat|sleep slept|slide slid|speak spoke spoken|spend spent|spin spun|stand stood|
steal stole stolen|stick stuck|sting stung|strike struck|swear swore sworn|sweep swept|swim swam swum|swing swung|
take took taken|teach taught|tear tore torn|tell told|think thought|throw threw thrown|understand understood|
wake woke woken|wear wore worn|win won|write wrote written|child children|person people|man men|woman women|
mouse mice|foot feet|tooth teeth
"""
IRREGULAR: dict[str, tuple[str, ...]] = {
    form: tuple(group.split())
    for group in _IRREGULAR_GROUPS.replace("\n", "").split("|")
    for form in group.split()
}

# Scripts written without spaces between words. unicode61 keeps a whole run
# of them as one token, so a two-character word inside a longer run could
# never be found; `segment` rewrites each run as overlapping bigrams instead.
_CJK_RANGES = (
    (0x1100, 0x11FF),  # Hangul Jamo
    (0x2E80, 0x2FDF),  # CJK radicals, Kangxi radicals
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x3100, 0x312F),  # Bopomofo
    (0x3130, 0x318F),  # Hangul compatibility Jamo
    (0x31A0, 0x31BF),  # Bopomofo extended
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xA960, 0xA97F),  # Hangul Jamo extended A
    (0xAC00, 0xD7AF),  # Hangul syllables
    (0xD7B0, 0xD7FF),  # Hangul Jamo extended B
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # halfwidth Katakana
    (0x20000, 0x3134F),  # CJK extensions B..G
)


_CJK_CLASS = "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in _CJK_RANGES)
_CJK_RUN = re.compile(f"([{_CJK_CLASS}]+)")  # a group: `split` keeps the runs


def _is_cjk(ch: str) -> bool:
    # Latin, Greek, Cyrillic and the rest below the first CJK range (most words) without the regex.
    return ch >= "\u1100" and _CJK_RUN.match(ch) is not None


# For text without other characters: each byte the loop below does not keep becomes a space (then one split).
_ASCII_SEPARATORS = bytes(c if chr(c).isascii() and chr(c).isalnum() else 0x20 for c in range(256))


def _words(text: str) -> list[str]:
    """Runs of letters, digits, marks, private-use and unassigned characters.

    These are the characters unicode61 keeps in tokens; everything else
    (punctuation, symbols, emoji, spaces, "_") separates words, as it does in
    the index. Unassigned code points (in Python's Unicode version) count as
    letters because SQLite's tables may know them as such. A quoted word is tokenized again by FTS5 itself, so any small
    disagreement with the tokenizer only turns a word into a phrase.
    """
    if text.isascii():
        return text.encode().translate(_ASCII_SEPARATORS).decode().split()
    out: list[str] = []
    cur: list[str] = []
    for ch in text:
        cat = unicodedata.category(ch)
        if cat[0] in "LNM" or cat in ("Co", "Cn"):
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _bigrams(run: str) -> list[str]:
    """Overlapping bigrams of a CJK run, plus its last character alone.

    The trailing unigram means every character starts some token, so a
    one-character query can be answered with a prefix query (see `terms`).
    """
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]


def segment(text: str) -> str:
    """Rewrite CJK runs in `text` as space-separated bigrams, for indexing.

    Text without CJK characters is returned unchanged (the common case costs
    one regex search).

    >>> segment("meet at 東京駅 at 9")
    'meet at  東京 京駅 駅  at 9'
    """
    if text.isascii():
        return text
    # The same NFKC folding as queries get (full-width letters, ligatures),
    # so both sides reach the tokenizer in one form.
    text = unicodedata.normalize("NFKC", text)
    if not _CJK_RUN.search(text):
        return text
    return _CJK_RUN.sub(lambda m: " " + " ".join(_bigrams(m.group())) + " ", text)


def _normalise(text: str) -> str:
    if text.isascii():
        # NFKC changes no ASCII character, and the control characters are
        # not word characters, so they already separate words.
        return text.lower()
    # NFKC folds full-width letters and digits, ligatures and superscripts to
    # what the tokenizer sees in ordinary text; control and format characters
    # become spaces so they separate words instead of gluing them.
    text = unicodedata.normalize("NFKC", text)
    # lower(), not casefold(): unicode61 folds case one character at a time
    # ("ß" stays "ß"), and the query must name the tokens the index holds.
    return "".join(" " if unicodedata.category(c) in ("Cc", "Cf", "Cs") else c for c in text).lower()


def terms(
    text: str, *, stop_words: frozenset[str] = STOP_WORDS, irregular: bool = True, months: bool = True,
    frame: bool = True,
) -> list[str]:
    """The query's search terms, each already a safe FTS5 string.

    Each term is a double-quoted string of letters and digits, a quoted
    phrase of CJK bigrams, a quoted single CJK character followed by ``*``
    (prefix: matches the bigrams that start with it), or a parenthesised OR
    of a word's irregular forms (``("go" OR "went" OR "gone")``). Duplicates are
    removed, order kept, at most `TERMS_MAX` returned. Stop words are dropped
    unless every word is one, and, with ``months``, a month name that is also a
    stop word ("may") is kept beside a day or a year. With ``frame``, the
    `FRAME_WORDS` before "of" go with the stop words ("what kind of art"
    searches for "art").
    """
    words = _words(_normalise(text))
    if not text.isascii():  # a CJK run is a word of its own
        words = [part for word in words for part in _CJK_RUN.split(word) if part]
    content = [w for i, w in enumerate(words)
               if (w not in stop_words or (months and w in MONTHS and _dated(words, i)))
               and not (frame and stop_words and w in FRAME_WORDS and words[i + 1 : i + 2] == ["of"])]
    if not content:
        content = words
    out: list[str] = []
    seen: set[str] = set()
    for w in content:
        if _is_cjk(w[0]):
            term = f'"{w}"*' if len(w) == 1 else '"' + " ".join(_bigrams(w)[:-1]) + '"'
        elif irregular and w in IRREGULAR:
            term = "(" + " OR ".join(f'"{f}"' for f in IRREGULAR[w]) + ")"
        else:
            term = f'"{w}"'
        if term not in seen:
            seen.add(term)
            out.append(term)
        if len(out) >= TERMS_MAX:
            break
    return out


def build(
    text: str, *, stop_words: frozenset[str] = STOP_WORDS, irregular: bool = True, months: bool = True,
    frame: bool = True,
) -> str | None:
    """A safe FTS5 MATCH expression for `text`, or None if it has no words.

    None means nothing can match (empty input, only punctuation or emoji);
    callers answer with zero matches instead of running a query.

    Safety: the expression is built only from double-quoted strings joined by
    ``OR``, and every quoted string contains only letters and digits (the
    characters a tokenizer keeps), so no user input can reach the FTS5 query
    parser as syntax. ``AND``, ``NOT``, ``NEAR(``, ``*``, ``:``, ``-``,
    parentheses and quotes typed by a user are searched as words or dropped as
    punctuation, never interpreted.

    Recall: a word joined by punctuation ("e-mail", "v1.2", "don't", "C++") is
    split the way the index tokenizer splits it, so the pieces find the same
    tokens the indexed text produced. Terms are OR-ed and ranked by bm25, so a
    question finds records that share only some of its words. Stop words are
    dropped, unless the query has nothing else, so "what is it" still gets an
    answer; "may" is the month only next to a day or a year.

    >>> build("Don't e-mail the C++ v1.2 guide!")
    '"e" OR "mail" OR "c" OR "v1" OR "2" OR "guide"'
    >>> build('NEAR(a b) AND "x" OR z*')
    '"near" OR "b" OR "x" OR "z"'
    >>> build("the") is None
    False
    >>> build("  ") is None
    True
    >>> build("what happened in May 2022")
    '"happened" OR "may" OR "2022"'
    >>> build("東京都庁")
    '"東京 京都 都庁"'
    """
    return " OR ".join(terms(text, stop_words=stop_words, irregular=irregular, months=months, frame=frame)) or None


SUBJECT_WORDS_MAX = 64  # content words compared per record; bounds the cost of one comparison
_SUBJECT_OF: dict[str, str] = {}  # each word `subject` met, to its stem ("" for a stop word): one lookup a word
_SUBJECT_OF_MAX = 1 << 16
_SUFFIXES = ("ing", "ed", "es", "s")


@functools.lru_cache(maxsize=1 << 16)
def _stem(word: str) -> str:
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def subject(text: str) -> frozenset[str]:
    """The content words of ``text``, roughly stemmed: what `same_subject` compares.

    Stop words go; a plural or past ending is cut ("reviewed" and "reviews"
    both give "review"), a cruder stand-in for the index's porter stemmer
    that needs no SQLite.

    >>> sorted(subject("We raised the API timeout to 60 seconds."))
    ['60', 'api', 'rais', 'second', 'timeout']
    """
    words = _words(_normalise(text))
    try:
        stems = list(map(_SUBJECT_OF.__getitem__, words))  # one lookup a word, in C
    except KeyError:  # a word not met yet
        stems = [s if (s := _SUBJECT_OF.get(w)) is not None else _subject_of(w) for w in words]
    out = set(stems)
    out.discard("")
    if len(out) > SUBJECT_WORDS_MAX:  # the first SUBJECT_WORDS_MAX of the text's words only
        out = set(list(dict.fromkeys(s for s in stems if s))[:SUBJECT_WORDS_MAX])
    return frozenset(out)


def _subject_of(word: str) -> str:
    """``word``'s stem for `subject` ("" for a stop word), remembered in `_SUBJECT_OF`."""
    if len(_SUBJECT_OF) >= _SUBJECT_OF_MAX:
        _SUBJECT_OF.clear()
    stem = _SUBJECT_OF[word] = "" if word in STOP_WORDS else _stem(word)
    return stem


def same_subject(a: frozenset[str], b: frozenset[str], *, shared_min: int = 2, overlap_min: float = 0.5) -> bool:
    """True when two records' `subject` words say they are about the same thing.

    At least ``shared_min`` words in common, and at least ``overlap_min`` of
    the shorter record's words: "The API timeout is 30 seconds." and "We
    raised the API timeout to 60 seconds." share 3 of 4.

    >>> same_subject(subject("The API timeout is 30 seconds."), subject("We raised the API timeout to 60 seconds."))
    True
    >>> same_subject(subject("Thanks, Caroline!"), subject("Thanks, Mel!"))
    False
    """
    shared = len(a & b)
    return shared >= shared_min and shared >= overlap_min * min(len(a), len(b))


_WORD_SPAN = re.compile(r"[^\W_]+")  # letters and digits, as `_words` keeps them
_CUT_SNAP_CHARS = 24  # a cut moves this far at most to fall between two words


def excerpt(text: str, around: str, chars_max: int) -> tuple[int, int]:
    """``(start, end)``: the part of ``text`` to show in ``chars_max`` characters, centred on the words of ``around``.

    The whole text when it fits. Otherwise the window holding the most
    distinct words of ``around`` (a query; stop words aside, endings cut as
    in `subject`, a longer word starting with a query word counts), centred
    on the span of those words, its ends moved to fall between words; the
    start of the text when none of them occurs.

    >>> text = "filler " * 100 + "the deploy key rotates monthly " + "filler " * 100
    >>> start, end = excerpt(text, "when does the deploy key rotate?", 60)
    >>> "deploy key rotates" in text[start:end], end - start <= 60
    (True, True)
    """
    if chars_max <= 0:
        return 0, 0
    if len(text) <= chars_max:
        return 0, len(text)
    wanted = [_stem(w) for w in dict.fromkeys(_words(_normalise(around))) if w not in STOP_WORDS]
    spans: list[tuple[int, int, int]] = []  # (start, end, index into wanted)
    if wanted:
        for m in _WORD_SPAN.finditer(text):
            word = _stem(_normalise(m.group()))
            for i, w in enumerate(wanted):
                if word == w or (len(w) >= 4 and word.startswith(w)) or (_is_cjk(w[0]) and w in word):
                    spans.append((m.start(), m.end(), i))
                    break
    if not spans:
        start, end = 0, chars_max
    else:
        best = (0, 0, 0, 0)  # (distinct words, occurrences, first span, last span)
        j = 0
        for i in range(len(spans)):
            j = max(j, i)
            while j + 1 < len(spans) and spans[j + 1][1] - spans[i][0] <= chars_max:
                j += 1
            found = spans[i : j + 1]
            score = (len({s[2] for s in found}), len(found))
            if score > best[:2]:
                best = (*score, i, j)
        first, last = spans[best[2]][0], spans[best[3]][1]
        start = max(0, (first + last - chars_max) // 2)
        end = min(len(text), start + chars_max)
        start = max(0, end - chars_max)
    if start > 0:
        gap = text.find(" ", start, min(start + _CUT_SNAP_CHARS, end))
        start = gap + 1 if gap != -1 else start
    if end < len(text):
        gap = text.rfind(" ", max(end - _CUT_SNAP_CHARS, start), end)
        end = gap if gap > start else end
    return start, end

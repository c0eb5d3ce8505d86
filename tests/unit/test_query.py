"""The query builder: any text becomes a safe FTS5 expression that keeps recall."""

from __future__ import annotations

import sqlite3

import pytest

from retained.index import query
from retained.index.writer import TOKENIZER

HOSTILE = [
    "",
    " ",
    '"',
    '""',
    '"unbalanced',
    "'",
    "don't",
    "AND",
    "OR",
    "NOT",
    "a AND b",
    "NOT x",
    "x OR",
    "NEAR(",
    "NEAR(a b, 3)",
    "NEAR(a b",
    "*",
    "foo*",
    "*foo",
    "-",
    "-foo",
    "foo -bar",
    ":",
    "col:foo",
    "text: deploy",
    "{text body}: x",
    "/",
    "a/b/c",
    "(",
    ")",
    "((a)",
    "a)",
    "^start",
    "+plus",
    "🙂",
    "🙂🙂 deploy 🚀",
    "\x00",
    "a\x00b",
    "\x1b[31mred\x1b[0m",
    "line\nbreak\ttab\r",
    "\u200b\u200d",
    "\ufeffbom",
    "C++",
    "e-mail",
    "v1.2",
    "v1.2.3-rc.1",
    "foo_bar",
    "é",
    "Zoë «dark mode»",
    "東京",
    "東",
    "こんにちは 世界",
    "한국어",
    "ﬁle",
    "x" * 5000,
    "the " * 300,
    "what is it",
    "%_",
    "'; DROP TABLE fts; --",
    "rowid = 1",
    "MATCH",
]


@pytest.fixture
def fts():
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(text, body, fields, content='', tokenize='{TOKENIZER}')")
    rows = [
        "Don't forget to e-mail the C++ team about v1.2",
        "what is it",
        "东京 and 東京都庁 were visited",
        "the deploy target is staging",
        "Zoe prefers dark mode",
        "foo_bar and a/b/c paths",
    ]
    for i, t in enumerate(rows, 1):
        db.execute("INSERT INTO fts (rowid, text, body, fields) VALUES (?, ?, '', '')", (i, query.segment(t)))
    yield db
    db.close()


def search(db: sqlite3.Connection, text: str) -> list[int]:
    expr = query.build(text)
    if expr is None:
        return []
    return [r[0] for r in db.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY rank", (expr,))]


@pytest.mark.parametrize("text", HOSTILE)
def test_hostile_query_never_raises_against_a_real_fts5_table(fts, text):
    search(fts, text)


@pytest.mark.parametrize(
    ("text", "seq"),
    [
        ("don't", 1),  # apostrophe: "don" is a stop word, the query falls back to it
        ("e-mail", 1),
        ("C++", 1),
        ("v1.2", 1),
        ("what is it", 2),  # only stop words: still answerable
        ("东京", 3),
        ("都庁", 3),
        ("京", 3),  # one CJK character: a prefix over the bigrams
        ("deployed targets", 4),  # porter stemming
        ("Zoë", 5),  # diacritics folded
        ("foo_bar", 6),
        ("a/b/c", 6),
    ],
)
def test_ordinary_punctuation_keeps_recall(fts, text, seq):
    assert seq in search(fts, text)


def test_syntax_words_are_searched_as_words():
    expr = query.build('NEAR(a b) AND "x" OR NOT z*')
    assert expr is not None
    # Every term is a quoted string; no bare operator survives.
    for term in expr.split(" OR "):
        assert term.startswith('"')
        assert term.rstrip("*").endswith('"')
        assert '"' not in term.rstrip("*")[1:-1]


def test_empty_and_punctuation_only_give_no_query():
    for text in ("", "   ", "!!!", "🙂", "\x00\x01", "—"):
        assert query.build(text) is None


def test_stop_words_are_dropped_when_anything_else_remains():
    assert query.build("what is the deploy target") == '"deploy" OR "target"'
    assert query.build("what is it") == '"what" OR "is" OR "it"'


def test_terms_are_deduplicated_and_bounded():
    assert query.build("deploy Deploy DEPLOY") == '"deploy"'
    many = " ".join(f"w{i}" for i in range(500))
    assert len(query.terms(many)) == query.TERMS_MAX


def test_segment_rewrites_cjk_runs_as_bigrams_and_leaves_other_text():
    assert query.segment("plain ascii") == "plain ascii"
    assert query.segment("東京都").split() == ["東京", "京都", "都"]
    assert query.segment("x東y").split() == ["x", "東", "y"]
    assert query.terms("京都") == ['"京都"']
    assert query.terms("東京都") == ['"東京 京都"']


def test_irregular_forms_are_one_term_and_find_the_past_tense(fts):
    assert query.terms("go") == ['("go" OR "went" OR "gone")']
    assert query.terms("go", irregular=False) == ['"go"']
    fts.execute("INSERT INTO fts (rowid, text, body, fields) VALUES (50, 'she went to the lake', '', '')")
    assert 50 in search(fts, "when did she go to the lake")

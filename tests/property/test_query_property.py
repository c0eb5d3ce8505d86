"""Any text becomes a query that runs against a real FTS5 table without error."""

from __future__ import annotations

import sqlite3

from hypothesis import given, settings
from hypothesis import strategies as st

from retained.index import query
from retained.index.writer import TOKENIZER

_DB = sqlite3.connect(":memory:")
_DB.execute(f"CREATE VIRTUAL TABLE fts USING fts5(text, body, fields, content='', tokenize='{TOKENIZER}')")
_DB.execute("INSERT INTO fts (rowid, text, body, fields) VALUES (1, 'deploy target staging', '', '')")
_DB.execute("INSERT INTO fts (rowid, text, body, fields) VALUES (2, ?, '', '')", (query.segment("東京都庁 café"),))

# Text biased towards FTS5 syntax, plus arbitrary unicode (surrogates excluded:
# they cannot be encoded for SQLite at all and never reach the store).
_syntax = st.sampled_from(['"', "'", "(", ")", "*", "-", ":", "/", "^", "+", "{", "}", "AND", "OR", "NOT", "NEAR(", ",", " "])
_text = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",))),
    st.lists(st.one_of(_syntax, st.text(min_size=1, max_size=4)), max_size=20).map("".join),
)


@settings(max_examples=400, deadline=None)
@given(_text)
def test_any_text_gives_a_valid_query(text):
    expr = query.build(text)
    if expr is None:
        return
    _DB.execute("SELECT rowid FROM fts WHERE fts MATCH ? ORDER BY bm25(fts)", (expr,)).fetchall()
    _DB.execute("SELECT count(*) FROM fts WHERE fts MATCH ?", (expr,)).fetchone()


# Words of real scripts, joined by the punctuation people type.
_letters = st.sampled_from(list("abcxyzABCXYZ0129éüßçØñ東京都庁日本語こんにちはカタカナ한국어中文"))
_seps = st.sampled_from(list(" -'.:/_+*()\"!?,;@#&") + ["  ", "\n", "\t"])
_real = st.lists(st.one_of(st.lists(_letters, min_size=1, max_size=6).map("".join), _seps), min_size=1, max_size=12).map("".join)


@settings(max_examples=300, deadline=None)
@given(_real)
def test_segmented_text_indexes_and_finds_itself(text):
    """Recall: a record is found by its own text, whatever punctuation joins the words."""
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE fts USING fts5(text, content='', tokenize='{TOKENIZER}')")
    db.execute("INSERT INTO fts (rowid, text) VALUES (1, ?)", (query.segment(text),))
    expr = query.build(text, stop_words=frozenset())
    if expr is None:
        return
    assert db.execute("SELECT rowid FROM fts WHERE fts MATCH ?", (expr,)).fetchall() == [(1,)]

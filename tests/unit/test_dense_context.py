"""Vector context only where records form a conversation (issue 18, point 6).

The same defaults serve a store of notes and a conversation: a record is read with
its neighbours only when both are turns (they carry a speaker), so the context
weights change nothing for notes. Real stores, a real embedding server on 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retained import Store
from retained.index.hybrid import Hybrid
from retained.index.writer import Index
from retained.index.dense import SCAN_ROWS_MIN, Matrix, turns
from retained.vectors.embed import Embedder
from tests.embed_server import EmbedServer

DIM = 32


@pytest.fixture(scope="module")
def server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=DIM) as srv:
        yield srv


def _hybrid(store: Store, server: EmbedServer, **weights: float) -> Hybrid:
    hybrid = Hybrid(Index(store.log), Embedder(server.url("openai"), "hashed-bow"), **weights)
    assert hybrid.backfill()["pending"] == 0
    return hybrid


def test_only_turns_are_linked_and_a_note_between_them_does_not_break_the_link() -> None:
    import numpy as np

    from retained.vectors import numeric as vectors

    rng = np.random.default_rng(3)
    m = Matrix("m", 0)
    rows = [(i + 1, i + 1, f"h{i}", 8, vectors.pack(rng.standard_normal(8)), None) for i in range(6)]
    said = {1: ("A", None), 2: ("B", None), 4: ("A", None), 5: ("B", 2), 6: ("A", 3)}  # seq 3 is a note
    m.extend(rows, said)
    assert list(m.prev[:6]) == [-1, 0, -1, 1, 3, -1]  # 6 starts session 3: not linked to 5 (session 2)
    assert list(m.next[:6]) == [1, 3, -1, 4, -1, -1]


def test_turns_reads_the_same_in_one_pass_as_line_by_line(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        for i in range(SCAN_ROWS_MIN + 10):
            fields = {"speaker": f"s{i % 3}", "session": i // 50} if i % 4 else {"role": "user"} if i % 8 else {}
            store.write(f"record {i}", fields=fields)
        index = store.index
        index.catch_up()
        places = index.connection().execute("SELECT seq, offset, length FROM records ORDER BY seq").fetchall()
        many = turns(store.log, places)
        few = {}
        for start in range(0, len(places), 50):
            few.update(turns(store.log, places[start : start + 50]))
        assert many == few
        assert len(many) == sum(1 for i in range(len(places)) if i % 4 or i % 8)
        assert many[2] == ("s1", 0) and many[5] == ("user", None)


def _ranking(hybrid: Hybrid, text: str) -> list[int]:
    qvec = hybrid.embedder.embed([text], purpose="query")[0]
    return [s for s, _ in hybrid.dense(qvec, limit=20)]


NOTES = [
    "The production database runs on the host db-east-2.",
    "Deploys go out on Tuesdays and Thursdays.",
    "Maya prefers review comments phrased as questions.",
    "The rate limit for free accounts is 60 requests per minute.",
    "The flaky upload test fails on tmpfs.",
    "Invoices are generated on the first business day of each month.",
    "The staging cluster shuts down every night at 22:00.",
    "Passwords are hashed with argon2id.",
]


def test_context_weights_change_nothing_in_a_store_of_notes(tmp_path: Path, server: EmbedServer) -> None:
    with Store(tmp_path / "s") as store:
        for text in NOTES:
            store.write(text)
        plain = _hybrid(store, server, context_weight=0.0, neighbour_weight=0.0)
        ctx = _hybrid(store, server, context_weight=0.7, neighbour_weight=0.7)
        for question in ("when does staging shut down", "how are invoices generated", "review comments"):
            assert _ranking(ctx, question) == _ranking(plain, question)


def test_context_weights_read_a_turn_with_the_one_before_it(tmp_path: Path, server: EmbedServer) -> None:
    with Store(tmp_path / "s") as store:
        for i, text in enumerate(NOTES):
            store.write(text, fields={"speaker": "A" if i % 2 else "B"})
        plain = _hybrid(store, server, context_weight=0.0, neighbour_weight=0.0)
        ctx = _hybrid(store, server, context_weight=0.7, neighbour_weight=0.7)
        changed = [q for q in ("when does staging shut down", "how are invoices generated", "review comments")
                   if _ranking(ctx, q) != _ranking(plain, q)]
        assert changed, "context never changed a ranking between turns: the test above shows nothing"


def test_hybrid_accounting_counts_a_reply_ranked_through_its_question(tmp_path: Path, server: EmbedServer) -> None:
    with Store(tmp_path / "s") as store:
        for i, text in enumerate(NOTES):
            store.write(text, fields={"speaker": "A" if i % 2 else "B"})
        store.write("Which instrument do you practise?", fields={"speaker": "A"})
        answer = store.write("Clarinet, every evening after dinner.", fields={"speaker": "B"})["seq"]
        hybrid = _hybrid(store, server)
        reply: dict[str, Any] = hybrid.search("instrument practise", k=10)
        assert reply["mode"] == "hybrid"
        assert answer in [r["seq"] for r in reply["results"]]
        assert reply["returned"] + sum(reply["left_out"].values()) == reply["total_matches"]

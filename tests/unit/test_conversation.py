"""Search reads a conversation (issue 18): answers gain from the question they answer, names
said to someone count less, neighbours come with a result on request, and a write names the
earlier records it may correct. Real stores, real writes, real searches.
"""

from __future__ import annotations

import dataclasses

import pytest

from retained import Store
from retained.index.search import RANKING

FILLER = [
    ("Mel", "The weather was lovely at the lake this weekend."),
    ("Caroline", "I finished a big painting of the sunset last night."),
    ("Mel", "My kids started a new school term on Monday."),
    ("Caroline", "The support group meets every Thursday evening."),
    ("Mel", "We adopted a puppy from the shelter last month."),
    ("Caroline", "Work at the counselling centre keeps me busy."),
]


def converse(store: Store, turns: list[tuple[str, str]], scope: str | None = None, **fields: object) -> list[int]:
    return [store.write(text, scope=scope, fields={"speaker": who, **fields})["seq"] for who, text in turns]


def ranked(store: Store, question: str, k: int = 10, **ranking: float) -> list[int]:
    store.index.ranking = dataclasses.replace(RANKING, **ranking)
    try:
        return [r["seq"] for r in store.search(question, k=k)["results"]]
    finally:
        store.index.ranking = RANKING


def test_the_answer_after_a_matching_question_comes_right_after_it(tmp_path):
    """The other speaker's next turn answers the question: it gains from it and joins it at the head."""
    with Store(tmp_path / "s") as store:
        converse(store, FILLER[:3])
        ask, answer = converse(store, [("Caroline", "Do you play any instruments, Mel?"),
                                       ("Mel", "Yes, the clarinet, since I was a kid.")])
        converse(store, [*FILLER[3:], ("Mel", "The kids play football after school."),
                         ("Mel", "We play board games on rainy days.")])
        question = "What instruments does Mel play?"
        assert ranked(store, question)[:2] == [ask, answer]
        off = ranked(store, question, reply_credit=0.0, prev_credit=0.0)
        assert off[0] == ask and off.index(answer) > 2, off
        assert ranked(store, question, reply_credit=2.0)[0] == answer


def test_a_reply_no_query_word_matches_is_returned_and_counted(tmp_path):
    """I2 holds when the answer shares no word with the question: it is counted as a match it reached."""
    with Store(tmp_path / "s") as store:
        converse(store, FILLER)
        ask, answer = converse(store, [("Caroline", "Which instrument do you practise?"),
                                       ("Mel", "Clarinet, every evening after dinner.")])
        reply = store.search("instrument practise", k=5)
        seqs = [r["seq"] for r in reply["results"]]
        assert answer in seqs and ask in seqs
        assert reply["returned"] + sum(reply["left_out"].values()) == reply["total_matches"]
        assert reply["total_matches"] == 2  # the question matched; the answer reached the list through it


def test_notes_without_a_speaker_are_never_read_with_their_neighbours(tmp_path):
    """The same texts as notes: no credit, no extra records, the question ranks by its own words."""
    with Store(tmp_path / "s") as store:
        for _, text in FILLER:
            store.write(text)
        ask = store.write("Which instrument do you practise?")["seq"]
        answer = store.write("Clarinet, every evening after dinner.")["seq"]
        reply = store.search("instrument practise", k=5)
        assert [r["seq"] for r in reply["results"]] == [ask]
        assert reply["total_matches"] == 1 and answer not in [r["seq"] for r in reply["results"]]


def test_turns_of_another_scope_or_session_are_not_replies(tmp_path):
    with Store(tmp_path / "s") as store:
        converse(store, FILLER)
        ask = converse(store, [("Caroline", "Which instrument do you practise?")], scope="a")[0]
        other = converse(store, [("Mel", "Clarinet, every evening after dinner.")], scope="b")[0]
        assert ranked(store, "instrument practise") == [ask]
        ask2 = converse(store, [("Caroline", "Which sport do you practise?")], session=1)[0]
        late = converse(store, [("Mel", "Tennis, on Sundays.")], session=2)[0]
        got = ranked(store, "sport practise")
        assert ask2 in got and late not in got and other not in got


def test_the_same_speaker_continuing_is_not_an_answer(tmp_path):
    with Store(tmp_path / "s") as store:
        converse(store, FILLER)
        ask, more = converse(store, [("Caroline", "Which instrument do you practise?"),
                                     ("Caroline", "Clarinet, every evening after dinner.")])
        assert ranked(store, "instrument practise") == [ask]


def test_a_name_said_to_someone_counts_less_than_the_named_speaker(tmp_path):
    """'Caroline, your garden...' (Mel speaking to her) against Caroline's own turn about her garden."""
    with Store(tmp_path / "s") as store:
        converse(store, FILLER)
        to_her, hers = converse(store, [("Mel", "Caroline, lovely garden!"),
                                        ("Caroline", "The garden gives me tomatoes all summer long.")])
        converse(store, [("Mel", "Thanks Caroline, talk soon."), ("Caroline", "Bye Mel!")])
        question = "What grows in Caroline's garden?"
        kw = {"reply_credit": 0.0, "prev_credit": 0.0, "recency_band": 0.0}
        assert ranked(store, question, name_factor=1.0, **kw).index(to_her) == 0
        assert ranked(store, question, **kw)[0] == hers


def test_context_returns_neighbours_of_the_same_scope_within_the_budget(tmp_path):
    with Store(tmp_path / "s") as store:
        a = [store.write(f"alpha note {i}", scope="a")["seq"] for i in range(3)]
        b = store.write("unrelated note in another scope", scope="b")["seq"]
        hit = store.write("the deploy key rotates monthly", scope="a")["seq"]
        after = [store.write(f"omega note {i}", scope="a")["seq"] for i in range(3)]
        reply = store.search("deploy key", context=3)
        (result,) = reply["results"]
        assert result["seq"] == hit
        assert [c["seq"] for c in result["context"]] == [a[1], a[2], after[0]]
        assert b not in [c["seq"] for c in result["context"]]
        assert reply["context"] == {"asked": 3, "included": 3, "tokens": sum(c["tokens"] for c in result["context"]),
                                    "over_budget": 0}
        assert reply["tokens"] == result["tokens"] + reply["context"]["tokens"]
        tight = store.search("deploy key", context=3, max_tokens=result["tokens"] + 4)
        assert tight["context"]["included"] == 1 and tight["context"]["over_budget"] == 2
        assert tight["tokens"] <= result["tokens"] + 4
        assert store.search("deploy key")["results"][0].get("context") is None


def test_context_never_repeats_a_record_already_in_the_reply(tmp_path):
    with Store(tmp_path / "s") as store:
        first = store.write("deploy key one")["seq"]
        second = store.write("deploy key two")["seq"]
        reply = store.search("deploy key", context=1)
        seqs = [r["seq"] for r in reply["results"]] + [c["seq"] for r in reply["results"] for c in r["context"]]
        assert sorted(seqs) == [first, second] and len(seqs) == len(set(seqs))


@pytest.mark.parametrize("bad", [-1, 51, 1.5, "2", True])
def test_context_out_of_range_is_refused(store, bad):
    from retained.errors import InvalidRecord

    store.write("anything")
    with pytest.raises(InvalidRecord, match="context"):
        store.search("anything", context=bad)


def test_a_write_names_earlier_records_of_the_same_subject(tmp_path):
    with Store(tmp_path / "s") as store:
        old = store.write("The API timeout is 30 seconds.", scope="svc")["seq"]
        store.write("The API timeout is 30 seconds in the other service.", scope="other")
        store.write("Lunch is at noon on Fridays.", scope="svc")
        proof = store.write("We raised the API timeout to 60 seconds.", scope="svc", related=True)
        assert [r["seq"] for r in proof["related"]] == [old]
        assert proof["related"][0]["text"] == "The API timeout is 30 seconds."
        assert f"supersedes=[{old}]" in proof["notices"][0]
        assert "related" not in store.write("Remember to water the plants.", scope="svc", related=True)
        assert "related" not in store.write("The API timeout is now 90 seconds.", scope="svc")  # not asked for
        again = store.write("We raised the API timeout to 60 seconds.", scope="svc", client_op_id="x", related=True)
        assert {proof["seq"], proof["seq"] + 2} <= {r["seq"] for r in again["related"]}
        duplicate = store.write("We raised the API timeout to 60 seconds.", scope="svc", client_op_id="x",
                                related=True)
        assert duplicate["duplicate"] and "related" not in duplicate


def test_a_write_names_at_most_three(tmp_path):
    with Store(tmp_path / "s") as store:
        for n in range(6):
            store.write(f"The build cache lives in bucket {n}.")
        assert len(store.write("The build cache moved to bucket 9.", related=True)["related"]) == 3


def test_cli_write_prints_the_related_records_and_search_shows_context(store_dir):
    from tests.conftest import run_cli

    assert run_cli("write", "The API timeout is 30 seconds.", env_dir=store_dir).returncode == 0
    out = run_cli("write", "We raised the API timeout to 60 seconds.", env_dir=store_dir)
    assert out.returncode == 0 and "supersedes=[1]" in out.stdout
    run_cli("write", "unrelated afterwards", env_dir=store_dir)
    got = run_cli("search", "raised timeout", "--context", "1", "--json", env_dir=store_dir)
    import json

    reply = json.loads(got.stdout)
    assert [r["seq"] for r in reply["results"]] == [2, 1]
    assert reply["context"]["included"] == 1 and reply["results"][0]["context"][0]["seq"] == 3
    text = run_cli("search", "raised timeout", "--context", "1", env_dir=store_dir).stdout
    assert "    | #" in text and "context: 1 record(s)" in text


def test_a_write_does_not_wait_for_another_process_holding_the_index(store, store_dir):
    """The hint after the acknowledgement never stalls a write: a held index is left as it is."""
    import sqlite3
    import time

    from retained.index.writer import INDEX_NAME

    old = store.write("The API timeout is 30 seconds.")["seq"]
    store.index.busy_timeout_s = 30.0
    store.search("timeout")
    holder = sqlite3.connect(store_dir / INDEX_NAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        proof = store.write("We raised the API timeout to 60 seconds.", related=True)
        waited = time.monotonic() - t0
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert waited < 10.0, f"the write waited {waited:.1f} s for the index"
    assert [r["seq"] for r in proof["related"]] == [old]  # from the index as it was
    assert store.search("timeout")["total_matches"] == 2

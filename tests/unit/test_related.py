"""The related-records step of a write (issue 31 point 1): what it names, and what it costs to ask.

A write asked for ``related`` (``memory_write``, ``retained write``) names up
to 3 earlier records of its scope that look like the same subject, so the
writer can supersede them. The fact/correction pairs of ``test_recency`` are
written among filler notes and conversation turns, the corrections asked for
their related records: the step must name the fact it corrects in at least
as many pairs as the step before it became one bounded statement over the
index (`RECALL_BEFORE`, measured on that code with this very set), and name
little among the filler.
"""

from __future__ import annotations

import random

import pytest

from retained import Store
from tests.unit.test_recency import FILLER, PAIRS

# The conversation turns written among the pairs: a speaker and a line, as an
# agent that keeps a conversation writes them (the shape of LoCoMo's turns).
SPEAKERS = ("Caroline", "Melanie", "Jon", "Gina")
TURN_WORDS = (
    "went support group yesterday powerful kids painted sunset lake weekend new job bakery starts next month "
    "adopted puppy Oscar loves beach reading book mindfulness pottery classes relax family camping trip amazing "
    "despite rain thinking going back school counseling concert downtown loud fun bowl community center charity run"
).split()


def turns(n: int, seed: int = 31) -> list[str]:
    rng = random.Random(seed)
    return [f"{SPEAKERS[i % len(SPEAKERS)]}: " + " ".join(rng.choice(TURN_WORDS) for _ in range(rng.randint(5, 16)))
            for i in range(n)]


# Pairs (of the 34) whose correction named its fact with the step as it was
# before (a ranking of rare terms, then each candidate read back from the log
# and compared), on `write_and_ask` with seeds 18, 1 and 2.
RECALL_BEFORE = {18: 34, 1: 34, 2: 34}


def write_and_ask(store: Store, seed: int, read_every: int = 0) -> tuple[int, int, int]:
    """``(pairs whose correction names its fact, filler writes that name anything, filler writes)``.

    The facts go among the first half of the notes and turns, the
    corrections among the second; every write after the facts asks for its
    related records. ``read_every``: as the MCP server does, each write
    leaves its step for later, and a read every that many writes (and one at
    the end) runs them (``Store.related_to_writes``).
    """
    rng = random.Random(seed)
    notes = FILLER + turns(120, seed)
    half = len(notes) // 2
    early = [("fact", i) for i in range(len(PAIRS))] + [("filler", j) for j in range(half)]
    late = [("correction", i) for i in range(len(PAIRS))] + [("filler", j) for j in range(half, len(notes))]
    rng.shuffle(early)
    rng.shuffle(late)
    facts: dict[int, int] = {}
    named = noisy = fillers = 0
    written: list[tuple[str, int, dict]] = []
    for n, (what, i) in enumerate(early + late, 1):
        text = notes[i] if what == "filler" else PAIRS[i][1 if what == "fact" else 2]
        written.append((what, i, store.write(text, related=True, later="session" if read_every else None)))
        if read_every and n % read_every == 0:
            told = store.related_to_writes("session") or {"writes": []}
            by_seq = {w["seq"]: w["related"] for w in told["writes"]}
            for _, _, proof in written[-read_every:]:
                proof["related"] = by_seq.get(proof["seq"], [])
    if read_every:
        told = store.related_to_writes("session") or {"writes": [], "checked": 0}
        by_seq = {w["seq"]: w["related"] for w in told["writes"]}
        for _, _, proof in written[len(written) - told["checked"]:]:
            proof["related"] = by_seq.get(proof["seq"], [])
    for what, i, proof in written:
        found = [r["seq"] for r in proof.get("related", [])]
        if what == "fact":
            facts[i] = proof["seq"]
        elif what == "correction":
            named += facts[i] in found
        elif i < len(FILLER):  # a note: the turns share their few words by design
            fillers += 1
            noisy += bool(found)
    return named, noisy, fillers


@pytest.mark.parametrize("seed", sorted(RECALL_BEFORE))
def test_a_correction_names_the_fact_it_corrects_as_often_as_before(tmp_path, seed):
    with Store(tmp_path / "store") as store:
        named, noisy, fillers = write_and_ask(store, seed)
    assert named >= RECALL_BEFORE[seed], f"named the fact in {named} of {len(PAIRS)} pairs"
    # The step before named something for 0, 0 and 1 of the 40 notes.
    assert noisy <= 1, f"{noisy} of {fillers} unrelated notes named an earlier record"


@pytest.mark.parametrize("read_every", [1, 5, 32])
def test_left_for_the_next_read_the_step_names_what_it_names_on_the_write(tmp_path, read_every):
    """The MCP server's writes leave the step for the session's next read (``later``): the same records are named."""
    with Store(tmp_path / "now") as now, Store(tmp_path / "later") as later:
        assert write_and_ask(later, 18, read_every) == write_and_ask(now, 18)


FACT = "The API timeout is 30 seconds."
CORRECTION = "We raised the API timeout to 60 seconds."


def related_seqs(proof: dict) -> list[int]:
    return [r["seq"] for r in proof.get("related", [])]


def test_a_correction_right_after_its_fact_names_it_before_the_index_holds_the_fact(tmp_path):
    """The records a process's steps saw are compared in memory: the write does not index the one before it."""
    with Store(tmp_path / "s") as store:
        for text in FILLER[:5]:
            store.write(text)
        store.search("anything")  # the index holds the notes
        fact = store.write(FACT, related=True)
        proof = store.write(CORRECTION, related=True)
        assert related_seqs(proof) == [fact["seq"]]
        assert proof["related"][0] == {"seq": fact["seq"], "ts": fact["ts"], "text": FACT}
        assert store.index.status()["indexed_to"] == fact["offset"]  # neither is indexed yet
        assert store.search("timeout")["total_matches"] == 2  # a read catches up as ever


def test_a_long_write_left_for_the_next_read_keeps_only_what_the_step_reads_and_names_the_same(tmp_path):
    from retained import limits

    long_text = CORRECTION + " " + " ".join(f"filler{i % 5000}" for i in range(200_000))
    with Store(tmp_path / "now") as now, Store(tmp_path / "later") as later:
        for store in (now, later):
            store.write(FACT)
        named = related_seqs(now.write(long_text, related=True))
        later.write(long_text, related=True, later="s")
        (step,) = later._related._later["s"].steps
        assert len(step[3]) == limits.RELATED_TEXT_CHARS < len(long_text)
        told = later.related_to_writes("s")
        assert told is not None and [[r["seq"] for r in w["related"]] for w in told["writes"]] == [named] == [[1]]


def test_a_long_write_is_left_to_a_later_catch_up(tmp_path):
    """However long the text, the step reads its first words only and never indexes it on the write's path."""
    with Store(tmp_path / "s") as store:
        fact = store.write(FACT)["seq"]
        long_text = CORRECTION + " " + " ".join(f"filler{i % 5000}" for i in range(200_000))
        proof = store.write(long_text, related=True)
        assert related_seqs(proof) == [fact]
        assert store.index.status()["indexed_to"] == proof["offset"]
        assert store.search("filler4999")["total_matches"] == 1


def test_a_record_another_writer_added_is_seen(tmp_path):
    """A record the process's steps did not see makes the index catch up first."""
    with Store(tmp_path / "s") as a, Store(tmp_path / "s") as b:
        a.write("Lunch is at noon on Fridays.", related=True)
        fact = b.write(FACT)["seq"]
        assert related_seqs(a.write(CORRECTION, related=True)) == [fact]


def test_the_rows_looked_up_ahead_are_looked_up_again_once_another_writer_added_a_record(tmp_path):
    """A lone write's terms are looked up beside its fsync (`Search.look_ahead`), and kept while the index does
    not change: a record on the same subject that another writer added in between is still named."""
    with Store(tmp_path / "s") as a, Store(tmp_path / "s") as b:
        fact = a.write(FACT, related=True)["seq"]
        a.write("Lunch is at noon on Fridays.", related=True)
        a.index.searcher.look_ahead(CORRECTION).result()  # the terms' rows as the index holds them now
        other = b.write("The API timeout on staging is 60 seconds too.")["seq"]
        assert set(related_seqs(a.write(CORRECTION, related=True))) == {fact, other}


def test_the_look_ahead_thread_ends_when_no_write_comes(tmp_path, monkeypatch):
    """No lasting thread: a process left with one thread forks its verify and rebuild workers (``core.pool``)."""
    from retained.index import search

    monkeypatch.setattr(search, "WORKER_IDLE_S", 0.0)
    with Store(tmp_path / "s") as store:
        store.write(FACT, related=True)
        store.write(CORRECTION, related=True)  # the step ran before: this write looked its terms up ahead
        worker = store.index.searcher.__dict__["_related_worker"]
        thread = worker.thread
        if thread is not None:
            thread.join(timeout=60)
        assert worker.thread is None


def test_another_writers_long_record_is_not_indexed_on_the_writes_path_but_by_the_next_read(tmp_path):
    """The catch-up the step would need is bounded too: past RELATED_CATCH_UP_BYTES it is left to the next read."""
    from retained.index.search import RELATED_CATCH_UP_BYTES

    with Store(tmp_path / "s") as a, Store(tmp_path / "s") as b:
        a.write("Lunch is at noon on Fridays.", related=True)
        long = b.write(" ".join(f"filler{i % 5000}" for i in range(RELATED_CATCH_UP_BYTES // 8)))
        assert long["length"] > RELATED_CATCH_UP_BYTES
        proof = a.write(CORRECTION, related=True)
        assert proof.get("related", []) == []  # a hint only: the write is acknowledged as ever
        assert a.index.status()["indexed_to"] <= long["offset"]  # the long record waits for a read
        assert a.search("filler4999")["total_matches"] == 1


def test_a_superseded_or_forgotten_record_is_not_named(tmp_path):
    with Store(tmp_path / "s") as store:
        old = store.write(FACT, related=True)["seq"]
        new = store.write(CORRECTION, supersedes=[old], related=True)["seq"]
        again = store.write("The API timeout was raised to 60 seconds last week.", related=True)
        assert related_seqs(again) == [new]
        store.forget([new], "wrong")
        assert related_seqs(store.write("Is the API timeout still 60 seconds?", related=True)) == [again["seq"]]


def test_the_cli_writes_without_the_step_when_it_is_off(store_dir):
    import os

    from tests.conftest import run_cli

    assert run_cli("write", FACT, env_dir=store_dir).returncode == 0
    os.environ["RETAINED_RELATED"] = "off"
    try:
        out = run_cli("write", CORRECTION, "--json", env_dir=store_dir)
        os.environ["RETAINED_RELATED"] = "maybe"
        bad = run_cli("write", CORRECTION, env_dir=store_dir)
    finally:
        del os.environ["RETAINED_RELATED"]
    assert out.returncode == 0 and '"related"' not in out.stdout
    assert bad.returncode != 0 and "RETAINED_RELATED must be on or off" in bad.stderr
    on = run_cli("write", CORRECTION, "--json", env_dir=store_dir)
    assert on.returncode == 0 and '"related"' in on.stdout


def test_threads_sharing_a_store_each_find_the_fact(tmp_path):
    """Concurrent writes (the HTTP server's handlers) run their steps in any order; each still sees what came before."""
    import threading

    with Store(tmp_path / "s") as store:
        facts = {t: store.write(FACT, scope=f"t{t}", related=True)["seq"] for t in range(8)}
        found: dict[int, list[int]] = {}
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                for i, text in enumerate(turns(20, seed=t)):
                    store.write(text, scope=f"t{t}", related=True)
                    if i == 10:
                        found[t] = related_seqs(store.write(CORRECTION, scope=f"t{t}", related=True))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors
        assert found == {t: [facts[t]] for t in range(8)}
        assert store.search("timeout")["total_matches"] == 16

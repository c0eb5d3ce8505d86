"""Vectors in the index and hybrid search, against a real embedding server on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from retained import Store
from retained.index.hybrid import Hybrid, embed_text
from retained.index.writer import Index
from retained.render import mode_line as status_line
from retained.vectors.embed import Breaker, Embedder
from tests.embed_server import EmbedServer

DIM = 32


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(scope="module")
def server() -> Iterator[EmbedServer]:
    with EmbedServer(dim=DIM) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _reset(server: EmbedServer) -> Iterator[None]:
    server.reset()
    if server._httpd is None:
        server.start()
    yield
    server.reset()
    if server._httpd is None:
        server.start()


@pytest.fixture
def parts(tmp_path: Path, server: EmbedServer) -> Iterator[tuple[Store, Index, Hybrid, FakeClock]]:
    store = Store(tmp_path / "s")
    index = Index(store.log)
    clock = FakeClock()
    emb = Embedder(server.url("ollama"), "hashed-bow", read_timeout_s=0.5,
                   breaker=Breaker(failures_max=2, cooldown_s=30, clock=clock))
    hybrid = Hybrid(index, emb)
    yield store, index, hybrid, clock
    hybrid.close()
    index.close()
    store.close()


def accounted(reply: dict[str, Any]) -> bool:
    return reply["returned"] + sum(reply["left_out"].values()) == reply["total_matches"]


def fill(store: Store, hybrid: Hybrid | None = None) -> None:
    """Four records; with ``hybrid``, their vectors too (a search never embeds stored records)."""
    store.write("the quarterly budget spreadsheet lives in the finance folder")
    store.write("deploy key rotated on the staging cluster", scope="ops")
    store.write("lunch order: two pizzas and salad")
    store.write("cluster staging deploy rolled back after the incident", scope="ops")
    if hybrid is not None:
        assert hybrid.backfill()["pending"] == 0


def test_records_get_vectors_and_search_is_hybrid(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store, hybrid)
    reply = hybrid.search("staging cluster deploy", k=3)
    assert reply["mode"] == "hybrid" and reply["mode_reason"] is None
    assert accounted(reply)
    assert {r["seq"] for r in reply["results"][:2]} == {2, 4}
    assert reply["results"][0]["ranks"]["dense"] is not None
    counts = hybrid.counts()
    assert counts["vectors"] == 4 and counts["missing"] == 0
    assert status_line(reply) == "mode: hybrid"


def test_hybrid_finds_what_lexical_search_cannot(parts: Any) -> None:
    """The hashed embedder matches word forms the stemmer does not fold ("pizzas" vs a typo'd query)."""
    store, index, hybrid, _ = parts
    fill(store, hybrid)
    lexical = index.search("pizzas salad lunchtime", k=5)
    reply = hybrid.search("pizzas salad lunchtime", k=5)
    assert reply["mode"] == "hybrid"
    assert reply["results"][0]["seq"] == 3
    # Dense candidates that match no lexical term are counted as matches too.
    assert reply["total_matches"] >= lexical["total_matches"]
    assert accounted(reply)
    dense_only = hybrid.search("xylophone quantum", k=4)
    assert dense_only["mode"] == "hybrid"
    assert index.search("xylophone quantum", k=4)["total_matches"] == 0
    assert dense_only["returned"] == 4 and accounted(dense_only)


def test_embedder_stopped_writes_land_search_is_lexical_and_says_why(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, clock = parts
    fill(store, hybrid)
    assert hybrid.search("budget", k=2)["mode"] == "hybrid"
    server.stop()
    proof = store.write("the budget moved to a new spreadsheet")
    assert proof["seq"] == 5
    # A search does not embed the new record: 1 of 5 without a vector is over the share it fuses with.
    reply = hybrid.search("budget spreadsheet", k=5)
    assert reply["mode"] == "lexical" and "1 of 5 records have no vector" in reply["mode_reason"]
    assert {r["seq"] for r in reply["results"]} == {1, 5}
    assert accounted(reply)
    # The backfill fails and the reply says so; two failures open the breaker: no more calls.
    assert "embedder" in hybrid.backfill()["error"]
    reply = hybrid.search("budget", k=1)
    assert reply["mode"] == "lexical" and "embedding them failed" in reply["mode_reason"]
    hybrid.backfill()
    reply = hybrid.search("budget", k=1)
    assert reply["mode"] == "lexical" and "circuit breaker open" in reply["mode_reason"]
    assert reply["vectors"]["breaker"] == "open"
    # The server comes back; after the cool-down, backfill fills the gap.
    server.start()
    clock.t += 31
    assert hybrid.pending() == 1
    done = hybrid.backfill()
    assert done == {"embedded": 1, "pending": 0, "error": None, "model": "hashed-bow"}
    assert hybrid.search("budget spreadsheet", k=5)["mode"] == "hybrid"


def test_a_query_the_embedder_cannot_answer_is_searched_lexically_and_says_why(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, _ = parts
    fill(store, hybrid)
    server.stop()
    reply = hybrid.search("budget spreadsheet", k=5)
    assert reply["mode"] == "lexical" and "the query could not be embedded" in reply["mode_reason"]
    assert reply["without_vectors"] == reply["total_matches"] and accounted(reply)


def test_a_slow_embedder_never_delays_a_write(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, _ = parts
    server.delay_s = 2.0
    proof = store.write("written while the embedder sleeps")
    hybrid.kick()  # what the server does after acknowledging: returns at once
    assert proof["seq"] == 1
    reply = hybrid.search("embedder sleeps", k=1)
    # Either the background batch still holds the embedder (the search does not queue
    # behind it) or it has timed out and the search's own attempt timed out too.
    assert reply["mode"] == "lexical"
    assert "read timeout" in reply["mode_reason"] or "in the background" in reply["mode_reason"]
    assert reply["returned"] == 1 and reply["without_vectors"] == 1


def test_too_many_records_without_vectors_means_lexical(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, _ = parts
    for i in range(10):
        store.write(f"note {i} about gardening")
    reply = hybrid.search("gardening", k=3)
    assert reply["mode"] == "lexical"
    assert "10 of 10 records have no vector" in reply["mode_reason"] and "--backfill" in reply["mode_reason"]
    assert server.requests == []  # the search sent nothing: no query vector to fuse with, no stored record
    progress: list[tuple[int, int]] = []
    assert hybrid.backfill(lambda d, t: progress.append((d, t)), batch=4)["pending"] == 0
    assert progress == [(4, 10), (8, 10), (10, 10)]
    assert hybrid.search("gardening", k=3)["mode"] == "hybrid"


def test_a_search_sends_its_query_and_never_a_stored_record(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, _ = parts
    for i in range(10):
        store.write(f"note {i} about gardening")
    hybrid.backfill()
    store.write("note 10 about gardening, not embedded yet")
    server.requests.clear()
    reply = hybrid.search("gardening", k=3)
    assert reply["mode"] == "hybrid" and reply["without_vectors"] == 1 and reply["vectors"]["missing"] == 1
    assert [r["payload"]["input"] for r in server.requests] == [["gardening"]]
    assert hybrid.pending() == 1


def test_a_model_change_never_mixes_vectors(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, _ = parts
    fill(store)
    hybrid.backfill()
    other = Hybrid(index, Embedder(server.url("openai"), "another-model"))
    counts = other.counts()
    assert counts["vectors"] == 0 and counts["missing"] == 4
    assert counts["other_models"] == {"hashed-bow": 4}
    reply = other.search("staging", k=2, mode="auto")
    # Nothing of the old model is ranked with the new one: lexical until the new model's vectors exist.
    assert reply["vectors"]["model"] == "another-model" and reply["mode"] == "lexical"
    assert other.backfill()["embedded"] == 4 and other.counts()["vectors"] == 4
    assert other.search("staging", k=2)["mode"] == "hybrid"
    assert hybrid.counts()["vectors"] == 4


def test_wrong_dimension_from_the_same_model_is_rejected(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, _ = parts
    fill(store)
    hybrid.backfill()
    fresh = Hybrid(index, Embedder(server.url("ollama"), "hashed-bow"))
    store.write("a fifth note")
    server.wrong_dim = True
    step = fresh.catch_up()
    assert step["embedded"] == 0 and step["pending"] == 1
    assert f"expected {DIM}" in step["error"]


def test_retracted_and_superseded_records_stay_out_of_dense_results(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store, hybrid)
    store.write("lunch order: three pizzas", supersedes=[3])
    store.forget([1], "wrong folder")
    reply = hybrid.search("pizzas lunch budget spreadsheet finance", k=10)
    seqs = [r["seq"] for r in reply["results"]]
    assert 3 not in seqs and 1 not in seqs and 5 in seqs
    assert reply["left_out"]["superseded"] == 1 and reply["left_out"]["retracted"] == 1
    assert accounted(reply)
    shown = hybrid.search("pizzas", k=10, include_superseded=True)
    assert 3 in [r["seq"] for r in shown["results"]]


def test_scope_filter_applies_to_the_dense_ranking(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store, hybrid)
    reply = hybrid.search("pizzas", k=10, scope="ops")
    assert reply["mode"] == "hybrid"
    assert {r["seq"] for r in reply["results"]} <= {2, 4}
    assert accounted(reply)


def test_budget_and_k_keep_the_accounting(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store, hybrid)
    for k in (0, 1, 2, 10):
        for budget in (None, 0, 12, 1000):
            reply = hybrid.search("staging deploy pizzas", k=k, max_tokens=budget)
            assert reply["mode"] == "hybrid" and accounted(reply), (k, budget, reply["left_out"])


def test_without_embedder_search_is_lexical_and_says_it_is_off(tmp_path: Path) -> None:
    with Store(tmp_path / "s") as store:
        store.write("hello world")
        index = Index(store.log)
        reply = Hybrid(index, None).search("hello")
        assert reply["mode"] == "lexical" and "RETAINED_EMBED_URL" in reply["mode_reason"]
        assert reply["returned"] == 1
        index.close()


def test_vectors_survive_an_index_rebuild_and_follow_a_redaction_free_log(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store)
    hybrid.backfill()
    index.rebuild()
    assert hybrid.pending() == 0
    assert hybrid.search("staging", k=2)["mode"] == "hybrid"


def test_embed_text_is_text_then_body() -> None:
    assert embed_text({"text": "a", "body": "b"}) == "a\nb"
    assert embed_text({"text": "a", "body": {"x": 1}}) == "a"
    assert embed_text({"kind": "retract"}) == ""


def test_a_redacted_records_vector_is_deleted(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store)
    hybrid.backfill()
    store.redact(2, "held a credential")
    hybrid.catch_up()
    with index.lock:
        seqs = [r[0] for r in index.connection().execute("SELECT seq FROM vectors ORDER BY seq")]
    assert seqs == [1, 3, 4]
    reply = hybrid.search("deploy key rotated staging", k=10)
    assert 2 not in [r["seq"] for r in reply["results"]]


def test_prune_removes_the_vectors_of_redacted_records_once(parts: Any) -> None:
    from retained.index.hybrid import prune

    store, index, hybrid, _ = parts
    fill(store)
    hybrid.backfill()
    with index.lock:
        index.connection().execute("UPDATE records SET redacted = 1 WHERE seq = 3")  # what a redaction leaves
    assert prune(index) == 1
    assert prune(index) == 0
    with index.lock:
        assert [r[0] for r in index.connection().execute("SELECT seq FROM vectors ORDER BY seq")] == [1, 2, 4]


def test_settings_turn_embeddings_on_and_bad_settings_say_why(tmp_path: Path, server: EmbedServer) -> None:
    from retained.index.hybrid import from_settings

    with Store(tmp_path / "s") as store:
        store.write("settings are read by the edge")
        index = Index(store.log)
        on = from_settings(index, {"RETAINED_EMBED_URL": server.url("ollama"), "RETAINED_EMBED_MODEL": "m",
                                   "RETAINED_EMBED_DENSE_WEIGHT": "0.4", "RETAINED_EMBED_KEY": "sekrit-key"})
        assert on.backfill()["embedded"] == 1
        assert on.dense_weight == 0.4 and on.search("settings")["mode"] == "hybrid"
        off = from_settings(index, {})
        assert off.search("settings")["mode_reason"].startswith("embeddings are off")
        half = from_settings(index, {"RETAINED_EMBED_URL": server.url("ollama")})
        assert "RETAINED_EMBED_MODEL is not set" in half.search("settings")["mode_reason"]
        bad = from_settings(index, {"RETAINED_EMBED_URL": "http://127.0.0.1:1", "RETAINED_EMBED_MODEL": "m"})
        assert "no known endpoint path" in bad.search("settings")["mode_reason"]
        weight = from_settings(index, {"RETAINED_EMBED_URL": server.url("ollama"), "RETAINED_EMBED_MODEL": "m",
                                       "RETAINED_EMBED_DENSE_WEIGHT": "heavy"})
        assert "RETAINED_EMBED_DENSE_WEIGHT" in weight.search("settings")["mode_reason"]
        keep = from_settings(index, {"RETAINED_EMBED_URL": server.url("ollama"), "RETAINED_EMBED_MODEL": "m",
                                     "RETAINED_EMBED_KEEP_LEXICAL": "0"})
        keep.backfill()
        assert keep.keep_lexical == 0 and keep.search("settings")["vectors"]["keep_lexical"] == 0
        for raw in ("-1", "1.5", "all"):
            bad_keep = from_settings(index, {"RETAINED_EMBED_URL": server.url("ollama"), "RETAINED_EMBED_MODEL": "m",
                                             "RETAINED_EMBED_KEEP_LEXICAL": raw})
            assert "RETAINED_EMBED_KEEP_LEXICAL" in bad_keep.search("settings")["mode_reason"], raw
        index.close()


def test_verify_reports_records_without_a_vector(parts: Any, server: EmbedServer) -> None:
    store, index, hybrid, _ = parts
    fill(store)
    hybrid.backfill()
    assert hybrid.verify()["findings"] == []
    server.stop()
    store.write("written while the embedder is down")
    report = hybrid.verify()
    assert report["missing"] == 1
    assert report["findings"][0]["kind"] == "vectors_missing"
    assert "1 of 5 records" in report["findings"][0]["message"]


def test_kick_embeds_new_records_in_the_background(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store)
    hybrid.kick()
    assert hybrid._thread is not None
    # A bounded poll (at most 10 s): the follower embeds the four records on its own.
    pause = threading.Event()
    for _ in range(200):
        if hybrid.counts()["vectors"] == 4:
            break
        pause.wait(0.05)
    assert hybrid.counts()["vectors"] == 4


def test_context_and_neighbour_scores_match_their_definition() -> None:
    import numpy as np

    from retained.vectors import numeric as vectors
    from retained.index.dense import Matrix

    rng = np.random.default_rng(5)
    raw = rng.standard_normal((5, 8))
    scopes = ["a", "b", "a", "a", "b"]
    m = Matrix("m", 0)
    m.extend([(i + 1, i + 1, f"h{i}", 8, vectors.pack(raw[i]), scopes[i]) for i in range(5)],
             {i + 1: (f"speaker {i % 2}", None) for i in range(5)})
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    q = unit[2] + unit[4]
    q = q / np.linalg.norm(q)
    assert list(m.prev[:5]) == [-1, -1, 0, 2, 1] and list(m.next[:5]) == [2, 4, 3, -1, -1]
    plain = unit @ q
    assert np.allclose(m.scores(q.astype(np.float32), 0.0, 0.0), plain, atol=1e-5)
    g = 0.5
    z = plain - plain.mean()
    ctx = z.copy()
    for row, prev in ((2, 0), (3, 2), (4, 1)):
        ctx[row] = z[row] + g * z[prev]
    assert np.allclose(m.scores(q.astype(np.float32), g, 0.0), ctx, atol=1e-5)
    b = 0.3
    best = [ctx[2], ctx[4], max(ctx[0], ctx[3]), ctx[2], ctx[1]]
    assert np.allclose(m.scores(q.astype(np.float32), g, b), ctx + b * np.array(best), atol=1e-5)


def test_an_unrelated_neighbour_never_outranks_the_match() -> None:
    """Embedding models give unrelated texts a high baseline cosine; context must not ride on it."""
    import numpy as np

    from retained.index.hybrid import CONTEXT_WEIGHT, NEIGHBOUR_WEIGHT
    from retained.vectors import numeric as vectors
    from retained.index.dense import Matrix

    rng = np.random.default_rng(9)
    base = rng.standard_normal(384)
    raw = [base * 2.0 + rng.standard_normal(384) for _ in range(6)]  # anisotropic: cosines near 0.8
    m = Matrix("m", 0)
    m.extend([(i + 1, i + 1, f"h{i}", 384, vectors.pack(raw[i]), None) for i in range(6)])
    for match in range(6):
        q = raw[match] / np.linalg.norm(raw[match])
        scores = m.scores(q.astype(np.float32), CONTEXT_WEIGHT, NEIGHBOUR_WEIGHT)
        assert int(np.argmax(scores)) == match


def test_the_lexical_head_keeps_its_places_in_the_fused_ranking(parts: Any) -> None:
    store, index, hybrid, _ = parts
    fill(store, hybrid)
    store.write("staging deploy notes: the cluster budget for pizzas")
    store.write("the finance cluster rolled the deploy key")
    hybrid.backfill()
    queries = ("staging deploy", "cluster budget", "deploy key cluster", "pizzas finance", "rolled back staging")
    hybrid.dense_weight = 1.0  # a heavy dense list, so that plain RRF reorders the head
    hybrid.newer_first = False  # the fusion alone (the newer-first step has its own tests)
    moved = 0
    for q in queries:
        lexical = [r["seq"] for r in index.search(q, k=10)["results"]]
        hybrid.keep_lexical = 0
        plain = [r["seq"] for r in hybrid.search(q, k=6)["results"]]
        hybrid.keep_lexical = 2
        reply = hybrid.search(q, k=6)
        kept = [r["seq"] for r in reply["results"]]
        assert reply["vectors"]["keep_lexical"] == 2 and accounted(reply)
        assert kept[:2] == lexical[:2], q
        assert kept[2:] == [s for s in plain if s not in lexical[:2]][:4], q  # the rest in fused order
        moved += plain[:2] != lexical[:2]
    assert moved, "the dense ranking never reordered the lexical head: the test shows nothing"


def test_a_newer_record_does_not_move_above_an_older_one_that_answers_the_query_as_asked():
    """"restorable note 17" asked: note 40 may correct note 17 (same subject), but only 17 holds every term."""
    from retained.index import corrections, query

    def entry(seq: int, text: str) -> dict:
        return {"seq": seq, "offset": 0, "length": 0, "record": {"seq": seq, "text": text, "kind": "note"}}

    asked = entry(18, "restorable note 17")
    results = [asked, entry(41, "restorable note 40")]
    assert corrections.newer_first(results, None, query.terms("restorable note 17")) == 0
    assert [r["seq"] for r in results] == [18, 41] and results[1]["may_correct"] == [18]
    # Asked without the number, the newer statement of the same subject comes first.
    results = [entry(18, "restorable note 17"), entry(41, "restorable note 40")]
    assert corrections.newer_first(results, None, query.terms("restorable note")) == 1
    assert [r["seq"] for r in results] == [41, 18]


def test_a_plain_word_the_correction_lacks_does_not_hold_the_older_record_in_place():
    """"where does proj-a deploy" asked: the older holds every term, the newer lacks only "deploy"; it still moves."""
    from retained.index import corrections, query

    def entry(seq: int, text: str) -> dict:
        return {"seq": seq, "offset": 0, "length": 0, "record": {"seq": seq, "text": text, "kind": "note"}}

    results = [entry(3, "proj-a: we deploy to the eu-west cluster"), entry(9, "proj-a moved to the us-east cluster")]
    assert corrections._answers_as_asked(set(query.terms("where does proj-a deploy")), results[0])
    assert corrections.newer_first(results, None, query.terms("where does proj-a deploy")) == 1
    assert [r["seq"] for r in results] == [9, 3] and results[0]["may_correct"] == [3]


def test_vectors_link_two_turns_only_when_one_speaker_said_both():
    """Turns about one topic are close by cosine; across speakers that is a conversation, not a correction."""
    from retained.index import corrections

    def turn(seq: int, speaker: str, text: str) -> dict:
        return {"seq": seq, "offset": 0, "length": 0,
                "record": {"seq": seq, "text": text, "kind": "note", "speaker": speaker}}

    older, same, other = (turn(1, "Sam", "we met at the lake"), turn(5, "Sam", "lovely evening by the water"),
                          turn(6, "Alex", "lovely evening by the water"))
    assert corrections.may_correct(older, same, 0.95, mutual=True)
    assert not corrections.may_correct(older, other, 0.95, mutual=True)
    # Nor by their words: what one speaker says does not correct what the other said.
    assert corrections.may_correct(turn(1, "Sam", "the team dinner is at Luigi's"),
                                   turn(9, "Sam", "the team dinner moved to Sakura"), None)
    assert not corrections.may_correct(turn(1, "Sam", "the team dinner is at Luigi's"),
                                       turn(9, "Alex", "the team dinner moved to Sakura"), None)


def test_with_vectors_a_pair_is_each_others_nearest_and_two_turns_stand_out_from_the_rest():
    """A high cosine alone links nothing: one speaker's turns on a topic are all close to each other."""
    from retained.index import corrections

    def turn(seq: int, text: str, speaker: str | None = "Sam") -> dict:
        rec = {"seq": seq, "text": text, "kind": "note", **({"speaker": speaker} if speaker else {})}
        return {"seq": seq, "offset": 0, "length": 0, "record": rec}

    def ranked(cosines: dict[tuple[int, int], float], speaker: str | None = "Sam") -> list[dict]:
        results = [turn(3, "the standup is at nine", speaker), turn(5, "standup moved to half past nine", speaker),
                   turn(1, "the standup room is on floor two", speaker)]
        corrections.newer_first(results, lambda a, b: cosines.get((min(a, b), max(a, b))), "when is standup")
        return results

    # 3 and 5 each other's nearest by 0.05: the newer swaps with the older.
    assert [r["seq"] for r in ranked({(3, 5): 0.95, (1, 3): 0.90, (1, 5): 0.89})] == [5, 3, 1]
    # 1 is nearer to 3 than 5 is: 5 is not 3's nearest, so it does not correct it and the order stays.
    plain = ranked({(3, 5): 0.95, (1, 3): 0.96, (1, 5): 0.89})
    assert [r["seq"] for r in plain] == [3, 5, 1] and "may_correct" not in plain[1]
    # Each other's nearest, but by less than MARGIN: for turns that is no pair; for notes it is.
    close = {(3, 5): 0.95, (1, 3): 0.945, (1, 5): 0.90}
    assert [r["seq"] for r in ranked(close)] == [3, 5, 1]
    assert [r["seq"] for r in ranked(close, speaker=None)] == [5, 3, 1]


def test_a_question_neither_corrects_nor_is_corrected():
    from retained.index import corrections

    def entry(seq: int, text: str) -> dict:
        return {"seq": seq, "offset": 0, "length": 0, "record": {"seq": seq, "text": text, "kind": "note"}}

    fact, fix = entry(2, "The API timeout is 30 seconds."), entry(8, "The API timeout is 60 seconds.")
    assert corrections.may_correct(fact, fix, None)
    assert not corrections.may_correct(fact, entry(8, "Is the API timeout still 30 seconds?"), None)
    assert not corrections.may_correct(entry(2, "What is the API timeout in seconds?"), fix, None)


def test_a_correction_swaps_with_what_it_corrects_and_the_results_between_keep_their_places():
    from retained.index import corrections

    def entry(seq: int, text: str) -> dict:
        return {"seq": seq, "offset": 0, "length": 0, "record": {"seq": seq, "text": text, "kind": "note"}}

    results = [entry(2, "The API timeout is 30 seconds."), entry(3, "lunch is at noon"),
               entry(4, "the office opens at eight"), entry(9, "The API timeout is 60 seconds.")]
    assert corrections.newer_first(results, None, "api timeout") == 1
    assert [r["seq"] for r in results] == [9, 3, 4, 2]
    assert results[0]["may_correct"] == [2] and results[3]["may_be_corrected_by"] == [9]


def test_a_budget_smaller_than_the_best_result_returns_it_cut_in_hybrid_search_too(parts: Any) -> None:
    store, _, hybrid, _ = parts
    big = store.write("lorem ipsum " * 500 + "the staging deploy was rolled back " + "dolor sit " * 500)
    hybrid.backfill()  # a search embeds only its query
    reply = hybrid.search("staging deploy rolled back", k=3, max_tokens=12)
    assert reply["mode"] == "hybrid" and accounted(reply) and reply["returned"] == 1
    (result,) = reply["results"]
    assert result["seq"] == big["seq"] and result["tokens"] <= 12 and "staging deploy" in result["record"]["text"]
    assert result["cut"]["total_chars"] > 10000

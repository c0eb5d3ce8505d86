"""The derived index: catch-up, search with I2 accounting, supersede, two-way verify (L5)."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from retained import Store
from retained.errors import InvalidRecord, NotFound
from retained.index.writer import INDEX_NAME, Index, documents, estimate_tokens

from ..conftest import REPO, VECTORS, run_cli


def kinds(findings):
    return sorted((f["kind"], f["seq"]) for f in findings)


def identity(reply):
    return reply["returned"] + sum(reply["left_out"].values()) == reply["total_matches"]


def test_search_finds_a_write_and_reads_its_text_from_the_log(store):
    store.write("the deploy target is staging", scope="proj-a")
    reply = store.search("what is the deploy target?")
    assert reply["returned"] == 1
    hit = reply["results"][0]
    assert hit["seq"] == 1
    assert hit["record"]["text"] == "the deploy target is staging"
    raw = store.log.read_at(hit["offset"], hit["length"])
    assert raw.endswith(b"\n") and hit["record"]["hash"].encode() in raw
    assert identity(reply)


def test_search_on_a_store_with_no_log_answers_zero_without_creating_it(store_dir):
    with Store(store_dir) as s:
        reply = s.search("anything")
    assert reply["total_matches"] == 0 and identity(reply)
    assert not store_dir.exists()


def test_accounting_names_beyond_k_over_budget_and_scope(store):
    for i in range(12):
        store.write(f"alpha note {i} " + "pad " * (10 * i), scope="a" if i % 3 else "b")
    reply = store.search("alpha", k=5)
    assert (reply["total_matches"], reply["returned"], reply["left_out"]["beyond_k"]) == (12, 5, 7)
    reply = store.search("alpha", k=12, max_tokens=40)
    assert reply["tokens"] <= 40 and reply["left_out"]["over_budget"] == 12 - reply["returned"]
    assert identity(reply)
    reply = store.search("alpha", k=10, scope="b")
    assert reply["total_matches"] == 4 and all(r["record"]["scope"] == "b" for r in reply["results"])


def test_token_estimate_is_utf8_bytes_over_four_rounded_up():
    assert estimate_tokens({"text": "abcd"}) == 1
    assert estimate_tokens({"text": "abcde"}) == 2
    assert estimate_tokens({"text": "é"}) == 1  # 2 bytes
    assert estimate_tokens({"text": "abc", "body": {"k": 1}}) == 3  # 3 + len('{"k":1}') = 10


def test_superseded_is_hidden_counted_and_shown_on_request(store):
    store.write("the deploy target is staging")
    store.write("the deploy target is production", supersedes=[1])
    reply = store.search("deploy target")
    assert [r["seq"] for r in reply["results"]] == [2]
    assert reply["left_out"]["superseded"] == 1 and identity(reply)
    reply = store.search("deploy target", include_superseded=True)
    assert sorted(r["seq"] for r in reply["results"]) == [1, 2]
    old = next(r for r in reply["results"] if r["seq"] == 1)
    assert old["superseded_by"] == [2]
    assert store.get([1])[0]["superseded_by"] == [2]


def test_retracted_is_hidden_and_counted(store):
    store.write("a secret-ish plan")
    store.forget([1], "wrong")
    reply = store.search("plan")
    assert reply["returned"] == 0 and reply["left_out"]["retracted"] == 1 and identity(reply)
    assert store.get([1])[0]["retracted_by"] == [2]
    reply = store.search("plan", include_retracted=True)
    assert reply["returned"] == 1


def test_write_supersedes_checks_the_targets_exist(store):
    store.write("one")
    with pytest.raises(NotFound):
        store.write("two", supersedes=[7])
    assert store.head()["seq"] == 1


def test_bad_k_and_budget_are_refused(store):
    store.write("x")
    for kwargs in ({"k": -1}, {"k": 100000}, {"max_tokens": -5}, {"k": 1.5}):
        with pytest.raises(InvalidRecord):
            store.search("x", **kwargs)


def test_caller_fields_are_searchable_and_reserved_ones_are_not(store):
    store.write("hello there", fields={"speaker": "Caroline", "meta": {"tags": ["gardening"]}}, scope="zebra")
    assert store.search("Caroline")["returned"] == 1
    assert store.search("gardening")["returned"] == 1
    assert store.search("zebra")["returned"] == 0  # scope is a filter, not words
    text, body, fields = documents({"text": "t", "body": "b", "speaker": "S", "hash": "h" * 64, "seq": 4})
    assert (text, body, fields) == ("t", "b", "S")


def test_cjk_two_character_query_finds_a_run(store):
    store.write("我们明天去东京都庁参观")
    store.write("日本語のテキストを検索する")
    assert [r["seq"] for r in store.search("东京")["results"]] == [1]
    assert [r["seq"] for r in store.search("参观")["results"]] == [1]
    assert [r["seq"] for r in store.search("検索")["results"]] == [2]
    assert [r["seq"] for r in store.search("テキスト")["results"]] == [2]
    assert store.search("京都")["returned"] == 1  # a substring across the run


def test_catch_up_sees_records_another_process_wrote(store, store_dir):
    store.write("first")
    assert store.search("first")["returned"] == 1
    code = f"from retained import Store\nwith Store({str(store_dir)!r}) as s: s.write('second from elsewhere')"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)
    assert store.search("elsewhere")["returned"] == 1


def test_a_write_is_acknowledged_when_the_index_cannot_be_updated(store, store_dir):
    store.write("one")
    store.search("one")
    store.close()
    (store_dir / INDEX_NAME).unlink()
    for suffix in ("-wal", "-shm"):
        (store_dir / (INDEX_NAME + suffix)).unlink(missing_ok=True)
    (store_dir / INDEX_NAME).write_bytes(b"this is not a database" * 100)
    with Store(store_dir) as s:
        proof = s.write("two")
        assert proof["seq"] == 2
        # The unusable file is set aside and the index rebuilt from the log.
        assert s.search("two")["returned"] == 1
        assert (store_dir / (INDEX_NAME + ".damaged-0")).exists()
        assert s.verify()["ok"]


# -- drift, made by hand, in each direction ----------------------------------


def _filled(store, n=8):
    for i in range(1, n + 1):
        store.write(f"record number {i} about topic{i}")
    store.search("record")  # the index is caught up
    return store


def test_rows_deleted_from_the_index_are_reported_exactly_and_cleared_by_rebuild(store, store_dir):
    _filled(store)
    index = store.index
    db = index.connection()
    rec = store.get([3])[0]["record"]
    db.execute("DELETE FROM records WHERE seq = 3")
    db.execute("INSERT INTO fts (fts, rowid, text, body, fields) VALUES ('delete', 3, ?, ?, ?)", documents(rec))
    assert kinds(index.verify()) == [("index_missing", 3)]
    report = store.verify()
    assert not report["ok"] and [f["kind"] for f in report["findings"]] == ["index_missing"]
    index.rebuild()
    assert index.verify() == []


def test_log_replaced_by_an_older_copy_reports_ghosts_and_rebuild_clears(store, store_dir):
    for i in range(1, 6):
        store.write(f"record number {i}")
    old = store_dir.parent / "log-copy.jsonl"
    shutil.copy(store_dir / "log.jsonl", old)
    for i in range(6, 9):
        store.write(f"record number {i}")
    store.search("record")
    store.close()
    shutil.copy(old, store_dir / "log.jsonl")
    with Store(store_dir) as s:
        found = kinds(s.index.verify())
        assert found == [("index_ghost", 6), ("index_ghost", 7), ("index_ghost", 8), ("index_log_replaced", 8)]
        s.rebuild()
        assert s.index.verify() == []
        assert s.search("record")["total_matches"] == 5


def test_a_read_after_the_log_was_replaced_rebuilds_and_answers_from_the_log(store, store_dir):
    _filled(store, 6)
    old = store_dir.parent / "log-copy.jsonl"
    shutil.copy(store_dir / "log.jsonl", old)
    store.write("late record")
    store.search("late")
    shutil.copy(old, store_dir / "log.jsonl")
    reply = store.search("late")
    assert reply["total_matches"] == 0 and reply["index"]["state"] == "rebuilt"


def test_a_hash_edited_in_the_index_is_reported_exactly(store):
    _filled(store)
    index = store.index
    index.connection().execute("UPDATE records SET hash = ? WHERE seq = 2", ("ab" * 32,))
    found = index.verify()
    assert kinds(found) == [("index_hash_mismatch", 2)]
    assert found[0]["expected"] == store.get([2])[0]["record"]["hash"] and found[0]["observed"] == "ab" * 32
    # The search refuses to serve what it cannot check, and says so.
    reply = store.search("topic2")
    assert reply["returned"] == 0 and reply["left_out"]["unreadable"] == 1 and identity(reply)
    index.rebuild()
    assert index.verify() == []


def test_an_offset_edited_in_the_index_is_reported(store):
    _filled(store)
    index = store.index
    index.connection().execute("UPDATE records SET offset = offset + 1 WHERE seq = 4")
    assert kinds(index.verify()) == [("index_offset_mismatch", 4)]


def test_fts_rows_without_records_are_reported(store):
    _filled(store)
    db = store.index.connection()
    db.execute("INSERT INTO fts (rowid, text, body, fields) VALUES (99, 'stray words', '', '')")
    assert kinds(store.index.verify()) == [("index_words_ghost", 99)]


def test_a_damaged_full_text_index_fails_fts5s_own_check(store):
    _filled(store)
    db = store.index.connection()
    # Drop the segments FTS5 keeps its postings in (its structure record, id 10, stays).
    db.execute("DELETE FROM fts_data WHERE id > 10")
    report = store.verify()
    found = [f for f in report["findings"] if f["kind"] == "index_integrity"]
    assert found and "FTS5 integrity check failed" in found[0]["message"] and not report["ok"]
    store.rebuild()
    assert store.verify()["ok"]


def test_verify_is_clean_on_the_format_vector_with_foreign_and_redacted_lines(tmp_path):
    src = VECTORS / "chain-v1-redacted-foreign.jsonl"
    d = tmp_path / "s"
    d.mkdir()
    shutil.copy(src, d / "log.jsonl")
    with Store(d) as s:
        assert s.index.verify() == []
        listed = s.index.recent(10)
        assert listed["total_matches"] == 4  # five chained records, one redacted


def test_two_processes_catching_up_at_once_index_each_record_once(store, store_dir):
    store.write_batch([{"text": f"bulk record {i}"} for i in range(3000)])
    store.close()
    code = textwrap.dedent(f"""
        from retained.core.log import Log
        from retained.index.writer import Index
        ix = Index(Log({str(store_dir)!r}))
        ix.catch_up()
        ix.close()
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO) for _ in range(3)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    with Store(store_dir) as s:
        db = s.index.connection()
        assert db.execute("SELECT count(*) FROM records").fetchone()[0] == 3000
        assert db.execute("SELECT count(*) FROM fts").fetchone()[0] == 3000
        assert s.index.verify() == []
        assert s.search("bulk")["total_matches"] == 3000


def test_a_searching_process_sees_every_acknowledged_record_while_two_write(tmp_path, store_dir):
    writer = textwrap.dedent("""
        import sys
        from retained import Store
        name, n, ack = sys.argv[1], int(sys.argv[2]), sys.argv[3]
        with Store(sys.argv[4]) as s, open(ack, "a", encoding="utf-8") as out:
            for i in range(n):
                s.write(f"token{name}x{i} written")
                out.write(f"token{name}x{i}\\n")
                out.flush()
    """)
    searcher = textwrap.dedent("""
        import sys, time
        from pathlib import Path
        from retained import Store
        acks = [Path(p) for p in sys.argv[2:4]]
        done = Path(sys.argv[4])
        seen = set()
        with Store(sys.argv[1]) as s:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                finished = done.exists()
                acked = set()
                for a in acks:
                    if a.exists():
                        acked.update(l for l in a.read_text(encoding="utf-8").split("\\n") if l)
                for token in sorted(acked - seen):
                    if s.search(token)["returned"] != 1:
                        print("missing", token)
                        sys.exit(1)
                    seen.add(token)
                if finished:
                    break
        print(len(seen))
    """)
    store_dir.mkdir(mode=0o700)
    a1, a2, done = tmp_path / "a1", tmp_path / "a2", tmp_path / "done"
    s = subprocess.Popen([sys.executable, "-c", searcher, str(store_dir), str(a1), str(a2), str(done)],
                         cwd=REPO, stdout=subprocess.PIPE, text=True)
    ws = [subprocess.Popen([sys.executable, "-c", writer, name, "40", str(ack), str(store_dir)], cwd=REPO)
          for name, ack in (("a", a1), ("b", a2))]
    for w in ws:
        assert w.wait(timeout=120) == 0
    done.write_text("1")
    out, _ = s.communicate(timeout=180)
    assert s.returncode == 0, out
    assert out.strip().splitlines()[-1] == "80"


# -- the CLI ------------------------------------------------------------------


def test_cli_search_rebuild_and_verify(store_dir):
    assert run_cli("write", "the deploy target is staging", "--scope", "p", env_dir=store_dir).returncode == 0
    assert run_cli("write", "deploy target is prod", "--supersedes", "1", env_dir=store_dir).returncode == 0
    r = run_cli("write", "x", "--supersedes", "9", env_dir=store_dir)
    assert r.returncode == 2 and "no record with seq 9" in r.stderr
    r = run_cli("search", "deploy target", "--scope", "p", "--json", env_dir=store_dir)
    import json

    reply = json.loads(r.stdout)
    assert reply["returned"] == 1 and reply["left_out"]["superseded"] == 1
    r = run_cli("search", "deploy", "--scope", "p", "--include-superseded", "-k", "1", env_dir=store_dir)
    assert r.returncode == 0 and "1 beyond k" in r.stdout
    r = run_cli("get", "1", env_dir=store_dir)
    assert "superseded_by=#2" in r.stdout
    r = run_cli("rebuild", env_dir=store_dir)
    assert r.returncode == 0 and "rebuild:" in r.stderr
    assert run_cli("verify", env_dir=store_dir).returncode == 0
    db = sqlite3.connect(store_dir / INDEX_NAME)
    db.execute("UPDATE records SET hash = ? WHERE seq = 1", ("cd" * 32,))
    db.commit()
    db.close()
    r = run_cli("verify", "--json", env_dir=store_dir)
    assert r.returncode == 1 and "index_hash_mismatch" in r.stdout
    for q in ['"', "NEAR(", "a AND", "*", "🙂", ""]:
        assert run_cli("search", q, env_dir=store_dir).returncode == 0


def test_index_file_is_private(store, store_dir):
    store.write("x")
    store.search("x")
    assert (store_dir / INDEX_NAME).stat().st_mode & 0o777 == 0o600


def test_ranked_gives_the_lexical_list_for_fusion(store):
    for t in ("apple pie", "apple", "banana"):
        store.write(t)
    index: Index = store.index
    index.catch_up()
    ranked = index.ranked("apple", limit=10)
    assert [s for s, _ in ranked][:2] in ([2, 1], [1, 2]) and all(isinstance(x, float) for _, x in ranked)
    assert isinstance(index.connection(), sqlite3.Connection)
    assert Path(index.path).name == INDEX_NAME


def test_a_search_answers_while_another_process_holds_the_index(store, store_dir):
    store.write("first note")
    store.search("first")
    store.write("second note")
    holder = sqlite3.connect(store_dir / INDEX_NAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Store(store_dir) as s:
            s.index.busy_timeout_s = 0.1
            reply = s.search("note")
            assert reply["index"]["state"] == "stale"
            assert reply["total_matches"] == 1 and identity(reply)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.search("note")["total_matches"] == 2


def test_a_budget_smaller_than_the_best_result_returns_it_cut_around_the_match_with_its_seq(store):
    """Issue 29, point 9: not "0 returned, 1 over budget"."""
    store.write("a short note about the deploy key")
    text = "filler words here " * 300 + "the deploy key rotates monthly " + "ünïcödé filler " * 300
    big = store.write(text, body={"where": "the vault"})
    reply = store.search("deploy key rotates", k=2, max_tokens=20)
    assert reply["returned"] == 1 and identity(reply) and reply["left_out"]["over_budget"] == 1
    (result,) = reply["results"]
    assert result["seq"] == big["seq"] and result["tokens"] == reply["tokens"] <= 20
    assert "deploy key rotates" in result["record"]["text"] and "body" not in result["record"]
    cut = result["cut"]
    assert result["record"]["text"] == text[cut["start"]:cut["end"]] and cut["total_chars"] > len(text)
    assert f"ids=[{big['seq']}]" in cut["message"]
    assert store.get([big["seq"]])[0]["record"]["text"] == text  # the record itself is whole
    # Multi-byte characters: still within the budget.
    wide = store.search("ünïcödé", k=1, max_tokens=7)
    assert wide["returned"] == 1 and wide["tokens"] <= 7 and wide["results"][0]["cut"]
    # A budget that fits it: whole, no cut; a budget of 0: nothing, counted.
    assert "cut" not in store.search("short note", k=1, max_tokens=1000)["results"][0]
    none = store.search("deploy", k=2, max_tokens=0)
    assert none["returned"] == 0 and none["left_out"]["over_budget"] == 2


def test_the_cli_shows_a_cut_result_and_says_how_to_read_the_rest(store_dir):
    with Store(store_dir) as s:
        s.write("x " * 3000 + "the deploy key rotates monthly " + "y " * 3000)
    out = run_cli("search", "deploy key", "--max-tokens", "15", env_dir=store_dir)
    assert out.returncode == 0, out.stderr
    assert "deploy key rotates" in out.stdout and "cut to fit max_tokens=15" in out.stdout
    assert "1 of 1 match(es) returned" in out.stdout

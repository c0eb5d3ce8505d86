"""Checks of what is derived from the log: search, the index, embeddings, the brief."""

from __future__ import annotations

import random
import socket
import sqlite3
from pathlib import Path
from typing import Any

from retained.brief.compose import build_brief
from retained.errors import RetainedError
from retained.index.schema import INDEX_FILES, INDEX_NAME
from retained.selftest.context import CheckFailed, Context, NotAvailable, expect, need
from retained.selftest.spec import _canonical, append_raw, chained, check_proof, read_at


def check_supersede(ctx: Context) -> str:
    """A correction names what it supersedes; the old record is unchanged, hidden and counted."""
    s = ctx.store()
    need(s, "search", "search with superseded records hidden")
    old = s.write("the deploy target is staging", scope="proj")
    old_bytes = read_at(ctx.log_path, old["offset"], old["length"])
    new = s.write("the deploy target is production", scope="proj", supersedes=[old["seq"]])
    ctx.fault("after_write")
    expect(read_at(ctx.log_path, old["offset"], old["length"]) == old_bytes, f"seq {old['seq']} changed on disk when superseded")
    rec = check_proof(ctx.log_path, new)
    expect(rec.get("supersedes") == [old["seq"]], f"seq {new['seq']} stores supersedes={rec.get('supersedes')}")
    found = s.search("deploy target", k=10)
    seqs = [r["seq"] for r in found["results"]]
    expect(seqs == [new["seq"]], f"search returns seqs {seqs}, expected only the correction seq {new['seq']}")
    expect(found["left_out"].get("superseded") == 1, f"search left_out {found['left_out']}: the superseded record is not counted")
    both = s.search("deploy target", k=10, include_superseded=True)
    old_entry = next((r for r in both["results"] if r["seq"] == old["seq"]), None)
    if old_entry is None:
        raise CheckFailed("with include_superseded the old record is not returned")
    expect(old_entry.get("superseded_by") == [new["seq"]], f"the old record shows superseded_by={old_entry.get('superseded_by')}")
    got = s.get([old["seq"]])[0]
    expect(got["record"]["text"] == "the deploy target is staging", "the superseded record no longer reads back")
    return (
        f"seq {new['seq']} supersedes seq {old['seq']}; old line unchanged ({old['length']} bytes); "
        f"search returns 1, left_out superseded=1; with include_superseded 2, superseded_by={old_entry.get('superseded_by')}"
    )


def _accounting(found: dict[str, Any]) -> tuple[int, int, int]:
    left = sum(found["left_out"].values())
    return found["returned"], left, found["total_matches"]


def check_search_accounting(ctx: Context) -> str:
    """returned + left out = matched, for several k and token budgets."""
    s = ctx.store()
    need(s, "search", "search with the I2 accounting")
    rng = random.Random(6)
    items = []
    for i in range(30):
        filler = " ".join(rng.choice(["river", "stone", "copper", "window", "garden"]) for _ in range(rng.randrange(0, 40)))
        items.append({"text": f"lantern note {i} {filler}", "scope": "even" if i % 2 == 0 else "odd"})
    for i in range(6):
        items.append({"text": f"unrelated note {i} about a bicycle"})
    s.write_batch(items)  # seq 1..36; seq 1..30 mention lantern
    s.write("lantern correction one", supersedes=[3])
    s.write("lantern correction two", supersedes=[4, 5])
    need(s, "forget", "retraction")([7, 8], "obsolete by the selftest")
    ctx.fault("after_write")
    # What should match, counted here from the file: records mentioning lantern.
    matching = {rec["seq"] for _, rec in chained(ctx.log_path) if "lantern" in str(rec.get("text", ""))}
    superseded, retracted = {3, 4, 5}, {7, 8}
    visible = len(matching - superseded - retracted)
    runs = 0
    for k in (1, 5, visible, 100):
        for budget in (None, 8, 60, 100_000):
            found = s.search("lantern", k=k, max_tokens=budget)
            returned, left, total = _accounting(found)
            what = f"k={k} max_tokens={budget}"
            expect(total == len(matching), f"{what}: total_matches {total}, the log has {len(matching)} records mentioning it")
            expect(returned + left == total, f"{what}: returned {returned} + left out {left} != matched {total} ({found['left_out']})")
            expect(returned == len(found["results"]) <= k, f"{what}: returned {returned}, {len(found['results'])} results")
            expect(found["left_out"].get("superseded") == 3 and found["left_out"].get("retracted") == 2,
                   f"{what}: left_out {found['left_out']}, expected superseded 3 and retracted 2")
            expect(found["left_out"].get("beyond_k", 0) == max(0, visible - k),
                   f"{what}: beyond_k {found['left_out'].get('beyond_k')}, expected {max(0, visible - k)}")
            if budget is not None:
                expect(found.get("tokens", 0) <= budget, f"{what}: {found.get('tokens')} tokens returned")
            hidden = {r["seq"] for r in found["results"]} & (superseded | retracted)
            expect(not hidden, f"{what}: returns hidden records {sorted(hidden)}")
            for r in found["results"]:
                raw = read_at(ctx.log_path, r["offset"], r["length"])
                expect(_canonical(r["record"]) + b"\n" == raw, f"{what}: result seq {r['seq']} differs from its line in the log")
            runs += 1
    tight = s.search("lantern", k=visible, max_tokens=8)
    expect(tight["left_out"].get("over_budget", 0) > 0, f"a budget of 8 tokens left nothing out for over_budget: {tight['left_out']}")
    scoped = s.search("lantern", k=100, scope="even")
    # Counted from the file: a correction written without a scope keeps the scope of what it corrects.
    in_scope = len([1 for _, rec in chained(ctx.log_path) if rec["seq"] in matching and rec.get("scope") == "even"])
    expect(scoped["total_matches"] == in_scope, f"scope even: total_matches {scoped['total_matches']}, expected {in_scope}")
    expect(sum(_accounting(scoped)[:2]) == in_scope, f"scope even: returned + left out != {in_scope}")
    return (
        f"{runs} searches (k 1/5/{visible}/100 × budget none/8/60/100000): returned + left out = {len(matching)} matched every time; "
        f"superseded 3, retracted 2 hidden and counted; budget 8 → {tight['returned']} returned, {tight['left_out'].get('over_budget')} over budget"
    )


HOSTILE_QUERIES = (
    '"unbalanced quote', "AND OR NOT", "NEAR(alpha beta", "text:alpha", "alpha*", "*", "^alpha", "alpha -beta",
    "(((", ")", "'; DROP TABLE records; --", "c++", "naïve café", "日本語のテキスト", "🧪🧪", "", "   ", "\x00\x01",
    "alpha " * 300, "a" * 2000,
)


def check_search_hostile(ctx: Context) -> str:
    """Whatever a user types, search answers with its accounting: no query syntax error reaches them."""
    s = ctx.store()
    need(s, "search", "search")
    s.write_batch([
        {"text": "alpha beta gamma"},
        {"text": "c++ templates and the naïve café"},
        {"text": "日本語のテキストを検索する"},
        {"text": "the records table is not for dropping"},
    ])
    ctx.fault("after_write")
    answered = matched = 0
    for q in HOSTILE_QUERIES:
        try:
            found = s.search(q, k=5)
        except RetainedError as exc:
            raise CheckFailed(f"query {q[:40]!r}: {exc.code}: {exc.message[:120]}") from None
        except sqlite3.Error as exc:
            raise CheckFailed(f"query {q[:40]!r} reached SQLite as query syntax: {exc}") from None
        returned, left, total = _accounting(found)
        expect(returned + left == total, f"query {q[:40]!r}: returned {returned} + left out {left} != matched {total}")
        answered += 1
        matched += total > 0
    report = s.verify()
    expect(report["ok"], f"verify after the hostile queries: {len(report['findings'])} findings")
    plain = s.search("alpha", k=5)
    expect(plain["total_matches"] == 1, f"an ordinary query finds {plain['total_matches']} records after the hostile ones, expected 1")
    return (f"{answered}/{len(HOSTILE_QUERIES)} hostile queries (FTS5 syntax, SQL, quotes, NUL, CJK, 2000 chars) "
            f"answered with accounting, {matched} matched something; store intact")


def _index_files(directory: Path) -> list[Path]:
    return [p for p in (directory / name for name in INDEX_FILES) if p.exists()]


def check_index_rebuild(ctx: Context) -> str:
    """Index drift is found both ways; the index deleted, rebuilt from the log, verifies clean."""
    s = ctx.store()
    need(s, "search", "the derived index")
    need(s, "rebuild", "rebuilding the index from the log")
    s.write_batch([{"text": f"alpha record {i} beta"} for i in range(12)])
    before = s.search("alpha", k=20)
    expect(before["total_matches"] == 12, f"search finds {before['total_matches']} of 12 before the rebuild")
    report = s.verify()
    expect(report["ok"], f"verify before damage: {len(report['findings'])} findings")
    # Damage the index both ways: a record missing from it, a row with no record.
    db = sqlite3.connect(ctx.directory / INDEX_NAME)
    try:
        row = db.execute("SELECT offset, length, hash FROM records WHERE seq = 5").fetchone()
        expect(row is not None, "the index has no row for seq 5 to damage")
        db.execute("DELETE FROM records WHERE seq = 5")
        db.execute("INSERT INTO records (seq, offset, length, hash) VALUES (999, ?, ?, ?)", row)
        db.commit()
    finally:
        db.close()
    drift = s.verify()
    kinds = {(f.get("kind"), f.get("seq")) for f in drift["findings"]}
    expect(not drift["ok"], "verify says ok with a record missing from the index and a ghost row in it")
    expect(any(seq == 5 for _, seq in kinds), f"verify does not name seq 5, missing from the index: {sorted(map(str, kinds))}")
    expect(any(seq == 999 for _, seq in kinds), f"verify does not name the ghost row seq 999: {sorted(map(str, kinds))}")
    s.close()
    removed = _index_files(ctx.directory)
    for p in removed:
        p.unlink()
    expect(bool(removed), "there was no index file to delete")
    ctx.fault("after_delete")
    s2 = ctx.store()
    result = need(s2, "rebuild", "rebuilding the index from the log")()
    expect(result.get("records") == 12, f"rebuild indexed {result.get('records')} records, the log has 12")
    clean = s2.verify()
    expect(clean["ok"], f"verify after rebuild: {len(clean['findings'])} findings: {[f.get('kind') for f in clean['findings']][:5]}")
    after = s2.search("alpha", k=20)
    same = [r["seq"] for r in after["results"]] == [r["seq"] for r in before["results"]]
    expect(same and after["total_matches"] == before["total_matches"], "search after the rebuild differs from before")
    return (
        f"verify found the drift both ways ({', '.join(sorted({str(k) for k, _ in kinds}))}); "
        f"{len(removed)} index files deleted → rebuild indexed {result['records']} records → verify ok, same {after['total_matches']} matches"
    )


def check_index_damaged(ctx: Context) -> str:
    """A damaged index file is no single point of failure: writes land, search and verify answer."""
    s = ctx.store()
    need(s, "search", "the derived index")
    s.write_batch([{"text": f"gamma record {i}"} for i in range(10)])
    expect(s.search("gamma", k=20)["total_matches"] == 10, "search does not find the 10 records before the damage")
    s.close()
    for p in _index_files(ctx.directory):
        p.unlink()
    garbage = b"this is not an SQLite database " * 64
    (ctx.directory / INDEX_NAME).write_bytes(garbage)
    ctx.fault("after_damage")
    s2 = ctx.store()
    proof = s2.write("gamma record written after the damage")
    check_proof(ctx.log_path, proof)
    found = s2.search("gamma", k=20)
    expect(found["total_matches"] == 11 and found["returned"] == 11,
           f"search with a damaged index: {found['returned']} returned of {found['total_matches']} matched, the log has 11")
    report = s2.verify()
    expect(report["ok"], f"verify after the index was replaced: {len(report['findings'])} findings")
    kept = [p.name for p in ctx.directory.iterdir() if p.is_file() and p.read_bytes() == garbage]
    return (
        f"{len(garbage)} bytes of garbage as {INDEX_NAME}: seq {proof['seq']} still acked and read back, "
        f"search finds 11/11, verify ok; damaged file kept as {', '.join(kept) or 'nothing'}"
    )


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def check_embedder_down(ctx: Context) -> str:
    """With the embedder unreachable, writes land and search answers lexically, saying why."""
    port = _dead_port()
    settings = {"RETAINED_EMBED_URL": f"http://127.0.0.1:{port}/api/embed", "RETAINED_EMBED_MODEL": "selftest-model"}
    try:
        s = ctx.store(embed_settings=settings, follow_writes=True)
    except TypeError:
        raise NotAvailable("Store takes no embed_settings (embeddings are not wired into the store)") from None
    need(s, "search", "search")
    proofs = [s.write(f"epsilon record {i}") for i in range(5)]
    for p in proofs:
        check_proof(ctx.log_path, p)
    ctx.fault("after_write")
    found = s.search("epsilon", k=10)
    if "mode" not in found:
        raise NotAvailable("Store.search ignores embed_settings (its reply has no mode)")
    expect(found["mode"] == "lexical", f"search with the embedder down answered in mode {found['mode']!r}")
    reason = str(found.get("mode_reason") or "")
    expect(bool(reason), "search fell back to lexical without saying why")
    expect(found["total_matches"] == 5 and found["returned"] == 5, f"search found {found['returned']} of {found['total_matches']} matched, the log has 5")
    returned, left, total = _accounting(found)
    expect(returned + left == total, f"returned {returned} + left out {left} != matched {total}")
    report = s.verify()
    expect(report["ok"], f"verify with the embedder down: {len(report['findings'])} findings")
    vectors = report.get("vectors") or {}
    expect(vectors.get("missing") == 5, f"verify does not say that the 5 records lack vectors: {vectors.get('missing')!r}")
    breaker = (found.get("vectors") or {}).get("breaker")
    return (
        f"embedder at 127.0.0.1:{port} unreachable: 5 writes acked, search answers lexically with 5/5 "
        f"(breaker {breaker}; reason: {reason.split(':')[0]}), verify ok and reports 5 records without vectors"
    )


def _call_brief(ctx: Context, store: Any, budget: int) -> dict[str, Any]:
    method = getattr(store, "brief", None)
    if method is not None:
        return method(budget=budget)
    return build_brief(ctx.directory, budget=budget)


def _count(value: Any) -> int:
    """A count given as a number, a list of items, or a dict of counts by reason."""
    if isinstance(value, dict):
        return sum(int(v) for v in value.values())
    if isinstance(value, list):
        return len(value)
    return int(value)


def check_brief_accounting(ctx: Context) -> str:
    """The brief says what it left out: included + dropped = eligible, counted here from the log."""
    s = ctx.store()
    s.write_batch([{"text": f"brief note {i}: " + "context " * (i % 7)} for i in range(20)])  # seq 1..20
    s.checkpoint("brief checkpoint", summary="the state of the work")  # seq 21
    s.write("brief correction", supersedes=[2])  # seq 22
    need(s, "forget", "retraction")([5], "withdrawn by the selftest")  # seq 23, bookkeeping
    ctx.fault("after_write")
    # Eligible, counted from the file: chained records other than bookkeeping kinds.
    records = {rec["seq"]: rec for _, rec in chained(ctx.log_path)}
    eligible = sorted(q for q, rec in records.items() if rec.get("kind") not in ("retract", "redaction"))
    hidden = {2, 5}
    runs = []
    for budget in (30, 150, 100_000):
        b = _call_brief(ctx, s, budget)
        expect("included" in b and "dropped" in b, f"budget {budget}: the brief has no included/dropped accounting")
        included, dropped = _count(b["included"]), _count(b["dropped"])
        what = f"budget {budget}"
        expect(included + dropped == len(eligible),
               f"{what}: included {included} + dropped {dropped} != {len(eligible)} eligible records in the log")
        expect(b.get("eligible", len(eligible)) == len(eligible), f"{what}: the brief says {b.get('eligible')} eligible, the log has {len(eligible)}")
        expect(b.get("tokens", 0) <= budget, f"{what}: the brief used {b.get('tokens')} tokens")
        if isinstance(b["dropped"], dict):
            expect(b["dropped"].get("superseded") == 1 and b["dropped"].get("retracted") == 1,
                   f"{what}: dropped {b['dropped']}, expected superseded 1 and retracted 1")
        if isinstance(b["included"], list):
            shown = [e.get("seq") for e in b["included"]]
            expect(not hidden & set(shown), f"{what}: shows superseded or retracted seqs {sorted(hidden & set(shown))}")
            for e in b["included"]:
                rec = records.get(e.get("seq"), {})
                if not e.get("cut"):
                    expect(e.get("text") == rec.get("text"), f"{what}: seq {e.get('seq')} is shown with other text than the log holds")
        runs.append((budget, included, dropped))
    full = _call_brief(ctx, s, 100_000)
    expect(_count(full["included"]) == len(eligible) - len(hidden),
           f"a budget of 100000 shows {_count(full['included'])} of {len(eligible) - len(hidden)} current records")
    if isinstance(full["included"], list):
        expect(full["included"][0].get("seq") == 21, f"the brief starts with seq {full['included'][0].get('seq')}, not the checkpoint seq 21")
        notes = [e["seq"] for e in full["included"][1:]]
        expect(notes == sorted(notes, reverse=True), "the notes are not newest first")
    expect(runs[0][2] > len(hidden), f"a budget of 30 tokens dropped only {runs[0][2]}")
    counts = "; ".join(f"budget {b}: {i} included + {d} dropped = {len(eligible)} eligible" for b, i, d in runs)
    return counts + " (counted from the log; superseded 1, retracted 1)"


def check_brief_degraded(ctx: Context) -> str:
    """The brief never fails its host: a missing or damaged store is a status, damage around records is skipped."""
    missing = build_brief(ctx.work / "no-store-here", budget=200)
    expect(missing.get("status") == "absent" and _count(missing["included"]) == 0,
           f"a missing store: status {missing.get('status')!r}, expected 'absent'")
    broken_dir = ctx.work / "broken"
    (broken_dir / "log.jsonl").mkdir(parents=True)
    broken = build_brief(broken_dir, budget=200)
    message = str(broken.get("message") or "")
    expect(broken.get("status") == "unreadable" and bool(message) and "\n" not in message,
           f"a log that is a directory: status {broken.get('status')!r}, message {message[:80]!r}")
    s = ctx.store()
    s.write_batch([{"text": f"delta note {i}"} for i in range(5)])
    s.search("delta", k=1)  # an index exists before it is damaged
    s.close()
    for p in _index_files(ctx.directory):
        p.unlink()
    (ctx.directory / INDEX_NAME).write_bytes(b"garbage, not SQLite " * 50)
    append_raw(ctx.log_path, b'{"from":"another program"}\n{"torn":"tail')
    ctx.fault("after_damage")
    b = build_brief(ctx.directory, budget=10_000)
    shown = _count(b["included"])
    expect(b.get("status") == "ok" and shown == 5,
           f"a store with a garbage index, a foreign line and a torn tail: status {b.get('status')!r}, shows {shown} of 5 records")
    expect(shown + _count(b["dropped"]) == 5, f"included {shown} + dropped {_count(b['dropped'])} != 5 eligible")
    expect(not list(ctx.directory.glob("log.jsonl.torn-*")), "the brief repaired the log (it must not write)")
    return (
        f"missing store → {missing['status']}; log is a directory → {broken['status']} (one line); garbage index + foreign "
        f"line + torn tail → ok, {shown}/5 shown, log untouched"
    )

"""Pull, verify and search the union: two and three stores on one bucket, each mirroring the others, never mixing logs."""

from __future__ import annotations

import json
import subprocess
import sys

from retained import Store

from ..conftest import REPO
from .helpers import kinds, sync


def test_three_stores_on_one_bucket_search_each_others_records_with_their_origin(seaweed, tmp_path, monkeypatch):
    remote = seaweed.bucket()
    names = ("laptop", "desktop", "ci")
    stores = [Store(tmp_path / n, anchor_dir=tmp_path / "anchors") for n in names]
    try:
        for n, store in zip(names, stores, strict=True):
            for i in range(5):
                store.write(f"{n} learned fact {i} about kiwifruit", scope=f"proj-{n}")
        logs_before = [s.log.path.read_bytes() for s in stores]
        for n, store in zip(names, stores, strict=True):
            assert sync(store, seaweed, remote, machine=n)["ok"]
        for n, store in zip(names, stores, strict=True):
            report = sync(store, seaweed, remote, machine=n)
            assert report["ok"], report["findings"]
        # No record was written into another store's log.
        assert [s.log.path.read_bytes() for s in stores] == logs_before
        ids = {n: s.head()["store_id"] for n, s in zip(names, stores, strict=True)}
        reply = stores[0].search("kiwifruit", k=20)
        assert reply["total_matches"] == 15 and reply["returned"] == 15
        seen = {(r["origin"]["machine"], r["origin"]["local"]) for r in reply["results"]}
        assert seen == {(None, True), ("desktop", False), ("ci", False)}
        ci = [r for r in reply["results"] if r["origin"]["machine"] == "ci"]
        assert {r["id"] for r in ci} == {f"{ids['ci']}:{s}" for s in range(1, 6)}
        assert all(r["record"]["scope"] == "proj-ci" for r in ci)
        # The accounting holds over the union (I2).
        small = stores[0].search("kiwifruit", k=4)
        assert small["returned"] == 4 and small["left_out"]["beyond_k"] == 11
        # Each mirror is the other store's log, byte for byte.
        mirror = tmp_path / "laptop" / "mirrors" / ids["desktop"] / "log.jsonl"
        assert mirror.read_bytes() == logs_before[1]
        assert oct(mirror.stat().st_mode & 0o777) == "0o600"
        assert oct(mirror.parent.stat().st_mode & 0o777) == "0o700"
        assert stores[0].verify()["ok"]
        # Incremental: one new record in one store travels once.
        stores[1].write("desktop learned one more kiwifruit fact")
        assert sync(stores[1], seaweed, remote, machine="desktop")["published"]["records"] == 1
        again = sync(stores[0], seaweed, remote)
        pulled = {p["machine"]: p["records"] for p in again["pulled"]}
        assert pulled == {"desktop": 1, "ci": 0}
        assert stores[0].search("kiwifruit", k=50)["total_matches"] == 16
        # The brief reads the last pulled stores' records (here, with the cap at 1, the desktop's: its mirror changed
        # last), names the others and counts their records as not read.
        from retained.brief import compose
        from retained.sync import layout

        monkeypatch.setattr(layout, "PULLED_READ_MAX", 1)
        brief = compose.build_brief(tmp_path / "laptop", budget=2000)
        machines = {e.get("origin", {}).get("machine") for e in brief["included"]}
        assert machines == {None, "desktop"}
        assert [(p["machine"], p["shown"]) for p in brief["pulled"]] == [("desktop", 6)]
        assert brief["pulled_skipped"] == {"stores": 1, "records": 5}
        assert brief["dropped"]["not_read"] == 5 and not brief["exact"]
        assert "1 more not read (the brief reads the 1 pulled last" in compose.render_text(brief)
        assert len(brief["included"]) + sum(brief["dropped"].values()) == brief["eligible"] == 16
    finally:
        for s in stores:
            s.close()


def test_concurrent_publishes_from_separate_processes_all_land(seaweed, tmp_path):
    remote = seaweed.bucket()
    dirs = [tmp_path / f"s{i}" for i in range(3)]
    for i, d in enumerate(dirs):
        with Store(d) as s:
            s.write_batch([{"text": f"store {i} note {j} on concurrency"} for j in range(50)])
    env = {**__import__("os").environ, **seaweed.env}
    procs = [subprocess.Popen([sys.executable, "-m", "retained", "--dir", str(d), "sync", "--remote", remote, "--json",
                               "--machine", f"m{i}"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i, d in enumerate(dirs)]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out)["published"]["records"] == 50
    with Store(dirs[0]) as s:
        report = sync(s, seaweed, remote)
        assert report["ok"], report["findings"]
        # Each other store is mirrored up to its head (part of it may have come with the concurrent run's pull).
        assert [p["seq"] for p in report["pulled"]] == [50, 50]
        assert s.search("concurrency", k=200)["total_matches"] == 150


def test_a_tampered_segment_is_reported_and_left_out_of_search(seaweed, tmp_path):
    from .helpers import get, keys, put

    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for i in range(20):
            a.write(f"alpha note {i} mentions quokka")
        sync(a, seaweed, remote, segment_bytes=1024)
        seg = [k for k in keys(seaweed, remote) if "/seg/" in k][1]
        data = get(seaweed, remote, seg)
        put(seaweed, remote, seg, data.replace(b"quokka", b"wombat", 1))
        report = sync(b, seaweed, remote)
        assert kinds(report) == ["segment_unverified"]
        assert report["findings"][0]["segment"] == seg
        assert b.search("quokka")["total_matches"] == 0
        assert b.search("wombat")["total_matches"] == 0
        verified = b.verify()
        assert not verified["ok"] and "segment_unverified" in [f["kind"] for f in verified["findings"]]
        # Put right, the next pull takes it all.
        put(seaweed, remote, seg, data)
        report = sync(b, seaweed, remote)
        assert report["ok"], report["findings"]
        assert b.search("quokka", k=50)["total_matches"] == 20
        assert b.verify()["ok"]
        # Rewritten in place after it was pulled: a finding; the mirror keeps what it verified.
        put(seaweed, remote, seg, data.replace(b"quokka", b"wombat", 1))
        report = sync(b, seaweed, remote)
        assert kinds(report) == ["segment_rewritten"] and report["findings"][0]["segment"] == seg
        assert b.search("quokka", k=50)["total_matches"] == 20


def test_get_reads_another_stores_record_by_seq_with_its_origin(seaweed, tmp_path):
    from ..conftest import run_cli

    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        a.write("first of a")
        a.write("second of a", scope="proj")
        sync(a, seaweed, remote, machine="desk")
        b.write("b's own")
        sync(b, seaweed, remote, machine="lap")
        sid, b_sid = a.head()["store_id"], b.head()["store_id"]
        got = b.get([2], store_id=sid)
        assert got[0]["record"]["text"] == "second of a" and got[0]["origin"] == {"store_id": sid, "machine": "desk", "local": False}
        assert b.get([1])[0]["record"]["text"] == "b's own"
    shown = run_cli("--dir", str(tmp_path / "b"), "get", "2", "--from", sid)
    assert shown.returncode == 0 and "second of a" in shown.stdout
    found = run_cli("--dir", str(tmp_path / "b"), "search", "second", "--all-scopes")  # its scope is not this project's
    assert found.returncode == 0 and f"from=desk/{sid[:8]}" in found.stdout
    missing = run_cli("--dir", str(tmp_path / "b"), "get", "1", "--from", "0" * 32)
    assert missing.returncode == 2 and "run `retained sync`" in missing.stderr and "store_id" in missing.stderr
    short = run_cli("--dir", str(tmp_path / "b"), "get", "1", "--from", sid[:8], "--json")
    assert short.returncode == 0 and json.loads(short.stdout)["records"][0]["record"]["text"] == "first of a"
    around = run_cli("--dir", str(tmp_path / "b"), "get", "--around", "2", "--from", sid, "--json")
    assert around.returncode == 0
    assert [r["record"]["text"] for r in json.loads(around.stdout)["records"]] == ["first of a", "second of a"]
    bad = run_cli("--dir", str(tmp_path / "b"), "get", "1", "--from", "xyz")
    assert bad.returncode == 2 and "field store_id (`--from` on the command line): must be a store id" in bad.stderr
    # This store's own id (or its start) reads this store.
    own = run_cli("--dir", str(tmp_path / "b"), "get", "1", "--from", b_sid[:8], "--json")
    assert own.returncode == 0 and json.loads(own.stdout)["records"][0]["record"]["text"] == "b's own"


def test_memory_get_reads_a_pulled_search_hit_by_its_store_id_over_mcp(seaweed, tmp_path):
    import anyio
    from mcp import Client

    from ..integration.conftest import WAIT_S, client_info, stdio_params

    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for text in ("first of a", "the desk's note on pelicans", "third of a"):
            a.write(text)
        sync(a, seaweed, remote, machine="desk")
        b.write("b's own note")
        sync(b, seaweed, remote, machine="lap")
        sid = a.head()["store_id"]
    seen: dict = {}

    async def go() -> None:
        with anyio.fail_after(WAIT_S * 2):
            async with Client(stdio_params(tmp_path / "b"), client_info=client_info("pytest-agent", "1.0")) as client:
                hit = (await client.call_tool("memory_search", {"query": "pelicans"})).structured_content["results"][0]
                seen["hit"] = hit
                got = await client.call_tool("memory_get", {"ids": [hit["seq"]], "store_id": hit["origin"]["store_id"]})
                seen["got"] = got
                seen["short"] = await client.call_tool("memory_get", {"ids": [1], "store_id": sid[:8]})
                seen["around"] = await client.call_tool("memory_get", {"around": 2, "window": 1, "store_id": sid})
                seen["own"] = await client.call_tool("memory_get", {"ids": [1]})
                seen["unknown"] = await client.call_tool("memory_get", {"ids": [1], "store_id": "0" * 32})
                seen["alone"] = await client.call_tool("memory_get", {"store_id": sid})

    anyio.run(go)
    assert seen["hit"]["origin"] == {"store_id": sid, "machine": "desk", "local": False} and seen["hit"]["seq"] == 2
    got = seen["got"]
    assert not got.is_error, got.content[0].text
    (entry,) = got.structured_content["records"]
    assert entry["record"]["text"] == "the desk's note on pelicans" and entry["origin"]["machine"] == "desk"
    assert entry["id"] == f"{sid}:2" and f"from=desk/{sid[:8]}" in got.content[0].text
    assert seen["short"].structured_content["records"][0]["record"]["text"] == "first of a"
    around = seen["around"].structured_content
    assert [r["record"]["text"] for r in around["records"]] == ["first of a", "the desk's note on pelicans", "third of a"]
    assert all(r["origin"]["store_id"] == sid for r in around["records"])
    assert seen["own"].structured_content["records"][0]["record"]["text"] == "b's own note"
    unknown = seen["unknown"]
    assert unknown.is_error and "not_found: field store_id (`--from` on the command line): no store" in unknown.content[0].text
    assert "run `retained sync`" in unknown.content[0].text
    alone = seen["alone"]
    assert alone.is_error and "store_id goes with ids" in alone.content[0].text


def test_the_brief_shows_pulled_records_with_their_origin_within_the_one_budget(seaweed, tmp_path):
    from retained.brief import compose
    from retained.viewer import pages

    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        old = a.write("a fact from the desk about otters", scope="zoo")
        a.write("otters hold hands while they sleep", scope="zoo", supersedes=[old["seq"]])
        a.write("a note from the desk about the build", scope="ci")
        sync(a, seaweed, remote, machine="desk")
        b.write("b's own note")
        b.checkpoint("b's checkpoint", summary="where b left off")
        a.checkpoint("a's checkpoint", summary="where the desk left off")
        sync(a, seaweed, remote, machine="desk")
        sync(b, seaweed, remote, machine="lap")
        sid = a.head()["store_id"]
        brief = compose.build_brief(tmp_path / "b")
        shown = [(e["seq"], (e.get("origin") or {}).get("machine")) for e in brief["included"]]
        # Checkpoints first, then the rest, each newest first over both stores; the superseded record left out.
        assert shown == [(4, "desk"), (2, None), (1, None), (3, "desk"), (2, "desk")]
        pulled = [e for e in brief["included"] if "origin" in e]
        assert all(e["origin"] == {"store_id": sid, "machine": "desk", "local": False} for e in pulled)
        assert [e["id"] for e in pulled] == [f"{sid}:4", f"{sid}:3", f"{sid}:2"]
        assert brief["eligible"] == 6 and brief["dropped"]["superseded"] == 1 and brief["exact"]
        assert brief["pulled"] == [{"store_id": sid, "machine": "desk", "seq": 4, "eligible": 4, "not_read": 0, "shown": 3}]
        text = compose.render_text(brief)
        assert "#4 checkpoint" in text and f"from=desk/{sid[:8]}" in text and "otters hold hands" in text
        assert f"desk/{sid[:8]} (#1-#4, 3 shown)" in text
        # The same budget and accounting over the union (I2): a small budget leaves records of both stores out.
        small = compose.build_brief(tmp_path / "b", budget=40)
        assert small["tokens"] <= 40
        assert len(small["included"]) + sum(small["dropped"].values()) == small["eligible"] == 6
        # Scope filters pulled records as this store's.
        zoo = compose.build_brief(tmp_path / "b", scope="zoo")
        assert [(e["seq"], e["origin"]["machine"]) for e in zoo["included"]] == [(2, "desk")]
        assert zoo["eligible"] == 2 and zoo["dropped"]["superseded"] == 1
        # A mirror that cannot be read is named, and the brief still comes.
        (tmp_path / "b" / "mirrors" / sid / "log.jsonl").rename(tmp_path / "moved")
        broken = compose.build_brief(tmp_path / "b")
        assert broken["status"] == "ok" and [e["seq"] for e in broken["included"]] == [2, 1]
        assert "error" in broken["pulled"][0] and "not read" in compose.render_text(broken)
        assert broken["dropped"]["not_read"] == 4 and broken["eligible"] == 6 and not broken["exact"]
        (tmp_path / "moved").rename(tmp_path / "b" / "mirrors" / sid / "log.jsonl")
        html = pages.record_list(b.search("otters")["results"], scores=True)
        assert f"from desk/{sid[:8]}" in html and 'href="/record/2"' not in html


def test_every_form_of_a_brief_with_many_pulled_stores_stays_under_the_hook_cap(seaweed, tmp_path):
    import orjson

    from retained.brief import compose

    from ..unit.test_brief import _adversarial_store

    remote = seaweed.bucket()
    dirs = [tmp_path / f"s{i}" for i in range(7)]
    for i, d in enumerate(dirs):
        _adversarial_store(d)
        with Store(d) as s:
            assert sync(s, seaweed, remote, machine=f"machine-{i}-" + "\u00e9\"" * 100)["ok"]
    with Store(dirs[0]) as s:
        assert sync(s, seaweed, remote, machine="home")["ok"]
    # One mirror read cannot be: its log is a directory.
    sid = sorted(p.name for p in (dirs[0] / "mirrors").iterdir())[0]
    log = dirs[0] / "mirrors" / sid / "log.jsonl"
    log.rename(tmp_path / "aside")
    log.mkdir()
    for budget in (0, 24, 500, 1500, 5000, 10**9):
        result = compose.build_brief(dirs[0], budget)
        assert len(result["included"]) + sum(result["dropped"].values()) == result["eligible"]
        assert len(result["pulled"]) == 4 and result["pulled_skipped"]["stores"] == 2
        assert [p["store_id"] for p in result["pulled"] if "error" in p] == [sid]
        text = compose.render_text(result)
        for form in (text, orjson.dumps(compose.hook_output(text)).decode(), orjson.dumps(result).decode()):
            assert len(form.encode("utf-16-le")) // 2 < 10_000, (budget, len(form))


def test_a_searched_mirrors_index_follows_each_pull_so_the_brief_reads_it_exactly(seaweed, tmp_path):
    from retained.brief import compose
    from retained.brief.reader import IndexView, LogReader
    from retained.sync import layout

    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        a.write_batch([{"text": f"first batch note {i} " + "padding " * 30} for i in range(300)])
        sync(a, seaweed, remote, machine="desk")
        sync(b, seaweed, remote, machine="lap")
        sid = a.head()["store_id"]
        mdir = layout.mirror_dir(tmp_path / "b", sid)
        # Never searched: no index; the brief reads the newest 64 KiB of the mirror and counts the rest as not read.
        assert not (mdir / "index.sqlite3").exists() and (mdir / "log.jsonl").stat().st_size > compose.PULLED_SCAN_BYTES_MAX
        cold = compose.build_brief(tmp_path / "b")
        assert cold["pulled"][0]["not_read"] > 0 and not cold["exact"] and cold["included"][0]["seq"] == 300
        assert len(cold["included"]) + sum(cold["dropped"].values()) == cold["eligible"]
        assert b.search("batch")["total_matches"] > 0  # builds the mirror's index
        a.write_batch([{"text": f"second batch note {i} " + "padding " * 30} for i in range(300)])
        sync(a, seaweed, remote, machine="desk")
        assert sync(b, seaweed, remote, machine="lap")["pulled"][0]["records"] == 300
        size = (mdir / "log.jsonl").stat().st_size
        view = IndexView(mdir, LogReader(mdir), size)
        try:
            assert view.state == "current"
        finally:
            view.close()
        warm = compose.build_brief(tmp_path / "b")
        assert warm["exact"] and warm["pulled"][0]["eligible"] == 600 and warm["pulled"][0]["not_read"] == 0
        assert warm["eligible"] == 600 and warm["included"][0]["seq"] == 600


def test_a_new_machine_with_nothing_of_its_own_is_briefed_from_what_it_pulled(seaweed, tmp_path):
    from retained.brief import compose

    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a:
        a.write("the deploy key lives in the vault")
        sync(a, seaweed, remote, machine="desk")
    with Store(tmp_path / "fresh", anchor_dir=None) as fresh:
        report = fresh.sync(remote, client=seaweed.client(), machine="new", publish_own=False)
        assert report["ok"], report["findings"]
    brief = compose.build_brief(tmp_path / "fresh")
    assert brief["status"] == "ok" and [e["text"] for e in brief["included"]] == ["the deploy key lives in the vault"]
    assert brief["included"][0]["origin"]["machine"] == "desk"


def test_an_incremental_pull_walks_only_the_new_segments_and_still_refuses_a_tampered_one(seaweed, tmp_path):
    from .helpers import get, keys, put

    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for i in range(10):
            a.write(f"first batch {i} of lemurs")
        sync(a, seaweed, remote)
        assert sync(b, seaweed, remote)["ok"]
        sid = a.head()["store_id"]
        mlog = tmp_path / "b" / "mirrors" / sid / "log.jsonl"
        for i in range(5):
            a.write(f"second batch {i} of lemurs")
        new = sync(a, seaweed, remote)["published"]["segments"]
        data = get(seaweed, remote, new[0])
        put(seaweed, remote, new[0], data.replace(b"second", b"SECOND", 1))
        before = mlog.read_bytes()
        report = sync(b, seaweed, remote)
        assert kinds(report) == ["segment_unverified"] and report["findings"][0]["segment"] == new[0]
        assert mlog.read_bytes() == before
        assert b.search("lemurs", k=50)["total_matches"] == 10
        put(seaweed, remote, new[0], data)
        # An append cut short by a crash left bytes past what mirror.json records: they are cut off first.
        with open(mlog, "ab") as f:
            f.write(b'{"half a line')
        report = sync(b, seaweed, remote)
        assert report["ok"], report["findings"]
        assert mlog.read_bytes() == a.log.path.read_bytes()
        assert b.search("lemurs", k=50)["total_matches"] == 15
        assert len([k for k in keys(seaweed, remote) if "/seg/" in k]) == 2

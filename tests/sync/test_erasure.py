"""Erasure across machines: a redaction published replaces the remote segment that held the record, and mirrors follow."""

from __future__ import annotations

from retained import Store

from .helpers import get, keys, kinds, put, sync


def test_a_redaction_replaces_the_published_segment_and_every_mirror_drops_the_erased_words(seaweed, tmp_path):
    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        for i in range(12):
            a.write("the door code is quokka" if i == 2 else f"ordinary note {i}")
        assert sync(a, seaweed, remote, segment_bytes=1024)["ok"]
        assert sync(b, seaweed, remote)["ok"]
        sid = a.head()["store_id"]
        assert b.search("quokka")["total_matches"] == 1
        a.redact(3, "a secret")
        report = sync(a, seaweed, remote, segment_bytes=1024)
        assert report["ok"], report["findings"]
        assert len(report["published"]["replaced"]) == 1
        assert not any(b"quokka" in get(seaweed, remote, k) for k in keys(seaweed, remote))
        pulled = sync(b, seaweed, remote)
        assert pulled["ok"], pulled["findings"]
        assert [p["erased"] for p in pulled["pulled"]] == [[3]]
        mirror = tmp_path / "b" / "mirrors" / sid
        assert b"quokka" not in (mirror / "log.jsonl").read_bytes()
        assert b.search("quokka")["total_matches"] == 0
        assert b.get([3], store_id=sid)[0]["record"].get("redacted") is True
        assert (mirror / "log.jsonl").read_bytes() == a.log.path.read_bytes()
        assert b.verify()["ok"]
        # A rewrite that is not a redaction stays a finding, and the mirror keeps its bytes.
        seg = report["published"]["replaced"][0]
        put(seaweed, remote, seg, get(seaweed, remote, seg).replace(b"ordinary", b"changed!", 1))
        again = sync(b, seaweed, remote)
        assert kinds(again) == ["segment_rewritten"]
        assert (mirror / "log.jsonl").read_bytes() == a.log.path.read_bytes()

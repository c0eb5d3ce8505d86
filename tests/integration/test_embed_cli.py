"""Embeddings through the CLI and Store, against a real HTTP embedder on 127.0.0.1.

The wiring, end to end: writes never wait for vectors, search says its mode
and why, backfill fills the gap after an outage, verify reports vectors, and
a redaction takes the record's vector with it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from embed_server import EmbedServer  # noqa: E402

from retained import Store  # noqa: E402

from ..conftest import run_cli  # noqa: E402


def _env(server: EmbedServer) -> dict[str, str]:
    return {"RETAINED_EMBED_URL": server.url("openai"), "RETAINED_EMBED_MODEL": "hashed-16"}


def _cli(store_dir: Path, server: EmbedServer, *args: str):
    old = dict(os.environ)
    os.environ.update(_env(server))
    try:
        return run_cli(*args, env_dir=store_dir)
    finally:
        os.environ.clear()
        os.environ.update(old)


def test_search_is_hybrid_lexical_through_an_outage_and_backfill_fills_the_gap(store_dir):
    with EmbedServer(dim=16) as server:
        for text in ("the deploy target is staging", "prefers dark mode", "lunch at noon"):
            assert _cli(store_dir, server, "write", text).returncode == 0
        # A search embeds nothing stored: lexical, saying what to run.
        reply = json.loads(_cli(store_dir, server, "search", "deploy target", "--json").stdout)
        assert reply["mode"] == "lexical" and "retained embed --backfill" in reply["mode_reason"]
        out = _cli(store_dir, server, "embed", "--backfill")
        assert out.returncode == 0 and "embedded 3/3 records" in out.stderr, out.stderr
        reply = json.loads(_cli(store_dir, server, "search", "deploy target", "--json").stdout)
        assert reply["mode"] == "hybrid" and reply["mode_reason"] is None
        assert reply["results"][0]["record"]["text"] == "the deploy target is staging"
        assert reply["returned"] + sum(reply["left_out"].values()) == reply["total_matches"]

        server.stop()
        out = _cli(store_dir, server, "write", "written while the embedder is down", "--json")
        assert out.returncode == 0 and json.loads(out.stdout)["seq"] == 4
        for _ in range(3):  # enough failures to open the breaker in one process are not needed: each says why
            reply = json.loads(_cli(store_dir, server, "search", "embedder down", "--json").stdout)
            assert reply["mode"] == "lexical" and reply["mode_reason"]
        assert reply["results"][0]["seq"] == 4

        server.start()
        out = _cli(store_dir, server, "embed", "--backfill", "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["pending"] == 0
        report = json.loads(_cli(store_dir, server, "verify", "--json").stdout)
        assert report["ok"] and report["vectors"]["missing"] == 0


def test_embed_without_settings_is_a_usage_error_that_says_how_to_turn_it_on(store_dir):
    run_cli("write", "x", env_dir=store_dir)
    # Without an endpoint and with the embedded model turned off (or not installed).
    env = {k: v for k, v in os.environ.items() if not k.startswith("RETAINED_EMBED_") or k == "RETAINED_EMBED_LOCAL"}
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        out = run_cli("embed", "--backfill", env_dir=store_dir)
    finally:
        os.environ.clear()
        os.environ.update(old)
    assert out.returncode == 2 and "RETAINED_EMBED_URL" in out.stderr


def test_a_redaction_takes_the_records_vector_with_it(store_dir):
    with EmbedServer(dim=16) as server:
        store = Store(store_dir, embed_settings=_env(server))
        store.write("first note about the garden")
        store.write("the code word is pineapple-submarine-42")
        store.embed(backfill=True)
        assert store.search("garden")["mode"] == "hybrid"
        db = store.index.connection()
        assert db.execute("SELECT count(*) FROM vectors WHERE seq = 2").fetchone()[0] == 1
        store.close()
        Store(store_dir, embed_settings=_env(server)).redact(2, "test")
        store = Store(store_dir, embed_settings=_env(server))
        store.search("garden")
        db = store.index.connection()
        assert db.execute("SELECT count(*) FROM vectors WHERE seq = 2").fetchone()[0] == 0
        store.close()

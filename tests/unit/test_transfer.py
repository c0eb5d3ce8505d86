"""Import, export and backup: real files, real stores, real subprocesses for the CLI."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from retained import Store
from retained.core import chain
from retained.core.log import Log
from retained.data import imports as transfer

from ..conftest import REPO, run_cli


def _records(directory: Path) -> list[dict]:
    return [line.record for line in Log(directory).scan() if line.chained]


def _caller_view(rec: dict) -> dict:
    """What a caller set: everything but the store's own fields and the import provenance.

    An imported record's client_op_id is its source identity (``import:...``),
    so it is left out too; the source's own is in ``imported.client_op_id``.
    """
    skip = {"v", "seq", "ts", "prev", "hash", "client", "imported"}
    return {k: v for k, v in rec.items() if k not in skip and not (k == "client_op_id" and v.startswith("import:"))}


def _source_store(directory: Path) -> Store:
    s = Store(directory)
    s.write("the deploy target is staging", scope="proj-a", fields={"priority": 2, "tags": ["ops"]})
    s.write("prefers dark mode", scope="ui", source="chat", body={"detail": "said twice"})
    s.checkpoint("shipped 0.1", summary="core log done", scope="proj-a")
    s.write("the deploy target is production", scope="proj-a", supersedes=[1], client_op_id="op-7")
    s.forget([2], "wrong person")
    return s


# -- round trip ---------------------------------------------------------------


def test_export_then_import_into_a_new_store_keeps_texts_fields_and_links(tmp_path):
    src = _source_store(tmp_path / "src")
    src.close()
    out = run_cli("export", "--dir", str(tmp_path / "src"))
    assert out.returncode == 0, out.stderr
    export_file = tmp_path / "export.jsonl"
    export_file.write_text(out.stdout, encoding="utf-8")
    assert "exported 5 records" in out.stderr

    # The export is the log's chained lines byte for byte.
    assert export_file.read_bytes() == (tmp_path / "src" / "log.jsonl").read_bytes()

    done = run_cli("import", str(export_file), "--json", "--dir", str(tmp_path / "dst"))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["format"] == "retained" and result["written"] == 5 and result["first_seq"] == 1
    assert "5 records written" in done.stderr

    before, after = _records(tmp_path / "src"), _records(tmp_path / "dst")
    assert [_caller_view(r) for r in before] == [_caller_view(r) for r in after]
    origin = before[0]["hash"][:16]
    for old, new in zip(before, after):
        assert new["imported"] == {"seq": old["seq"], "hash": old["hash"], "ts": old["ts"], "client": old["client"]}
        # Its identity: its own client_op_id, else one derived from where it was in the source.
        assert new["client_op_id"] == old.get("client_op_id", f"import:{origin}:{old['seq']}:{old['hash']}")
        assert new["client"]["name"] == "retained-cli"
    report = chain.walk(Log(tmp_path / "dst").scan())
    assert report.ok and report.records == 5
    verify = run_cli("verify", "--dir", str(tmp_path / "dst"))
    assert verify.returncode == 0, verify.stdout


def test_import_into_a_store_with_records_renumbers_links(tmp_path):
    src = _source_store(tmp_path / "src")
    export_file = tmp_path / "export.jsonl"
    with open(export_file, "wb") as f:
        transfer.export(src.log, f)
    dst = Store(tmp_path / "dst")
    for i in range(3):
        dst.write(f"already here {i}")
    result = transfer.import_file(dst, export_file)
    assert (result["first_seq"], result["last_seq"]) == (4, 8)
    recs = {r["seq"]: r for r in _records(tmp_path / "dst")}
    # seq 4 of the source superseded seq 1; here they are seq 7 and seq 4.
    assert recs[7]["supersedes"] == [4] and recs[7]["imported"]["refs"] == {"supersedes": [1]}
    assert recs[8]["kind"] == "retract" and recs[8]["retracts"] == [5]
    assert chain.walk(Log(tmp_path / "dst").scan()).ok


def test_issue_15_reimporting_an_export_appends_nothing_and_says_how_many_were_present(tmp_path):
    src = _source_store(tmp_path / "src")
    export_file = tmp_path / "export.jsonl"
    transfer.export_to_file(src.log, export_file)
    first = run_cli("import", str(export_file), "--dir", str(tmp_path / "dst"))
    assert first.returncode == 0, first.stderr
    size = (tmp_path / "dst" / "log.jsonl").stat().st_size
    again = run_cli("import", str(export_file), "--dir", str(tmp_path / "dst"))
    assert again.returncode == 0, again.stderr
    assert "imported 0 of 5 records" in again.stdout and "5 already in the store" in again.stdout
    assert (tmp_path / "dst" / "log.jsonl").stat().st_size == size
    # Links of a later import still point at the records the first one wrote.
    dup = json.loads(run_cli("import", str(export_file), "--json", "--dir", str(tmp_path / "dst")).stdout)
    assert (dup["written"], dup["duplicates"]) == (0, 5)
    forced = json.loads(run_cli("import", str(export_file), "--allow-duplicates", "--json",
                                "--dir", str(tmp_path / "dst")).stdout)
    assert (forced["written"], forced["duplicates"]) == (5, 0)
    recs = _records(tmp_path / "dst")
    assert recs[8]["supersedes"] == [6] and recs[9]["retracts"] == [7]


@pytest.mark.parametrize("fmt, text", [
    ("jsonl", '{"text": "alpha"}\n{"text": "alpha"}\n{"text": "beta", "client_op_id": "mine"}\n'),
    ("memory", '{"type": "entity", "name": "kim", "entityType": "person", "observations": ["likes tea", "likes tea"]}\n'
               '{"type": "relation", "from": "kim", "to": "kim", "relationType": "knows"}\n'),
])
def test_issue_15_reimporting_jsonl_or_memory_appends_nothing(tmp_path, fmt, text):
    f = tmp_path / "in.jsonl"
    f.write_text(text, encoding="utf-8")
    s = Store(tmp_path / "s")
    first = s.import_file(f)
    assert first["format"] == fmt and first["written"] == first["records"] == (3 if fmt == "jsonl" else 4)
    again = s.import_file(f, scope="other")
    assert (again["written"], again["duplicates"]) == (0, first["records"])
    # The identity is the line's place and bytes: an edited line is new; a line's own client_op_id holds.
    f.write_text(text.replace("alpha", "gamma").replace("tea", "coffee"), encoding="utf-8")
    edited = s.import_file(f)
    assert edited["written"] == (2 if fmt == "jsonl" else 3)
    assert s.import_file(f, allow_duplicates=True)["written"] == (2 if fmt == "jsonl" else 4)


def test_an_imported_record_keeps_its_earlier_provenance_nested(tmp_path):
    a = _source_store(tmp_path / "a")
    transfer.export_to_file(a.log, tmp_path / "a.jsonl")
    b = Store(tmp_path / "b")
    transfer.import_file(b, tmp_path / "a.jsonl")
    transfer.export_to_file(b.log, tmp_path / "b.jsonl")
    c = Store(tmp_path / "c")
    transfer.import_file(c, tmp_path / "b.jsonl")
    first_a, first_b, first_c = (_records(tmp_path / d)[0] for d in "abc")
    assert first_c["imported"]["hash"] == first_b["hash"]
    assert first_c["imported"]["imported"]["hash"] == first_a["hash"]


def test_redacted_lines_are_skipped_and_links_to_them_dropped(tmp_path):
    _source_store(tmp_path / "src")
    log_path = tmp_path / "src" / "log.jsonl"
    lines = log_path.read_bytes().splitlines(keepends=True)
    # Erase seq 1 the way the redaction flow does: its redacted form keeps the chain.
    from retained.core import record

    rec1 = orjson.loads(lines[0])
    lines[0] = record.canonical(record.redacted_form(rec1)) + b"\n"
    log_path.write_bytes(b"".join(lines))
    export_file = tmp_path / "export.jsonl"
    transfer.export_to_file(Log(tmp_path / "src"), export_file)
    dst = Store(tmp_path / "dst")
    result = transfer.import_file(dst, export_file)
    assert result["skipped"] == {"redacted": 1} and result["written"] == 4
    recs = _records(tmp_path / "dst")
    superseding = [r for r in recs if r.get("text") == "the deploy target is production"][0]
    assert "supersedes" not in superseding and superseding["imported"]["refs"] == {"supersedes": [1]}
    assert chain.walk(Log(tmp_path / "dst").scan()).ok


# -- a tampered export --------------------------------------------------------


@pytest.mark.parametrize(
    "tamper, line",
    [
        (lambda ls: [*ls[:2], ls[2].replace(b"shipped 0.1", b"shipped 0.2"), *ls[3:]], 3),
        (lambda ls: [*ls[:1], *ls[2:]], 2),
        (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], 2),
    ],
    ids=["edited", "deleted", "swapped"],
)
def test_a_tampered_export_is_refused_with_nothing_written(tmp_path, tamper, line):
    src = _source_store(tmp_path / "src")
    export_file = tmp_path / "export.jsonl"
    transfer.export_to_file(src.log, export_file)
    export_file.write_bytes(b"".join(tamper(export_file.read_bytes().splitlines(keepends=True))))
    dst = tmp_path / "dst"
    Store(dst).write("already here")
    before = (dst / "log.jsonl").read_bytes()
    out = run_cli("import", str(export_file), "--json", "--dir", str(dst))
    assert out.returncode == 1, out.stderr
    err = json.loads(out.stdout)["error"]
    assert err["code"] == "chain_broken" and err["line"] == line
    assert f"line {line}" in out.stderr and "nothing was written" in out.stderr
    assert (dst / "log.jsonl").read_bytes() == before


def test_a_foreign_line_inside_an_export_is_refused(tmp_path):
    src = _source_store(tmp_path / "src")
    export_file = tmp_path / "export.jsonl"
    transfer.export_to_file(src.log, export_file)
    with open(export_file, "ab") as f:
        f.write(b'{"note":"added by hand"}\n')
    with pytest.raises(transfer.ImportRefused) as exc:
        transfer.plan_import(export_file)
    assert exc.value.line == 6


# -- plain JSONL --------------------------------------------------------------


def test_plain_jsonl_keeps_other_fields_and_applies_the_default_scope(tmp_path):
    f = tmp_path / "notes.jsonl"
    f.write_text(
        '{"text": "alpha", "author": "kim", "n": 3}\n'
        "\n"
        '{"text": "beta", "scope": "own", "kind": "fact", "source": "wiki", "body": "long", "client_op_id": "b-1"}\n'
        '{"text": "gamma", "tags": ["x", "y"]}',  # no final newline
        encoding="utf-8",
    )
    out = run_cli("import", str(f), "--scope", "imported", "--json", "--dir", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["format"] == "jsonl"
    recs = _records(tmp_path / "s")
    assert [_caller_view(r) for r in recs] == [
        {"text": "alpha", "author": "kim", "n": 3, "scope": "imported", "kind": "note"},
        {"text": "beta", "scope": "own", "kind": "fact", "source": "wiki", "body": "long", "client_op_id": "b-1"},
        {"text": "gamma", "tags": ["x", "y"], "scope": "imported", "kind": "note"},
    ]
    assert all("imported" not in r for r in recs)


def test_plain_jsonl_with_bad_lines_is_refused_with_their_numbers(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(
        "\n".join(
            [
                '{"text": "fine"}',
                "not json at all",
                '{"title": "no text"}',
                '["a list"]',
                '{"text": "sets the store field", "seq": 9}',
                '{"text": "fine too"}',
                '{"text": 5}',
                '{"text": "links elsewhere", "supersedes": [1]}',
                '{"text": "a store kind", "kind": "retract"}',
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    dst = tmp_path / "s"
    out = run_cli("import", str(f), "--json", "--dir", str(dst))
    assert out.returncode == 2, out.stderr
    err = json.loads(out.stdout)["error"]
    assert err["code"] == "invalid_argument" and err["line"] == 2 and err["bad_lines"] == 7
    assert "line 2: not JSON" in out.stderr
    assert "at line 2, 3, 4, 5, 7, 8, 9" in out.stderr
    assert not (dst / "log.jsonl").exists()


def test_a_reserved_key_is_refused_by_default_and_nested_on_request(tmp_path):
    f = tmp_path / "ts.jsonl"
    f.write_text('{"text": "from another tool", "ts": "2024-01-01", "hash": "abc"}\n', encoding="utf-8")
    with pytest.raises(transfer.ImportRefused, match=r"line 1: field 'hash' is set by the store"):
        transfer.plan_import(f)
    s = Store(tmp_path / "s")
    transfer.import_file(s, f, on_reserved="nest")
    (rec,) = _records(tmp_path / "s")
    assert rec["original"] == {"ts": "2024-01-01", "hash": "abc"}
    assert rec["ts"] != "2024-01-01"
    g = tmp_path / "both.jsonl"
    g.write_text('{"text": "x", "ts": "t", "original": 1}\n', encoding="utf-8")
    with pytest.raises(transfer.ImportRefused, match="already has"):
        transfer.plan_import(g, on_reserved="nest")


# -- server-memory's memory.jsonl --------------------------------------------

MEMORY_JSONL = textwrap.dedent(
    """\
    {"type":"entity","name":"John_Smith","entityType":"person","observations":["Speaks fluent Spanish","Graduated in 2019"]}
    {"type":"entity","name":"Anthropic","entityType":"organization","observations":[]}
    {"type":"relation","from":"John_Smith","to":"Anthropic","relationType":"works_at"}
    """
)


def test_a_server_memory_file_becomes_entities_observations_and_relations(tmp_path):
    f = tmp_path / "memory.jsonl"
    f.write_text(MEMORY_JSONL, encoding="utf-8")
    out = run_cli("import", str(f), "--json", "--dir", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["format"] == "memory" and result["written"] == 5
    assert result["source"] == {"entities": 2, "relations": 1}
    got = [(r["kind"], r["text"], r.get("entity"), r.get("entity_type")) for r in _records(tmp_path / "s")]
    assert got == [
        ("entity", "John_Smith", "John_Smith", "person"),
        ("observation", "Speaks fluent Spanish", "John_Smith", "person"),
        ("observation", "Graduated in 2019", "John_Smith", "person"),
        ("entity", "Anthropic", "Anthropic", "organization"),
        ("relation", "John_Smith works_at Anthropic", None, None),
    ]
    rel = _records(tmp_path / "s")[-1]
    assert (rel["from"], rel["to"], rel["relation_type"]) == ("John_Smith", "Anthropic", "works_at")
    assert rel["source"] == "server-memory:memory.jsonl"


def test_a_file_written_by_the_real_server_memory_imports(tmp_path):
    """The npm package, when the harness has installed it, writes the file over MCP stdio."""
    from harness.adapters.server_memory import cache_dir

    entry = cache_dir() / "node_modules" / "@modelcontextprotocol" / "server-memory" / "dist" / "index.js"
    if not entry.exists():
        pytest.skip("server-memory is not installed in the harness cache (python -m harness --adapter=server-memory installs it)")
    import anyio

    from harness.mcpio import spawn

    memory = tmp_path / "memory.jsonl"
    env = {**os.environ, "MEMORY_FILE_PATH": str(memory)}

    async def fill() -> None:
        async with spawn(["node", str(entry)], env, tmp_path / "work") as server:
            await server.call("create_entities", {"entities": [
                {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]},
                {"name": "Engine", "entityType": "machine", "observations": []},
            ]})
            await server.call("create_relations", {"relations": [{"from": "Ada", "to": "Engine", "relationType": "programmed"}]})

    anyio.run(fill)
    s = Store(tmp_path / "s")
    result = transfer.import_file(s, memory)
    assert result["format"] == "memory" and result["written"] == 4
    texts = {r["text"] for r in _records(tmp_path / "s")}
    assert texts == {"Ada", "wrote the first program", "Engine", "Ada programmed Engine"}


def test_a_bad_memory_line_is_refused_with_its_number(tmp_path):
    f = tmp_path / "memory.jsonl"
    f.write_text(MEMORY_JSONL + '{"type":"entity","name":"X","entityType":"t","observations":[3]}\n{"type":"blob"}\n', encoding="utf-8")
    with pytest.raises(transfer.ImportRefused) as exc:
        transfer.plan_import(f)
    assert exc.value.line == 4 and exc.value.bad_lines == 2
    assert "observations must be a list of strings" in exc.value.message


# -- batches and progress ----------------------------------------------------


def test_a_large_import_goes_in_batches_and_reports_progress(tmp_path):
    f = tmp_path / "many.jsonl"
    with open(f, "wb") as out:
        for i in range(5000):
            out.write(orjson.dumps({"text": f"note {i}", "i": i}) + b"\n")
    s = Store(tmp_path / "s")
    seen = []
    result = transfer.import_file(s, f, batch=1500, progress=lambda done, total: seen.append((done, total)))
    assert result["written"] == 5000 and (result["first_seq"], result["last_seq"]) == (1, 5000)
    assert seen == [(1500, 5000), (3000, 5000), (4500, 5000), (5000, 5000)]
    assert chain.walk(Log(tmp_path / "s").scan()).ok


# -- export -------------------------------------------------------------------


def test_export_refuses_a_damaged_log_and_force_writes_the_valid_records(tmp_path):
    src = _source_store(tmp_path / "src")
    path = tmp_path / "src" / "log.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"dark", b"lite")
    path.write_bytes(b"".join(lines) + b'{"from":"another program"}\n')
    out = run_cli("export", "--dir", str(tmp_path / "src"))
    assert out.returncode == 1 and out.stdout == ""
    assert "verify found 1 problems" in out.stderr and "seq 2" in out.stderr
    forced = run_cli("export", "--force", "--dir", str(tmp_path / "src"))
    assert forced.returncode == 1 and "WARNING" in forced.stderr
    assert len(forced.stdout.splitlines()) == 4  # 5 records minus the damaged one; the foreign line left out
    src.close()


def test_export_to_a_file_prints_a_summary_and_markdown_is_readable(tmp_path):
    _source_store(tmp_path / "src").close()
    dest = tmp_path / "out.jsonl"
    out = run_cli("export", "-o", str(dest), "--json", "--dir", str(tmp_path / "src"))
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["records"] == 5 and summary["path"] == str(dest)
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    md = run_cli("export", "--format", "markdown", "--dir", str(tmp_path / "src"))
    assert md.returncode == 0
    assert "### #3 · checkpoint · proj-a" in md.stdout and "shipped 0.1" in md.stdout
    assert "supersedes #1" in md.stdout


# -- backup -------------------------------------------------------------------


def test_backup_copies_verifies_and_never_overwrites_without_force(tmp_path):
    _source_store(tmp_path / "src").close()
    dest = tmp_path / "backups" / "one"
    out = run_cli("backup", str(dest), "--json", "--dir", str(tmp_path / "src"))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ok"] and result["records"] == 5
    assert (dest / "log.jsonl").read_bytes() == (tmp_path / "src" / "log.jsonl").read_bytes()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in dest.iterdir())
    manifest = json.loads((dest / "backup.json").read_text(encoding="utf-8"))
    assert manifest["head"] == result["head"]

    Store(tmp_path / "src").write("one more")
    again = run_cli("backup", str(dest), "--dir", str(tmp_path / "src"))
    assert again.returncode == 2 and "--force" in again.stderr
    assert Log(dest).tail()[0] == 5
    forced = run_cli("backup", str(dest), "--force", "--json", "--dir", str(tmp_path / "src"))
    assert forced.returncode == 0 and json.loads(forced.stdout)["replaced"] is True
    assert Log(dest).tail()[0] == 6
    assert sorted(os.listdir(dest.parent)) == ["one"]  # no staging or old copies left


def test_backup_refuses_a_destination_inside_or_around_the_store(tmp_path):
    _source_store(tmp_path / "src").close()
    for dest in (tmp_path / "src", tmp_path / "src" / "bk", tmp_path):
        out = run_cli("backup", str(dest), "--force", "--dir", str(tmp_path / "src"))
        assert out.returncode == 2, dest
    other = tmp_path / "docs"
    other.mkdir()
    (other / "thesis.txt").write_text("precious", encoding="utf-8")
    out = run_cli("backup", str(other), "--force", "--dir", str(tmp_path / "src"))
    assert out.returncode == 2 and "not a retained backup" in out.stderr
    assert (other / "thesis.txt").read_text(encoding="utf-8") == "precious"


WRITER = """
import sys
from retained import Store
s = Store(sys.argv[1])
i = 0
while True:
    s.write(f"written during backups {i}", scope="busy")
    if i == 0:
        print("ready", flush=True)
    i += 1
"""


def _grows(path: Path, size: int) -> None:
    """Wait (bounded) until another process has appended past ``size``."""
    import time

    deadline = time.monotonic() + 30
    while path.stat().st_size <= size and time.monotonic() < deadline:
        time.sleep(0.005)


def test_backup_is_consistent_while_another_process_writes(tmp_path):
    src_dir = tmp_path / "src"
    Store(src_dir).write("before the writer")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(src_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        heads = []
        for n in range(5):
            _grows(src_dir / "log.jsonl", (src_dir / "log.jsonl").stat().st_size)
            dest = tmp_path / f"bk{n}"
            result = transfer.backup(Log(src_dir), dest)
            assert result["ok"], result["findings"]
            copy = (dest / "log.jsonl").read_bytes()
            assert copy.endswith(b"\n")
            # The copy is an exact prefix of the live log, ending at a record boundary.
            live = (src_dir / "log.jsonl").read_bytes()
            assert live[: len(copy)] == copy
            report = chain.walk(Log(dest).scan())
            assert report.ok and report.torn_tail is None
            heads.append(report.head_seq)
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    assert heads == sorted(heads) and len(set(heads)) == 5


def test_dry_run_validates_everything_and_writes_nothing(tmp_path):
    f = tmp_path / "memory.jsonl"
    f.write_text(MEMORY_JSONL, encoding="utf-8")
    out = run_cli("import", str(f), "--dry-run", "--json", "--dir", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["dry_run"] is True and got["records"] == 5 and got["written"] == 0
    assert not (tmp_path / "s").exists()


def test_format_can_be_forced_and_a_retained_export_read_as_plain_jsonl_is_refused(tmp_path):
    src = _source_store(tmp_path / "src")
    export_file = tmp_path / "export.jsonl"
    transfer.export_to_file(src.log, export_file)
    out = run_cli("import", str(export_file), "--format", "jsonl", "--dir", str(tmp_path / "s"))
    assert out.returncode == 2
    assert "line 1: field 'client' is set by the store" in out.stderr
    assert not (tmp_path / "s" / "log.jsonl").exists()


def test_an_empty_file_imports_nothing(tmp_path):
    f = tmp_path / "empty.jsonl"
    f.write_bytes(b"")
    result = transfer.import_file(Store(tmp_path / "s"), f)
    assert result["written"] == 0 and result["first_seq"] is None


def test_links_stay_right_while_another_process_writes_between_batches(tmp_path):
    src = Store(tmp_path / "src")
    for i in range(30):
        src.write(f"fact {i}", supersedes=[i] if i % 3 == 0 and i > 0 else None)
    export_file = tmp_path / "export.jsonl"
    transfer.export_to_file(src.log, export_file)
    dst_dir = tmp_path / "dst"
    Store(dst_dir).write("already here")
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(dst_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "ready"
        transfer.import_file(Store(dst_dir), export_file, batch=4)
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()
    recs = {r["seq"]: r for r in _records(dst_dir)}
    imported = [r for r in recs.values() if "imported" in r]
    assert len(imported) == 30
    for r in imported:
        if "supersedes" in r:
            (target,) = r["supersedes"]
            (original,) = r["imported"].get("refs", {}).get("supersedes", r["supersedes"])
            assert recs[target]["imported"]["seq"] == original
            assert recs[target]["text"] == f"fact {original - 1}"
    assert chain.walk(Log(dst_dir).scan()).ok


def test_import_runs_the_write_guard_and_a_secret_refuses_the_whole_file(tmp_path):
    """An import is a write: a credential in any line refuses the file, nothing written."""
    src = tmp_path / "notes.jsonl"
    key = "AKIA" + "ABCDEFGHIJ234567"  # a fake AWS key id, assembled so no scanner flags this file
    src.write_text(
        json.dumps({"text": "fine"}) + "\n" + json.dumps({"text": f"deploy with {key}"}) + "\n", encoding="utf-8"
    )
    store = Store(tmp_path / "s")
    store.write("before")
    before = (tmp_path / "s" / "log.jsonl").read_bytes()
    plan = transfer.plan_import(src)
    with pytest.raises(Exception) as err:
        transfer.run_import(store, plan)
    assert getattr(err.value, "code", None) == "secret_detected"
    assert "line 2" in str(err.value) and key not in str(err.value)
    assert (tmp_path / "s" / "log.jsonl").read_bytes() == before


def test_import_under_the_redact_policy_stores_placeholders_and_counts_them(tmp_path):
    from retained.safety.guard import Guard

    src = tmp_path / "notes.jsonl"
    key = "AKIA" + "ABCDEFGHIJ234567"
    src.write_text(json.dumps({"text": f"key {key} <private>pin</private>"}) + "\n", encoding="utf-8")
    store = Store(tmp_path / "s", guard=Guard("redact"))
    result = transfer.run_import(store, transfer.plan_import(src))
    assert result["guard"] == {"records_changed": 1, "secrets_redacted": 1, "private_spans_removed": 1}
    (entry,) = store.get([1])
    assert entry["record"]["text"] == "key [secret:aws_access_key] "

"""The viewer's HTML (issue 16): hostile text in any field stays text, the check commands work, the chart.

The pages are built from real Store replies over a real store; the HTML is
parsed with the standard library's parser, so a tag or attribute that
escaping let through would show up as one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from retained import Store
from retained.brief import compose as brief
from retained.viewer import pages

HOSTILE = [
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(2)">',
    "javascript:alert(3)",
    '"><a href="javascript:alert(4)">x</a>',
    "'><svg onload=alert(5)>",
    "&lt;script&gt; already escaped once",
    "\x1b[31mred\x07 and \u202e reversed",
]
ALLOWED_TAGS = {
    "html", "head", "meta", "title", "link", "body", "header", "nav", "a", "span", "main", "footer", "h1", "h2", "h3",
    "p", "form", "label", "input", "button", "ol", "ul", "li", "div", "time", "table", "tr", "th", "td", "pre",
    "code", "strong", "section", "figure", "figcaption", "svg", "rect", "line", "text", "progress",
}


class Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _parse(html: str) -> Collect:
    c = Collect()
    c.feed(html)
    c.close()
    return c


def _assert_inert(html: str) -> Collect:
    c = _parse(html)
    for tag, attrs in c.tags:
        assert tag in ALLOWED_TAGS, tag
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("href", "src", "action"):
                assert value is not None and value.startswith("/"), (tag, name, value)
    return c


@pytest.fixture
def hostile_store(tmp_path: Path):
    with Store(tmp_path / "store", client={"name": HOSTILE[0], "version": HOSTILE[1]}) as store:
        first = store.write("plain first note", scope="s")["seq"]
        for n, text in enumerate(HOSTILE):
            store.write(text, scope=HOSTILE[n - 1], source=HOSTILE[n - 2], body={"k": HOSTILE[n - 3]},
                        kind=HOSTILE[n - 4], fields={"link": HOSTILE[2], HOSTILE[n - 5][:8].strip() or "f": HOSTILE[n]})
        store.write("corrects the first", supersedes=[first], scope=HOSTILE[0])
        store.checkpoint(HOSTILE[0], summary=HOSTILE[1], scope=HOSTILE[2])
        store.forget([first], HOSTILE[3])
        yield store


def test_every_page_keeps_hostile_text_as_text(hostile_store: Store):
    store = hostile_store
    where = {"directory": HOSTILE[0], "head": store.head()}
    listed = store.list(limit=100)
    params = {"limit": 100, "limit_default": 50, "before": None, "after": None,
              **dict.fromkeys(pages.TIMELINE_FILTERS, HOSTILE[0])}
    shown = "".join(_parse(pages.timeline(listed, params, where)).text)
    for text in HOSTILE[:6]:
        assert text in shown  # the text itself is there to read
    reply = store.search("alert script onerror", include_superseded=True)
    assert reply["results"]
    _assert_inert(pages.search(reply, {"q": HOSTILE[0], "scope": HOSTILE[1], "k": 10}, where))
    for entry in listed["records"]:
        older = store.list(limit=3, before=entry["seq"])["records"]
        page = pages.record(entry, older=older, newer=[], chain=[entry], log_path=HOSTILE[1], where=where)
        _assert_inert(page)
    result = store.brief(4000)
    _assert_inert(pages.brief(result, brief.render_text(result), {"budget": 4000, "scope": HOSTILE[0]}, where))
    stats = store.stats()
    stats["by_day"][HOSTILE[0]] = 1  # a ts that is not a date (a hand-made line)
    _assert_inert(pages.health(stats, None, where))
    report = store.verify()
    report["findings"] = [{"kind": HOSTILE[0], "seq": 2, "offset": 5, "message": HOSTILE[1]}, HOSTILE[2]]
    job = {"state": "done", "report": report, "seconds": 0.1, "finished_at": HOSTILE[3]}
    _assert_inert(pages.verify(job, where))
    _assert_inert(pages.error(400, HOSTILE[4], where))
    # Control characters never reach the page as themselves.
    assert "\x1b" not in pages.esc(HOSTILE[6]) and "\x07" not in pages.esc(HOSTILE[6])


def test_the_check_commands_recompute_the_hash_and_catch_a_flipped_byte(hostile_store: Store, tmp_path: Path):
    store = hostile_store
    head = store.head()
    log = Path(head["log"])
    entries = store.list(limit=100)["records"]
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}

    def run(command: str) -> str:
        out = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, env=env, timeout=60)
        return out.stdout

    for entry in entries:
        commands = pages.check_commands(entry, str(log), str(store.directory))
        raw = log.read_bytes()[entry["offset"]: entry["offset"] + entry["length"]]
        assert run(commands["the line's bytes"]).encode() == raw
        assert run(commands["recompute its hash"]).split() == ["seq", str(entry["seq"]), "hash",
                                                               entry["record"]["hash"], "ok"]
    entry = entries[len(entries) // 2]
    data = bytearray(log.read_bytes())
    data[entry["offset"] + entry["length"] - 3] ^= 0x01  # inside the last field's value, before '}\n'
    log.write_bytes(bytes(data))
    assert run(pages.check_commands(entry, str(log), str(store.directory))["recompute its hash"]).split()[-1] in (
        "MISMATCH",)


@pytest.mark.parametrize(("days", "unit", "bars"), [
    ({"2026-01-01": 3}, "day", 1),
    ({"2026-01-01": 3, "2026-01-05": 2}, "day", 5),
    ({"2026-01-01": 1, "2026-06-30": 1}, "week", 27),
    ({"2020-01-15": 1, "2026-06-30": 4}, "month", 78),
])
def test_the_chart_groups_days_into_the_finest_unit_that_fits_and_keeps_every_record(days, unit, bars):
    got_unit, got, odd = pages._buckets({**days, "not-a-day": 2})
    assert (got_unit, len(got), odd) == (unit, bars, 2)
    assert sum(n for _, n in got) == sum(days.values())
    svg = pages.chart(days)
    assert svg.count("<rect") == bars and f"records per {unit}" in svg


def test_a_running_verify_shows_its_progress_and_reloads_itself_without_script():
    where = {"directory": "/store", "head": {"seq": 3, "hash": "ab" * 32}}
    job = {"state": "running", "done_bytes": 2_500, "total_bytes": 10_000, "seconds": 1.5, "report": None}
    c = _assert_inert(pages.verify(job, where))
    tags = dict(c.tags)
    assert tags["progress"] == {"max": "10000", "value": "2500"}
    assert ("meta", {"http-equiv": "refresh", "content": "1"}) in c.tags
    assert "2,500 of 10,000 bytes (25%)" in "".join(c.text)
    done = {**job, "state": "done", "report": {"ok": True, "findings": [], "records": 3, "bytes": 10_000},
            "finished_at": "2026-12-01 10:00:00 UTC"}
    c = _assert_inert(pages.verify(done, where))
    assert not [t for t in c.tags if t[0] == "meta" and t[1].get("http-equiv") == "refresh"]
    assert "verify ok" in "".join(c.text)

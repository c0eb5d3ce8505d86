"""``retained view`` in a real browser: a viewer subprocess on 127.0.0.1 driven by headless Chromium (issue 16).

Chromium comes from the system (Debian's ``chromium``; ``.ci/run`` installs
it when missing) and is spoken to over the DevTools protocol. Screenshots of
every page are written under the test's tmp_path. The access rules (Host,
Origin with its port, methods) are checked with plain HTTP requests.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from retained import Store

from .browser import Chromium, find_chromium
from .conftest import REPO, WAIT_S, HttpServer, LineReader, server_env

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="no chromium on PATH (apt-get install chromium); CI installs it and never skips",
)

AGENT = {"name": "agent-one", "version": "1.0"}
OTHER = {"name": "agent-two", "version": "2.0"}
# Record text a page must show as text, never run or follow.
HOSTILE = [
    "<script>window.__xss = 'script'; alert('script')</script>",
    '<img src=x onerror="window.__xss = \'onerror\'; alert(\'onerror\')">',
    "javascript:window.__xss='url';alert('url')",
    '"><svg onload="window.__xss=\'svg\'">',
    "</pre></code><script>window.__xss='close'</script>",
]


def _fill(directory: Path) -> dict[str, int]:
    """A store with notes by two clients in two scopes, a checkpoint, a correction, a retraction, hostile text."""
    seqs: dict[str, int] = {}
    with Store(directory, client=AGENT) as store:
        for i in range(1, 31):
            store.write(f"routine note {i} about the build cache", scope="proj-a" if i % 2 else "proj-b",
                        client=OTHER if i % 3 == 0 else None)
        seqs["target"] = store.write("the deploy target is staging", scope="proj-a")["seq"]
        seqs["correction"] = store.write("the deploy target is production now", scope="proj-a",
                                         supersedes=[seqs["target"]])["seq"]
        seqs["checkpoint"] = store.checkpoint("shipped the cache fix", summary="next: the index", scope="proj-a")["seq"]
        seqs["wrong"] = store.write("the office is on mars", scope="proj-b")["seq"]
        seqs["retraction"] = store.forget([seqs["wrong"]], "not true")["seq"]
        for n, text in enumerate(HOSTILE):
            seqs[f"hostile{n}"] = store.write(
                text, scope=HOSTILE[(n + 1) % len(HOSTILE)], source=HOSTILE[(n + 2) % len(HOSTILE)],
                body=HOSTILE[(n + 3) % len(HOSTILE)], fields={"link": HOSTILE[2], "note": HOSTILE[n]},
                client={"name": HOSTILE[n], "version": HOSTILE[1]},
            )["seq"]
        seqs["head"] = store.head()["seq"]
    return seqs


class Viewer(HttpServer):
    """``python -m retained view --port 0 --json`` on a store; its URL from the JSON line it prints."""

    def __init__(self, store_dir: Path, *args: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "retained", "view", "--port", "0", "--json", "--dir", str(store_dir), *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=server_env(store_dir, **env), cwd=REPO,
        )
        self.out = LineReader(self.proc.stdout)
        self.err = LineReader(self.proc.stderr)
        line = self.out.next()
        if not line:
            self.stop()
            raise AssertionError(f"the viewer did not start: {b''.join(self.err.rest()).decode(errors='replace')}")
        self.info = json.loads(line)
        self.url = self.info["url"].rstrip("/")
        self.port = int(self.info["port"])

    def request(self, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=WAIT_S)
        try:
            conn.request(method, path, headers={"Host": f"127.0.0.1:{self.port}", **(headers or {})})
            reply = conn.getresponse()
            return reply.status, {k.lower(): v for k, v in reply.getheaders()}, reply.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    directory = tmp_path_factory.mktemp("viewer") / "store"
    return directory, _fill(directory)


@pytest.fixture(scope="module")
def viewer(filled: tuple[Path, dict[str, int]]) -> Any:
    v = Viewer(filled[0])
    yield v
    v.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if CHROMIUM is None:
        pytest.fail("chromium is not installed; .ci/run installs it (apt-get install chromium)")
    b = Chromium(tmp_path_factory.mktemp("chromium-profile"), CHROMIUM)
    yield b
    b.close()


@pytest.fixture
def page(browser: Chromium) -> Any:
    p = browser.page()
    yield p
    p.close()


def _seqs_shown(page: Any) -> list[int]:
    return page.eval("[...document.querySelectorAll('ol.records > li > .meta > a.seq:first-child')]"
                     ".map(a => parseInt(a.textContent.slice(1)))")


def test_the_timeline_loads_newest_first_and_pages_both_ways(viewer, page, filled):
    _, seqs = filled
    head = seqs["head"]
    page.goto(f"{viewer.url}/?limit=10")
    assert _seqs_shown(page) == list(range(head, head - 10, -1))
    assert f"Showing 10 records of {head} records" in page.text()
    page.follow("a[rel=next]")
    assert _seqs_shown(page) == list(range(head - 10, head - 20, -1))
    assert page.url().endswith(f"before={head - 9}")
    page.follow("a[rel=prev]")
    assert _seqs_shown(page) == list(range(head, head - 10, -1))
    # Corrections and retractions are marked and linked to what replaced them; the checkpoint stands out.
    page.goto(f"{viewer.url}/?limit=100")
    marks = page.eval("Object.fromEntries([...document.querySelectorAll('li.rec')].map(li => "
                      "[li.querySelector('.meta > a.seq').textContent, [li.className, "
                      "[...li.querySelectorAll('.mark a')].map(a => a.getAttribute('href'))]]))")
    assert marks[f"#{seqs['target']}"] == ["rec kind-other superseded", [f"/record/{seqs['correction']}"]]
    assert marks[f"#{seqs['wrong']}"] == ["rec kind-other retracted", [f"/record/{seqs['retraction']}"]]
    assert marks[f"#{seqs['checkpoint']}"][0] == "rec kind-checkpoint"
    assert marks[f"#{seqs['correction']}"] == ["rec kind-other", [f"/record/{seqs['target']}"]]


def test_the_timeline_filters_by_scope_kind_client_and_day(viewer, page, filled):
    directory, _ = filled
    with Store(directory) as store:
        expected = [r["seq"] for r in store.list(limit=100, client="agent-two", scope="proj-b")["records"]]
        day = store.get([1])[0]["record"]["ts"][:10]
    assert expected
    page.goto(f"{viewer.url}/?client=agent-two&scope=proj-b&limit=100")
    assert _seqs_shown(page) == expected
    page.goto(f"{viewer.url}/?kind=checkpoint")
    assert len(_seqs_shown(page)) == 1
    page.goto(f"{viewer.url}/?since={day}&until={day}&limit=3")
    assert len(_seqs_shown(page)) == 3
    page.goto(f"{viewer.url}/?since=2000-01-01&until=2000-01-02")
    assert _seqs_shown(page) == [] and "Showing 0 records of 0" in page.text()
    page.goto(f"{viewer.url}/?since=not-a-day")
    assert "field since" in page.text()


def test_a_search_from_the_form_finds_the_record_and_shows_mode_and_accounting(viewer, page, filled):
    _, seqs = filled
    page.goto(f"{viewer.url}/search")
    page.eval("document.querySelector('input[name=q]').value = 'deploy target'")
    page.follow("form.filters button[type=submit]")
    assert _seqs_shown(page) == [seqs["correction"]]
    text = page.text()
    assert "mode: lexical" in text
    assert "1 of 2 matching record(s) returned; left out: 1 superseded." in text
    page.goto(f"{viewer.url}/search?q=deploy+target&superseded=1")
    assert sorted(_seqs_shown(page)) == [seqs["target"], seqs["correction"]]
    assert "2 of 2 matching record(s) returned; left out: none." in page.text()


def test_a_record_page_shows_its_proof_exactly_as_the_log_holds_it(viewer, page, filled):
    directory, seqs = filled
    seq = seqs["correction"]
    with Store(directory) as store:
        (entry,) = store.get([seq])
    raw = (directory / "log.jsonl").read_bytes()[entry["offset"]: entry["offset"] + entry["length"]]
    rec = json.loads(raw)
    page.goto(f"{viewer.url}/record/{seq}")
    proof = page.eval("Object.fromEntries([...document.querySelector('h2 + table.kv').querySelectorAll('tr')]"
                      ".map(tr => [tr.cells[0].textContent, tr.cells[1].textContent]))")
    assert proof["seq"] == str(seq)
    assert proof["hash"] == rec["hash"]
    assert proof["prev"].startswith(rec["prev"])
    assert proof["offset"].startswith(f"{entry['offset']:,} ")
    assert proof["length"] == f"{entry['length']:,} bytes"
    assert proof["time"] == rec["ts"]
    assert proof["client"].startswith("agent-one 1.0")
    text = page.text()
    assert "Supersede chain" in text and f"#{seqs['target']}" in text
    assert "recompute its hash" in text and f"retained get {seq} --json" in text
    page.follow(f"a[href='/record/{seqs['target']}']")
    assert page.url().endswith(f"/record/{seqs['target']}") and "superseded by" in page.text()


def test_hostile_record_text_stays_text_on_every_page_even_with_the_policy_off(viewer, browser, filled):
    """No dialog opens and no script runs; the escaping alone holds (CSP bypassed), and the CSP is there too."""
    _, seqs = filled
    first = seqs["hostile0"]
    paths = ["/?limit=100", "/search?q=xss+script+onerror+window", "/search?q=window", "/brief?budget=4000",
             "/health", *(f"/record/{seqs[f'hostile{n}']}" for n in range(len(HOSTILE)))]
    for bypass in (True, False):
        p = browser.page(bypass_csp=bypass)
        try:
            for path in paths:
                p.goto(viewer.url + path)
                assert p.eval("typeof window.__xss") == "undefined", path
                assert p.eval("document.querySelectorAll('script, iframe, object, embed, img, svg:not(figure svg)')"
                              ".length") == 0, path
                assert p.eval("[...document.querySelectorAll('*')].filter(e => [...e.attributes]"
                              ".some(a => a.name.startsWith('on'))).length") == 0, path
                assert p.eval("[...document.querySelectorAll('[href],[src],[action]')].filter(e => "
                              "/^\\s*javascript:/i.test(e.getAttribute('href') || e.getAttribute('src') || "
                              "e.getAttribute('action'))).length") == 0, path
            p.goto(f"{viewer.url}/record/{first}")
            assert HOSTILE[0] in p.text()  # shown, as text
            assert p.events("Page.javascriptDialogOpening") == []
        finally:
            p.close()
    status, headers, _ = viewer.request("GET", "/")
    assert status == 200 and "script-src" not in headers["content-security-policy"]
    assert headers["content-security-policy"].startswith("default-src 'none'")


def test_every_page_renders_and_a_screenshot_of_each_is_written(viewer, page, filled, tmp_path):
    _, seqs = filled
    folder = tmp_path / "screenshots"
    pages = {"timeline": "/", "search": "/search?q=deploy+target&superseded=1", "record": f"/record/{seqs['target']}",
             "health": "/health", "brief": "/brief?budget=400"}
    for name, path in pages.items():
        page.goto(viewer.url + path)
        assert page.eval("getComputedStyle(document.body).margin") == "0px", "the stylesheet did not load"
        shot = page.screenshot(folder / f"{name}.png")
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
    assert sorted(p.name for p in folder.iterdir()) == sorted(f"{n}.png" for n in pages)


def test_the_health_page_reports_a_flipped_byte_and_verify_runs_with_progress(tmp_path, browser):
    store_dir = tmp_path / "store"
    seqs = _fill(store_dir)
    log = store_dir / "log.jsonl"
    with Store(store_dir) as store:
        store.search("warm the index")
        (entry,) = store.get([seqs["checkpoint"]])
    data = bytearray(log.read_bytes())
    at = data.index(b"shipped the cache fix", entry["offset"])
    data[at] ^= 0x20  # "s" -> "S": the line still parses; its hash no longer matches
    log.write_bytes(bytes(data))
    v = Viewer(store_dir)
    page = browser.page()
    try:
        page.goto(f"{v.url}/health")
        assert "the log has problems" in page.text()
        page.screenshot(tmp_path / "screenshots" / "health-tampered.png")
        page.follow("form[action='/verify'] button")
        for _ in range(int(WAIT_S)):  # the page reloads itself each second while verify runs
            text = page.text()
            if "Findings" in text:
                break
            assert "Walking the chain" in text
            page.wait_reload()
        else:
            raise AssertionError(f"verify did not finish: {page.text()[:500]}")
        assert "finding" in page.text()
        kinds = page.eval("[...document.querySelectorAll('table.findings tr td:first-child')].map(td => td.textContent)")
        seqs_found = page.eval("[...document.querySelectorAll('table.findings tr td:nth-child(2)')]"
                               ".map(td => td.textContent)")
        assert kinds and f"#{seqs['checkpoint']}" in seqs_found, (kinds, seqs_found)
        page.screenshot(tmp_path / "screenshots" / "verify-tampered.png")
    finally:
        page.close()
        v.stop()
    assert log.read_bytes() == bytes(data), "the viewer changed the log"


def test_a_foreign_origin_a_foreign_host_and_any_write_method_are_refused(viewer, filled):
    directory, _ = filled
    before = (directory / "log.jsonl").read_bytes()
    port = viewer.port
    other = port + 1 if port < 65535 else port - 1
    assert viewer.request("GET", "/")[0] == 200
    assert viewer.request("GET", "/", {"Origin": f"http://127.0.0.1:{port}"})[0] == 200
    for origin in ("https://evil.example", f"http://127.0.0.1:{other}", f"http://localhost:{other}", "null",
                   f"https://127.0.0.1:{port}"):
        assert viewer.request("GET", "/", {"Origin": origin})[0] == 403, origin
    for host in (f"evil.example:{port}", "rebind.attacker.test"):
        assert viewer.request("GET", "/", {"Host": host})[0] == 421, host
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        status, headers, _ = viewer.request(method, "/")
        assert status == 405 and headers["allow"] == "GET, HEAD", method
    assert viewer.request("POST", "/verify?run=1")[0] == 403  # no Origin: not from the viewer's page
    status, headers, body = viewer.request("HEAD", "/")
    assert status == 200 and body == b"" and float(headers["server-timing"].split("dur=")[1]) >= 0
    assert (directory / "log.jsonl").read_bytes() == before


def test_off_loopback_the_token_is_required_and_a_browser_keeps_it_in_a_cookie(tmp_path):
    store_dir = tmp_path / "store"
    _fill(store_dir)
    out = subprocess.run([sys.executable, "-m", "retained", "view", "--host", "0.0.0.0", "--port", "0"],
                         capture_output=True, text=True, env=server_env(store_dir), cwd=REPO, timeout=WAIT_S)
    assert out.returncode == 2 and "RETAINED_TOKEN" in out.stderr and out.stdout == ""
    token = "viewer-token-for-tests-0123456789"
    v = Viewer(store_dir, "--host", "0.0.0.0", RETAINED_TOKEN=token)
    try:
        assert v.info["token_required"] is True
        assert v.request("GET", "/")[0] == 401
        assert v.request("GET", "/", {"Authorization": f"Bearer {token}"})[0] == 200
        assert v.request("GET", "/?token=wrong")[0] == 401
        status, headers, _ = v.request("GET", f"/search?q=deploy&token={token}")
        assert status == 303 and headers["location"] == "/search?q=deploy"
        cookie = headers["set-cookie"].split(";", 1)[0]
        assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
        assert v.request("GET", "/search?q=deploy", {"Cookie": cookie})[0] == 200
        assert v.request("GET", "/", {"Cookie": cookie + "x"})[0] == 401
        v.proc.terminate()
        v.proc.wait(timeout=WAIT_S)
        said = b"".join(v.err.rest())
    finally:
        v.stop()
    assert b"a token is required" in said and token.encode() not in said, "the token reached the log"


def test_open_starts_the_browser_named_by_BROWSER_with_the_url(tmp_path):
    store_dir = tmp_path / "store"
    _fill(store_dir)
    opened = tmp_path / "opened.txt"
    fake = tmp_path / "fake-browser.py"
    fake.write_text(f"import sys, pathlib\npathlib.Path({str(opened)!r}).write_text(sys.argv[1])\n", encoding="utf-8")
    v = Viewer(store_dir, "--open", BROWSER=f"{sys.executable} {fake} %s")
    try:
        v.err.until(lambda raw: b"viewing" in raw)
        for _ in range(int(WAIT_S * 10)):  # the browser is started on a thread; bounded wait for its file
            if opened.exists() and opened.read_text(encoding="utf-8"):
                break
            time.sleep(0.1)
        assert opened.read_text(encoding="utf-8") == v.info["url"]
    finally:
        v.stop()

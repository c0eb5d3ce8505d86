"""The viewer's edges over plain HTTP (issue 29, point 10): a 400 page for any parameter it cannot use, no
write on a GET, verify run only by a POST from its own page, no open redirect, an absent store named.

A real ``retained view`` subprocess on 127.0.0.1, spoken to with ``http.client``; no browser needed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from retained import Store

from .conftest import REPO, WAIT_S, server_env
from .test_viewer import Viewer


def _files(*dirs: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``dirs`` but the derived index, with its size and modification time."""
    out = {}
    for d in dirs:
        if d.exists():
            for p in sorted(d.rglob("*")):
                if p.is_file() and not p.name.startswith("index.sqlite3"):
                    st = p.stat()
                    out[str(p)] = (st.st_size, st.st_mtime_ns)
    return out


def _store(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    with Store(directory) as s:  # no anchor_dir: nothing but the log yet
        for i in range(5):
            s.write(f"note {i} about the build cache", scope="a")
        s.search("cache")  # the index exists before the viewer starts: it is derived, and not the question here
    return directory


def test_issue_29_bad_or_out_of_range_parameters_get_the_400_page_never_a_traceback(tmp_path):
    v = Viewer(_store(tmp_path))
    try:
        for path in ("/?limit=1e3", "/?limit=abc", "/?before=99999999999999999999999", "/?after=99999999999999999999",
                     "/?before=-1", "/search?q=cache&k=ten", "/search?q=cache&max_tokens=99999999999999999999999",
                     "/brief?budget=-1", "/brief?budget=99999999999999999999999999", "/record/99999999999999999999999"):
            status, headers, body = v.request("GET", path)
            assert status == 400, (path, status, body[:300])
            assert headers["content-type"].startswith("text/html") and b"Bad request" in body, path
        assert v.request("GET", "/?limit=5")[0] == 200
        v.proc.terminate()
        v.proc.wait(timeout=WAIT_S)
        said = b"".join(v.err.rest())
    finally:
        v.stop()
    assert b"Traceback" not in said, said[-2000:]


def test_issue_29_no_get_writes_anything_and_verify_runs_only_by_a_post_from_the_viewers_page(tmp_path):
    directory = _store(tmp_path)
    anchors = Path(os.environ["RETAINED_ANCHOR_DIR"])
    v = Viewer(directory)
    try:
        before = _files(directory, anchors)
        for path in ("/", "/search?q=cache", "/health", "/brief", "/record/2", "/verify", "/verify?run=1",
                     "/?token=x", "/style.css"):
            status, _, body = v.request("GET", path)
            assert status == 200, (path, status, body[:300])
        assert _files(directory, anchors) == before, "a GET wrote a file"
        assert not (directory / "store.id").exists()
        # A POST without an Origin (a script, a form on no page) runs nothing; the one from the page does.
        assert v.request("POST", "/verify")[0] == 403
        assert v.request("POST", "/verify", {"Origin": "https://evil.example"})[0] == 403
        assert _files(directory, anchors) == before
        status, headers, _ = v.request("POST", "/verify", {"Origin": f"http://127.0.0.1:{v.port}"})
        assert status == 303 and headers["location"] == "/verify"
        for _ in range(int(WAIT_S * 10)):  # bounded wait for the run on its thread
            body = v.request("GET", "/verify")[2]
            if b"reloads itself" not in body:
                break
            time.sleep(0.1)
        assert b"verify ok: the chain and the index agree" in body, body[-1500:]
        assert (directory / "store.id").exists(), "the verify run records its head, as verify does"
    finally:
        v.stop()


def test_issue_29_the_token_redirect_never_leaves_the_viewer(tmp_path):
    token = "viewer-token-for-tests-0123456789"
    v = Viewer(_store(tmp_path), RETAINED_TOKEN=token)
    try:
        for path in (f"//evil.example/?token={token}", f"//evil.example?token={token}", f"/\\evil.example?token={token}",
                     f"///evil.example/x?q=1&token={token}"):
            status, headers, _ = v.request("GET", path)
            assert status == 303, path
            location = headers["location"]
            assert location.startswith("/") and not location.startswith(("//", "/\\")), (path, location)
    finally:
        v.stop()


def test_issue_29_view_of_a_store_that_does_not_exist_says_so(tmp_path):
    for missing in (tmp_path / "typo", tmp_path):
        out = subprocess.run([sys.executable, "-m", "retained", "view", "--port", "0", "--dir", str(missing)],
                             capture_output=True, text=True, env=server_env(missing), cwd=REPO, timeout=WAIT_S)
        assert out.returncode == 1 and f"no store at {missing}" in out.stderr and out.stdout == "", out.stderr
        assert "Traceback" not in out.stderr
    assert not (tmp_path / "typo").exists()


def test_issue_29_a_damaged_record_page_says_it_is_damaged(tmp_path):
    directory = _store(tmp_path)
    log = directory / "log.jsonl"
    log.write_bytes(log.read_bytes().replace(b'"text":"note 2 about', b'"text":"note 2 abouT'))
    v = Viewer(directory)
    try:
        status, _, body = v.request("GET", "/record/3")
        assert status == 500 and b"seq 3 is damaged" in body and b"hash does not recompute" in body, body[-800:]
        assert b"no record with seq" not in body
    finally:
        v.stop()

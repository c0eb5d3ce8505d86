"""The viewer over a store with another store pulled beside it: a real SeaweedFS, a viewer subprocess, headless Chromium."""

from __future__ import annotations

import os

import pytest

from retained import Store

from ..integration.browser import Chromium, find_chromium
from ..integration.test_viewer import Viewer
from .helpers import sync

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="no chromium on PATH (apt-get install chromium); CI installs it and never skips",
)


def test_the_viewer_shows_pulled_records_with_their_origin_and_keeps_their_links_in_their_store(seaweed, tmp_path):
    remote = seaweed.bucket()
    with Store(tmp_path / "a") as a, Store(tmp_path / "b") as b:
        a.write("first of the desk")
        wrong = a.write("pelicans nest in the attic")["seq"]
        fixed = a.write("pelicans nest on the roof", supersedes=[wrong])["seq"]
        a.checkpoint("the desk's checkpoint", summary="roof survey done")
        sync(a, seaweed, remote, machine="desk")
        b.write("the laptop's own note")
        b.write("the laptop's second note")
        sync(b, seaweed, remote, machine="lap")
        sid = a.head()["store_id"]
    viewer = Viewer(tmp_path / "b")
    browser = Chromium(tmp_path / "chromium-profile", CHROMIUM or "chromium")
    page = browser.page()
    try:
        page.goto(f"{viewer.url}/search?q=pelicans+roof")
        assert f"from desk/{sid[:8]}" in page.text()
        page.follow(f"a.seq[href='/record/{fixed}?from={sid}']")
        text = page.text()
        assert "pelicans nest on the roof" in text and f"from desk/{sid[:8]}" in text and sid in text
        assert f"retained get {fixed} --from {sid}" in text and f"mirrors/{sid}/log.jsonl" in text
        # Its links stay in its store: the record it corrects is that store's #wrong, not this store's.
        page.follow(f"a[href='/record/{wrong}?from={sid}']")
        assert "pelicans nest in the attic" in page.text() and "superseded by" in page.text()
        # This store's record with the same seq is its own page.
        page.goto(f"{viewer.url}/record/{wrong}")
        assert "the laptop's second note" in page.text() and "from desk" not in page.text()
        # The brief page lists the pulled records with their origin, linked into their store.
        page.goto(f"{viewer.url}/brief")
        text = page.text()
        assert f"from=desk/{sid[:8]}" in text and "roof survey done" in text
        links = page.eval("[...document.querySelectorAll('ul.plain a.seq')].map(a => a.getAttribute('href'))")
        assert f"/record/4?from={sid}" in links and "/record/2" in links
        status, _, body = viewer.request("GET", f"/record/1?from={'0' * 32}")
        assert status == 404 and b"store_id" in body and b"retained sync" in body
    finally:
        page.close()
        browser.close()
        viewer.stop()

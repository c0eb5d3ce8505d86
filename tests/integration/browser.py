"""Headless Chromium driven over the Chrome DevTools Protocol (its websocket), for the viewer's tests.

A real browser process on 127.0.0.1 with a profile under the test's
tmp_path; every wait is bounded. Events the browser sends are kept per page
so a test can ask afterwards whether a dialog ever opened.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from .conftest import WAIT_S, LineReader

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


class CdpError(Exception):
    """The browser answered a DevTools command with an error."""


class Chromium:
    """One headless browser process and the websocket to it."""

    def __init__(self, profile: Path, executable: str) -> None:
        import websocket  # websocket-client, from the test extra

        args = [
            executable, "--headless=new", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
            "--disable-extensions", "--disable-background-networking", "--disable-sync", "--disable-default-apps",
            "--mute-audio", "--hide-scrollbars", "--window-size=1280,900", "--remote-debugging-port=0",
            f"--user-data-dir={profile}", "about:blank",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            args.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to start as root (CI runs as root)
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.err = LineReader(self.proc.stderr)
        try:
            line = self.err.until(lambda raw: b"DevTools listening on ws://" in raw).decode()
        except Exception:
            self.close()
            raise
        url = line.split("DevTools listening on ", 1)[1].strip()
        # suppress_origin: DevTools refuses a websocket that names an origin it was not told to allow.
        self.ws = websocket.create_connection(url, timeout=WAIT_S, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self.next_id += 1
        wanted = self.next_id
        message: dict[str, Any] = {"id": wanted, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == wanted:
                if "error" in reply:
                    raise CdpError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._keep(reply)
        raise TimeoutError(f"no reply to {method} within {WAIT_S} s")

    def _keep(self, event: dict[str, Any]) -> None:
        """Keep an event; a dialog is recorded and dismissed at once, so it cannot hold the page up."""
        self.events.append(event)
        if event.get("method") == "Page.javascriptDialogOpening":
            self.next_id += 1
            self.ws.send(json.dumps({"id": self.next_id, "method": "Page.handleJavaScriptDialog",
                                     "params": {"accept": False}, "sessionId": event.get("sessionId")}))

    def wait_event(self, method: str, session: str, timeout: float = WAIT_S) -> dict[str, Any]:
        """The next event ``method`` of ``session`` not yet taken (kept events first)."""
        for event in self.events:
            if event.get("method") == method and event.get("sessionId") == session and not event.get("_taken"):
                event["_taken"] = True
                return event
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                event = json.loads(self.ws.recv())
            finally:
                self.ws.settimeout(WAIT_S)
            self._keep(event)
            if event.get("method") == method and event.get("sessionId") == session:
                event["_taken"] = True
                return event
        raise TimeoutError(f"no {method} within {timeout} s")

    def page(self, *, bypass_csp: bool = False) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        return Page(self, session, bypass_csp=bypass_csp)

    def close(self) -> None:
        try:
            if getattr(self, "ws", None) is not None:
                try:
                    self.send("Browser.close")
                except Exception:  # noqa: BLE001 - the browser may already be gone; it is killed below
                    pass
                self.ws.close()
        finally:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
            if self.proc.stderr:
                self.proc.stderr.close()


class Page:
    """One tab: navigate, read the DOM through JavaScript evaluated by DevTools, take screenshots."""

    def __init__(self, browser: Chromium, session: str, *, bypass_csp: bool) -> None:
        self.browser = browser
        self.session = session
        for domain in ("Page.enable", "Runtime.enable"):
            self.send(domain)
        if bypass_csp:
            # The escaping alone must keep record text inert: with the policy
            # off, a script that slipped through would run.
            self.send("Page.setBypassCSP", {"enabled": True})

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def events(self, method: str) -> list[dict[str, Any]]:
        return [e for e in self.browser.events if e.get("method") == method and e.get("sessionId") == self.session]

    def goto(self, url: str) -> None:
        """Load ``url`` and wait for its load event."""
        for e in self.events("Page.loadEventFired"):
            e["_taken"] = True
        result = self.send("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise AssertionError(f"navigation to {url} failed: {result['errorText']}")
        self.browser.wait_event("Page.loadEventFired", self.session)

    def follow(self, selector: str) -> None:
        """Click the first element matching ``selector`` (a link or a button) and wait for the next page."""
        for e in self.events("Page.loadEventFired"):
            e["_taken"] = True
        found = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                          "if (!e) return false; e.click(); return true; })()")
        assert found, f"no element {selector} on {self.url()}"
        self.browser.wait_event("Page.loadEventFired", self.session)

    def wait_reload(self, timeout: float = WAIT_S) -> None:
        self.browser.wait_event("Page.loadEventFired", self.session, timeout)

    def eval(self, expression: str) -> Any:
        reply = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise AssertionError(f"{expression}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def text(self) -> str:
        return self.eval("document.body ? document.body.innerText : ''")

    def url(self) -> str:
        return self.eval("location.href")

    def screenshot(self, path: Path) -> Path:
        """The whole page as a PNG at ``path``."""
        metrics = self.send("Page.getLayoutMetrics")["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": max(1, metrics["width"]), "height": min(max(1, metrics["height"]), 6000),
                "scale": 1}
        data = self.send("Page.captureScreenshot", {"format": "png", "clip": clip, "captureBeyondViewport": True})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data["data"]))
        return path

    def close(self) -> None:
        self.send("Page.close")

"""A headless Chromium that a test starts reaches nothing beyond this host's loopback.

``--disable-background-networking`` and its kin are not enough: Chromium still looked up
update.googleapis.com, accounts.google.com and clients2.google.com (348 DNS queries to the
host's resolver in one 15 s run of the page tests). Inside the browser every name resolves
to nothing but ``localhost`` and ``127.0.0.1`` (without that exception the service's pages
on 127.0.0.1 did not load, and the failed page's DNS probe asked 8.8.8.8).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

LOCAL_ONLY = [
    "--no-first-run", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--disable-domain-reliability", "--no-pings",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]


class Browser:
    """One headless Chromium kept open, driven over the DevTools protocol on a pipe
    (``--remote-debugging-pipe``: JSON messages, NUL-terminated, the browser reading fd 3
    and writing fd 4; no port, no client library).

    A test opens a tab and watches it as a person would: the tab is navigated once and
    reloads itself (the board's ``Refresh`` header); :meth:`Tab.html` reads its DOM as
    laid out (``DOM.getOuterHTML``: no script runs in the page, whose CSP forbids them).
    """

    def __init__(self, chromium: str, profile: Path):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # The child's fds 3 and 4 are the pipe's ends (dup2'd after fork, before exec, via
        # fresh copies: an end may itself be fd 3 or 4). Python's own fds are close-on-exec,
        # so nothing else reaches the browser (close_fds would close 3 and 4 after this).
        def fds() -> None:
            a, b = os.dup(to_browser_r), os.dup(from_browser_w)
            os.dup2(a, 3)
            os.dup2(b, 4)
        argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                *LOCAL_ONLY, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                "about:blank"]
        self.proc = subprocess.Popen(argv, preexec_fn=fds, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._next = 0
        self._cv = threading.Condition()
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        buf = b""
        while chunk := os.read(self._from_browser, 1 << 16):
            buf += chunk
            *messages, buf = buf.split(b"\0")
            with self._cv:
                for raw in messages:
                    msg = json.loads(raw)
                    if "id" in msg:
                        self._replies[msg["id"]] = msg
                    else:
                        self.events.append(msg)
                self._cv.notify_all()
        with self._cv:
            self._cv.notify_all()

    def call(self, method: str, session: str | None = None, timeout: float = 60,
             **params: Any) -> dict[str, Any]:
        """One command; its result (an error reply raises)."""
        with self._cv:
            self._next += 1
            ident = self._next
        msg: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if session is not None:
            msg["sessionId"] = session
        os.write(self._to_browser, json.dumps(msg).encode() + b"\0")
        with self._cv:
            if not self._cv.wait_for(lambda: ident in self._replies or not self._reader.is_alive(),
                                     timeout):
                raise AssertionError(f"Chromium did not answer {method} in {timeout} s")
            reply = self._replies.pop(ident, None)
        if reply is None:
            raise AssertionError(f"Chromium exited (rc {self.proc.poll()}) during {method}")
        if "error" in reply:
            raise AssertionError(f"Chromium refused {method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def loads(self, session: str) -> int:
        """How many times the tab of ``session`` has finished loading a page."""
        with self._cv:
            return sum(1 for e in self.events if e.get("sessionId") == session
                       and e.get("method") == "Page.loadEventFired")

    def wait_loads(self, session: str, more_than: int, timeout: float) -> int:
        """Wait until the tab has loaded more than ``more_than`` pages; the count."""
        with self._cv:
            self._cv.wait_for(lambda: self._count(session) > more_than, timeout)
            return self._count(session)

    def _count(self, session: str) -> int:
        return sum(1 for e in self.events if e.get("sessionId") == session
                   and e.get("method") == "Page.loadEventFired")

    def open(self, url: str, timeout: float = 60) -> Tab:
        """A new tab on ``url``, once loaded."""
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session)
        self.call("Network.enable", session)
        before = self.loads(session)
        self.call("Page.navigate", session, url=url)
        if self.wait_loads(session, before, timeout) <= before:
            raise AssertionError(f"{url} did not load in {timeout} s")
        return Tab(self, session)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        os.close(self._to_browser)
        self._reader.join(10)
        os.close(self._from_browser)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Tab:
    """One open tab of a :class:`Browser`."""

    def __init__(self, browser: Browser, session: str):
        self.browser, self.session = browser, session

    def html(self) -> str:
        """The tab's DOM now, serialised."""
        root = self.browser.call("DOM.getDocument", self.session, depth=0)["root"]
        out: str = self.browser.call("DOM.getOuterHTML", self.session,
                                     nodeId=root["nodeId"])["outerHTML"]
        return out

    def loads(self) -> int:
        return self.browser.loads(self.session)

    def wait_reload(self, after: int, timeout: float) -> int:
        """Wait for the tab to load a page again (the count of loads then)."""
        return self.browser.wait_loads(self.session, after, timeout)

    def responses(self) -> list[dict[str, Any]]:
        """The document responses the tab received (``Network.responseReceived``)."""
        with self.browser._cv:
            return [e["params"]["response"] for e in self.browser.events
                    if e.get("sessionId") == self.session
                    and e.get("method") == "Network.responseReceived"
                    and e["params"].get("type") == "Document"]

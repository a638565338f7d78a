"""Headless Chromium driven over the Chrome DevTools Protocol, for tests of the HTML report.

A small synchronous client on one websocket (``websockets.sync``) with flattened target
sessions: enough to open a page, evaluate script, send real mouse and key events, take
screenshots and watch every request. Every request that is not ``file://`` (or ``data:``)
is failed on the spot and recorded in ``Page.blocked``, so a test can assert the page tried
none; Chromium is also started with a dead proxy and a host resolver that resolves nothing.
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

LOCAL_SCHEMES = ("file:", "data:")
"""URL schemes a self-contained page may load."""

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--metrics-recording-only",
    "--proxy-server=http://127.0.0.1:9",
    "--host-resolver-rules=MAP * ~NOTFOUND",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
)


def chromium_path() -> str | None:
    """The system Chromium, if installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


class CDPError(RuntimeError):
    """A DevTools command answered with an error."""


class Page:
    """One tab, attached through a flattened session of the browser's connection."""

    def __init__(self, browser: Browser, session: str, target: str) -> None:
        self.browser = browser
        self.session = session
        self.target = target
        self.blocked: list[str] = []
        """URLs the page tried to load that are not local (all were failed)."""
        self.requested: list[str] = []
        """Every URL the page requested, local or not."""
        self.errors: list[str] = []
        """Uncaught script exceptions."""

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        return self.browser.send(method, params, self.session)

    def on_event(self, message: dict[str, Any]) -> None:
        method, params = message["method"], message.get("params", {})
        if method == "Fetch.requestPaused":
            url = params["request"]["url"]
            self.requested.append(url)
            if url.startswith(LOCAL_SCHEMES):
                self.browser.post(
                    "Fetch.continueRequest", {"requestId": params["requestId"]}, self.session
                )
            else:
                self.block(url)
                self.browser.post(
                    "Fetch.failRequest",
                    {"requestId": params["requestId"], "errorReason": "BlockedByClient"},
                    self.session,
                )
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(LOCAL_SCHEMES):
                self.block(url)
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.errors.append(details.get("exception", {}).get("description") or details["text"])
        elif method == "Network.webSocketCreated":
            self.block(params["url"])

    def block(self, url: str) -> None:
        if url not in self.blocked:
            self.blocked.append(url)

    def viewport(self, width: int, height: int, mobile: bool = False) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=mobile,
        )

    def open(self, url: str, ready: str = "document.documentElement.dataset.ready === '1'") -> None:
        """Navigate and wait until ``ready`` evaluates true."""
        self.send("Page.navigate", url=url)
        self.wait_for(ready)

    def evaluate(self, expression: str) -> Any:
        reply = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in reply:
            raise CDPError(f"{expression!r}: {reply['exceptionDetails']}")
        return reply["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(
                f"(() => {{ try {{ return {expression}; }} catch (e) {{ return false; }} }})()"
            )
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {expression}")
            self.browser.pump(0.05)

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element (scrolled into view first)."""
        box = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " el.scrollIntoView({block: 'center', inline: 'center'});"
            " const r = el.getBoundingClientRect();"
            " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def press(self, key: str, code: int, text: str | None = None) -> None:
        """A real key press (down, char, up) on the focused element."""
        down: dict[str, Any] = {"key": key, "code": key, "windowsVirtualKeyCode": code}
        self.send("Input.dispatchKeyEvent", type="rawKeyDown", **down)
        if text:
            self.send("Input.dispatchKeyEvent", type="char", text=text, **down)
        self.send("Input.dispatchKeyEvent", type="keyUp", **down)

    def screenshot(self, path: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


class Browser:
    """A headless Chromium process and one DevTools connection to it."""

    def __init__(self, executable: str, profile: Path) -> None:
        self.log = (profile / "chromium.log").open("wb")
        self.process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not (port_file.exists() and len(port_file.read_text().splitlines()) >= 2):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"chromium did not start (see {profile / 'chromium.log'})")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.stack = ExitStack()
        self.ws: ClientConnection = self.stack.enter_context(
            connect(f"ws://127.0.0.1:{port}{path}", max_size=None)
        )
        self.ids = itertools.count(1)
        self.pages: dict[str, Page] = {}
        self.replies: dict[int, dict[str, Any]] = {}

    def post(self, method: str, params: dict[str, Any], session: str | None = None) -> int:
        number = next(self.ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        self.ws.send(json.dumps(message))
        return number

    def _dispatch(self, message: dict[str, Any]) -> None:
        if "id" in message:
            self.replies[message["id"]] = message
        elif message.get("sessionId") in self.pages:
            self.pages[message["sessionId"]].on_event(message)

    def pump(self, seconds: float) -> None:
        """Handle events for ``seconds``."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                self._dispatch(json.loads(self.ws.recv(timeout=left)))
            except TimeoutError:
                return

    def send(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        number = self.post(method, params or {}, session)
        while number not in self.replies:
            self._dispatch(json.loads(self.ws.recv(timeout=60)))
        reply = self.replies.pop(number)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def new_page(self) -> Page:
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"
        ]
        page = Page(self, session, target)
        self.pages[session] = page
        page.send("Fetch.enable", patterns=[{"urlPattern": "*"}])
        page.send("Network.enable")
        page.send("Page.enable")
        page.send("Runtime.enable")
        return page

    def close(self) -> None:
        stack = getattr(self, "stack", None)
        if stack is not None:
            stack.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


@contextmanager
def chromium(executable: str) -> Iterator[Browser]:
    """A headless Chromium for the duration of the block, with a throwaway profile.

    Chromium's helper processes can still be writing to the profile for a moment after
    the browser process has exited, so removing it may race them: what is left then is
    only a temporary folder, not a test failure.
    """
    with tempfile.TemporaryDirectory(
        prefix="aidanbench-chromium-", ignore_cleanup_errors=True
    ) as profile:
        browser = Browser(executable, Path(profile))
        try:
            yield browser
        finally:
            browser.close()

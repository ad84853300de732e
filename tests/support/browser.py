"""Headless Debian chromium for page tests, with the internet made unreachable: every request
that is not to loopback goes to a proxy of ours that answers nothing and writes down what was
asked (chromium sends loopback traffic direct, never through a proxy). A test can then check
both that the page rendered and that it tried to reach nothing outside."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.sync.client import connect

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Background services (updates, safe browsing, sign-in) off: only the page's own requests remain.
QUIET_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-default-apps", "--disable-extensions", "--hide-scrollbars", "--mute-audio")

# Hosts chromium itself calls whatever the page (clock, component updates, sign-in), even with
# the flags above. Exact names: fonts.googleapis.com, say, is a page asset and must be caught.
BROWSER_OWN_HOSTS = frozenset({"clients2.google.com", "update.googleapis.com", "accounts.google.com",
                               "optimizationguide-pa.googleapis.com", "safebrowsing.googleapis.com",
                               "content-autofill.googleapis.com", "redirector.gvt1.com"})


def _host(request_line: str) -> str:
    parts = request_line.split(" ")
    target = parts[1] if len(parts) > 1 else ""
    if parts[0] == "CONNECT":
        return target.rsplit(":", 1)[0]
    return target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]


class ProxyTrap:
    """A loopback proxy that refuses every request and keeps its first line (CONNECT host:443 or
    GET http://host/...)."""

    def __init__(self) -> None:
        self.requests: list[str] = []
        self._server = socket.socket()
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(16)
        self.port = self._server.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    first = conn.recv(4096).split(b"\r\n", 1)[0].decode("latin-1")
                    conn.sendall(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                except OSError:
                    first = "(no request line)"
                self.requests.append(first)

    def page_requests(self) -> list[str]:
        """What was asked of the outside, less chromium's own housekeeping."""
        return [r for r in self.requests if _host(r) not in BROWSER_OWN_HOSTS]

    def close(self) -> None:
        self._server.close()


def run_chromium(url: str, trap: ProxyTrap, *, dump_dom: bool = False, screenshot: Path | None = None,
                 window: tuple[int, int] = (1280, 1400), budget_ms: int = 20000, timeout: float = 120) -> str:
    """Load url offline; return the rendered DOM (dump_dom) or write a PNG (screenshot)."""
    assert CHROMIUM is not None
    profile = tempfile.mkdtemp(prefix="sg-chromium-")
    args = [CHROMIUM, *QUIET_FLAGS, f"--user-data-dir={profile}", f"--proxy-server=http://127.0.0.1:{trap.port}",
            f"--window-size={window[0]},{window[1]}", f"--virtual-time-budget={budget_ms}"]
    if dump_dom:
        args.append("--dump-dom")
    if screenshot is not None:
        args.append(f"--screenshot={screenshot}")
    try:
        done = subprocess.run([*args, url], capture_output=True, timeout=timeout, check=False)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    if done.returncode != 0:
        raise RuntimeError(f"chromium exited with {done.returncode}: {done.stderr.decode()[-500:]}")
    return done.stdout.decode()


class DevToolsPage:
    """Chromium driven over the DevTools protocol, for pages behind HTTP Basic: the browser gets the
    server's real 401 challenge and answers it as a person typing into the prompt would."""

    def __init__(self, trap: ProxyTrap, window: tuple[int, int] = (1280, 1400),
                 credentials: tuple[str, str] | None = None) -> None:
        assert CHROMIUM is not None
        self.credentials = credentials
        self.profile = Path(tempfile.mkdtemp(prefix="sg-chromium-"))
        self.process = subprocess.Popen(
            [CHROMIUM, *QUIET_FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-port=0",
             f"--proxy-server=http://127.0.0.1:{trap.port}", f"--window-size={window[0]},{window[1]}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.close()
                raise RuntimeError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().split("\n")[0])
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10, trust_env=False).json()
        page = next(t for t in targets if t["type"] == "page")
        self.socket = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10, proxy=None)
        self._next_id = 0
        self.loaded = False
        self.call("Page.enable")
        if credentials is not None:
            self.call("Fetch.enable", {"handleAuthRequests": True, "patterns": [{"urlPattern": "*"}]})

    def _handle(self, event: dict[str, Any]) -> None:
        method, params = event.get("method"), event.get("params", {})
        if method == "Fetch.requestPaused":
            self._send("Fetch.continueRequest", {"requestId": params["requestId"]})
        elif method == "Fetch.authRequired":
            assert self.credentials is not None
            user, password = self.credentials
            self._send("Fetch.continueWithAuth", {"requestId": params["requestId"], "authChallengeResponse": {
                "response": "ProvideCredentials", "username": user, "password": password}})
        elif method == "Page.loadEventFired":
            self.loaded = True

    def _send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._next_id += 1
        self.socket.send(json.dumps({"id": self._next_id, "method": method, "params": params or {}}))
        return self._next_id

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> dict[str, Any]:
        wanted = self._send(method, params)
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == wanted:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._handle(message)

    def pump(self, seconds: float) -> None:
        """Serve events (auth, paused requests) for a while."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                self._handle(json.loads(self.socket.recv(timeout=max(0.05, deadline - time.monotonic()))))
            except TimeoutError:
                return

    def open(self, url: str, timeout: float = 60) -> None:
        self.loaded = False
        self.call("Page.navigate", {"url": url})
        deadline = time.monotonic() + timeout
        while not self.loaded:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not load")
            self.pump(0.2)

    def evaluate(self, expression: str) -> Any:
        return self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not self.evaluate(expression):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the page never satisfied {expression}")
            self.pump(0.2)

    def dom(self) -> str:
        return self.evaluate("document.documentElement.outerHTML")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        socket_ = getattr(self, "socket", None)
        if socket_ is not None:
            socket_.close()
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        shutil.rmtree(self.profile, ignore_errors=True)

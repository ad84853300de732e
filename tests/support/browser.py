"""Headless Debian chromium for page tests, with the internet made unreachable: every request
that is not to loopback goes to a proxy of ours that answers nothing and writes down what was
asked (chromium sends loopback traffic direct, never through a proxy). A test can then check
both that the page rendered and that it tried to reach nothing outside."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import threading
from pathlib import Path

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

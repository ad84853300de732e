"""A loopback HTTP proxy in front of the real service that misbehaves on purpose for its first
requests (a status with a Retry-After header, or a stall longer than the client's time-out),
then forwards faithfully. It counts what reached it, so tests see how the client retried."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


@dataclass
class Script:
    failures: list[tuple[int, str | None]] = field(default_factory=list)  # (status, Retry-After) per request
    stall_seconds: float = 0.0  # stall this long on each of the first `stalls` requests
    stalls: int = 0
    seen: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextmanager
def flaky_proxy(upstream: str, script: Script) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
            with script.lock:
                index = len(script.seen)
                script.seen.append(f"{self.command} {self.path}")
            if index < script.stalls:
                time.sleep(script.stall_seconds)
            if index < len(script.failures):
                status, retry_after = script.failures[index]
                payload = b'{"error": "busy", "detail": "try later"}'
                self.send_response(status)
                if retry_after is not None:
                    self.send_header("retry-after", retry_after)
            else:
                r = httpx.request(self.command, upstream + self.path, content=body,
                                  headers={"content-type": "application/json"}, timeout=60)
                status, payload = r.status_code, r.content
                self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client timed out and left
                self.wfile.write(payload)

        do_GET = do_POST = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()

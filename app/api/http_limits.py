"""Bounds on a request's head (request line and headers), below the application: uvicorn's
httptools protocol buffers a URL or a header of any length (each piece appended to the last, so
the copying grows with the square of the length, on the event loop) and waits for the head of a
request for ever, so one anonymous connection could hold hundreds of megabytes and stall every
request, and a few thousand idle or trickling ones (slowloris) could use up the process's file
descriptors. Nothing the application does can help: it sees a request only once its head is in.

``BoundedHttpTools`` is uvicorn's own protocol (passed as ``uvicorn.run(http=...)``, the
documented way to choose one) with two limits, read from the settings:

- a head larger than ``limits.max_header_bytes`` is answered 431 and the connection closed;
- a head not complete within ``limits.header_seconds`` of the connection opening, or of the first
  byte of a later request on it, is answered 408 and the connection closed. An idle keep-alive
  connection between requests is uvicorn's own (``timeout_keep_alive``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.settings import get_settings


def _refusal(status: int, reason: bytes, error: str, detail: str) -> bytes:
    body = json.dumps({"error": error, "detail": detail}).encode()
    return (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        % (status, reason, len(body))
    ) + body


TOO_LARGE = _refusal(
    431, b"Request Header Fields Too Large", "headers_too_large", "the request line and headers are over the size limit"
)
TOO_SLOW = _refusal(408, b"Request Timeout", "request_timeout", "the request line and headers did not arrive in time")


class BoundedHttpTools(HttpToolsProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = get_settings().limits
        self._max_head, self._head_seconds = limits.max_header_bytes, limits.header_seconds
        self._in_head = False  # between a request's first byte (or the connection's start) and its headers' end
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None

    def _start_head(self) -> None:
        self._in_head, self._head_bytes = True, 0
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self._head_seconds, self._head_late)

    def _end_head(self) -> None:
        self._in_head = False
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _refuse(self, response: bytes) -> None:
        self._end_head()
        if not self.transport.is_closing():
            self.transport.write(response)
            self.transport.close()

    def _head_late(self) -> None:
        self._head_timer = None
        if self._in_head:
            self._refuse(TOO_SLOW)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_head()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Counted only for reads that begin inside a head: the read that starts a later request
        # may hold the end of the one before (a pipelined body), which is no part of this head.
        # So a head may run over the limit by at most one read before it is refused.
        counted = self._in_head
        super().data_received(data)
        if counted and self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self._max_head:
                self._refuse(TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_head()

    def on_headers_complete(self) -> None:
        self._end_head()
        super().on_headers_complete()

"""A minimal keep-alive HTTP/1.1 load generator on asyncio streams. httpx costs more CPU per
request than the server under test, which would make every server look alike; this client
does almost nothing per request."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    ok: int = 0
    errors: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    samples: list[tuple[int, float]] = field(default_factory=list)  # (request index, latency)
    statuses: dict[int, int] = field(default_factory=dict)
    server_cpu_per_request: float | None = None  # seconds, when the bench can read the server's CPU time

    @property
    def rps(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0


def request_bytes(host: str, port: int, method: str, path: str, body: object | None,
                  headers: dict[str, str] | None = None) -> bytes:
    payload = b"" if body is None else json.dumps(body).encode()
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: keep-alive"]
    if body is not None:
        lines += ["Content-Type: application/json", f"Content-Length: {len(payload)}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    return status, body


async def run_load(host: str, port: int, make_request: Callable[[int], bytes], *, connections: int,
                   seconds: float | None = None, total: int | None = None,
                   check: Callable[[int, bytes], bool] | None = None) -> LoadResult:
    """Drive `connections` keep-alive clients for `seconds`, or until `total` requests are done."""
    result = LoadResult()
    counter = iter(range(10**12))
    start = time.perf_counter()
    deadline = start + seconds if seconds else float("inf")

    async def client() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < deadline:
                i = next(counter)
                if total is not None and i >= total:
                    return
                t0 = time.perf_counter()
                writer.write(make_request(i))
                status, body = await _read_response(reader)
                elapsed = time.perf_counter() - t0
                result.latencies.append(elapsed)
                result.samples.append((i, elapsed))
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if status == 200 and (check is None or check(i, body)):
                    result.ok += 1
                else:
                    result.errors += 1
        finally:
            writer.close()

    await asyncio.gather(*(client() for _ in range(connections)))
    result.seconds = time.perf_counter() - start
    return result

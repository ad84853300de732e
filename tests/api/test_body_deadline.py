"""A body that stops arriving is cut off with 408 once its deadline passes (the grace plus its
length at the slowest allowed rate), and a large body's slot is given back when it is."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.exceptions import HTTPException

from app.observability import BodyLimitMiddleware


async def reads_body(scope: dict[str, Any], receive: Any, send: Any) -> None:
    try:
        while (await receive()).get("more_body"):
            pass
        status = 200
    except HTTPException as exc:
        status = exc.status_code
    await send({"type": "http.response.start", "status": status, "headers": []})


def stalled_after(chunks: list[bytes]) -> Any:
    pending = list(chunks)

    async def receive() -> dict[str, Any]:
        if pending:
            return {"type": "http.request", "body": pending.pop(0), "more_body": True}
        await asyncio.Event().wait()  # the client went silent
        raise AssertionError("unreachable")

    return receive


def answer(middleware: BodyLimitMiddleware, receive: Any, length: int) -> tuple[int, float]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def run() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        scope = {"type": "http", "path": "/v1/grade/batch",
                 "headers": [(b"content-length", str(length).encode())]}
        await asyncio.wait_for(middleware(scope, receive, send), 10)
        return loop.time() - start

    seconds = asyncio.run(run())
    return sent[0]["status"], seconds


def test_a_stalled_body_gets_408_after_its_deadline() -> None:
    middleware = BodyLimitMiddleware(reads_body, max_bytes=1000, grace_seconds=0.2, min_bytes_per_second=10_000)
    status, seconds = answer(middleware, stalled_after([b" " * 900]), 1000)
    assert status == 408 and seconds >= 0.2  # 0.2 s grace + 1,000 bytes at 10 kB/s


def test_a_stalled_large_body_gives_its_slot_back() -> None:
    middleware = BodyLimitMiddleware(reads_body, max_bytes=100, path_limits={"/v1/grade/batch": 10_000},
                                     large_bodies=1, grace_seconds=0.1, min_bytes_per_second=100_000)
    assert answer(middleware, stalled_after([b" " * 500]), 5000)[0] == 408
    # the only large-body slot is free again: a complete large body goes through
    chunks = [{"type": "http.request", "body": b" " * 500, "more_body": True},
              {"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0)

    assert answer(middleware, receive, 500)[0] == 200


def test_a_wait_for_disconnect_after_the_body_has_no_deadline() -> None:
    # Streaming responses wait on receive() for the client's disconnect once the body is in.
    messages = [{"type": "http.request", "body": b"{}", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(0.5)  # past the deadline below
        return {"type": "http.disconnect"}

    async def waits_for_disconnect(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        status = 200 if (await receive())["type"] == "http.disconnect" else 500
        await send({"type": "http.response.start", "status": status, "headers": []})

    middleware = BodyLimitMiddleware(waits_for_disconnect, max_bytes=1000, grace_seconds=0.1,
                                     min_bytes_per_second=1_000_000)
    assert answer(middleware, receive, 2)[0] == 200

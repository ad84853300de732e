"""The one way to grade without a socket, as docs/trainers.md gives it: a caller that holds the
service's ASGI app hands scaling_book an ``httpx.ASGITransport`` over it (scaling_book itself never
imports the service). Same verdicts as through a real server."""

from __future__ import annotations

import asyncio

import httpx

from app.main import create_app
from scaling_book.client import AsyncGraderClient
from scaling_book.grading import grade_labelled_async
from tests.support.oracle import right, synthetic_tasks, wrong


def _batch() -> tuple[list[str], list[str], list[tuple[str, float]]]:
    tasks = synthetic_tasks(4, seed=97)
    completions = [right(t.id) if i % 2 else wrong(t.id) for i, t in enumerate(tasks)]
    expected = [("correct", 1.0) if i % 2 else ("incorrect", 0.0) for i in range(len(tasks))]
    return [t.id for t in tasks], completions, expected


def test_grading_through_the_apps_asgi_transport_gives_the_servers_verdicts(server_url: str) -> None:
    labels, completions, expected = _batch()

    async def through(client: AsyncGraderClient) -> list[tuple[str, float]]:
        async with client:
            results = await grade_labelled_async(labels, completions, client=client)
        return [(r.outcome, r.reward) for r in results]

    in_process = asyncio.run(through(AsyncGraderClient(transport=httpx.ASGITransport(app=create_app()))))
    served = asyncio.run(through(AsyncGraderClient(server_url)))
    assert in_process == served == expected

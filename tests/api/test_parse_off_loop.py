"""A hostile client's large legal body (many small JSON values, within every size bound) is parsed
on a grading thread a list element at a time: the service keeps answering /healthz while the
parse is in progress, and the refusal that follows is the usual short 4xx.

/healthz is asked of the real application in process (httpx's ASGI transport) while the parse
runs on a grading thread (``off_loop``). How long the loop waits at most is measured by
bench/bench_hostile.py, not here (no timing in tests)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import pytest
from pydantic import ValidationError

from app.api.errors import describe_validation_errors
from app.api.json_budget import outline_json
from app.api.json_pieces import InvalidBody, validate_in_pieces
from app.grading.models import GradeBatchRequest
from app.grading.offload import off_loop
from app.main import create_app
from app.settings import Settings

ROWS = [{"name": "r", "x": i + 0.5} for i in range(1000)]  # about 5,000 JSON values


def _slow_body(n: int) -> bytes:
    """n items of a thousand-row reference each (legal), the last with a completion of the wrong
    type: refused only once every item has been parsed."""
    items = [{"reference": {"rows": ROWS}, "completion": "Final answer: 1 s"} for _ in range(n)]
    items[-1]["completion"] = 5
    return json.dumps({"items": items}).encode()


async def _health_answers_during(client: httpx.AsyncClient, parse: Callable[[], object]) -> int:
    """How many /healthz requests were answered while ``parse`` ran on a grading thread."""
    parsing = asyncio.ensure_future(off_loop(parse))
    answered = 0
    while not parsing.done():
        assert (await client.get("/healthz")).status_code == 200
        answered += not parsing.done()
        # /healthz is async and in-process here: without a pause of its own this loop would never
        # give the event loop a turn to see the parse end
        await asyncio.sleep(0.001)
    with pytest.raises(Exception):  # noqa: B017 - the last item is invalid either way
        parsing.result()
    return answered


@pytest.mark.anyio
async def test_healthz_is_answered_while_a_large_body_is_parsed() -> None:
    settings = Settings()
    raw = _slow_body(200)
    assert len(raw) < settings.limits.batch_request_bytes  # passes the size checks,
    outline = outline_json(raw, settings.limits.max_grades_per_batch)  # and the value budget
    assert len(outline.arrays["items"][1]) == 200  # validated as 200 pieces, plus the envelope
    transport = httpx.ASGITransport(app=create_app(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        await client.get("/healthz")  # the first request builds the middleware stack
        answered = await _health_answers_during(client, lambda: validate_in_pieces(GradeBatchRequest, raw, outline))
    assert answered >= 5, answered


@pytest.mark.anyio
async def test_the_large_body_is_refused_with_the_usual_short_message() -> None:
    raw = _slow_body(200)
    with pytest.raises(InvalidBody) as refused:
        validate_in_pieces(GradeBatchRequest, raw, outline_json(raw, 512))
    transport = httpx.ASGITransport(app=create_app(Settings()))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.post("/v1/grade/batch", content=raw, headers={"content-type": "application/json"})
    with pytest.raises(ValidationError) as whole:  # the oracle: the message the whole body gets
        GradeBatchRequest.model_validate_json(raw)
    expected = describe_validation_errors(list(whole.value.errors(include_input=False)), located=False)
    assert refused.value.errors[0]["loc"][:3] == ("items", 199, "completion")
    assert (answer.status_code, answer.json()["error"], answer.json()["detail"]) == expected
    assert "Traceback" not in answer.text and "Final answer" not in answer.text


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"

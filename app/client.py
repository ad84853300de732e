"""Python clients for the service, on httpx: ``GraderClient`` (sync) and ``AsyncGraderClient``.

Both keep one pooled connection set per client, retry 429/502/503/504, time-outs and dropped
connections with exponential backoff and full jitter (a ``Retry-After`` header wins when the
server sends one), and split long lists into ``/v1/grade/batch`` (or ``/v1/rewards``) chunks
whose results come back in the order given. Results are typed ``GradeResult`` objects.

Numeric and rows grading are deterministic, which makes retrying their POSTs safe. Judge and
impl items are queued: give them a ``request_id`` so that a retried POST finds the job the first
attempt created instead of queueing a second one. A queued item answered with a job id (202, or
a pending entry in a batch) is polled on ``/v1/jobs/{id}`` until its result is ready."""

from __future__ import annotations

import asyncio
import email.utils
import itertools
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.graders.result import GradeResult, Outcome
from app.grading.models import GradeRequest

DEFAULT_URL = "http://127.0.0.1:8000"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
RETRY_ERRORS = (httpx.TimeoutException, httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError)

GradeItem = GradeRequest | Mapping[str, Any]
POLL_WAIT = 30.0  # seconds each job poll blocks on the server (long polling, not a busy loop)


class GraderError(Exception):
    """The service refused a request (4xx), or kept failing after every retry."""

    def __init__(self, status: int | None, error: str, detail: str) -> None:
        super().__init__(f"{status or 'no response'} {error}: {detail}")
        self.status, self.error, self.detail = status, error, detail


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 5
    backoff: float = 0.25  # seconds before the first retry (before jitter)
    max_backoff: float = 20.0
    max_retry_after: float = 60.0  # never sleep longer than this, whatever the server asks

    def delay(self, attempt: int, response: httpx.Response | None, rng: random.Random) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if response is not None and (hinted := retry_after_seconds(response.headers.get("retry-after"))) is not None:
            return min(hinted, self.max_retry_after)
        # Full jitter: many rollout workers retrying at once spread out instead of stampeding.
        return rng.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header (delta seconds or an HTTP date) in seconds, None if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _payload(item: GradeItem) -> dict[str, Any]:
    if isinstance(item, GradeRequest):
        return item.model_dump(mode="json", exclude_none=True)
    return dict(item)


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _error_from(response: httpx.Response) -> GraderError:
    try:
        body = response.json()
        return GraderError(response.status_code, str(body.get("error", "http_error")), str(body.get("detail", "")))
    except ValueError:
        return GraderError(response.status_code, "http_error", response.text[:200])


def _settings_from_env(base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    url = (base_url or os.environ.get("SCALING_GRADER_URL") or DEFAULT_URL).rstrip("/")
    key = api_key or os.environ.get("SCALING_GRADER_API_KEY")
    return url, ({"authorization": f"Bearer {key}"} if key else {})


class _Base:
    def __init__(self, base_url: str | None, api_key: str | None, batch_size: int, retry: RetryPolicy | None,
                 seed: int | None) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.base_url, self._headers = _settings_from_env(base_url, api_key)
        self.batch_size = batch_size
        self.retry = retry or RetryPolicy()
        self._rng = random.Random(seed)

    def _settle(self, attempt: int, response: httpx.Response | None, error: Exception | None) -> tuple[bool, Any]:
        """After one attempt: (True, decoded body) when the call is over, (False, seconds to wait)
        before the next attempt; GraderError when it failed for good."""
        if response is not None and response.status_code < 400:
            return True, response.json()
        retryable = response is None or response.status_code in RETRY_STATUSES
        if attempt >= self.retry.max_retries or not retryable:
            if response is None:
                raise GraderError(None, type(error).__name__, "no response after retries")
            raise _error_from(response)
        return False, self.retry.delay(attempt, response, self._rng)


class GraderClient(_Base):
    """Blocking client. ``with GraderClient(url) as c: c.rewards([...])``."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None, timeout: float = 120.0,
                 batch_size: int = 256, retry: RetryPolicy | None = None, max_connections: int = 32,
                 transport: httpx.BaseTransport | None = None, seed: int | None = None) -> None:
        super().__init__(base_url, api_key, batch_size, retry, seed)
        self._http = httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    def __enter__(self) -> GraderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, json: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        """One call with retries; the decoded JSON body, or GraderError."""
        for attempt in itertools.count():
            response, error = None, None
            try:
                response = self._http.request(method, path, json=json, params=params)
            except RETRY_ERRORS as exc:
                error = exc
            done, value = self._settle(attempt, response, error)
            if done:
                return value
            time.sleep(value)

    def result(self, body: Mapping[str, Any]) -> GradeResult:
        """A grade response as a result, polling the job first if the service queued it (202)."""
        while _is_pending(body):
            view = self.request("GET", f"/v1/jobs/{body['job_id']}", params={"wait": POLL_WAIT})
            if (done := _finished(view)) is not None:
                return done
        return GradeResult.model_validate(body)

    def grade(self, task_id: str | None = None, completion: Any = "", **fields: Any) -> GradeResult:
        body = {"task_id": task_id, "completion": completion, **fields}
        return self.result(self.request("POST", "/v1/grade", _payload(_drop_none(body))))

    def grade_batch(self, items: Sequence[GradeItem]) -> list[GradeResult]:
        results: list[GradeResult] = []
        for chunk in _chunks(items, self.batch_size):
            body = self.request("POST", "/v1/grade/batch", {"items": [_payload(i) for i in chunk]})
            results.extend(self.result(r) for r in body["results"])
        return results

    def rewards(self, items: Sequence[GradeItem]) -> list[float | None]:
        out: list[float | None] = []
        for chunk in _chunks(items, self.batch_size):
            out.extend(self.request("POST", "/v1/rewards", {"items": [_payload(i) for i in chunk]})["rewards"])
        return out

    def tasks(self, split: str = "synthetic", *, seed: int = 0, n: int = 16, offset: int = 0,
              chapters: Sequence[str] | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"split": split, "seed": seed, "n": n, "offset": offset}
        if chapters:
            params["chapters"] = ",".join(chapters)
        return self.request("GET", "/v1/tasks", params=params)["tasks"]


class AsyncGraderClient(_Base):
    """Asyncio client; chunks of a long list are sent concurrently (at most ``concurrency`` at once)."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None, timeout: float = 120.0,
                 batch_size: int = 256, concurrency: int = 8, retry: RetryPolicy | None = None,
                 max_connections: int = 32, transport: httpx.AsyncBaseTransport | None = None,
                 seed: int | None = None) -> None:
        super().__init__(base_url, api_key, batch_size, retry, seed)
        self._semaphore = asyncio.Semaphore(concurrency)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )

    async def __aenter__(self) -> AsyncGraderClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, json: Any = None,
                      params: Mapping[str, Any] | None = None) -> Any:
        for attempt in itertools.count():
            response, error = None, None
            try:
                async with self._semaphore:
                    response = await self._http.request(method, path, json=json, params=params)
            except RETRY_ERRORS as exc:
                error = exc
            done, value = self._settle(attempt, response, error)
            if done:
                return value
            await asyncio.sleep(value)

    async def result(self, body: Mapping[str, Any]) -> GradeResult:
        while _is_pending(body):
            view = await self.request("GET", f"/v1/jobs/{body['job_id']}", params={"wait": POLL_WAIT})
            if (done := _finished(view)) is not None:
                return done
        return GradeResult.model_validate(body)

    async def grade(self, task_id: str | None = None, completion: Any = "", **fields: Any) -> GradeResult:
        body = {"task_id": task_id, "completion": completion, **fields}
        return await self.result(await self.request("POST", "/v1/grade", _payload(_drop_none(body))))

    async def grade_batch(self, items: Sequence[GradeItem]) -> list[GradeResult]:
        async def chunk(part: Sequence[GradeItem]) -> list[GradeResult]:
            body = await self.request("POST", "/v1/grade/batch", {"items": [_payload(i) for i in part]})
            return list(await asyncio.gather(*(self.result(r) for r in body["results"])))

        parts = await asyncio.gather(*(chunk(p) for p in _chunks(items, self.batch_size)))
        return [r for part in parts for r in part]

    async def rewards(self, items: Sequence[GradeItem]) -> list[float | None]:
        async def chunk(part: Sequence[GradeItem]) -> list[float | None]:
            body = await self.request("POST", "/v1/rewards", {"items": [_payload(i) for i in part]})
            return body["rewards"]

        parts = await asyncio.gather(*(chunk(p) for p in _chunks(items, self.batch_size)))
        return [r for part in parts for r in part]


def _is_pending(body: Mapping[str, Any]) -> bool:
    return "job_id" in body and "outcome" not in body


def _finished(view: Mapping[str, Any]) -> GradeResult | None:
    """The job's result once it has one; a failed job without one is an unscored error."""
    if view.get("result") is not None:
        return GradeResult.model_validate(view["result"])
    if view.get("status") == "failed":
        return GradeResult(grading="unknown", outcome=Outcome.error, reward=0.0,
                           explanation=f"job {view.get('job_id')} failed without a result")
    return None


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}

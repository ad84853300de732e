"""Python clients for the service, on httpx: ``GraderClient`` (sync) and ``AsyncGraderClient``.

Both keep one pooled connection set per client and per process (a forked child opens its own
instead of sharing the parent's sockets, whose bytes the two would interleave), retry 429/502/503/504,
every network fault (time-outs, refused or dropped connections, a reply cut or garbled so that its
JSON does not decode) with exponential backoff and full jitter (a ``Retry-After`` header wins when
the server sends one) for up to ``RetryPolicy.deadline`` seconds in all, the attempt in flight
included (120 by default, the per-request timeout: long enough to ride out a service restart),
raise every other failure as a ``GraderError`` (never a raw httpx or JSON exception, never with
the key or URL in its message), and split long lists into ``/v1/grade/batch`` (or
``/v1/rewards``, ``/v1/grade/labelled``) chunks whose results come back in the order given. A
chunk the service refuses for its size (more items than the tenant's burst or the service's cap,
or too many bytes) is halved until it passes; a reply with more or fewer verdicts than the chunk
had items is a ``GraderError``, never rewards shifted onto other samples.
Results are ``scaling_book.results.GradeResult`` objects.

Numeric and rows grading are deterministic, which makes retrying their POSTs safe. Judge and
impl items are queued: give them a ``request_id`` so that a retried POST finds the job the first
attempt created instead of queueing a second one. A queued item answered with a job id (202, or
a pending entry in a batch) is polled on ``/v1/jobs/{id}`` until its result is ready."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import itertools
import os
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from scaling_book.results import GradeResult, unscored

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 120.0  # seconds per request
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Faults of the network or of a (restarting) server: worth another attempt. Any other httpx error
# (a malformed URL, a local protocol error) fails at once, as a GraderError.
RETRY_ERRORS = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

# A grade request: a mapping of its JSON fields, or any object with pydantic's model_dump (the
# service's own GradeRequest).
GradeItem = Any
POLL_WAIT = 30.0  # seconds each job poll blocks on the server (long polling, not a busy loop)


class GraderError(Exception):
    """The service refused a request (4xx), or kept failing after every retry."""

    def __init__(self, status: int | None, error: str, detail: str) -> None:
        super().__init__(f"{status or 'no response'} {error}: {detail}")
        self.status, self.error, self.detail = status, error, detail


@dataclass(frozen=True)
class RetryPolicy:
    """When to give up: after ``deadline`` seconds from the first attempt (the retries then
    ride out an ordinary restart of the service), or after ``max_retries`` retries."""

    # seconds, all attempts and waits together: an attempt in flight gets at most what is left.
    # As long as the default per-request timeout, so that the first attempt keeps all of it.
    deadline: float = 120.0
    max_retries: int = 1000
    backoff: float = 0.25  # seconds before the first retry (before jitter)
    max_backoff: float = 4.0  # short enough that a restarted service is found within seconds
    max_retry_after: float = 60.0  # never sleep longer than this, whatever the server asks

    def delay(self, attempt: int, response: httpx.Response | None, rng: random.Random) -> float:
        """Seconds to wait before retry number ``attempt`` (0-based)."""
        if response is not None and (hinted := retry_after_seconds(response.headers.get("retry-after"))) is not None:
            # At least what the server asked, plus a little jitter so a crowd told the same
            # number of seconds does not come back in one burst.
            return min(self.max_retry_after, hinted + rng.uniform(0, min(1.0, 0.1 * hinted)))
        # Full jitter: many rollout workers retrying at once spread out instead of stampeding.
        return rng.uniform(0, min(self.max_backoff, self.backoff * 2**attempt))


class CorruptReply(Exception):
    """A 2xx reply whose body is not the JSON it must be: garbled in transit, so retried."""


@dataclass(frozen=True)
class ClientOptions:
    """How a trainer helper reaches the service, the same arguments on every helper: the tenant's
    ``api_key`` (else $SCALING_GRADER_API_KEY), the per-request ``timeout``, the total ``deadline``
    of one call's retries and ``headers`` added to every request. Hashable, so helpers keep one
    client per (URL, options): two tenants on one URL get two clients, never each other's key."""

    api_key: str | None = field(default=None, repr=False)
    timeout: float | None = None
    deadline: float | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def of(cls, api_key: str | None = None, timeout: float | None = None, deadline: float | None = None,
           headers: Mapping[str, str] | None = None) -> ClientOptions:
        # seconds as numbers: a config interpolated from the environment (verl's ${oc.env:...}) gives text
        timeout, deadline = (None if x is None else float(x) for x in (timeout, deadline))
        if any(seconds is not None and not seconds > 0 for seconds in (timeout, deadline)):
            raise ValueError("timeout and deadline must be positive seconds")
        pairs = tuple(sorted((str(k), str(v)) for k, v in (headers or {}).items()))
        return cls(api_key or None, timeout, deadline, pairs)

    def sync_client(self, url: str) -> GraderClient:
        return GraderClient(url, api_key=self.api_key, timeout=self.timeout or DEFAULT_TIMEOUT,
                            retry_deadline=self.deadline, headers=dict(self.headers))

    def async_client(self, url: str) -> AsyncGraderClient:
        return AsyncGraderClient(url, api_key=self.api_key, timeout=self.timeout or DEFAULT_TIMEOUT,
                                 retry_deadline=self.deadline, headers=dict(self.headers))


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
    if hasattr(item, "model_dump"):
        return dict(item.model_dump(mode="json", exclude_none=True))
    return dict(item)


def _chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _error_from(response: httpx.Response) -> GraderError:
    try:
        body = response.json()
        if not isinstance(body, dict):
            raise ValueError("not an error object")
        return GraderError(response.status_code, str(body.get("error", "http_error")), str(body.get("detail", "")))
    except ValueError:
        return GraderError(response.status_code, "http_error", response.text[:200])


def _settings_from_env(base_url: str | None, api_key: str | None,
                       headers: Mapping[str, str] | None = None) -> tuple[str, dict[str, str]]:
    url = (base_url or os.environ.get("SCALING_GRADER_URL") or DEFAULT_URL).rstrip("/")
    # A key read from a file or a secret often ends with a newline, which no header may carry
    # (every request would fail as an unexplained protocol error): whitespace is no part of a key.
    key = str(api_key or os.environ.get("SCALING_GRADER_API_KEY") or "").strip()
    sent = {**(headers or {}), **({"authorization": f"Bearer {key}"} if key else {})}
    for name, value in sent.items():
        if not (str(value).isascii() and str(value).isprintable()):
            what = "the API key" if name == "authorization" and key else f"header {str(name)[:40]!r}"
            raise ValueError(f"{what} holds a character no HTTP header can carry (only printable ASCII): "
                             "check how it was set (a pasted quote, a line break)")
    return url, sent


def _labelled_items(labels: Sequence[Any], completions: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"label": label, "completion": completion} for label, completion in zip(labels, completions, strict=True)]


def _given(options: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if v is not None}


def _too_big(refused: GraderError) -> bool:
    """Whether the service refused a batch for its size alone (its bytes, more items than the
    tenant's burst or than the service takes at once): the same items pass in smaller requests."""
    return refused.status == 413 or refused.error == "batch_exceeds_burst" or (
        refused.status == 422 and "items per" in refused.detail)


def _entries(body: Any, key: str, n: int) -> list[Any]:
    """The ``key`` list of a batch reply, which must hold one entry per item sent: a list of
    another length cannot say which verdict is whose, so it is an error, never rewards on the
    wrong samples."""
    entries = body.get(key) if isinstance(body, dict) else None
    if not isinstance(entries, list) or len(entries) != n:
        got = len(entries) if isinstance(entries, list) else "no"
        raise GraderError(None, "malformed_reply", f"the service answered {n} items with {got} verdicts")
    return entries


class _Base:
    def __init__(self, base_url: str | None, api_key: str | None, batch_size: int, retry: RetryPolicy | None,
                 seed: int | None, retry_deadline: float | None, headers: Mapping[str, str] | None,
                 timeout: float) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be positive")
        self.base_url, self._headers = _settings_from_env(base_url, api_key, headers)
        self.timeout = timeout
        self._pid = os.getpid()
        self.batch_size = batch_size
        self.retry = retry or RetryPolicy()
        if retry_deadline is not None:
            self.retry = dataclasses.replace(self.retry, deadline=retry_deadline)
        elif retry is None and timeout > self.retry.deadline:
            # A longer per-request timeout and no deadline given: the first attempt keeps all of it.
            self.retry = dataclasses.replace(self.retry, deadline=timeout)
        self._rng = random.Random(seed)

    def _attempt_timeout(self, started: float) -> float:
        """An attempt's time-out: the per-request one, or what is left of the deadline if less."""
        return max(0.001, min(self.timeout, self.retry.deadline - (time.monotonic() - started)))

    def _poll_params(self) -> dict[str, float]:
        """How long a job poll asks the server to hold it: well inside the attempt's time-out."""
        return {"wait": min(POLL_WAIT, self.timeout / 2, self.retry.deadline / 2)}

    def _settle(self, attempt: int, started: float, response: httpx.Response | None,
                error: Exception | None, faults: list[str], cut_short: bool) -> tuple[bool, Any]:
        """After one attempt: (True, decoded body) when the call is over, (False, seconds to wait)
        before the next attempt; GraderError when it failed for good. ``faults`` collects the
        call's network faults; ``cut_short``: the deadline, not ``timeout``, bounded this attempt."""
        if response is not None and response.status_code < 400:
            try:
                return True, response.json()
            except ValueError:
                response, error = None, CorruptReply()
        if response is None:
            faults.append(type(error).__name__)
        retryable = response is None or response.status_code in RETRY_STATUSES
        left = self.retry.deadline - (time.monotonic() - started)
        if attempt >= self.retry.max_retries or not retryable or left <= 0:
            if response is None:
                # A last attempt the deadline cut short says nothing: name the fault before it.
                fault = faults[-2] if cut_short and isinstance(error, httpx.TimeoutException) and len(faults) > 1 \
                    else faults[-1]
                raise GraderError(None, fault, f"no usable response after {attempt + 1} attempts")
            raise _error_from(response)
        return False, min(self.retry.delay(attempt, response, self._rng), left)


class GraderClient(_Base):
    """Blocking client. ``with GraderClient(url) as c: c.rewards([...])``."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None, timeout: float = 120.0,
                 batch_size: int = 256, retry: RetryPolicy | None = None, max_connections: int = 32,
                 transport: httpx.BaseTransport | None = None, seed: int | None = None,
                 retry_deadline: float | None = None, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(base_url, api_key, batch_size, retry, seed, retry_deadline, headers, timeout)
        self._new_http: Callable[[], httpx.Client] = lambda: httpx.Client(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self._http = self._new_http()

    def _session(self) -> httpx.Client:
        """This process's connections: a forked child drops the parent's pool unclosed (closing it
        would shut sockets the parent still uses) and opens its own."""
        if self._pid != os.getpid():
            self._http, self._pid = self._new_http(), os.getpid()
        return self._http

    def __enter__(self) -> GraderClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, json: Any = None, params: Mapping[str, Any] | None = None) -> Any:
        """One call with retries; the decoded JSON body, or GraderError."""
        started, faults = time.monotonic(), list[str]()
        for attempt in itertools.count():
            response, error = None, None
            budget = self._attempt_timeout(started)
            try:
                response = self._session().request(method, path, json=json, params=params, timeout=budget)
            except RETRY_ERRORS as exc:
                error = exc
            except httpx.HTTPError as exc:
                raise GraderError(None, type(exc).__name__, "the request could not be sent") from None
            done, value = self._settle(attempt, started, response, error, faults, budget < self.timeout)
            if done:
                return value
            time.sleep(value)

    def result(self, body: Mapping[str, Any]) -> GradeResult:
        """A grade response as a result, polling the job first if the service queued it (202)."""
        while _is_pending(body):
            view = self.request("GET", f"/v1/jobs/{body['job_id']}", params=self._poll_params())
            if (done := _finished(view)) is not None:
                return done
        return GradeResult.from_json(body)

    def grade(self, task_id: str | None = None, completion: Any = "", **fields: Any) -> GradeResult:
        body = {"task_id": task_id, "completion": completion, **fields}
        return self.result(self.request("POST", "/v1/grade", _payload(_drop_none(body))))

    def _post_items(self, path: str, key: str, items: Sequence[dict[str, Any]],
                    extra: Mapping[str, Any] | None = None) -> list[Any]:
        """POST one chunk: its ``key`` list, one entry per item, halving a chunk refused for its size."""
        try:
            body = self.request("POST", path, {"items": list(items), **(extra or {})})
        except GraderError as refused:
            if len(items) < 2 or not _too_big(refused):
                raise
            half = len(items) // 2
            return self._post_items(path, key, items[:half], extra) + self._post_items(path, key, items[half:], extra)
        return _entries(body, key, len(items))

    def grade_batch(self, items: Sequence[GradeItem]) -> list[GradeResult]:
        results: list[GradeResult] = []
        for chunk in _chunks(items, self.batch_size):
            results.extend(self.result(r) for r in self._post_items("/v1/grade/batch", "results",
                                                                     [_payload(i) for i in chunk]))
        return results

    def rewards(self, items: Sequence[GradeItem]) -> list[float | None]:
        out: list[float | None] = []
        for chunk in _chunks(items, self.batch_size):
            out.extend(self._post_items("/v1/rewards", "rewards", [_payload(i) for i in chunk]))
        return out

    def tasks(self, split: str = "synthetic", *, seed: int = 0, n: int = 16, offset: int = 0,
              chapters: Sequence[str] | None = None) -> list[dict[str, Any]]:
        tasks: list[dict[str, Any]] = self.request("GET", "/v1/tasks",
                                                   params=_task_params(split, seed, n, offset, chapters))["tasks"]
        return tasks

    def grade_labelled(self, labels: Sequence[Any], completions: Sequence[Any], **options: Any) -> list[GradeResult]:
        """Grade completions against trainer labels (task ids, quantities, references: see
        POST /v1/grade/labelled); an unreadable label is that item's unscored result."""
        out: list[GradeResult] = []
        for chunk in _chunks(_labelled_items(labels, completions), self.batch_size):
            out.extend(GradeResult.from_json(r)
                       for r in self._post_items("/v1/grade/labelled", "results", chunk, _given(options)))
        return out


class AsyncGraderClient(_Base):
    """Asyncio client; chunks of a long list are sent concurrently (at most ``concurrency`` at once)."""

    def __init__(self, base_url: str | None = None, *, api_key: str | None = None, timeout: float = 120.0,
                 batch_size: int = 256, concurrency: int = 8, retry: RetryPolicy | None = None,
                 max_connections: int = 32, transport: httpx.AsyncBaseTransport | None = None,
                 seed: int | None = None, retry_deadline: float | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(base_url, api_key, batch_size, retry, seed, retry_deadline, headers, timeout)
        self._semaphore = asyncio.Semaphore(concurrency)
        self._new_http: Callable[[], httpx.AsyncClient] = lambda: httpx.AsyncClient(
            base_url=self.base_url, headers=self._headers, timeout=timeout, transport=transport,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self._concurrency = concurrency
        self._http = self._new_http()
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop its connections belong to

    def _session(self) -> httpx.AsyncClient:
        """As GraderClient._session: a forked child's own connections (and its own semaphore); and
        a new event loop's (two asyncio.run calls): pooled connections belong to the loop that
        opened them, and reused from another they fail with "Event loop is closed"."""
        loop = asyncio.get_running_loop()
        if self._pid != os.getpid() or (self._loop is not None and self._loop is not loop):
            self._http, self._pid = self._new_http(), os.getpid()
            self._semaphore = asyncio.Semaphore(self._concurrency)
        self._loop = loop
        return self._http

    async def __aenter__(self) -> AsyncGraderClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def request(self, method: str, path: str, json: Any = None,
                      params: Mapping[str, Any] | None = None) -> Any:
        started, faults = time.monotonic(), list[str]()
        for attempt in itertools.count():
            response, error, budget = None, None, self.timeout
            try:
                http = self._session()
                async with self._semaphore:  # the deadline keeps running while a slot is awaited
                    budget = self._attempt_timeout(started)
                    response = await http.request(method, path, json=json, params=params, timeout=budget)
            except RETRY_ERRORS as exc:
                error = exc
            except httpx.HTTPError as exc:
                raise GraderError(None, type(exc).__name__, "the request could not be sent") from None
            done, value = self._settle(attempt, started, response, error, faults, budget < self.timeout)
            if done:
                return value
            await asyncio.sleep(value)

    async def result(self, body: Mapping[str, Any]) -> GradeResult:
        while _is_pending(body):
            view = await self.request("GET", f"/v1/jobs/{body['job_id']}", params=self._poll_params())
            if (done := _finished(view)) is not None:
                return done
        return GradeResult.from_json(body)

    async def grade(self, task_id: str | None = None, completion: Any = "", **fields: Any) -> GradeResult:
        body = {"task_id": task_id, "completion": completion, **fields}
        return await self.result(await self.request("POST", "/v1/grade", _payload(_drop_none(body))))

    async def _post_items(self, path: str, key: str, items: Sequence[dict[str, Any]],
                          extra: Mapping[str, Any] | None = None) -> list[Any]:
        """As GraderClient._post_items; the halves of a refused chunk go out concurrently."""
        try:
            body = await self.request("POST", path, {"items": list(items), **(extra or {})})
        except GraderError as refused:
            if len(items) < 2 or not _too_big(refused):
                raise
            half = len(items) // 2
            first, second = await asyncio.gather(self._post_items(path, key, items[:half], extra),
                                                 self._post_items(path, key, items[half:], extra))
            return first + second
        return _entries(body, key, len(items))

    async def grade_batch(self, items: Sequence[GradeItem]) -> list[GradeResult]:
        async def chunk(part: Sequence[GradeItem]) -> list[GradeResult]:
            replies = await self._post_items("/v1/grade/batch", "results", [_payload(i) for i in part])
            return list(await asyncio.gather(*(self.result(r) for r in replies)))

        parts = await asyncio.gather(*(chunk(p) for p in _chunks(items, self.batch_size)))
        return [r for part in parts for r in part]

    async def rewards(self, items: Sequence[GradeItem]) -> list[float | None]:
        parts = await asyncio.gather(*(self._post_items("/v1/rewards", "rewards", [_payload(i) for i in part])
                                       for part in _chunks(items, self.batch_size)))
        return [r for part in parts for r in part]

    async def tasks(self, split: str = "synthetic", *, seed: int = 0, n: int = 16, offset: int = 0,
                    chapters: Sequence[str] | None = None) -> list[dict[str, Any]]:
        body = await self.request("GET", "/v1/tasks", params=_task_params(split, seed, n, offset, chapters))
        tasks: list[dict[str, Any]] = body["tasks"]
        return tasks

    async def grade_labelled(self, labels: Sequence[Any], completions: Sequence[Any],
                             **options: Any) -> list[GradeResult]:
        async def chunk(part: Sequence[dict[str, Any]]) -> list[GradeResult]:
            replies = await self._post_items("/v1/grade/labelled", "results", part, _given(options))
            return [GradeResult.from_json(r) for r in replies]

        parts = await asyncio.gather(*(chunk(p) for p in _chunks(_labelled_items(labels, completions),
                                                                 self.batch_size)))
        return [r for part in parts for r in part]


def _task_params(split: str, seed: int, n: int, offset: int, chapters: Sequence[str] | None) -> dict[str, Any]:
    params: dict[str, Any] = {"split": split, "seed": seed, "n": n, "offset": offset}
    if chapters:
        params["chapters"] = ",".join(chapters)
    return params


def _is_pending(body: Mapping[str, Any]) -> bool:
    return "job_id" in body and "outcome" not in body


def _finished(view: Mapping[str, Any]) -> GradeResult | None:
    """The job's result once it has one; a failed job without one is an unscored error."""
    if view.get("result") is not None:
        return GradeResult.from_json(view["result"])
    if view.get("status") == "failed":
        return unscored(f"job {view.get('job_id')} failed without a result")
    return None


def _drop_none(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if v is not None}

"""Grade a list of requests through the service (when a URL is known) or in this process (when
none is): the one switch every trainer adapter shares. Local grading runs the same
``GradingService`` the API runs, so both paths give the same reward for the same item."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Awaitable, Sequence
from functools import lru_cache
from typing import Any

from app.client import AsyncGraderClient, GraderClient
from app.graders.result import GradeResult
from app.grading.labels import in_order, pending, requests_for, settle
from app.grading.models import GradeRequest
from app.grading.service import GradingService
from app.jobs.embedded import EmbeddedJobs
from app.settings import Settings

URL_ENV = "SCALING_GRADER_URL"


def service_url(explicit: str | None = None) -> str | None:
    """The service to call: an explicit URL, else $SCALING_GRADER_URL, else None (grade locally)."""
    return explicit or os.environ.get(URL_ENV) or None


def judge_settings(judge_model: str | None, judge_base_url: str | None,
                   judge_api_key_var: str | None) -> dict[str, Any] | None:
    """Settings overrides letting in-process grading reach the judge given here (and only it)."""
    if not judge_model:
        return None
    return {"judge": {"default_model": judge_model, "default_base_url": judge_base_url,
                      "allowed_base_urls": [judge_base_url] if judge_base_url else [],
                      "api_key_env": judge_api_key_var}}


# One pooled client per (URL, thread): httpx clients are not meant to be shared across the
# threads a trainer's reward workers may run in.
_local = threading.local()


def sync_client(url: str) -> GraderClient:
    clients: dict[str, GraderClient] = _local.__dict__.setdefault("clients", {})
    if url not in clients:
        clients[url] = GraderClient(url)
    return clients[url]


# Async clients are bound to the event loop they were made in: one per (loop, URL), dropped
# with the loop, so that a reward function called per rollout reuses its connections.
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, AsyncGraderClient]] = (
    weakref.WeakKeyDictionary()
)


def async_client(url: str) -> AsyncGraderClient:
    per_loop = _async_clients.setdefault(asyncio.get_running_loop(), {})
    if url not in per_loop:
        per_loop[url] = AsyncGraderClient(url)
    return per_loop[url]


@lru_cache(maxsize=4)
def _service(settings_json: str) -> GradingService:
    settings = Settings.model_validate_json(settings_json)
    # In this process: queued kinds (judge, impl) run on its threads too, whatever Redis is configured.
    return GradingService(settings, EmbeddedJobs(settings))


def local_service(settings_overrides: dict[str, Any] | None = None) -> GradingService:
    """The in-process GradingService (cached per settings), for grading without a server."""
    return _service(Settings(**(settings_overrides or {})).model_dump_json())


async def _settled(job: Awaitable[Sequence[Any]]) -> list[GradeResult]:
    return settle(await job)


def grade_requests(requests: Sequence[GradeRequest], url: str | None = None,
                   settings_overrides: dict[str, Any] | None = None) -> list[GradeResult]:
    """Grade in order, blocking; through the service if a URL is known, else in-process."""
    if not requests:
        return []
    url = service_url(url)
    if url:
        return sync_client(url).grade_batch(requests)
    job = _settled(local_service(settings_overrides).grade_many(requests))
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(job)
    # Called from inside an event loop (a notebook, an async trainer): grade on a helper thread.
    box: list[list[GradeResult]] = []
    thread = threading.Thread(target=lambda: box.append(asyncio.run(job)))
    thread.start()
    thread.join()
    return box[0]


async def grade_requests_async(requests: Sequence[GradeRequest], url: str | None = None,
                               settings_overrides: dict[str, Any] | None = None,
                               client: AsyncGraderClient | None = None) -> list[GradeResult]:
    if not requests:
        return []
    url = service_url(url)
    if client is not None:
        return await client.grade_batch(requests)
    if url:
        return await async_client(url).grade_batch(requests)
    return await _settled(local_service(settings_overrides).grade_many(requests))


def grade_labelled(labels: Sequence[Any], completions: Sequence[Any], url: str | None = None,
                   settings_overrides: dict[str, Any] | None = None, **options: Any) -> list[GradeResult]:
    """Grade (label, completion) pairs in order; an unreadable label is an unscored item."""
    slots = requests_for(zip(labels, completions, strict=True), **options)
    return in_order(slots, grade_requests(pending(slots), url, settings_overrides))


async def grade_labelled_async(labels: Sequence[Any], completions: Sequence[Any], url: str | None = None,
                               settings_overrides: dict[str, Any] | None = None,
                               client: AsyncGraderClient | None = None, **options: Any) -> list[GradeResult]:
    slots = requests_for(zip(labels, completions, strict=True), **options)
    return in_order(slots, await grade_requests_async(pending(slots), url, settings_overrides, client))

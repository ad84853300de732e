"""Grade labelled completions through the service (when a URL is known) or in this process (when
none is): the one switch every trainer helper shares.

Through the service, a whole batch is one ``POST /v1/grade/labelled`` (chunked past the client's
batch size); labels are read by the service, so an unreadable label, or a judge item on a service
without a judge, is that item's unscored result, never a failed batch. In-process grading runs the
service's own ``GradingService`` and needs the service package installed beside this one."""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from scaling_book.client import AsyncGraderClient, ClientOptions, GraderClient
from scaling_book.results import GradeResult

URL_ENV = "SCALING_GRADER_URL"


def service_url(explicit: str | None = None) -> str | None:
    """The service to call: an explicit URL, else $SCALING_GRADER_URL, else None (grade locally)."""
    return explicit or os.environ.get(URL_ENV) or None


NO_OPTIONS = ClientOptions()
ClientKey = tuple[str, ClientOptions]

# One pooled client per (URL, options, thread): httpx clients are not meant to be shared across
# the threads a trainer's reward workers may run in, and two tenants on one URL need two clients.
_per_thread = threading.local()


def sync_client(url: str, options: ClientOptions = NO_OPTIONS) -> GraderClient:
    clients: dict[ClientKey, GraderClient] = _per_thread.__dict__.setdefault("clients", {})
    if (url, options) not in clients:
        clients[url, options] = options.sync_client(url)
    return clients[url, options]


# Async clients are bound to the event loop they were made in: one per (loop, URL, options),
# dropped with the loop, so that a reward function called per rollout reuses its connections.
_async_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[ClientKey, AsyncGraderClient]] = (
    weakref.WeakKeyDictionary()
)


def async_client(url: str, options: ClientOptions = NO_OPTIONS) -> AsyncGraderClient:
    per_loop = _async_clients.setdefault(asyncio.get_running_loop(), {})
    if (url, options) not in per_loop:
        per_loop[url, options] = options.async_client(url)
    return per_loop[url, options]


def _forget_clients_in_child() -> None:
    """A forked child (verl's prime manager forks, so do multiprocessing pools) starts with no
    cached client: the parent's would share its sockets. Each client also checks its pid."""
    global _per_thread, _async_clients
    _per_thread = threading.local()
    _async_clients = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_forget_clients_in_child)


def _service_side() -> Any:
    try:
        from app.integrations import grading
    except ImportError as exc:
        raise ImportError(
            "no grading service URL (give one, or set $SCALING_GRADER_URL), and in-process grading needs "
            "the service package installed beside this one (pip install <repository root>)"
        ) from exc
    return grading


async def _grade_in_process(labels: Sequence[Any], completions: Sequence[Any],
                            overrides: dict[str, Any] | None, options: dict[str, Any]) -> list[GradeResult]:
    results = await _service_side().grade_labelled_locally(labels, completions, overrides, **options)
    return [GradeResult.from_json(r.model_dump(mode="json")) for r in results]


def grade_labelled(labels: Sequence[Any], completions: Sequence[Any], url: str | None = None,
                   settings_overrides: dict[str, Any] | None = None, client_options: ClientOptions = NO_OPTIONS,
                   **options: Any) -> list[GradeResult]:
    """Grade (label, completion) pairs in order, blocking. ``options``: tolerance,
    all_or_nothing, partial_credit, judge ({model, base_url}); ``client_options``: how the
    service is reached (key, time-outs, headers)."""
    if len(labels) != len(completions):
        raise ValueError(f"{len(labels)} labels for {len(completions)} completions")
    if not labels:
        return []
    url = service_url(url)
    if url:
        return sync_client(url, client_options).grade_labelled(list(labels), list(completions), **options)
    job = _grade_in_process(labels, completions, settings_overrides, options)
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


async def grade_labelled_async(labels: Sequence[Any], completions: Sequence[Any], url: str | None = None,
                               settings_overrides: dict[str, Any] | None = None,
                               client: AsyncGraderClient | None = None,
                               client_options: ClientOptions = NO_OPTIONS, **options: Any) -> list[GradeResult]:
    if len(labels) != len(completions):
        raise ValueError(f"{len(labels)} labels for {len(completions)} completions")
    if not labels:
        return []
    url = service_url(url)
    if client is None and url:
        client = async_client(url, client_options)
    if client is not None:
        return await client.grade_labelled(list(labels), list(completions), **options)
    return await _grade_in_process(labels, completions, settings_overrides, options)

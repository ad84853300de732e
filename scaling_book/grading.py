"""Grade labelled completions through the service: the one path every trainer helper shares.

A whole batch is one ``POST /v1/grade/labelled`` (chunked past the client's batch size); labels
are read by the service, so an unreadable label, or a judge item on a service without a judge, is
that item's unscored result, never a failed batch. There is no in-process mode: this package talks
HTTP only, so that it needs httpx and nothing of the service. A caller holding the service's ASGI
app can still grade without a socket by passing ``client=AsyncGraderClient(transport=
httpx.ASGITransport(app=...))``."""

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


class NoServiceURL(ValueError):
    """No service to grade with: neither a URL nor $SCALING_GRADER_URL."""

    def __init__(self) -> None:
        super().__init__(f"no grading service URL: give one, or set ${URL_ENV} "
                         "(`scaling-grader serve` runs one on this machine)")


def service_url(explicit: str | None = None) -> str | None:
    """The service to call: an explicit URL, else $SCALING_GRADER_URL, else None."""
    return explicit or os.environ.get(URL_ENV) or None


def required_service_url(explicit: str | None = None) -> str:
    """As ``service_url``, but NoServiceURL when there is none."""
    url = service_url(explicit)
    if url is None:
        raise NoServiceURL()
    return url


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


def grade_labelled(labels: Sequence[Any], completions: Sequence[Any], url: str | None = None,
                   client_options: ClientOptions = NO_OPTIONS, **options: Any) -> list[GradeResult]:
    """Grade (label, completion) pairs in order, blocking. ``options``: tolerance,
    all_or_nothing, partial_credit, judge ({model, base_url}); ``client_options``: how the
    service is reached (key, time-outs, headers)."""
    if len(labels) != len(completions):
        raise ValueError(f"{len(labels)} labels for {len(completions)} completions")
    if not labels:
        return []
    client = sync_client(required_service_url(url), client_options)
    return client.grade_labelled(list(labels), list(completions), **options)


async def grade_labelled_async(labels: Sequence[Any], completions: Sequence[Any], url: str | None = None,
                               client: AsyncGraderClient | None = None,
                               client_options: ClientOptions = NO_OPTIONS, **options: Any) -> list[GradeResult]:
    if len(labels) != len(completions):
        raise ValueError(f"{len(labels)} labels for {len(completions)} completions")
    if not labels:
        return []
    if client is None:
        client = async_client(required_service_url(url), client_options)
    return await client.grade_labelled(list(labels), list(completions), **options)

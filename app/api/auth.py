"""Bearer-key authentication and per-tenant rate limits, as a pure ASGI middleware (it runs on
every request, the grading hot path included). Health endpoints stay open so orchestrators can
probe them; without a tenants file every request is the local user's.

Browsers cannot add a bearer header, so the key is also accepted as the password of HTTP Basic
credentials (any user name); pages people open (the status page, the docs) challenge for them,
the browser asks once and then sends them with every request of the page. A tenant's API key
never goes into a URL, where it would reach histories and proxy logs. The one key that does is a
reward key (``/get_reward/<reward key>``), because OpenRLHF can send no header: it is a key of its
own, good only on that route, and the service takes it out of the path before routing, logging or
metrics see it (OpenRLHF's own log still holds its URL: docs/trainers.md)."""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from app.api.routing import REWARD_URL_KEY
from app.errors import ApiError
from app.jobs.refusals import count_refusal
from app.observability import TENANT_REQUESTS, child
from app.ratelimit import RateLimiter
from app.tenants import ANONYMOUS, LOCAL_TENANT, Tenant, TenantsFile, hash_key

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
# Requests that read (every grading route is a POST): limited per API process (TenantMiddleware).
READ_METHODS = frozenset({"GET", "HEAD"})

BROWSER_PAGES = frozenset({"/", "/docs", "/redoc", "/openapi.json"})
BASIC_CHALLENGE = b'Basic realm="scaling-grader", charset="UTF-8"'


def _is_browser_page(path: str) -> bool:
    return path in BROWSER_PAGES or path.startswith("/docs/")


def _error(status: int, error: str, detail: str, headers: list[tuple[bytes, bytes]]) -> tuple[dict, dict]:
    body = json.dumps({"error": error, "detail": detail}).encode()
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                         *headers]}
    return start, {"type": "http.response.body", "body": body}


class TenantMiddleware:
    def __init__(self, app: Any, tenants: TenantsFile | None, limiter: RateLimiter) -> None:
        self.app, self.tenants, self.limiter = app, tenants, limiter  # the file, re-read when it changes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        tenant = LOCAL_TENANT
        url_key = scope.get(REWARD_URL_KEY)  # taken out of /get_reward/<key> by app.api.routing
        state = scope.setdefault("state", {})
        state["limiter"] = self.limiter
        if self.tenants is not None and scope["path"] in OPEN_PATHS:
            # Open to anyone; a caller that shows a key is known (the operator sees more).
            tenant = self._tenant(scope) or ANONYMOUS
        elif self.tenants is not None:
            found = self._tenant(scope) if url_key is None else self._reward_tenant(url_key)
            if found is None:
                challenge = BASIC_CHALLENGE if _is_browser_page(scope["path"]) else b"Bearer"
                for message in _error(401, "unauthorized", "a valid 'Authorization: Bearer <key>' (or a reward URL "
                                      "key in /get_reward/<key>) is required",
                                      [(b"www-authenticate", challenge)]):
                    await send(message)
                return
            tenant = found
            # Every request costs one token here, before its body is read (so malformed bodies are
            # not free); a grading route takes one more per further grade (``charge_grades``). A
            # read (GET, HEAD) takes it from this process's own bucket of the same size: waiting
            # for results neither spends the tenant's grading budget nor costs Redis the bucket's
            # four commands, more than the read itself (app.ratelimit).
            wait = await self.limiter.take(tenant.name, tenant.rate_per_second, tenant.burst,
                                           shared=scope.get("method") not in READ_METHODS)
            if wait > 0:
                await count_refusal(self.limiter.redis, "rate_limited")
                for message in _error(429, "rate_limited", "rate limit exceeded; retry after the delay",
                                      [(b"retry-after", _retry_after(wait).encode())]):
                    await send(message)
                return
            child(TENANT_REQUESTS, tenant.name).inc()
        state["tenant"] = tenant
        await self.app(scope, receive, send)

    def _reward_tenant(self, key: str) -> Tenant | None:
        assert self.tenants is not None
        return self.tenants.by_reward_key_digest().get(hash_key(key)) if key else None

    def _tenant(self, scope: dict[str, Any]) -> Tenant | None:
        for key, value in scope.get("headers", ()):
            if key == b"authorization":
                scheme, _, token = value.decode("latin-1").partition(" ")
                if scheme.lower() == "basic":
                    token = _basic_password(token.strip())
                elif scheme.lower() != "bearer":
                    return None
                if token.strip():
                    assert self.tenants is not None
                    return self.tenants.by_key_digest().get(hash_key(token.strip()))
        return None


def _basic_password(credentials: str) -> str:
    try:
        decoded = base64.b64decode(credentials, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return ""
    return decoded.partition(":")[2]


def tenant_of(request: Any) -> Tenant:
    return getattr(request.state, "tenant", LOCAL_TENANT)


def is_operator(request: Any) -> bool:
    """The operator's key (or the local user of a deployment without a tenants file)."""
    return tenant_of(request).operator


def require_operator(request: Any) -> None:
    if not is_operator(request):
        raise ApiError(403, "operator_only", "this route is for the operator's key")


def _retry_after(wait: float) -> str:
    return str(max(1, math.ceil(wait)))


async def charge_grades(request: Any, grades: int) -> None:
    """Make a request cost what it grades: the middleware took one token, this takes the other
    ``grades - 1``, all or none. 429 with Retry-After when they are not there yet; 422 when the
    request asks for more than the tenant's burst (it could never pass: the detail says to split
    it). Called before anything is graded or queued."""
    tenant = tenant_of(request)
    limiter: RateLimiter | None = getattr(request.state, "limiter", None)
    if limiter is None or math.isinf(tenant.rate_per_second) or grades <= 1:
        return
    if grades > tenant.burst:
        raise ApiError(422, "batch_exceeds_burst",
                       f"this request grades {grades} items; this tenant's burst is {tenant.burst}: split it")
    wait = await limiter.take(tenant.name, tenant.rate_per_second, tenant.burst, grades - 1)
    if wait > 0:
        raise ApiError(429, "rate_limited", f"grade rate limit exceeded ({grades} grades asked); retry after the delay",
                       {"Retry-After": _retry_after(wait)})

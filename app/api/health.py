"""Liveness, readiness and metrics."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from app.api.auth import is_operator, require_operator
from app.api.deps import grading_of, readiness_checks_of
from app.jobs.presence import live_workers
from app.metrics_scrape import scrape
from app.observability import READY

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    # async: a plain def would wait in the thread pool behind whatever else is queued there.
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    checks: dict[str, Any] = {}
    ready = True
    for name, check in readiness_checks_of(request).items():
        try:
            outcome = check()
            ok, info = (await outcome) if inspect.isawaitable(outcome) else outcome
        except Exception as exc:  # a failing check is a reason, not a crash
            ok, info = False, f"{type(exc).__name__}"
        checks[name] = {"ok": ok, "info": info}
        ready = ready and ok
    READY.set(1 if ready else 0)
    if not is_operator(request):  # anyone may probe: ready or not, nothing about the internals
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)
    body: dict[str, Any] = {"ready": ready, "checks": checks}
    redis = getattr(grading_of(request).jobs, "async_redis", None)
    if redis is not None:
        # Informational: the API can queue work with no worker up, so this never fails readiness.
        try:
            body["workers"] = await live_workers(redis)
        except Exception:  # Redis trouble is already reported by the queue check
            body["workers"] = []
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics")
def metrics(request: Request) -> Response:
    require_operator(request)  # every tenant's name and traffic: the operator's
    return Response(scrape(), media_type=CONTENT_TYPE_LATEST)

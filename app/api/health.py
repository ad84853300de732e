"""Liveness, readiness and metrics."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from app.observability import READY, REGISTRY

router = APIRouter(tags=["health"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    checks: dict[str, Any] = {}
    ready = True
    for name, check in request.app.state.readiness_checks.items():
        try:
            outcome = check()
            ok, info = (await outcome) if inspect.isawaitable(outcome) else outcome
        except Exception as exc:  # a failing check is a reason, not a crash
            ok, info = False, f"{type(exc).__name__}"
        checks[name] = {"ok": ok, "info": info}
        ready = ready and ok
    READY.set(1 if ready else 0)
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)


@router.get("/metrics")
def metrics() -> Response:
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

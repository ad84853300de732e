"""The status page at / (HTML, for a browser tab) and its figures at /v1/status (JSON). Both sit
behind the tenant auth like every other route; a browser sends the key as HTTP Basic password."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.api.status_data import collect_status
from app.api.status_page import render_status

router = APIRouter(tags=["health"])
# The page has no script and loads nothing: the browser is told so, which also stops anything
# that slipped past the escaping from running, and the page from being framed by another site.
PAGE_HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff",
                "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                                           "frame-ancestors 'none'; base-uri 'none'; form-action 'none'"}


@router.get("/", include_in_schema=False, response_class=HTMLResponse)
async def status_page(request: Request) -> HTMLResponse:
    page = render_status(await collect_status(request))
    return HTMLResponse(page, headers=PAGE_HEADERS)  # no-store: it reloads itself for fresh figures


@router.get("/v1/status", summary="Service status: splits, workers, queues, recent grades and errors")
async def status(request: Request) -> dict[str, Any]:
    return await collect_status(request)

"""Results of queued grading, visible only to the tenant that submitted them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from app.api.auth import tenant_of
from app.api.deps import GradingDep
from app.errors import ApiError

router = APIRouter(prefix="/v1", tags=["jobs"])


@router.get("/jobs/{job_id}")
async def get_job(
    request: Request,
    grading: GradingDep,
    job_id: Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")],
    wait: Annotated[float, Query(ge=0)] = 0.0,
) -> dict[str, Any]:
    view = await grading.job(tenant_of(request), job_id, wait)
    if view is None:  # unknown, expired, or another tenant's: indistinguishable on purpose
        raise ApiError(404, "unknown_job", "no job with this id")
    result = grading.shown(view.result, tenant_of(request)) if view.result else None
    return {"job_id": view.job_id, "status": view.status,
            "result": result.model_dump(mode="json") if result else None}

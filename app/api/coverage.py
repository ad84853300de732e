"""GET /v1/coverage: the coverage map as JSON (items per chapter, tasks per split)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query

from app.settings import Settings, get_settings
from app.tasks.coverage import compute_coverage

router = APIRouter(prefix="/v1", tags=["coverage"])


@router.get("/coverage", summary="Key-content items per chapter and the number of tasks per split for each")
def coverage(
    settings: Annotated[Settings, Depends(get_settings)],
    split: Annotated[list[str] | None, Query(description="limit to these splits (repeatable)")] = None,
) -> dict[str, Any]:
    from app.tasks import registry

    known = registry.split_names()
    if set(split or ()) - set(known):
        raise HTTPException(status_code=400, detail=f"unknown split; known splits: {', '.join(known)}")
    return compute_coverage(settings, split or None).as_dict()

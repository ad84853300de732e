"""GET /v1/coverage: the coverage map as JSON (items per chapter, tasks per split)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.deps import SettingsDep
from app.errors import ApiError
from app.tasks.coverage import compute_coverage
from app.tasks.registry import split_names

router = APIRouter(prefix="/v1", tags=["coverage"])


@router.get("/coverage", summary="Key-content items per chapter and the number of tasks per split for each")
def coverage(
    settings: SettingsDep,
    split: Annotated[list[str] | None, Query(max_length=50, description="only these splits (repeatable)")] = None,
) -> dict[str, Any]:
    # A plain def: counting may load a bank (parse the book) the first time, so it runs in the
    # threadpool rather than on the event loop.
    if set(split or ()) - set(split_names()):
        raise ApiError(404, "unknown_split", f"unknown split; known: {', '.join(split_names())}")
    return compute_coverage(settings, split or None).as_dict()

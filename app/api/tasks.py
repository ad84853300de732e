"""Task batches, single tasks and the list of splits. Only public views leave the service."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.api.auth import tenant_of
from app.api.deps import SettingsDep
from app.errors import ApiError
from app.grading.offload import off_loop
from app.settings import Settings
from app.tasks.base import UnknownTask, parse_chapters
from app.tasks.book.source import BookSourceError
from app.tasks.registry import get_bank, resolve_task, split_names

router = APIRouter(prefix="/v1", tags=["tasks"])


@router.get("/tasks", response_model=dict[str, Any])
async def list_tasks(
    request: Request,
    settings: SettingsDep,
    split: Annotated[str, Query(max_length=50)] = "synthetic",
    seed: Annotated[int, Query(ge=0, le=2**62)] = 0,
    n: Annotated[int, Query(ge=1)] = 16,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    chapters: Annotated[list[str] | None, Query(max_length=50)] = None,
) -> Response:
    if n > settings.limits.max_tasks_per_request:
        raise ApiError(422, "invalid_request",
                       f"n must be at most {settings.limits.max_tasks_per_request}; page with offset")
    if split not in split_names():
        raise ApiError(404, "unknown_split", f"unknown split; known: {', '.join(split_names())}")
    # A thousand tasks cost a tenth of a second or more to make and write, and a tenant may ask
    # for them as often as it sends requests: on the grading threads, in turn with the other
    # tenants, never on the event loop nor in the shared thread pool (where /healthz would wait).
    listing = await off_loop(task_listing, settings, split, seed, n, offset, chapters, tenant=tenant_of(request).name)
    return Response(listing, media_type="application/json")


def task_listing(settings: Settings, split: str, seed: int, n: int, offset: int, chapters: list[str] | None) -> str:
    """The JSON of a task batch (arguments checked by ``list_tasks``)."""
    bank = get_bank(split, settings)
    tasks = bank.batch(seed=seed, n=n, offset=offset, chapters=parse_chapters(chapters))  # a,b or repeated
    return json.dumps({"split": split, "seed": seed, "offset": offset, "n": len(tasks),
                       "tasks": [t.public() for t in tasks]}, separators=(",", ":"))


@router.get("/tasks/{task_id:path}")
def get_task(task_id: str, settings: SettingsDep) -> dict[str, Any]:
    try:
        return resolve_task(task_id, settings).public()
    except UnknownTask:
        raise ApiError(404, "unknown_task", "no task has this id") from None


@router.get("/splits")
def list_splits(settings: SettingsDep) -> dict[str, Any]:
    splits = []
    for name in split_names():
        try:
            splits.append({**get_bank(name, settings).info(), "available": True})
        except BookSourceError as exc:  # one split without its source must not hide the others
            splits.append({"name": name, "available": False, "error": str(exc)[:300]})
    return {"splits": splits}

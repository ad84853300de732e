"""Task batches, single tasks and the list of splits. Only public views leave the service."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.api.deps import SettingsDep
from app.errors import ApiError
from app.tasks.base import UnknownTask, parse_chapters
from app.tasks.book.source import BookSourceError
from app.tasks.registry import UnknownSplit, get_bank, resolve_task, split_names

router = APIRouter(prefix="/v1", tags=["tasks"])


@router.get("/tasks")
def list_tasks(
    settings: SettingsDep,
    split: Annotated[str, Query(max_length=50)] = "synthetic",
    seed: Annotated[int, Query(ge=0, le=2**62)] = 0,
    n: Annotated[int, Query(ge=1)] = 16,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    chapters: Annotated[list[str] | None, Query(max_length=50)] = None,
) -> dict[str, Any]:
    if n > settings.limits.max_tasks_per_request:
        raise ApiError(422, "invalid_request",
                       f"n must be at most {settings.limits.max_tasks_per_request}; page with offset")
    try:
        bank = get_bank(split, settings)
    except UnknownSplit:
        raise ApiError(404, "unknown_split", f"unknown split; known: {', '.join(split_names())}") from None
    tasks = bank.batch(seed=seed, n=n, offset=offset, chapters=parse_chapters(chapters))  # a,b or repeated
    return {"split": split, "seed": seed, "offset": offset, "n": len(tasks), "tasks": [t.public() for t in tasks]}


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

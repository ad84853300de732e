"""Public task views from the local banks, for the evaluation command when it grades in-process
(a service answers the same through GET /v1/tasks)."""

from __future__ import annotations

from typing import Any

from app.settings import get_settings
from app.tasks.base import parse_chapters
from app.tasks.registry import get_bank


def local_public_tasks(split: str, *, chapters: list[str] | str | None, n: int | None,
                       seed: int) -> list[dict[str, Any]]:
    """``n`` None means the whole (finite) split; ValueError for an unlimited one."""
    bank = get_bank(split, get_settings())
    count = n if n is not None else bank.size()
    if count is None:
        raise ValueError(f"split {split!r} is unlimited: give a number of examples")
    return [t.public() for t in bank.batch(seed=seed, n=count, chapters=parse_chapters(chapters))]

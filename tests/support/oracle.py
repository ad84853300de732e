"""Completions built from the bank's own reference answers: right ones (the gold values, some
restated in other units) and wrong ones (the first value pushed well outside any tolerance).
Every expected reward in these tests is derived from these, never typed in."""

from __future__ import annotations

from app.quantities import parse_quantity
from app.settings import get_settings
from app.tasks.base import Task
from app.tasks.registry import get_bank, resolve_task


def synthetic_tasks(n: int, seed: int = 11) -> list[Task]:
    return get_bank("synthetic", get_settings()).batch(seed=seed, n=n)


def gold(task_id: str) -> list[str]:
    return list(resolve_task(task_id, get_settings()).gold)


def right(task_id: str) -> str:
    return "Working it through.\nFinal answer: " + ", ".join(gold(task_id))


def wrong(task_id: str) -> str:
    values = gold(task_id)
    first = parse_quantity(values[0])
    unit = values[0].split(" ", 1)[1] if " " in values[0] else ""
    values[0] = f"{first.value * 1.5!r} {unit}".strip() if unit else f"{first.value * 1.5!r}"
    return "Working it through.\nFinal answer: " + ", ".join(values)

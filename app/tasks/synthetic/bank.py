"""Synthetic tasks by id: ``synthetic/<seed>/<index>``. The family is fixed by (seed + index)
modulo the number of families, so any run of consecutive indices cycles through every family
and a short prefix of a batch already spans many of them."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from app.tasks.base import Task, UnknownTask
from app.tasks.synthetic.families import FAMILIES, Generated
from app.tasks.synthetic.rng import Draws

if TYPE_CHECKING:
    from app.settings import Settings

SPLIT = "synthetic"
_FAMILY_FNS = tuple(FAMILIES.values())
_FAMILY_NAMES = tuple(FAMILIES)
_ID = re.compile(r"synthetic/(\d{1,18})/(\d{1,18})")


def family_of(seed: int, index: int) -> str:
    return _FAMILY_NAMES[(seed + index) % len(_FAMILY_NAMES)]


@lru_cache(maxsize=8192)
def cached(seed: int, index: int) -> Task:
    """RL runs grade several completions per task: regenerate each task once, not per grade."""
    return generate(seed, index)


def generate(seed: int, index: int) -> Task:
    position = (seed + index) % len(_FAMILY_FNS)
    g: Generated = _FAMILY_FNS[position](Draws(seed, index))
    return Task(
        id=f"{SPLIT}/{seed}/{index}",
        split=SPLIT,
        prompt=g.prompt,
        grading="numeric",
        gold=g.gold,
        chapter=g.chapter,
        tags=g.tags,
        meta={"family": _FAMILY_NAMES[position], "params": g.params},
    )


class SyntheticBank:
    name = SPLIT
    description = "Seeded generator of numeric scaling problems; unlimited and regenerable from the id"

    def get(self, task_id: str) -> Task:
        m = _ID.fullmatch(task_id)
        if not m:
            raise UnknownTask(task_id)
        return cached(int(m.group(1)), int(m.group(2)))

    def batch(self, *, seed: int, n: int, offset: int = 0, chapters: Sequence[str] | None = None) -> list[Task]:
        if not chapters:
            return [generate(seed, i) for i in range(offset, offset + n)]
        wanted = {name for name, chapter in _FAMILY_CHAPTERS.items() if chapter in set(chapters)}
        if not wanted:
            return []
        # Consecutive indices of the wanted families; offset counts matching tasks only.
        tasks: list[Task] = []
        skipped, index = 0, 0
        while len(tasks) < n:
            if family_of(seed, index) in wanted:
                if skipped >= offset:
                    tasks.append(generate(seed, index))
                else:
                    skipped += 1
            index += 1
        return tasks

    def size(self) -> int | None:
        return None

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "size": None,
            "grading": {"numeric": None},
            "families": list(_FAMILY_NAMES),
            "chapters": sorted(set(_FAMILY_CHAPTERS.values())),
        }


# Each family always lands in one chapter; learn it once from a sample.
_FAMILY_CHAPTERS: dict[str, str] = {name: fn(Draws(0, 0)).chapter for name, fn in FAMILIES.items()}


def load_bank(settings: Settings) -> SyntheticBank:
    return SyntheticBank()

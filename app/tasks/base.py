"""What a task is and what a bank offers. Banks are read-only once loaded."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

# The kind of a registered GraderSpec (app/graders/kinds.py), which also says whether it is graded
# inline or queued. Not listed here: the graders import the tasks, and a new kind is one registration.
GradingKind = str


def parse_chapters(chapters: str | Sequence[str] | None) -> list[str] | None:
    """A chapter filter from "a,b", ["a", "b"] or ["a,b", "c"] (a repeated query parameter);
    None when it names no chapter."""
    if not chapters:
        return None
    items = [chapters] if isinstance(chapters, str) else chapters
    return [c.strip() for item in items for c in item.split(",") if c.strip()] or None


class UnknownTask(LookupError):
    """The id names no task (unknown split, malformed id, or out of range)."""


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    split: str
    prompt: str
    grading: GradingKind
    # Hidden from clients. numeric: tuple of quantity strings; judge: reference answer text;
    # impl: exercise name; rows: expected rows.
    gold: Any
    chapter: str | None = None
    tags: tuple[str, ...] = ()
    tolerance: float | None = None  # None: the split's default
    meta: Mapping[str, Any] = field(default_factory=dict)  # public extras (family, title, source)
    hidden: Mapping[str, Any] = field(default_factory=dict)  # private extras (judge question...)

    def public(self) -> dict[str, Any]:
        """The view a client may see: never the gold, hidden cases or oracle code."""
        return {
            "id": self.id,
            "split": self.split,
            "grading": self.grading,
            "chapter": self.chapter,
            "tags": list(self.tags),
            "prompt": self.prompt,
            "meta": dict(self.meta),
        }


class Bank(Protocol):
    name: str
    description: str

    def get(self, task_id: str) -> Task:
        """The task with this id, or UnknownTask."""
        ...

    def batch(self, *, seed: int, n: int, offset: int = 0, chapters: Sequence[str] | None = None) -> list[Task]:
        """n tasks starting at offset in the order fixed by seed."""
        ...

    def size(self) -> int | None:
        """Number of tasks, or None for an unlimited (generated) bank."""
        ...

    def info(self) -> dict[str, Any]:
        """Summary for /v1/splits: size, grading kinds, chapters."""
        ...


class FiniteBank:
    """A bank backed by a fixed list of tasks; a seed fixes a shuffled order, so two workers
    with the same seed see the same batches and different seeds see different ones."""

    def __init__(self, name: str, description: str, tasks: Sequence[Task]) -> None:
        self.name = name
        self.description = description
        self._tasks = list(tasks)
        self._by_id = {t.id: t for t in self._tasks}
        if len(self._by_id) != len(self._tasks):
            raise ValueError(f"duplicate task ids in bank {name!r}")

    def get(self, task_id: str) -> Task:
        try:
            return self._by_id[task_id]
        except KeyError:
            raise UnknownTask(task_id) from None

    def tasks(self) -> list[Task]:
        return list(self._tasks)

    def batch(self, *, seed: int, n: int, offset: int = 0, chapters: Sequence[str] | None = None) -> list[Task]:
        pool = self._tasks
        if chapters:
            wanted = set(chapters)
            pool = [t for t in pool if t.chapter in wanted]
        order = list(range(len(pool)))
        random.Random(seed).shuffle(order)
        return [pool[i] for i in order[offset : offset + n]]

    def size(self) -> int | None:
        return len(self._tasks)

    def info(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        chapters: dict[str, int] = {}
        for t in self._tasks:
            kinds[t.grading] = kinds.get(t.grading, 0) + 1
            if t.chapter:
                chapters[t.chapter] = chapters.get(t.chapter, 0) + 1
        return {
            "name": self.name,
            "description": self.description,
            "size": len(self._tasks),
            "grading": kinds,
            "chapters": chapters,
        }

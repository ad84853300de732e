"""Load the ``tasks`` split: run every reference solution and wrap the results as Tasks."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.tasks.base import FiniteBank, Task
from app.tasks.tasks.catalog import ALL_SPECS, check_catalog
from app.tasks.tasks.conventions import API_DESCRIPTION
from app.tasks.tasks.spec import Row, TaskSpec

if TYPE_CHECKING:
    from app.settings import Settings

SPLIT = "tasks"
DESCRIPTION = (
    "35 self-contained scaling tasks (roofline, FLOPs, memory, sharding, inference); every number "
    'is stated in the prompt and the answer is a JSON object {"rows": [...]} graded at 1e-9 relative.'
)
KEY_CONTENT = Path(__file__).resolve().parents[1] / "key_content.toml"


@dataclass(frozen=True, slots=True)
class RowsTask:
    """One task as the issue describes it (and as it is exported)."""

    task_id: str
    category: str
    prompt: str
    api_description: str
    expected_output: dict[str, list[Row]]
    spec: TaskSpec

    @property
    def served_prompt(self) -> str:
        """The prompt as every entry point serves it (/v1/tasks, eval, verifiers, the export):
        the shared conventions first, then the question."""
        return f"{self.api_description}\n\n{self.prompt}"

    def record(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "category": self.category,
            "prompt": self.served_prompt,
            "api_description": self.api_description,
            "expected_output": self.expected_output,
        }


@lru_cache(maxsize=1)
def key_content_ids() -> frozenset[str]:
    data = tomllib.loads(KEY_CONTENT.read_text(encoding="utf-8"))
    return frozenset(item["id"] for chapter in data.values() for item in chapter["items"])


def build_tasks() -> list[RowsTask]:
    """Every task with its expected output computed by its reference solution."""
    check_catalog()
    known = key_content_ids()
    tasks = []
    for spec in ALL_SPECS:
        unknown = [t for t in spec.tags if t not in known]
        if unknown:
            raise ValueError(f"{spec.task_id}: unknown key-content tags {unknown}")
        tasks.append(
            RowsTask(
                task_id=spec.task_id,
                category=spec.category,
                prompt=spec.prompt(),
                api_description=API_DESCRIPTION,
                expected_output={"rows": spec.run()},
                spec=spec,
            )
        )
    return tasks


def to_task(rt: RowsTask, *, tolerance: float) -> Task:
    spec = rt.spec
    return Task(
        id=f"{SPLIT}/{rt.task_id}",
        split=SPLIT,
        # Served prompts carry the shared conventions first, so a rollout can use them as they are.
        prompt=rt.served_prompt,
        grading="rows",
        gold=tuple(rt.expected_output["rows"]),
        chapter=spec.chapter,
        tags=spec.tags,
        tolerance=tolerance,
        meta={
            "task_id": rt.task_id,
            "category": rt.category,
            "title": spec.title,
            "fields": [{"name": f.name, "type": f.type} for f in spec.fields],
        },
    )


def load_bank(settings: Settings) -> FiniteBank:
    tolerance = settings.tolerances.rows
    return FiniteBank(SPLIT, DESCRIPTION, [to_task(rt, tolerance=tolerance) for rt in build_tasks()])

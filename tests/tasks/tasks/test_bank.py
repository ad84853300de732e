"""The tasks bank: ids, categories, tags, prompts that never carry answers, registry wiring."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from app.graders import rows
from app.graders.dispatch import grade, grader_for
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.tasks import registry
from app.tasks.base import UnknownTask
from app.tasks.splits import tolerance_for
from app.tasks.tasks.catalog import ALL_SPECS, check_catalog
from app.tasks.tasks.conventions import API_DESCRIPTION
from app.tasks.tasks.spec import CATEGORIES, fmt

KEY_CONTENT = tomllib.loads(Path("app/tasks/key_content.toml").read_text(encoding="utf-8"))


def test_ids_and_categories(bank, rows_tasks) -> None:
    assert [t.id for t in bank.tasks()] == [f"tasks/sc-{i:03d}" for i in range(35)]
    counts: dict[str, int] = {}
    for rt in rows_tasks:
        counts[rt.category] = counts.get(rt.category, 0) + 1
    assert counts == {"roofline": 7, "flops": 8, "memory": 6, "sharding": 7, "inference": 7} == CATEGORIES


def test_catalog_check_rejects_gaps_and_wrong_sizes() -> None:
    with pytest.raises(ValueError, match="numbers"):
        check_catalog(ALL_SPECS[1:])
    with pytest.raises(ValueError, match="category sizes"):
        check_catalog(ALL_SPECS[:34])


def test_every_task_has_the_issue_fields(rows_tasks) -> None:
    for rt in rows_tasks:
        record = rt.record()
        assert list(record) == ["task_id", "category", "prompt", "api_description", "expected_output"]
        assert record["api_description"] == API_DESCRIPTION
        assert set(record["expected_output"]) == {"rows"} and record["expected_output"]["rows"]
        for field in rt.spec.fields:  # the prompt states the answer's shape
            assert f"- {field.name} ({field.type})" in record["prompt"]


def test_chapters_and_tags_come_from_key_content(bank) -> None:
    ids = {item["id"] for chapter in KEY_CONTENT.values() for item in chapter["items"]}
    for task in bank.tasks():
        assert task.chapter in KEY_CONTENT
        assert task.tags and set(task.tags) <= ids


def test_public_view_never_carries_the_expected_rows(bank) -> None:
    for task in bank.tasks():
        public = json.dumps(task.public())
        assert "gold" not in task.public()
        # Every computed expected number with many digits (one a prompt could leak) is absent.
        for row in task.gold:
            for value in row.values():
                if isinstance(value, float) and len(repr(value)) > 8:
                    assert repr(value) not in public and fmt_safe(value) not in task.prompt


def fmt_safe(value: float) -> str:
    try:
        return fmt(value)
    except ValueError:
        return repr(value)


def test_served_prompt_starts_with_the_conventions(bank) -> None:
    task = bank.get("tasks/sc-000")
    assert task.prompt.startswith(API_DESCRIPTION)
    assert task.grading == "rows" and task.tolerance == 1e-9
    assert task.meta["category"] == "roofline"
    assert [f["name"] for f in task.meta["fields"]] == ["batch", "flops", "bytes", "intensity", "bound"]


def test_registry_serves_and_dispatch_grades_the_split(settings, fresh_registry) -> None:
    assert "tasks" in registry.split_names() and grader_for("rows") is rows.grade_task
    task = registry.resolve_task("tasks/sc-016", settings)
    completion = "Sum 16 bytes per parameter.\n```json\n" + json.dumps({"rows": list(task.gold)}) + "\n```"
    result = grade(task, completion, GradeOptions(), settings)
    assert (result.outcome, result.reward, result.task_id, result.split) == (
        Outcome.correct,
        1.0,
        task.id,
        "tasks",
    )
    with pytest.raises(UnknownTask):
        registry.resolve_task("tasks/sc-035", settings)
    assert tolerance_for("tasks", settings) == 1e-9


def test_batches_are_seeded(bank) -> None:
    a = [t.id for t in bank.batch(seed=3, n=10)]
    assert a == [t.id for t in bank.batch(seed=3, n=10)]
    assert a != [t.id for t in bank.batch(seed=4, n=10)]
    assert {t.chapter for t in bank.batch(seed=0, n=35, chapters=["inference"])} == {"inference"}

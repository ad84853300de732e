"""Every served prompt is the prompt everywhere: the dataset export of the tasks split, the
public task view that `/v1/tasks`, `scaling-grader export` and the eval read, and the bank's own
task all carry the same text; and a rows prompt says how exact the answer must be and that a code
tool is expected."""

from __future__ import annotations

import pytest

from app.commands.export import public_rows
from app.settings import Settings
from app.tasks.registry import get_bank
from app.tasks.tasks.export import records


def test_the_tasks_export_carries_the_served_prompt() -> None:
    served = {t.id: t.prompt for t in get_bank("tasks", Settings()).tasks()}
    exported = {f"tasks/{r['task_id']}": r["prompt"] for r in records()}
    assert exported == served
    assert all(len(p) > 2000 for p in exported.values())  # the conventions block is in the prompt


@pytest.mark.parametrize("split", ["book", "exam", "tasks"])
def test_export_rows_and_the_public_view_match_the_bank(split: str) -> None:
    bank = {t.id: t for t in get_bank(split, Settings()).tasks()}
    rows = public_rows(split, n=None, seed=0, chapters=None)
    assert rows and all(r["prompt"] == bank[r["id"]].prompt == bank[r["id"]].public()["prompt"] for r in rows)


def test_a_rows_prompt_states_its_precision_and_the_code_tool() -> None:
    for task in get_bank("tasks", Settings()).tasks():
        assert "1e-9" in task.prompt and "code tool" in task.prompt, task.id

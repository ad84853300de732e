"""Every served prompt is the prompt everywhere: for each split, the same task read through each
path a user has (the bank in process, `GET /v1/tasks` on a real server, the task-by-id route,
`scaling-grader export`, the eval's task list over HTTP and in process, and the verifiers
environment's dataset column, which reads the service over HTTP) carries byte-for-byte the same prompt text."""

from __future__ import annotations

import httpx
import pytest

from app.commands.export import public_rows
from app.integrations.tasks import local_public_tasks
from app.settings import Settings
from app.tasks.registry import get_bank
from app.tasks.splits import tolerance_for
from scaling_book.selection import dataset_rows
from scaling_book.tasks import public_tasks

SPLITS = ["synthetic", "synthetic-v2", "book", "exam", "tasks"]
N = 12


@pytest.mark.parametrize("split", SPLITS)
def test_one_prompt_on_every_path(split: str, server_url: str) -> None:
    bank = {t.id: t.prompt for t in get_bank(split, Settings()).batch(seed=3, n=N)}
    assert len(bank) == N
    listed = httpx.get(f"{server_url}/v1/tasks", params={"split": split, "seed": 3, "n": N}, timeout=60).json()
    paths = {
        "GET /v1/tasks": {t["id"]: t["prompt"] for t in listed["tasks"]},
        "export": {r["id"]: r["prompt"] for r in public_rows(split, n=N, seed=3, chapters=None)},
        "eval over HTTP": {t["id"]: t["prompt"] for t in public_tasks(split, n=N, seed=3, url=server_url)},
        "eval in process": {t["id"]: t["prompt"] for t in local_public_tasks(split, chapters=None, n=N, seed=3)},
        "verifiers dataset": {
            r["answer"]: r["question"] for r in dataset_rows(public_tasks(split, n=N, seed=3, url=server_url))},
    }
    for path, prompts in paths.items():
        assert prompts == bank, path
    for task_id, prompt in list(bank.items())[:3]:
        one = httpx.get(f"{server_url}/v1/tasks/{task_id}", timeout=60).json()
        assert one["prompt"] == prompt, task_id


def test_a_layout_2_task_grades_by_id_at_its_tolerance(server_url: str) -> None:
    task = get_bank("synthetic-v2", Settings()).batch(seed=3, n=1, chapters=["profiling"])[0]
    values = [g.split(" ", 1) for g in task.gold]

    def grade(scale: float) -> float:
        answer = ", ".join(f"{float(v[0]) * scale!r} {v[1] if len(v) > 1 else ''}".strip() for v in values)
        body = {"task_id": task.id, "completion": f"Final answer: {answer}"}
        return float(httpx.post(f"{server_url}/v1/grade", json=body, timeout=60).json()["reward"])

    tolerance = tolerance_for("synthetic-v2", Settings())
    assert tolerance == 0.02  # layout 1's default; not configurable on its own yet (docs/limits.md)
    assert grade(1.0) == 1.0 and grade(1 + tolerance / 2) == 1.0
    assert grade(1 + 2 * tolerance) == 0.0


def test_the_verifiers_selection_draws_a_layout_2_sample(server_url: str) -> None:
    """An unlimited split takes num_synthetic_examples, never 'the whole split' (which over HTTP
    would page for ever)."""
    from scaling_book.selection import Selection

    tasks = Selection(split="synthetic-v2", num_synthetic_examples=5, service_url=server_url).tasks()
    assert [t["id"] for t in tasks] == [f"synthetic-v2/0/{i}" for i in range(5)]

"""A label shaped like a task id whose first segment is no split (a typo, a label column from
another dataset) is a bad label, unscored, on every route: never read as a quantity ("nonsense/1"
parses as a count of one "nonsense") and graded as a trusted verdict."""

from __future__ import annotations

import asyncio

from app.integrations.grading import grade_labelled_locally
from scaling_book.grading import grade_labelled
from scaling_book.trl import make_reward_func
from scaling_book.verl import compute_score
from tests.support.oracle import right, synthetic_tasks

ODD = ["nonsense/1", "synthtic/3/17", "Exam/roofline/001", "bytes/s", "tasks_v2/sc-001"]


def test_id_shaped_labels_of_no_split_are_bad_labels(server_url: str) -> None:
    # "Final answer: 1" is what would have matched "nonsense/1" read as a count
    results = grade_labelled(ODD, ["Final answer: 1"] * len(ODD), server_url)
    for label, result in zip(ODD, results, strict=True):
        assert not result.scored and result.details.get("unscored") == "bad_label", label
        assert "not a split" in result.explanation
    assert make_reward_func(server_url)(completions=["Final answer: 1"] * len(ODD), task_id=ODD) == [None] * len(ODD)
    verl = compute_score("x", "Final answer: 1", "nonsense/1", {"scaling_grader_url": server_url})
    assert verl["score"] == 0.0 and verl["scored"] is False


def test_the_eval_commands_in_process_grading_reads_them_as_bad_labels_too() -> None:
    results = asyncio.run(grade_labelled_locally(ODD, ["Final answer: 1"] * len(ODD)))
    for label, result in zip(ODD, results, strict=True):
        assert not result.scored and result.details.get("unscored") == "bad_label", label
        assert "not a split" in (result.explanation or "")


def test_real_ids_and_quantities_are_still_graded(server_url: str) -> None:
    task = synthetic_tasks(1, seed=95)[0]
    labels = [task.id, "3.35 TB/s", "42"]
    completions = [right(task.id), "Final answer: 3.35 TB/s", "Final answer: 42"]
    assert [r.reward for r in grade_labelled(labels, completions, server_url)] == [1.0, 1.0, 1.0]

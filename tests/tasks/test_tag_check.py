"""Tags name what a task computes (app/tasks/tag_check.py): every task of the finite splits and
every synthetic family passes, and a tag moved onto a task that does not compute what it needs is
refused, by the check and by the coverage map."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.settings import Settings
from app.tasks.coverage import compute_coverage
from app.tasks.registry import get_bank
from app.tasks.tag_check import mistagged


@pytest.mark.parametrize("split", ["book", "exam", "tasks"])
def test_no_task_is_mistagged(split: str) -> None:
    wrong = {t.id: mistagged(t) for t in get_bank(split, Settings()).tasks() if mistagged(t)}
    assert wrong == {}


@pytest.mark.parametrize("split", ["synthetic", "synthetic-v2"])
def test_no_synthetic_family_is_mistagged(split: str) -> None:
    tasks = get_bank(split, Settings()).one_per_family()
    assert {t.meta["family"]: mistagged(t) for t in tasks if mistagged(t)} == {}


@pytest.mark.parametrize(
    ("task_id", "tag"),
    [
        ("tasks/sc-015", "training.fsdp"),  # Adam state of one model: no communication
        ("book/inference/q1", "inference.memory"),  # a latency bound, not a capacity
        ("exam/training/009", "training.fsdp"),  # a step time from 6ND
        ("exam/roofline/001", "training.memory"),
    ],
)
def test_a_tag_that_does_not_fit_is_refused(task_id: str, tag: str) -> None:
    split = task_id.split("/", 1)[0]
    task = get_bank(split, Settings()).get(task_id)
    assert tag not in mistagged(task)
    moved = replace(task, tags=(*task.tags, tag))
    assert tag in mistagged(moved)


def test_the_memory_tasks_of_the_tasks_split_count_for_training_memory() -> None:
    cov = compute_coverage(Settings(), ["tasks"])
    assert cov.counts["training.memory"]["tasks"] >= 4
    assert cov.covered_only_by_mistagged() == [] and cov.mistagged == {}


JUDGE_EXCLUDED = ["book/jax-stuff/q1", "book/jax-stuff/q2", "book/gpus/q22", "book/applied-inference/q9",
                  "book/roofline/q3", "book/gpus/q12", "book/sharding/q8", "book/sharding/q10"]


def test_coverage_lists_the_judge_items_a_judge_cannot_grade_with_their_reason() -> None:
    from app.tasks.coverage import render_markdown

    cov = compute_coverage(Settings(), ["book"])
    served = {t.id for t in get_bank("book", Settings()).tasks()}
    for qid in JUDGE_EXCLUDED:
        assert qid not in served
        assert cov.excluded[qid].startswith("Not judgeable:"), qid
        assert f"`{qid}`: Not judgeable" in render_markdown(cov)

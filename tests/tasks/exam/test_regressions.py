"""Regressions from the audit of the exam split, one per item: keys and prompts that left a
convention open, a reference that disagreed with its passage, and judge locators that stopped at
a lead-in before the content their reference asserts."""

from __future__ import annotations

import hashlib

import pytest

from app.graders.dispatch import grade
from app.graders.options import GradeOptions
from app.quantities import parse_quantity
from app.settings import Settings
from app.tasks.exam.bank import concept_questions, resolve_locator


@pytest.fixture(scope="module")
def by_id(exam_tasks):
    return {t.id: t for t in exam_tasks}


def _reward(task, completion: str) -> float:
    return grade(task, completion, GradeOptions(), Settings()).reward


def test_training_002_counts_adam_moments_and_master_weights_as_12_bytes(by_id) -> None:
    task = by_id["exam/training/002"]
    assert "master copy" in task.prompt and "two fp32 moments" in task.prompt
    expected = 9.6e10 / (2 + 4 + 4 + 4)  # 2 bytes of weights, 8 of moments, 4 of master copy
    assert parse_quantity(task.gold[0]).value == pytest.approx(expected, rel=1e-6)
    assert _reward(task, f"Final answer: {expected:.3g} parameters") == 1.0
    assert _reward(task, f"Final answer: {9.6e10 / 10:.3g} parameters") == 0.0  # the old 8-byte reading


def test_training_008_defines_the_bubble(by_id) -> None:
    task = by_id["exam/training/008"]
    assert "Define the bubble" in task.prompt and "total time" in task.prompt
    stages, micro = 8, 24
    assert _reward(task, f"Final answer: {(stages - 1) / (micro + stages - 1):.2%}") == 1.0
    assert _reward(task, f"Final answer: {(stages - 1) / micro:.2%}") == 0.0  # idle over busy time


def test_sharding_007_states_its_ring_convention(by_id) -> None:
    task = by_id["exam/sharding/007"]
    assert "(N - 1)/N" in task.prompt
    i, k, b, w, x = 4096, 8192, 2, 1.8e11, 8
    compute = 2 * i * 16384 * k / x / 4.59e14
    book = 2 * i * k * b / w
    assert _reward(task, f"Final answer: {compute:.4g} s, {book:.4g} s") == 1.0
    assert _reward(task, f"Final answer: {compute:.4g} s, {book * (x - 1) / x:.4g} s") == 0.0


def test_training_101_reference_keeps_gradients_out_of_the_10_bytes() -> None:
    reference = next(q.reference for ch, q in concept_questions() if (ch, q.nnn) == ("training", 101))
    assert "leaves out gradients" in reference
    assert "parameters, gradients and Adam" not in reference


# Each judge locator must contain what its reference asserts, not stop at a lead-in.
MUST_CONTAIN = {
    ("sharding", 102): ["no communication is needed", "AllReduce or ReduceScatter", "non-contracting"],
    ("profiling", 101): ["StableHLO", "LLO", "machine code"],
    ("profiling", 103): ["HLO names", "repeated blocks", "Graph viewer"],
    ("jax-stuff", 102): ["reduce-scatter", "all-reduce", "out_sharding"],
    ("jax-stuff", 104): ["permute A", "collective matmul"],
    ("inference", 101): ["compute-bound", "one token at a time", "batching multiple requests"],
    ("inference", 104): ["Grouped multi-query", "local attention", "Sharing KVs", "Quantization", "Paged Attention"],
    ("inference", 107): ["continuous batching", "generate slots"],
    ("training", 106): ["71,360", "NICs"],
    ("tpus", 102): ["$N / 2$", "doubles the time", "8x16"],
    ("applied-inference", 101): ["FLOPs / dollar", "5.8e17"],
}


@pytest.mark.parametrize("key", MUST_CONTAIN, ids=[f"{c}/{n}" for c, n in MUST_CONTAIN])
def test_judge_locator_contains_what_the_reference_asserts(exam_settings, key) -> None:
    question = next(q for ch, q in concept_questions() if (ch, q.nnn) == key)
    passage = resolve_locator(exam_settings, question.locator)  # verifies the span's SHA-256
    assert hashlib.sha256(passage.encode()).hexdigest() == question.locator.sha256
    for phrase in MUST_CONTAIN[key]:
        assert phrase in passage, (key, phrase)


def test_no_judge_locator_ends_at_a_lead_in(exam_settings) -> None:
    for chapter, q in concept_questions():
        passage = resolve_locator(exam_settings, q.locator).rstrip()
        assert not passage.endswith(":"), f"{chapter}/{q.nnn} stops at a lead-in"


def test_splits_doc_states_the_exam_size(exam_tasks) -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "splits.md").read_text(encoding="utf-8")
    numeric = sum(t.grading == "numeric" for t in exam_tasks)
    judge = sum(t.grading == "judge" for t in exam_tasks)
    assert f"| {len(exam_tasks)} ({numeric} numeric, {judge} judge;" in doc

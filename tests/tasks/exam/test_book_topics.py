"""The nine topics of the book that no task touched now have at least three exam items each, and
every one of them grades its key right: the key is recomputed here by a formula written
independently of its oracle (from the quantities read back out of the served prompt), and a
value off by 30% scores 0."""

from __future__ import annotations

import math

import pytest

from app.graders.numeric import grade_numeric
from app.settings import Settings
from app.tasks.exam.bank import NUMERIC_INSTRUCTION, numeric_questions, task_id
from app.tasks.registry import get_bank

TOPICS = {
    "speculative sampling": ["exam/inference/021", "exam/inference/022", "exam/inference/023"],
    "FlashAttention and the cost of softmax and norms": [
        "exam/transformers/021", "exam/transformers/022", "exam/transformers/023"],
    "causal masking": ["exam/transformers/024", "exam/transformers/025", "exam/transformers/026"],
    "latency-throughput curves": ["exam/inference/024", "exam/inference/025", "exam/inference/026"],
    "expert-parallel AllToAll roofline": ["exam/gpus/021", "exam/gpus/022", "exam/gpus/023"],
    "zero-bubble pipelines": ["exam/training/021", "exam/training/022", "exam/training/023"],
    "GB200 NVL72": ["exam/gpus/024", "exam/gpus/025", "exam/gpus/026"],
    "backward-pass communication": ["exam/training/024", "exam/training/025", "exam/training/026"],
    "reading a real trace": ["exam/profiling/021", "exam/profiling/022", "exam/profiling/023"],
}


def _geometric(p: float, first: int, last: int) -> float:
    total, term = 0.0, p**first
    for _ in range(first, last + 1):
        total += term
        term *= p
    return total


# Independent recomputations from the prompt's quantities (a dict of floats).
INDEPENDENT = {
    "exam/inference/021": lambda a: _geometric(a["p"], 0, int(a["k"])),
    "exam/inference/022": lambda a: (
        (a["k"] * a["t_draft"] + a["t_target"]) / _geometric(a["p"], 0, int(a["k"]))),
    "exam/inference/023": lambda a: _geometric(a["p"], 1, int(a["k"])),
    "exam/inference/024": lambda a: (
        (t := max((a["wb"] * a["params"] + a["batch"] * a["kv"]) / (a["chips"] * a["bw"]),
                  a["fpp"] * a["params"] * a["batch"] / (a["chips"] * a["peak"]))),
        a["batch"] / t),
    "exam/inference/025": lambda a: next(
        b / 100 for b in range(1, 10**7)
        if a["fpp"] * a["params"] * (b / 100) / a["peak"]
        >= a["wb"] * a["params"] / a["bw"] + (b / 100) * a["kv"] / a["bw"]
    ),
    "exam/inference/026": lambda a: max(
        b for b in range(1, 10**5)
        if max((a["wb"] * a["params"] + b * a["kv"]) / (a["chips"] * a["bw"]),
               a["fpp"] * a["params"] * b / (a["chips"] * a["peak"])) <= a["target"]
    ),
    "exam/transformers/021": lambda a: a["t"] * a["s"] * a["heads"] * a["b"] * 2,
    "exam/transformers/022": lambda a: a["c"] / (a["c"] + 4 * a["h"]),
    "exam/transformers/023": lambda a: max(
        2 * a["eb"] * a["b"] * a["d"] / a["bw"], a["c"] * a["b"] * a["d"] / a["peak"]),
    "exam/transformers/024": lambda a: sum(4 * a["h"] * a["n"] * i for i in range(1, int(a["t"]) + 1)),
    "exam/transformers/025": lambda a: sum(
        1 for r in range(int(a["t"] // a["tile"])) for c in range(int(a["t"] // a["tile"])) if c <= r
    ) / (a["t"] // a["tile"]) ** 2,
    "exam/transformers/026": lambda a: 12 * a["d"] - 1,
    "exam/gpus/021": lambda a: (a["nbytes"] / 8) * (7 / 8) / a["w"],
    "exam/gpus/022": lambda a: a["nbytes"] * (a["k"] / 8) / (8 * a["w"]),
    "exam/gpus/023": lambda a: (2 * a["eb"] / a["w"]) * a["peak"] / 6,
    "exam/gpus/024": lambda a: a["shard"] * 71 / 9e11,
    "exam/gpus/025": lambda a: 2 * a["nbytes"] / (a["gpus"] * a["nic"] / 8),
    "exam/gpus/026": lambda a: a["f"] / (a["peak"] / a["w"]),
    "exam/training/021": lambda a: (a["s"] - 1) / (a["m"] + a["s"] - 1),
    "exam/training/022": lambda a: (a["m"] + a["s"] - 1) / a["m"],
    "exam/training/023": lambda a: next(m for m in range(1, 10**6) if (a["s"] - 1) / (m + a["s"] - 1) <= a["target"]),
    "exam/training/024": lambda a: 2 * a["gb"] * a["params"] / a["w"],
    "exam/training/025": lambda a: 2 * a["pb"] * a["params"] / a["w"],
    "exam/training/026": lambda a: 2 * a["eb"] * a["tokens"] * a["d"] / a["w"],
    "exam/profiling/021": lambda a: a["ag"] / (a["matmul"] + a["ag"] + a["idle"]),
    "exam/profiling/022": lambda a: 6 * a["params"] * a["tokens"] / a["step"] / (a["chips"] * a["peak"]),
    "exam/profiling/023": lambda a: a["eb"] * a["rows"] * a["cols"] / a["seconds"],
}


def test_every_topic_has_three_items() -> None:
    assert all(len(ids) >= 3 for ids in TOPICS.values())
    assert {i for ids in TOPICS.values() for i in ids} == set(INDEPENDENT)


@pytest.mark.parametrize("tid", sorted(INDEPENDENT))
def test_key_matches_an_independent_formula_and_grades(tid: str) -> None:
    questions = {task_id(chapter, q.nnn): q for chapter, q in numeric_questions()}
    q = questions[tid]
    task = get_bank("exam", Settings()).get(tid)
    args = q.parse_prompt(task.prompt.removesuffix(NUMERIC_INSTRUCTION))
    expected = INDEPENDENT[tid](args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    for value, computed in zip(q.answer_values(), expected, strict=True):
        assert math.isclose(value, computed, rel_tol=0.01), (tid, value, computed)
    right = grade_numeric(task.gold, "Final answer: " + ", ".join(task.gold), tolerance=0.05)
    assert right.reward == 1.0
    wrong = [f"{v * 1.3!r} {g.split(' ', 1)[1] if ' ' in g else ''}".strip()
             for v, g in zip(expected, task.gold, strict=True)]
    assert grade_numeric(task.gold, "Final answer: " + ", ".join(wrong), tolerance=0.05).reward == 0.0

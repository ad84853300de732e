"""Book items graded the way real completions write them: other units, LaTeX, boxed answers,
binary prefixes. Expected verdicts follow from the source answer's figures."""

from __future__ import annotations

import pytest

from app.graders.dispatch import grade
from app.graders.options import GradeOptions
from app.settings import Settings

RIGHT = {
    "other time unit": ("book/tpus/q1", "Each chip loads 12.5e9 B at 1.2e12 B/s.\nFinal answer: 0.0104 s"),
    "latex boxed": ("book/tpus/q7", r"So the VPU gives $\boxed{1.43 \times 10^{13}\ \text{FLOPs/s}}$"),
    "percent as fraction words": ("book/transformers/q7", "Final answer: about 21.8%"),
    "decimal vs binary bytes": ("book/sharding/q2", "Final answer: 16 KiB per device, 524288 bytes in total"),
    "counts with words": ("book/tpus/q2", "Final answer: 32 hosts, 256 cores, 5.0e16 FLOP/s, 4.1 TB, "
                          "2240 hosts, 17920 cores, 4.1e18 FLOP/s, 860 TB"),
    "rate per chip": ("book/applied-inference/q3", "Final answer: 17.3 ms, 231 tokens/s/chip, 8.6 ms"),
    "exact count (the book prints 16e9)": ("book/transformers/q1", "Final answer: 17.4e9, 0.25, 524288 bytes"),
    "microseconds spelled out": ("book/sharding/q5", "Final answer: 23.3 microseconds, 46.6 us, 11.65 µs"),
    "bandwidth in bytes per second": ("book/gpus/q8", "Final answer: 3.6e12 B/s"),
}

WRONG = {
    "forgot the (N-1)/N factor": ("book/gpus/q13", "Final answer: 75 µs"),
    "bidirectional ring assumed": ("book/sharding/q3", "Final answer: 377 µs, 3 µs"),
    "wrong order of values": ("book/inference/q1", "Final answer: 21 ms, 2.5 ms"),
    "bytes where a time is asked": ("book/tpus/q1", "Final answer: 12.5 GB"),
    "only one of two values": ("book/inference/q3", "Final answer: 7"),
}


@pytest.mark.parametrize(("task_id", "completion"), RIGHT.values(), ids=RIGHT.keys())
def test_correct_answers_in_other_forms(bank, task_id: str, completion: str) -> None:
    result = grade(bank.get(task_id), completion, GradeOptions(), Settings())
    assert result.reward == 1.0, result.explanation


@pytest.mark.parametrize(("task_id", "completion"), WRONG.values(), ids=WRONG.keys())
def test_plausible_mistakes_score_zero(bank, task_id: str, completion: str) -> None:
    result = grade(bank.get(task_id), completion, GradeOptions(), Settings())
    assert result.reward == 0.0 and result.scored, result.explanation

"""Exam prompts test the method: none writes the governing formula or names the solving step
(app/tasks/method_check.py); the one exception below says why it is a premise, not the method."""

from __future__ import annotations

from app.tasks.exam.bank import numeric_questions, task_id
from app.tasks.method_check import formula_findings

# task id -> why the finding is the question's premise
PREMISES = {
    "exam/applied-inference/003": "a memory-bound step is the premise; what is tested is the step time and the "
                                  "per-chip throughput it gives",
}


def test_no_exam_prompt_states_its_formula() -> None:
    found = {}
    for chapter, q in numeric_questions():
        tid = task_id(chapter, q.nnn)
        findings = formula_findings(q.prompt())
        if findings and tid not in PREMISES:
            found[tid] = [(f.kind, f.text) for f in findings]
    assert found == {}


def test_the_premises_are_still_findings() -> None:
    prompts = {task_id(chapter, q.nnn): q.prompt() for chapter, q in numeric_questions()}
    for tid in PREMISES:
        assert formula_findings(prompts[tid]), tid

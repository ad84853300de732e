"""verl custom reward function. In a verl config:

    custom_reward_function:
      path: <site-packages>/app/integrations/verl.py
      name: compute_score

``ground_truth`` (the dataset's ``reward_model.ground_truth``) is a task id or a JSON inline
reference. The service is ``extra_info["scaling_grader_url"]``, else $SCALING_GRADER_URL; with
neither, grading runs in the trainer's process. verl stores every key of the returned dict as
a per-sample column (``reward_extra_info``), so the keys and their types are the same for every
sample, faults included."""

from __future__ import annotations

from typing import Any

from app.graders.result import GradeResult, Outcome
from app.integrations.grading import grade_labelled

URL_KEY = "scaling_grader_url"
# extra_info keys forwarded to the grade request when present.
OPTION_KEYS = ("tolerance", "all_or_nothing", "partial_credit", "judge")


def score_dict(result: GradeResult) -> dict[str, Any]:
    """verl's view of a verdict: ``score`` (0.0 when unscored) and flat, same-typed details."""
    return {
        "score": result.reward if result.scored else 0.0,
        "scored": result.scored,
        "acc": result.outcome is Outcome.correct,
        "outcome": result.outcome.value,
        "grading": result.grading,
        "task_id": result.task_id or "",
        "extracted_answer": result.extracted_answer or "",
        "explanation": result.explanation,
    }


def compute_score(data_source: str, solution_str: str, ground_truth: Any,
                  extra_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """Grade one decoded response against its ground truth; see the module docstring."""
    extra = extra_info or {}
    options = {k: extra[k] for k in OPTION_KEYS if extra.get(k) is not None}
    [result] = grade_labelled([ground_truth], [solution_str], extra.get(URL_KEY), **options)
    return score_dict(result)

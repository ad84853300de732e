"""verl custom reward functions: one call per sample (verl's default reward managers) or one per
batch (its ``batch`` reward manager), the rewards the same either way.

In a verl (0.9) config, with this package installed in the trainer's environment::

    reward:
      custom_reward_function:
        path: pkg://scaling_book.verl
        name: compute_score            # or compute_score_batch with the batch reward manager
        reward_kwargs:
          scaling_grader_url: http://grader:8000

(``path`` may also be this file's path; older versions keep ``custom_reward_function`` at the top
level of the config.) verl calls ``compute_score(data_source=, solution_str=, ground_truth=,
extra_info=, **reward_kwargs)``, adding ``reward_router_address`` and ``reward_model_tokenizer``
when a reward model router runs: keywords not used here are accepted and ignored. The batch
manager calls ``compute_score_batch(data_sources=, solution_strs=, ground_truths=, extra_infos=,
**reward_kwargs)`` and sends the whole batch as one request.

``ground_truth`` (the dataset's ``reward_model.ground_truth``) is a task id, a quantity, or a JSON
reference. The service is ``reward_kwargs["scaling_grader_url"]``, else
``extra_info["scaling_grader_url"]``, else $SCALING_GRADER_URL; with none, grading runs in the
trainer's process. verl stores every key of the returned dicts as a per-sample column, so the keys
and their types are the same for every sample, faults included. A judge-graded item with no usable
judge raises ``JudgeUnavailable`` rather than score 0.0."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from scaling_book.grading import grade_labelled
from scaling_book.results import GradeResult, require_judges

URL_KEY = "scaling_grader_url"
# Grade-request options read from reward_kwargs, or per sample from extra_info.
OPTION_KEYS = ("tolerance", "all_or_nothing", "partial_credit", "judge")


def score_dict(result: GradeResult) -> dict[str, Any]:
    """verl's view of a verdict: ``score`` (0.0 when unscored) and flat, same-typed details."""
    return {
        "score": result.reward if result.scored else 0.0,
        "scored": result.scored,
        "acc": result.correct,
        "outcome": result.outcome,
        "grading": result.grading,
        "task_id": result.task_id or "",
        "extracted_answer": result.extracted_answer or "",
        "explanation": result.explanation,
    }


def _plain(value: Any) -> Any:
    """numpy arrays and scalars (verl's non-tensor batch) as JSON-ready Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _settings(extra: Any, kwargs: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(service URL, grade options) for one sample: reward_kwargs first, then its extra_info."""
    extra = extra if isinstance(extra, Mapping) else {}
    url = kwargs.get(URL_KEY) or extra.get(URL_KEY)
    options = {k: _plain(extra[k]) for k in OPTION_KEYS if extra.get(k) is not None}
    options.update({k: _plain(kwargs[k]) for k in OPTION_KEYS if kwargs.get(k) is not None})
    return url, options


def _grade_all(solutions: list[Any], truths: list[Any], extras: list[Any],
               kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One request per distinct (URL, options) group: one per batch in the usual case."""
    if not len(solutions) == len(truths) == len(extras):
        raise ValueError(f"{len(solutions)} responses, {len(truths)} ground truths, {len(extras)} extra infos")
    settings = [_settings(extra, kwargs) for extra in extras]
    groups: dict[str, list[int]] = {}
    for i, (url, options) in enumerate(settings):
        groups.setdefault(json.dumps([url, options], sort_keys=True, default=str), []).append(i)
    out: dict[int, dict[str, Any]] = {}
    for indices in groups.values():
        url, options = settings[indices[0]]
        results = require_judges(grade_labelled([_plain(truths[i]) for i in indices],
                                                [str(solutions[i]) for i in indices], url, **options))
        out.update((i, score_dict(r)) for i, r in zip(indices, results, strict=True))
    return [out[i] for i in range(len(solutions))]


def compute_score(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                  extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Grade one decoded response against its ground truth (see the module docstring)."""
    return _grade_all([solution_str], [ground_truth], [extra_info], kwargs)[0]


def compute_score_batch(data_sources: Any = None, solution_strs: Any = (), ground_truths: Any = (),
                        extra_infos: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
    """verl's batch reward manager: every sample of the batch in one request, results in order."""
    solutions = list(solution_strs)
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solutions)
    return _grade_all(solutions, list(ground_truths), extras, kwargs)

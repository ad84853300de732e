"""The ``scaling-book`` verifiers environment, classic API (verifiers 0.3: ``SingleTurnEnv`` and
``Rubric``), as ``vf-eval scaling-book`` loads it::

    vf-eval scaling-book -a '{"split": "exam", "chapters": "roofline", "judge_model": "gpt-4.1-mini"}'

vf-eval imports the module named by the id (dashes to underscores: ``scaling_book``) and calls its
``load_environment(**env_args)``; its env server workers rebuild the environment the same way
from ``env.env_id`` and ``env.env_args``, so both carry every argument given here.

The rubric's one reward grades through the service at ``service_url`` (else
$SCALING_GRADER_URL). The
dataset carries public task views only, with the task id as the ``answer``. verifiers wants a
float from every reward function, so an unscored grade scores 0.0 and the ``scored`` metric
(weight 0) marks it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scaling_book.results import GradeResult
from scaling_book.selection import Selection, dataset_rows

ENV_ID = "scaling-book"
STATE_KEY = "scaling_grader_result"


def _message(message: Any) -> dict[str, Any]:
    if isinstance(message, dict):
        return {"role": message.get("role", "assistant"), "content": message.get("content")}
    content = getattr(message, "content", None)
    if isinstance(content, list):  # content parts as objects: keep their text
        content = [{"type": "text", "text": getattr(p, "text", None) or (p.get("text") if isinstance(p, dict) else "")}
                   for p in content]
    return {"role": getattr(message, "role", "assistant"), "content": content}


def completion_for_grading(completion: Any) -> Any:
    """verifiers' completion (a string, or messages as dicts or objects) as the service takes it."""
    if isinstance(completion, str):
        return completion
    return [_message(m) for m in completion or []]


def load_environment(split: str = "synthetic", chapters: str | Sequence[str] | None = None,
                     num_synthetic_examples: int = 256, seed: int = 0, tolerance: float | None = None,
                     judge_model: str | None = None, judge_base_url: str | None = None,
                     judge_api_key_var: str | None = None, service_url: str | None = None,
                     num_examples: int | None = None, system_prompt: str | None = None,
                     service_api_key_var: str | None = None, service_timeout: float | None = None,
                     service_deadline: float | None = None, service_headers: dict[str, str] | None = None) -> Any:
    """A ``vf.SingleTurnEnv`` over ``split`` (see ``scaling_book.selection.Selection`` for the
    arguments). ``judge_model`` is required when the selection holds judge-graded tasks."""
    try:
        import verifiers as vf
        from datasets import Dataset
    except ImportError as exc:  # the core install stays light; say what to install
        raise ImportError("the verifiers environment needs: pip install 'scaling-book[verifiers]'") from exc
    if not hasattr(vf, "SingleTurnEnv"):
        raise ImportError(f"verifiers {getattr(vf, '__version__', '?')} has only its v1 API: "
                          "run `vf-eval scaling-book` (the taskset) instead of load_environment")

    selection = Selection(split=split, chapters=chapters, num_synthetic_examples=num_synthetic_examples, seed=seed,
                          tolerance=tolerance, judge_model=judge_model, judge_base_url=judge_base_url,
                          judge_api_key_var=judge_api_key_var, service_url=service_url, num_examples=num_examples,
                          system_prompt=system_prompt, service_api_key_var=service_api_key_var,
                          service_timeout=service_timeout, service_deadline=service_deadline,
                          service_headers=service_headers)
    tasks = selection.tasks()

    async def scaling_grader_reward(completion: Any, answer: str, state: Any = None, **_: Any) -> float:
        result = await selection.grade(answer, completion_for_grading(completion))
        if state is not None:
            state[STATE_KEY] = result.to_json()
        return result.reward if result.scored else 0.0

    def scored(state: Any = None, **_: Any) -> float:
        stored = (state or {}).get(STATE_KEY)
        return float(stored is not None and GradeResult.from_json(stored).scored)

    rubric = vf.Rubric(funcs=[scaling_grader_reward], weights=[1.0])
    rubric.add_metric(scored)
    dataset = Dataset.from_list(dataset_rows(tasks))
    return vf.SingleTurnEnv(dataset=dataset, eval_dataset=dataset, system_prompt=selection.prompt(), rubric=rubric,
                            env_id=ENV_ID, env_args=selection.env_args())

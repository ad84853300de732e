"""A verifiers (Prime Intellect) single-turn environment over the task banks.

    from app.integrations.verifiers_env import load_environment
    env = load_environment(split="synthetic", num_synthetic_examples=200, seed=3)

Needs the optional extra: ``pip install 'scaling-grader[verifiers]'`` (verifiers' classic
``SingleTurnEnv``/``Rubric`` API, 0.2 to 0.3.x). The rubric's one reward calls the graders in
this process, or the service when ``service_url`` (or $SCALING_GRADER_URL) is set; the dataset
carries only public task views and the task id as the ``answer``. verifiers wants a float from
every reward function, so an unscored grade (a judge or grader fault) scores 0.0 and the
``scored`` metric (weight 0) marks it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.graders.result import GradeResult
from app.integrations.grading import grade_labelled_async, judge_settings
from app.integrations.grading import service_url as resolve_url
from app.integrations.tasks import SYSTEM_PROMPT, public_tasks
from app.tasks.base import parse_chapters

STATE_KEY = "scaling_grader_result"


def dataset_rows(tasks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{
        "question": t["prompt"],
        "answer": t["id"],
        "info": {"task_id": t["id"], "split": t["split"], "chapter": t.get("chapter") or "",
                 "grading": t["grading"]},
    } for t in tasks]


def _message(message: Any) -> dict[str, Any]:
    if isinstance(message, dict):
        return {"role": message.get("role", "assistant"), "content": message.get("content")}
    content = getattr(message, "content", None)
    if isinstance(content, list):  # content parts as objects: keep their text
        content = [{"type": "text", "text": getattr(p, "text", None) or (p.get("text") if isinstance(p, dict) else "")}
                   for p in content]
    return {"role": getattr(message, "role", "assistant"), "content": content}


def completion_for_grading(completion: Any) -> Any:
    """verifiers' completion (a string, or messages as dicts or objects) as a grade request takes it."""
    if isinstance(completion, str):
        return completion
    return [_message(m) for m in completion or []]


def load_environment(split: str = "synthetic", chapters: str | Sequence[str] | None = None,
                     num_synthetic_examples: int = 256, seed: int = 0, tolerance: float | None = None,
                     judge_model: str | None = None, judge_base_url: str | None = None,
                     judge_api_key_var: str | None = None, service_url: str | None = None,
                     num_examples: int | None = None, system_prompt: str = SYSTEM_PROMPT) -> Any:
    """A ``vf.SingleTurnEnv`` whose dataset is ``split`` (``chapters`` filters it; the
    synthetic split takes ``num_synthetic_examples`` generated tasks, a finite split all of its
    tasks unless ``num_examples`` caps it) and whose rubric grades with the project's graders.
    ``judge_*`` choose the judge for judge-graded items; ``judge_api_key_var`` names the
    environment variable holding its key (local grading only: a service holds its own keys)."""
    try:
        import verifiers as vf  # optional (the verifiers extra)
        from datasets import Dataset
    except ImportError as exc:  # the core install stays light; say what to install
        raise ImportError("the verifiers environment needs: pip install 'scaling-grader[verifiers]'") from exc

    url = resolve_url(service_url)
    n = num_synthetic_examples if split == "synthetic" else num_examples
    rows = dataset_rows(public_tasks(split, chapters=parse_chapters(chapters), n=n, seed=seed, url=url))
    if not rows:
        raise ValueError(f"no tasks in split {split!r} for chapters {chapters!r}")
    judge = {"model": judge_model, "base_url": judge_base_url} if judge_model else None
    overrides = None if url else judge_settings(judge_model, judge_base_url, judge_api_key_var)

    async def scaling_grader_reward(completion: Any, answer: str, state: Any = None, **_: Any) -> float:
        [result] = await grade_labelled_async([answer], [completion_for_grading(completion)], url, overrides,
                                              tolerance=tolerance, judge=judge)
        if state is not None:
            state[STATE_KEY] = result.model_dump(mode="json")
        return result.reward if result.scored else 0.0

    def scored(state: Any = None, **_: Any) -> float:
        stored = (state or {}).get(STATE_KEY)
        return float(stored is not None and GradeResult.model_validate(stored).scored)

    rubric = vf.Rubric(funcs=[scaling_grader_reward], weights=[1.0])
    rubric.add_metric(scored)
    dataset = Dataset.from_list(rows)
    return vf.SingleTurnEnv(dataset=dataset, eval_dataset=dataset, system_prompt=system_prompt, rubric=rubric,
                            env_id="scaling-grader", env_args={"split": split, "seed": seed})

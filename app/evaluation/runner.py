"""Sample ``rollouts`` completions per task from an OpenAI-compatible chat endpoint, with bounded
concurrency, and grade each one as it arrives. A sampling failure is recorded on its rollout
(and left ungraded), never fatal to the run."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.errors import ApiError
from app.evaluation.progress import Progress
from app.integrations.grading import grade_labelled_locally, judge_settings
from scaling_book.client import AsyncGraderClient, GraderError
from scaling_book.results import GradeResult
from scaling_book.tasks import SYSTEM_PROMPT

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam


@dataclass(frozen=True)
class EvalConfig:
    model: str
    base_url: str
    api_key_var: str = "OPENAI_API_KEY"
    rollouts: int = 1
    concurrency: int = 16
    temperature: float = 0.7
    max_tokens: int = 4096
    request_timeout: float = 600.0
    max_retries: int = 3
    seed: int = 0
    service_url: str | None = None
    tolerance: float | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    judge_api_key_var: str | None = None
    # Operator-side: keep the expected values in each record (in-process grading only; a service
    # decides by its own tenant setting).
    reveal_expected: bool = False
    system_prompt: str = SYSTEM_PROMPT


async def _grade_one(config: EvalConfig, grader: AsyncGraderClient | None, overrides: dict[str, Any] | None,
                     task_id: str, completion: str, judge: dict[str, Any] | None) -> GradeResult:
    """Through the service when there is one, else with this process's own GradingService (the
    operator's side: the trainer package only ever talks HTTP)."""
    if grader is not None:
        [result] = await grader.grade_labelled([task_id], [completion], tolerance=config.tolerance, judge=judge)
        return result
    [local] = await grade_labelled_locally([task_id], [completion], overrides, tolerance=config.tolerance,
                                           judge=judge)
    return GradeResult.from_json(local.model_dump(mode="json"))


def _usage(response: Any) -> dict[str, int]:
    usage = getattr(response, "usage", None)
    if usage is None:
        return {}
    return {k: getattr(usage, k) for k in ("prompt_tokens", "completion_tokens") if getattr(usage, k, None) is not None}


async def run_rollouts(config: EvalConfig, tasks: list[dict[str, Any]], progress: Progress) -> list[dict[str, Any]]:
    """One record per (task, rollout), in task order then rollout order."""
    # openai takes a second or more to import, and every CLI start imports this module.
    from openai import AsyncOpenAI, OpenAIError

    llm = AsyncOpenAI(base_url=config.base_url, api_key=os.environ.get(config.api_key_var) or "EMPTY",
                      timeout=config.request_timeout, max_retries=config.max_retries)
    grader = AsyncGraderClient(config.service_url) if config.service_url else None
    overrides = None if grader else {
        **(judge_settings(config.judge_model, config.judge_base_url, config.judge_api_key_var) or {}),
        "reveal_expected": config.reveal_expected,
    }
    judge = {"model": config.judge_model, "base_url": config.judge_base_url} if config.judge_model else None
    gate = asyncio.Semaphore(config.concurrency)
    correct = graded = 0

    async def one(task: dict[str, Any], rollout: int) -> dict[str, Any]:
        nonlocal correct, graded
        record: dict[str, Any] = {
            "task_id": task["id"], "split": task["split"], "chapter": task.get("chapter"),
            "grading": task["grading"], "rollout": rollout, "model": config.model,
        }
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": config.system_prompt}, {"role": "user", "content": task["prompt"]},
        ]
        start = time.perf_counter()
        async with gate:
            try:
                response = await llm.chat.completions.create(
                    model=config.model, messages=messages, temperature=config.temperature,
                    max_tokens=config.max_tokens, seed=config.seed + rollout,
                )
                choice = response.choices[0]
                record.update(completion=choice.message.content or "", finish_reason=choice.finish_reason,
                              usage=_usage(response), sampling_error=None)
            except OpenAIError as exc:
                record.update(completion=None, finish_reason=None, usage={},
                              sampling_error=f"{type(exc).__name__}: {str(exc)[:200]}")
        record["sample_seconds"] = round(time.perf_counter() - start, 4)
        if record["sampling_error"] is None:
            try:
                result = await _grade_one(config, grader, overrides, task["id"], record["completion"], judge)
            except (ApiError, GraderError) as refused:
                # A refused grade (no judge, a completion over the size limit) is this rollout's
                # unscored fault; it must not discard every other rollout sampled so far.
                status = refused.status or 500
                record.update(reward=None, outcome="invalid_request" if 400 <= status < 500 else "error",
                              scored=False, extracted_answer=None, explanation=f"{refused.error}: {refused.detail}")
            else:
                record.update(reward=result.reward if result.scored else None, outcome=result.outcome,
                              scored=result.scored, extracted_answer=result.extracted_answer,
                              explanation=result.explanation,
                              values=[{k: x for k, x in v.items() if x is not None} for v in result.values])
                graded += result.scored
                correct += result.correct
        else:
            record.update(reward=None, outcome=None, scored=False, extracted_answer=None, explanation=None)
        progress.update(1)
        progress.set_postfix_str(f"acc {correct / graded:.3f}" if graded else "")
        return record

    try:
        return list(await asyncio.gather(*(one(t, k) for t in tasks for k in range(config.rollouts))))
    finally:
        await llm.close()
        if grader is not None:
            await grader.aclose()

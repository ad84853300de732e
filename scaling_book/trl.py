"""Reward functions for TRL's ``GRPOTrainer`` (and its other online trainers).

    from scaling_book.trl import make_reward_func
    trainer = GRPOTrainer(..., reward_funcs=[make_reward_func("http://grader:8000")])

TRL (1.16, ``GRPOTrainer._calculate_rewards``) calls a reward function with keyword arguments:
``prompts``, ``completions`` (strings, or lists of chat messages for conversational datasets),
``completion_ids`` and every other dataset column as a list, plus ``trainer_state``,
``log_extra`` and ``log_metric``. Here the label column is read (``task_id`` by default: the
column ``scaling-grader export`` writes), holding task ids, quantities or JSON references. TRL
expects one float per completion, ``None`` where the function has no verdict (it becomes NaN and
is left out): an unscored grade (a judge fault, an unreadable label) is ``None``. Judge-graded items
with no usable judge raise ``JudgeUnavailable`` (a configuration to fix, not a reward).

How the service is reached is the same on every helper: ``api_key`` (else
$SCALING_GRADER_API_KEY), ``timeout`` per request, ``deadline`` for all of one request's retries,
``headers``; two reward functions with different keys on one URL use two clients."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from scaling_book.client import ClientOptions
from scaling_book.grading import grade_labelled, grade_labelled_async
from scaling_book.results import GradeResult, require_judges

LABEL_COLUMN = "task_id"
RewardFunc = Callable[..., list[float | None]]
AsyncRewardFunc = Callable[..., Awaitable[list[float | None]]]


def _rewards(results: Sequence[GradeResult]) -> list[float | None]:
    return [r.reward if r.scored else None for r in results]


def _labels(kwargs: dict[str, Any], column: str, n: int) -> Sequence[Any]:
    labels: Sequence[Any] | None = kwargs.get(column)
    if labels is None:
        raise KeyError(f"the dataset has no {column!r} column: TRL passes it to reward functions by name")
    if len(labels) != n:
        raise ValueError(f"{len(labels)} labels for {n} completions")
    return labels


def make_reward_func(service_url: str | None = None, *, label_column: str = LABEL_COLUMN,
                     tolerance: float | None = None, judge: dict[str, str] | None = None,
                     name: str = "scaling_grader", api_key: str | None = None, timeout: float | None = None,
                     deadline: float | None = None, headers: dict[str, str] | None = None) -> RewardFunc:
    """A TRL reward function grading through ``service_url`` (else $SCALING_GRADER_URL).
    ``name`` is what TRL logs the reward under."""
    client = ClientOptions.of(api_key, timeout, deadline, headers)

    def reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
               **kwargs: Any) -> list[float | None]:
        labels = _labels(kwargs, label_column, len(completions))
        return _rewards(require_judges(grade_labelled(labels, completions, service_url, client_options=client,
                                                      tolerance=tolerance, judge=judge)))

    reward.__name__ = name
    return reward


def make_async_reward_func(service_url: str | None = None, *, label_column: str = LABEL_COLUMN,
                           tolerance: float | None = None, judge: dict[str, str] | None = None,
                           name: str = "scaling_grader", api_key: str | None = None,
                           timeout: float | None = None, deadline: float | None = None,
                           headers: dict[str, str] | None = None) -> AsyncRewardFunc:
    """The same reward as a coroutine function: TRL runs async reward functions concurrently."""
    client = ClientOptions.of(api_key, timeout, deadline, headers)

    async def reward(prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (),
                     **kwargs: Any) -> list[float | None]:
        labels = _labels(kwargs, label_column, len(completions))
        return _rewards(require_judges(await grade_labelled_async(labels, completions, service_url,
                                                                  client_options=client, tolerance=tolerance,
                                                                  judge=judge)))

    reward.__name__ = name
    return reward

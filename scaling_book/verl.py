"""verl custom reward functions.

verl 0.9's reward loop (``RewardLoopWorker`` with the naive, rate_limited, dapo or gdpo manager:
every manager the 0.9 trainer builds) calls the function once per sample, and all of a worker's
samples at once when the function is a coroutine. ``compute_score_async`` is that coroutine: the
calls that arrive together are gathered (for ``LINGER`` seconds, or up to ``MAX_BATCH`` calls) and
graded in one request, each call getting its own sample's dict. ``compute_score`` is the same
reward, one blocking request per sample; ``compute_score_batch`` is for older verl's ``batch``
reward manager (0.5 and before), which passes whole lists::

    reward:
      custom_reward_function:
        path: pkg://scaling_book.verl
        name: compute_score_async          # verl 0.9: batched under the hood
        reward_kwargs:
          scaling_grader_url: http://grader:8000

(``path`` may also be this file's path; older versions keep ``custom_reward_function`` at the top
level of the config.) verl calls ``compute_score(data_source=, solution_str=, ground_truth=,
extra_info=, **reward_kwargs)``, adding ``reward_router_address`` and ``reward_model_tokenizer``
when a reward model router runs: keywords not used here are accepted and ignored.

``ground_truth`` (the dataset's ``reward_model.ground_truth``) is a task id, a quantity, or a JSON
reference. The service is ``reward_kwargs["scaling_grader_url"]``, else
``extra_info["scaling_grader_url"]``, else $SCALING_GRADER_URL (one of them is required). How it
is reached comes from ``reward_kwargs`` too: ``api_key`` (else
$SCALING_GRADER_API_KEY, the way to keep it out of verl's printed config), ``timeout``,
``deadline`` (seconds for all of one request's retries) and ``headers``. verl stores every key of
the returned dicts as a per-sample column, so the keys and their types are the same for every
sample, faults included. A judge-graded item with no usable judge raises ``JudgeUnavailable``
rather than score 0.0."""

from __future__ import annotations

import asyncio
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scaling_book.client import ClientOptions
from scaling_book.grading import grade_labelled, grade_labelled_async
from scaling_book.results import GradeResult, JudgeUnavailable, require_judges

URL_KEY = "scaling_grader_url"
# Grade-request options read from reward_kwargs, or per sample from extra_info.
OPTION_KEYS = ("tolerance", "all_or_nothing", "partial_credit", "judge")
# How the service is reached, read from reward_kwargs only (not per sample: a key in a dataset
# would be a key in every copy of it).
CLIENT_KEYS = ("api_key", "timeout", "deadline", "headers")
# verl's per-sample keywords: given to compute_score_batch they mean verl is calling it per sample.
PER_SAMPLE_KEYS = ("solution_str", "ground_truth", "data_source", "extra_info")
LINGER = 0.05  # seconds the first of a burst of calls waits for the rest of its batch
MAX_BATCH = 1024  # calls that are sent at once without waiting any longer


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


def client_options(kwargs: Mapping[str, Any]) -> ClientOptions:
    headers = kwargs.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise TypeError("reward_kwargs.headers must be a mapping of header names to values")
    return ClientOptions.of(kwargs.get("api_key"), kwargs.get("timeout"), kwargs.get("deadline"),
                            {str(k): str(v) for k, v in (headers or {}).items()})


def _settings(extra: Any, kwargs: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(service URL, grade options) for one sample: reward_kwargs first, then its extra_info."""
    extra = extra if isinstance(extra, Mapping) else {}
    url = kwargs.get(URL_KEY) or extra.get(URL_KEY)
    options = {k: _plain(extra[k]) for k in OPTION_KEYS if extra.get(k) is not None}
    options.update({k: _plain(kwargs[k]) for k in OPTION_KEYS if kwargs.get(k) is not None})
    return url, options


GroupKey = tuple[str | None, str, ClientOptions]


def _group_key(url: str | None, options: Mapping[str, Any], client: ClientOptions) -> GroupKey:
    return url, json.dumps(options, sort_keys=True, default=str), client


def _grade_all(solutions: list[Any], truths: list[Any], extras: list[Any],
               kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One request per distinct (URL, options) group: one per batch in the usual case."""
    if not len(solutions) == len(truths) == len(extras):
        raise ValueError(f"{len(solutions)} responses, {len(truths)} ground truths, {len(extras)} extra infos")
    settings = [_settings(extra, kwargs) for extra in extras]
    client = client_options(kwargs)
    groups: dict[GroupKey, list[int]] = {}
    for i, (url, options) in enumerate(settings):
        groups.setdefault(_group_key(url, options, client), []).append(i)
    out: dict[int, dict[str, Any]] = {}
    for indices in groups.values():
        url, options = settings[indices[0]]
        results = require_judges(grade_labelled([_plain(truths[i]) for i in indices],
                                                [str(solutions[i]) for i in indices], url,
                                                client_options=client, **options))
        out.update((i, score_dict(r)) for i, r in zip(indices, results, strict=True))
    return [out[i] for i in range(len(solutions))]


def compute_score(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                  extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """Grade one decoded response against its ground truth (see the module docstring)."""
    return _grade_all([solution_str], [ground_truth], [extra_info], kwargs)[0]


def compute_score_batch(data_sources: Any = None, solution_strs: Any = (), ground_truths: Any = (),
                        extra_infos: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
    """verl's batch reward manager: every sample of the batch in one request, results in order."""
    if given := [k for k in PER_SAMPLE_KEYS if k in kwargs]:
        raise TypeError(f"compute_score_batch was called per sample ({', '.join(given)}): verl 0.9's reward "
                        "managers call the function once per sample; use name: compute_score_async, which "
                        "batches those calls")
    solutions = list(solution_strs)
    extras = list(extra_infos) if extra_infos is not None else [None] * len(solutions)
    return _grade_all(solutions, list(ground_truths), extras, kwargs)


@dataclass
class _Pending:
    """Calls waiting to go out in one request: they share a URL, grade options and client."""

    url: str | None
    options: dict[str, Any]
    client: ClientOptions
    items: list[tuple[Any, str, asyncio.Future[dict[str, Any]]]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class _Batcher:
    """One per event loop: gathers concurrent calls and sends each group as one request."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.pending: dict[GroupKey, _Pending] = {}
        self.sending: set[asyncio.Task[None]] = set()  # strong references until each is done

    def submit(self, key: GroupKey, url: str | None, options: dict[str, Any], client: ClientOptions, truth: Any,
               solution: str) -> asyncio.Future[dict[str, Any]]:
        group = self.pending.get(key)
        if group is None:
            group = self.pending[key] = _Pending(url, options, client)
            group.timer = self.loop.call_later(LINGER, self.flush, key)
        future: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        group.items.append((truth, solution, future))
        if len(group.items) >= MAX_BATCH:
            self.flush(key)
        return future

    def flush(self, key: GroupKey) -> None:
        group = self.pending.pop(key, None)
        if group is None:
            return
        if group.timer is not None:
            group.timer.cancel()
        task = self.loop.create_task(_send(group))
        self.sending.add(task)
        task.add_done_callback(self.sending.discard)


async def _send(group: _Pending) -> None:
    futures = [future for _, _, future in group.items]
    try:
        results = await grade_labelled_async([truth for truth, _, _ in group.items],
                                             [solution for _, solution, _ in group.items], group.url,
                                             client_options=group.client, **group.options)
    except Exception as exc:  # every waiting call hears of it, not only the first
        for future in futures:
            if not future.done():
                future.set_exception(exc)
        return
    for future, result in zip(futures, results, strict=True):
        if future.done():  # the caller was cancelled
            continue
        try:
            require_judges([result])
        except JudgeUnavailable as exc:
            future.set_exception(exc)
            continue
        future.set_result(score_dict(result))


_batchers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Batcher] = weakref.WeakKeyDictionary()


async def compute_score_async(data_source: Any = None, solution_str: str = "", ground_truth: Any = None,
                              extra_info: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    """``compute_score`` as a coroutine whose concurrent calls share one request (see the module
    docstring): what verl 0.9's reward loop awaits for every sample of a worker's chunk at once."""
    url, options = _settings(extra_info, kwargs)
    client = client_options(kwargs)
    loop = asyncio.get_running_loop()
    batcher = _batchers.get(loop)
    if batcher is None:
        batcher = _batchers[loop] = _Batcher(loop)
    key = _group_key(url, options, client)
    return await batcher.submit(key, url, options, client, _plain(ground_truth), str(solution_str))

"""Reward endpoints for trainers: ``POST /v1/rewards`` (ordered floats, null when unscored),
OpenRLHF's remote reward model at ``POST /get_reward`` and ``POST /v1/grade/labelled`` (results for
trainer labels, what the ``scaling_book`` package sends).

The two label endpoints never fail a request for one item: an unreadable label, or a judge item
on a service without a judge, is that item's unscored result, with the reason.

They read their bodies as the grading routes do (``parse_body``: a trainer calls them once per
rollout batch, so they sit on the hot path too) and grade through the same ``GradingService``: a
reward here is exactly the reward ``/v1/grade`` gives for the same item."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.auth import charge_grades, tenant_of
from app.api.bodies import RequestRoute, json_body, parse_body
from app.api.deps import grading_of, settings_of
from app.api.openrlhf import response_from_query
from app.api.routing import REWARD_PATH
from app.errors import ApiError
from app.graders.options import JudgeSpec
from app.graders.result import GradeResult, Outcome
from app.grading.labels import UNSCORED_REASONS, in_order, pending, requests_for, unscored, unscored_reason
from app.grading.lenient import grade_labelled_with, grade_leniently
from app.grading.models import Completion, GradeBatchRequest, GradeRequest
from app.grading.offload import off_loop
from app.settings import BATCH_ITEM_ENVELOPE_BYTES


class RewardsResponse(BaseModel):
    rewards: list[float | None] = Field(description="in request order; null for an unscored item")


LABEL_DOC = ("a task id, a quantity (\"80 GB\" or a number), a list of quantities, or a JSON reference "
             "object; any JSON value is accepted and an unreadable one only makes its item unscored")


class GetRewardRequest(BaseModel):
    """OpenRLHF's remote reward model request (``--reward.remote_url``): one rollout per request
    in current versions; several URLs may leave a shard empty."""

    model_config = ConfigDict(extra="ignore")  # OpenRLHF versions add fields; ignore, don't refuse
    query: list[str] = Field(description="prompt + response, decoded with special tokens (may be empty)")
    prompts: list[str] | None = Field(None, description="the prompts, to cut them off the queries")
    labels: list[Any] | None = Field(None, description=f"per sample: {LABEL_DOC}")


class GetRewardResponse(BaseModel):
    rewards: list[float] = Field(description="unscored items get 0.0 (see extra_logs.scored)")
    scores: list[float]
    extra_logs: dict[str, list[float]] = Field(
        description="per-sample 0/1 flags, the same keys on every response: scored, correct, no_answer, and "
                    "unscored_bad_label, unscored_no_judge, unscored_fault saying why an item has no reward"
    )


class LabelledItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: Any = Field(description=LABEL_DOC)
    completion: Completion


class LabelledRequest(BaseModel):
    """Completions with trainer labels, graded with the same options."""

    model_config = ConfigDict(extra="forbid")
    items: list[LabelledItem] = Field(description="may be empty")
    tolerance: float | None = Field(None, gt=0, lt=1, description="relative tolerance override")
    all_or_nothing: bool = False
    partial_credit: bool = False
    judge: JudgeSpec | None = None


class LabelledResponse(BaseModel):
    results: list[GradeResult] = Field(description="in request order; unscored items say why in details.unscored")


router = APIRouter(tags=["rewards"], route_class=RequestRoute)


async def _check_size(request: Request, n: int) -> None:
    """Refuse more items than a batch may hold, then charge the tenant one token per item."""
    limit = settings_of(request).limits.max_grades_per_batch
    if n > limit:
        raise ApiError(422, "invalid_request", f"at most {limit} items per request")
    await charge_grades(request, n)


# Queries and labels up to this many characters in all are cut and read on the event loop (the
# usual one rollout per request); more, on a worker thread.
ON_LOOP_QUERY_CHARS = 16 * 1024


# One encoder for every response: json.dumps with any option builds a new encoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _json(payload: object) -> Response:
    return Response(content=_ENCODER.encode(payload), media_type="application/json")


async def _rewards(request: Request, items: list[GradeRequest], *, per_item_judge: bool = False) -> list[GradeResult]:
    """Results of which only rewards, outcomes and unscored reasons may leave (see ``reward_only``)."""
    return await grade_leniently(grading_of(request), items, tenant_of(request), per_item_judge=per_item_judge,
                                 reward_only=True)


@router.post("/v1/rewards", summary="Rewards for a batch of completions", response_model=RewardsResponse,
             response_description="rewards in request order", openapi_extra=json_body(GradeBatchRequest))
async def rewards(request: Request) -> Response:
    batch = await parse_body(request, GradeBatchRequest)
    await _check_size(request, len(batch.items))
    results = await _rewards(request, batch.items)
    return _json({"rewards": [r.reward if r.scored else None for r in results]})


@router.post(REWARD_PATH, summary="OpenRLHF remote reward model", response_model=GetRewardResponse,
             response_description="rewards in request order", openapi_extra=json_body(GetRewardRequest))
async def get_reward(request: Request) -> Response:
    body = await parse_body(request, GetRewardRequest)
    n = len(body.query)
    await _check_size(request, n)
    # Lists that do not line up cannot say which label goes with which query: every item is
    # unscored, with the reason (a trainer reads a 4xx as "no rewards at all" anyway).
    mismatch = next((f"{name} has {len(given)} entries for {n} queries" for name in ("prompts", "labels")
                     if (given := getattr(body, name)) is not None and len(given) != n), None)
    if mismatch is not None:
        results = [unscored(mismatch) for _ in body.query]
    else:
        size = sum(map(len, body.query)) + sum(map(len, body.prompts or ())) + sum(
            len(label) if isinstance(label, str) else 64 for label in body.labels or ())
        cap = settings_of(request).limits.max_completion_chars
        if size <= ON_LOOP_QUERY_CHARS:
            slots = _slots(body, cap)
        else:  # cutting responses and reading labels is linear in their size: not on the loop
            slots = await off_loop(_slots, body, cap, tenant=tenant_of(request).name)
        results = in_order(slots, await _rewards(request, pending(slots), per_item_judge=True))
    # OpenRLHF turns every list into a tensor, so no nulls and no strings: an unscored item gets
    # 0.0, the `scored` mask says which rewards to trust and the unscored_* flags say why.
    rewards = _floats([r.reward if r.scored else 0.0 for r in results])
    reasons = [unscored_reason(r) for r in results]
    logs = {
        "scored": [float(r.scored) for r in results],
        "correct": [float(r.outcome is Outcome.correct) for r in results],
        "no_answer": [float(r.outcome is Outcome.no_answer) for r in results],
        **{f"unscored_{name}": [float(why == name) for why in reasons] for name in UNSCORED_REASONS},
    }
    extra_logs = ",".join(f'"{name}":{_floats(flags)}' for name, flags in logs.items())
    return Response(content=f'{{"rewards":{rewards},"scores":{rewards},"extra_logs":{{{extra_logs}}}}}',
                    media_type="application/json")


def _slots(body: GetRewardRequest, max_completion_chars: int) -> list[Any]:
    n = len(body.query)
    prompts: Sequence[str | None] = body.prompts or [None] * n
    labels = body.labels or [None] * n
    responses = (_response(q, p, max_completion_chars) for q, p in zip(body.query, prompts, strict=True))
    return requests_for(zip(labels, responses, strict=True))


def _response(query: str, prompt: str | None, max_completion_chars: int) -> str:
    """The response cut out of ``query``; a query longer than its prompt, the completion cap and an
    item's envelope (a chat template's turns) holds a response over the cap whatever the cut, so
    it is not cut at all: graded as is, it is scored too_long, before any work on its text."""
    if len(query) > len(prompt or "") + max_completion_chars + BATCH_ITEM_ENVELOPE_BYTES:
        return query
    return response_from_query(query, prompt)


def _floats(values: list[float]) -> str:
    """A JSON array of rewards (validated into [0, 1]) or 0/1 flags: finite floats, whose repr is
    their JSON. Written directly: this response goes out once per rollout."""
    return "[" + ",".join(map(repr, values)) + "]"


@router.post("/v1/grade/labelled", summary="Grade completions against trainer labels", response_model=LabelledResponse,
             response_description="the verdicts, in order", openapi_extra=json_body(LabelledRequest))
async def grade_labelled(request: Request) -> Response:
    body = await parse_body(request, LabelledRequest)
    await _check_size(request, len(body.items))
    results = await grade_labelled_with(
        grading_of(request), [i.label for i in body.items], [i.completion for i in body.items],
        tenant_of(request), tolerance=body.tolerance, all_or_nothing=body.all_or_nothing,
        partial_credit=body.partial_credit, judge=body.judge)
    def written() -> str:
        return '{"results":[' + ",".join(r.model_dump_json() for r in results) + "]}"

    # as /v1/grade/batch: hundreds of results with their evidence are written off the loop
    return Response(content=written() if len(results) <= 8 else await off_loop(written, tenant=tenant_of(request).name),
                    media_type="application/json")


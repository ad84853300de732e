"""Reward endpoints for trainers: ``POST /v1/rewards`` (ordered floats, null when unscored) and
OpenRLHF's remote reward model at ``POST /get_reward``.

Both are plain Starlette routes like the grading routes (a trainer calls them once per rollout
batch, so they sit on the hot path too) and grade through the same ``GradingService``: a reward
here is exactly the reward ``/v1/grade`` gives for the same item."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.auth import tenant_of
from app.api.deps import grading_of, settings_of
from app.api.openrlhf import response_from_query
from app.api.plain import NamedRoute, OperationDocs, parse_body
from app.errors import ApiError
from app.graders.result import GradeResult, Outcome
from app.grading.labels import in_order, pending, requests_for, settle
from app.grading.models import GradeBatchRequest, GradeRequest


class RewardsResponse(BaseModel):
    rewards: list[float | None] = Field(description="in request order; null for an unscored item")


class GetRewardRequest(BaseModel):
    """OpenRLHF's remote reward model request (``--remote_rm_url``)."""

    model_config = ConfigDict(extra="ignore")  # OpenRLHF versions add fields; ignore, don't refuse
    query: list[str] = Field(min_length=1, description="prompt + response, decoded with special tokens")
    prompts: list[str] | None = Field(None, description="the prompts, to cut them off the queries")
    labels: list[str | dict[str, Any] | None] | None = Field(
        None, description="per sample: a task id, or a JSON inline reference"
    )


class GetRewardResponse(BaseModel):
    rewards: list[float] = Field(description="unscored items get 0.0 (see extra_logs.scored)")
    scores: list[float]
    extra_logs: dict[str, list[float]] = Field(description="per-sample scored, correct and no_answer flags")


def _check_size(request: Request, n: int) -> None:
    limit = settings_of(request).limits.max_grades_per_batch
    if n > limit:
        raise ApiError(422, "invalid_request", f"at most {limit} items per request")


def _json(payload: object) -> Response:
    return Response(content=json.dumps(payload, separators=(",", ":")), media_type="application/json")


async def _grade(request: Request, items: list[GradeRequest]) -> list[GradeResult]:
    """Grade like /v1/grade/batch, but wait as long as the service allows for queued kinds
    (unless an item sets its own wait): a reward endpoint answers with rewards, not job ids."""
    if not items:
        return []
    longest = settings_of(request).limits.max_wait_seconds
    for item in items:  # parsed from this request alone: set in place (a copy costs more than parsing)
        if item.wait is None:
            item.wait = longest
    return settle(await grading_of(request).grade_many(items, tenant_of(request)))


async def rewards(request: Request) -> Response:
    batch = await parse_body(request, GradeBatchRequest)
    _check_size(request, len(batch.items))
    results = await _grade(request, batch.items)
    return _json({"rewards": [r.reward if r.scored else None for r in results]})


async def get_reward(request: Request) -> Response:
    body = await parse_body(request, GetRewardRequest)
    n = len(body.query)
    _check_size(request, n)
    for name in ("prompts", "labels"):
        given = getattr(body, name)
        if given is not None and len(given) != n:
            raise ApiError(422, "invalid_request", f"{name} has {len(given)} entries for {n} queries")
    prompts: list[str | None] = [*body.prompts] if body.prompts else [None] * n
    labels = body.labels or [None] * n
    responses = (response_from_query(q, p) for q, p in zip(body.query, prompts, strict=True))
    slots = requests_for(zip(labels, responses, strict=True))
    results = in_order(slots, await _grade(request, pending(slots)))
    # OpenRLHF turns every list into a tensor, so no nulls: an unscored item gets 0.0 and the
    # `scored` mask in extra_logs says which rewards to trust.
    values = [r.reward if r.scored else 0.0 for r in results]
    return _json({
        "rewards": values,
        "scores": values,
        "extra_logs": {
            "scored": [float(r.scored) for r in results],
            "correct": [float(r.outcome is Outcome.correct) for r in results],
            "no_answer": [float(r.outcome is Outcome.no_answer) for r in results],
        },
    })


# Wiring: app.router.routes[0:0] = grade.ROUTES + rewards.ROUTES (see the report / README).
ROUTES = [
    NamedRoute("/v1/rewards", rewards, methods=["POST"], include_in_schema=False),
    NamedRoute("/get_reward", get_reward, methods=["POST"], include_in_schema=False),
]


def openapi_paths() -> tuple[dict[str, Any], dict[str, Any]]:
    """(paths, component schemas) documenting the routes above, for the app's OpenAPI hook."""
    docs = OperationDocs()
    docs.post("/v1/rewards", tag="rewards", summary="Rewards for a batch of completions", body=GradeBatchRequest,
              response=RewardsResponse, ok="rewards in request order")
    docs.post("/get_reward", tag="rewards", summary="OpenRLHF remote reward model", body=GetRewardRequest,
              response=GetRewardResponse, ok="rewards in request order")
    return docs.paths, docs.schemas

"""Grading trainer labels with the service's own ``GradingService``: for the label endpoints
(``/get_reward``, ``/v1/grade/labelled``) and for the eval command's in-process grading (when it
has no ``--service-url``), so that both give the same reward for the same item.

Lenient on purpose: a trainer cannot drop one item from its batch, so an unreadable label or a
judge item without a usable judge becomes that item's unscored result, with the reason."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from app.graders.result import GradeResult
from app.grading.lenient import grade_labelled_with
from app.grading.service import GradingService
from app.jobs.embedded import EmbeddedJobs
from app.settings import Settings


def judge_settings(judge_model: str | None, judge_base_url: str | None,
                   judge_api_key_var: str | None) -> dict[str, Any] | None:
    """Settings overrides letting in-process grading reach the judge given here (and only it)."""
    if not judge_model:
        return None
    return {"judge": {"default_model": judge_model, "default_base_url": judge_base_url,
                      "allowed_base_urls": [judge_base_url] if judge_base_url else [],
                      "api_key_env": judge_api_key_var}}


@lru_cache(maxsize=4)
def _service(settings_json: str) -> GradingService:
    settings = Settings.model_validate_json(settings_json)
    # In this process: queued kinds (judge, impl) run on its threads too, whatever Redis is configured.
    return GradingService(settings, EmbeddedJobs(settings))


def local_service(settings_overrides: dict[str, Any] | None = None) -> GradingService:
    """The in-process GradingService (cached per settings), for grading without a server."""
    return _service(Settings(**(settings_overrides or {})).model_dump_json())


async def grade_labelled_locally(labels: Sequence[Any], completions: Sequence[Any],
                                 settings_overrides: dict[str, Any] | None = None, **options: Any) -> list[GradeResult]:
    """In-process: what POST /v1/grade/labelled answers, without a server."""
    return await grade_labelled_with(local_service(settings_overrides), labels, completions, **options)

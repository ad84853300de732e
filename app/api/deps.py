"""What routes get from the application, typed: the settings, the grading service and the
readiness checks.

FastAPI routes take them as ``Annotated`` dependencies (``SettingsDep``, ``GradingDep``); the
routes of the hot path (grade.py, rewards.py), which take the ``Request`` alone, call
``settings_of`` and ``grading_of``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.requests import HTTPConnection

from app.grading.service import GradingService
from app.settings import Settings


def settings_of(request: HTTPConnection) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def grading_of(request: HTTPConnection) -> GradingService:
    grading: GradingService = request.app.state.grading
    return grading


# One check of /readyz: (ok, what it found), or an awaitable of it (the queue check asks Redis).
CheckResult = tuple[bool, Any]
ReadinessCheck = Callable[[], CheckResult | Awaitable[CheckResult]]


def readiness_checks_of(request: HTTPConnection) -> dict[str, ReadinessCheck]:
    checks: dict[str, ReadinessCheck] = request.app.state.readiness_checks
    return checks


# async: a plain def dependency hops to the threadpool on every request.
async def get_app_settings(request: Request) -> Settings:
    return settings_of(request)


async def get_grading(request: Request) -> GradingService:
    return grading_of(request)


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
GradingDep = Annotated[GradingService, Depends(get_grading)]

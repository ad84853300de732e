"""Shared dependencies as Annotated aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.grading import GradingService
from app.settings import Settings


# async: a plain def dependency hops to the threadpool on every request.
async def get_app_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_grading(request: Request) -> GradingService:
    return request.app.state.grading


SettingsDep = Annotated[Settings, Depends(get_app_settings)]
GradingDep = Annotated[GradingService, Depends(get_grading)]

"""create_app(): wiring only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from app import __version__
from app.api import grade, health, tasks
from app.api.errors import install_error_handlers
from app.grading import GradingService
from app.observability import BodyLimitMiddleware, MetricsMiddleware
from app.settings import Settings, get_settings
from app.tasks.registry import get_bank


def _readiness_checks(settings: Settings) -> dict[str, Callable[[], tuple[bool, Any]]]:
    def synthetic() -> tuple[bool, Any]:
        bank = get_bank("synthetic", settings)
        return True, {"families": len(bank.info()["families"])}

    return {"synthetic": synthetic, "mode": lambda: (True, "redis" if settings.redis_url else "embedded")}


def _document_hand_parsed_bodies(app: FastAPI) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            paths, schemas = grade.openapi_paths()
            schema.setdefault("paths", {}).update(paths)
            schema.setdefault("components", {}).setdefault("schemas", {}).update(schemas)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="scaling-grader", version=__version__,
                  description="Grading service for RL and evaluation on the JAX scaling book")
    app.state.settings = settings
    app.state.grading = GradingService(settings)
    app.state.readiness_checks = _readiness_checks(settings)
    app.router.routes[0:0] = grade.ROUTES  # first: matched in order, and grading is the hot path
    for module in (tasks, health):
        app.include_router(module.router)
    install_error_handlers(app)
    _document_hand_parsed_bodies(app)
    app.add_middleware(MetricsMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.limits.max_request_bytes)
    return app

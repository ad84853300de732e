"""create_app(): wiring only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI

from app import __version__
from app.api import coverage, grade, health, jobs, rewards, status, tasks
from app.api.auth import TenantMiddleware
from app.api.bodies import document_bodies
from app.api.browser_guard import BrowserGuard, is_loopback
from app.api.deps import CheckResult, ReadinessCheck
from app.api.docs import install_offline_docs
from app.api.errors import document_error_bodies, install_error_handlers
from app.api.openapi_docs import document_limits, document_refusals
from app.api.routing import REWARD_PATH, CanonicalPaths, document_twins, install_not_found_hints
from app.grade_ledger import use_ledger
from app.graders.impl import sandbox_status
from app.grading.service import GradingService
from app.jobs.base import JobBackend
from app.jobs.embedded import EmbeddedJobs
from app.jobs.queue_metrics import watch_queues
from app.jobs.readiness import impl_workers_ready
from app.jobs.redis_jobs import RedisJobs
from app.jobs.redis_ledger import ledger_for
from app.observability import BodyLimitMiddleware, MetricsMiddleware
from app.ratelimit import RateLimiter
from app.settings import Settings, get_settings
from app.startup import freeze_startup_objects
from app.tasks.registry import get_bank
from app.tenants import TenantsFile
from worker.jobs import grade_job


def job_backend(settings: Settings) -> JobBackend:
    """Queued grading on Redis, run by the workers' ``grade_job``, when Redis is configured;
    otherwise threads of this process."""
    if settings.redis_url:
        return RedisJobs(settings, grade_job)
    return EmbeddedJobs(settings)


def _readiness_checks(settings: Settings, grading: GradingService) -> dict[str, ReadinessCheck]:
    def synthetic() -> CheckResult:
        bank = get_bank("synthetic", settings)
        return True, {"families": len(bank.info()["families"])}

    def sandbox() -> CheckResult:
        status = sandbox_status(settings)  # the first call probes the tiers once
        return bool(status.get("ok")), {k: v for k, v in status.items() if k != "ok"}

    checks: dict[str, ReadinessCheck] = {
        "synthetic": synthetic,
        "mode": lambda: (True, "redis" if settings.redis_url else "embedded"),
        "queue": grading.jobs.ready,
    }
    if not settings.redis_url:  # embedded: impl grading runs sandboxes in this process
        checks["sandbox"] = sandbox
    else:  # impl grading runs on the workers: ready only with one that can grade
        checks["impl_workers"] = lambda: impl_workers_ready(getattr(grading.jobs, "async_redis", None))
    return checks


def _document_beyond_the_models(app: FastAPI, settings: Settings) -> None:
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            document_bodies(schema)  # the routes that parse their own bodies
            document_error_bodies(schema)
            document_refusals(schema)
            document_limits(schema, settings.limits)
            document_twins(schema)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


class PublicBindRefused(RuntimeError):
    """An app that would answer a non-loopback address with no tenants file: anyone could grade
    and run code on it."""


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    # Checked here, not only by `serve`: `uvicorn app.main:create_app --factory` or a test harness
    # build the app without the command.
    if settings.tenants_file is None and not is_loopback(settings.host):
        raise PublicBindRefused("refusing to serve a non-loopback address without a tenants file: anyone could "
                                "grade and run code here. Set SCALING_GRADER_TENANTS_FILE, or bind 127.0.0.1.")
    tenants = TenantsFile(settings.tenants_file) if settings.tenants_file else None
    grading = GradingService(settings, job_backend(settings), grading_processes=True)
    counts = ledger_for(settings.redis_url)  # of grades, read by the status page and /metrics
    use_ledger(counts)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        freeze_startup_objects()
        # before the first request, so that none waits for them; stopped (killed and reaped,
        # items in flight answered as unscored faults) when the app stops
        await anyio.to_thread.run_sync(grading.processes.start)
        try:
            yield
        finally:
            await anyio.to_thread.run_sync(grading.processes.close)
            await grading.jobs.close()
            await anyio.to_thread.run_sync(counts.close)  # this process's last grade counts

    # No OpenTelemetry (metrics are Prometheus's, app/observability.py): FastAPI otherwise asks on
    # every request whether a provider was configured since.
    app = FastAPI(title="scaling-grader", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Grading service for RL and evaluation on the JAX scaling book",
                  telemetry={"tracing": False, "metrics": False, "logs": False})
    app.state.settings = settings
    app.state.grading = grading
    app.state.readiness_checks = _readiness_checks(settings, grading)
    watch_queues(settings.redis_url)
    # Grading and rewards first (routes are matched in order, and they are the hot path), as the
    # app's own routes: an included router is a wrapper that matches the path a second time.
    app.router.routes[0:0] = [*rewards.router.routes, *grade.router.routes]
    for module in (tasks, jobs, coverage, health, status):
        app.include_router(module.router)
    install_offline_docs(app)
    install_error_handlers(app)
    install_not_found_hints(app)
    _document_beyond_the_models(app, settings)
    redis_client = getattr(grading.jobs, "async_redis", None)  # shared by the rate limiter
    app.add_middleware(TenantMiddleware, tenants=tenants, limiter=RateLimiter(redis_client))
    app.add_middleware(MetricsMiddleware)
    # the batch and reward routes hold up to max_grades_per_batch completions (docs/api.md)
    batch_paths = {"/v1/grade/batch", "/v1/rewards", REWARD_PATH, "/v1/grade/labelled"}
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.limits.max_request_bytes,
                       path_limits=dict.fromkeys(batch_paths, settings.limits.batch_request_bytes),
                       grace_seconds=settings.limits.body_grace_seconds,
                       min_bytes_per_second=settings.limits.body_min_bytes_per_second)
    # Card paths (GET /tasks, POST /grade...) and reward URLs (/get_reward/<key>) to the routes'
    # own, before anything else looks at the path.
    app.add_middleware(CanonicalPaths)
    # Outermost: a cross-site browser request is refused before anything reads it.
    app.add_middleware(BrowserGuard, bind_host=settings.host, allowed_hosts=settings.allowed_hosts,
                       check_hosts=tenants is None or bool(settings.allowed_hosts))
    return app

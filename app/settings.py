"""The one Settings object. Environment variables use the prefix ``SCALING_GRADER_``;
nested groups use ``__`` (``SCALING_GRADER_LIMITS__MAX_BATCH=256``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Tolerances(BaseModel):
    """Default relative tolerance per split; a request may override it."""

    synthetic: float = Field(0.02, gt=0, lt=1)
    book: float = Field(0.05, gt=0, lt=1)
    exam: float = Field(0.05, gt=0, lt=1)
    rows: float = Field(1e-9, gt=0, lt=1)


class Limits(BaseModel):
    """Request-size bounds: large enough for long reasoning traces, small enough that one client
    cannot exhaust the API's memory."""

    max_completion_chars: int = Field(200_000, gt=0)
    max_request_bytes: int = Field(8 * 1024 * 1024, gt=0)
    max_tasks_per_request: int = Field(1024, gt=0)
    max_grades_per_batch: int = Field(512, gt=0)
    max_wait_seconds: float = Field(60.0, ge=0)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="SCALING_GRADER_", env_nested_delimiter="__", extra="ignore"
    )

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # Absent means the embedded default: queued kinds are graded in-process.
    redis_url: str | None = None
    tolerances: Tolerances = Tolerances()
    limits: Limits = Limits()
    # Where verified copies of the pinned book chapters are kept, and an optional offline mirror.
    book_cache: Path = Path.home() / ".cache" / "scaling-grader" / "book"
    book_mirror: Path | None = None

    def tolerance_for(self, split: str) -> float:
        # The ``tasks`` split is graded as rows; its tolerance lives under that name.
        name = "rows" if split == "tasks" else split
        return getattr(self.tolerances, name, self.tolerances.synthetic)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()

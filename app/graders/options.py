"""Per-request grading options, shared by the graders and the grading core."""

from __future__ import annotations

from pydantic import BaseModel, Field


class JudgeSpec(BaseModel):
    model: str = Field(min_length=1, max_length=200)
    base_url: str | None = Field(None, max_length=500)


class GradeOptions(BaseModel):
    """Per-request knobs. JSON-safe, so they travel unchanged to a queue worker."""

    tolerance: float | None = Field(None, gt=0, lt=1, description="relative tolerance override")
    all_or_nothing: bool = Field(False, description="impl: reward 1 only if every case passes")
    partial_credit: bool = Field(False, description="rows: reward the fraction of rows right")
    judge: JudgeSpec | None = None

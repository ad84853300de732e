"""Request bodies. Everything a client sends is bounded here, so that validation, not the
graders, is where oversized or malformed input stops."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictStr, model_validator

from app.graders.options import GradeOptions, JudgeSpec


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str = Field(max_length=32)
    # a string, or OpenAI-style content parts [{"type": "text", "text": ...}]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "".join(str(p.get("text", "")) for p in self.content if p.get("type", "text") == "text")


Completion = Annotated[str | list[ChatMessage], Field(description="the text, or a chat transcript")]


def completion_text(completion: str | list[ChatMessage]) -> str:
    """The graded text: the last assistant message of a transcript (the last message if none is
    marked assistant), or the string itself."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return ""
    for message in reversed(completion):
        if message.role == "assistant":
            return message.text()
    return completion[-1].text()


class InlineReference(BaseModel):
    """A label passed without a task id, the way trainers carry ground truth."""

    model_config = ConfigDict(extra="forbid")
    # Strict: a JSON true/false is not a quantity (lax float parsing would read it as 1.0/0.0).
    values: list[StrictStr | StrictFloat] | None = Field(
        None, min_length=1, max_length=32, description='required quantities, e.g. ["3.35 TB/s", "80 GB"]'
    )
    tolerance: float | None = Field(None, gt=0, lt=1)
    rows: list[dict[str, Any]] | None = Field(None, max_length=1000, description="expected JSON rows")

    @model_validator(mode="after")
    def _one_kind(self) -> InlineReference:
        if (self.values is None) == (self.rows is None):
            raise ValueError("a reference holds either 'values' or 'rows'")
        return self


class GradeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str | None = Field(None, min_length=1, max_length=200)
    reference: InlineReference | None = None
    completion: Completion
    tolerance: float | None = Field(None, gt=0, lt=1, description="relative tolerance override")
    all_or_nothing: bool = False
    partial_credit: bool = False
    judge: JudgeSpec | None = None
    request_id: str | None = Field(
        None, min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:\-]+$",
        description="idempotency key: a retry with the same id gets the same job and result",
    )
    wait: float | None = Field(None, ge=0, description="seconds to block for queued work before a 202")

    @model_validator(mode="after")
    def _target(self) -> GradeRequest:
        if (self.task_id is None) == (self.reference is None):
            raise ValueError("give exactly one of 'task_id' or 'reference'")
        return self

    def options(self) -> GradeOptions:
        tolerance = self.tolerance
        if tolerance is None and self.reference is not None:
            tolerance = self.reference.tolerance
        return GradeOptions(
            tolerance=tolerance,
            all_or_nothing=self.all_or_nothing,
            partial_credit=self.partial_credit,
            judge=self.judge,
        )


class GradeBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[GradeRequest] = Field(min_length=1)

"""Request bodies. Everything a client sends is bounded here, so that validation, not the
graders, is where oversized or malformed input stops.

Their OpenAPI schemas say the same rules (a fuzzer generating from the spec must not meet a
refusal): "exactly one of" fields as ``oneOf``, and, in ``document_limits``, the limits that come
from settings. Inline quantities are documented by a pattern that admits only values the unit
parser accepts (the service takes more units than the pattern lists)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictStr, field_validator, model_validator

from app.graders.completion import without_edge_tokens
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


# Roles whose messages are the policy's visible answer (OpenAI "assistant", Gemini "model"),
# compared case-insensitively. Any other role (user, system, tool, function) is never graded.
ANSWER_ROLES = frozenset({"assistant", "model"})


def answer_message(messages: list[ChatMessage]) -> ChatMessage | None:
    """The last message of the policy's own in a transcript, or None if there is none."""
    for message in reversed(messages):
        if message.role.strip().lower() in ANSWER_ROLES:
            return message
    return None


def completion_text(completion: str | list[ChatMessage]) -> str:
    """The graded text: the string itself, or the last assistant-like message of a transcript
    (empty when there is none: a user or tool message is never the policy's answer). Special
    tokens a decoder left at its very ends are dropped, and the whitespace around the text: OpenRLHF's
    route cuts a response out of a query and strips it, and every entry point must grade (and
    count the length of) the same text."""
    if isinstance(completion, str):
        return without_edge_tokens(completion).strip()
    message = answer_message(completion)
    return without_edge_tokens(message.text()).strip() if message is not None else ""


def lacks_answer_message(completion: str | list[ChatMessage]) -> bool:
    return not isinstance(completion, str) and answer_message(completion) is None


# Documented form of an inline quantity: a finite number, optionally a space and a common unit.
QUANTITY_UNITS = ("s", "ms", "us", "ns", "B", "kB", "KB", "MB", "GB", "TB", "PB", "KiB", "MiB", "GiB", "TiB",
                  "FLOP", "FLOPs", "GFLOP", "TFLOP", "PFLOP", "FLOP/s", "GFLOP/s", "TFLOP/s", "PFLOP/s", "B/s",
                  "GB/s", "TB/s", "GiB/s", "W", "bytes", "tokens", "tokens/s")
QUANTITY_PATTERN = (r"^[-+]?(?:[0-9]{1,15}(?:\.[0-9]{0,15})?|\.[0-9]{1,15})(?:[eE][-+]?[0-9]{1,2})?"
                    "(?: (?:" + "|".join(re.escape(u) for u in QUANTITY_UNITS) + "))?$")


def _without_null(schema: dict[str, Any], *names: str) -> None:
    """Document optional fields as absent-or-valued: null is accepted for "not given", but a
    generator that sends it for an "exactly one of" field would be told the wrong rule."""
    for name in names:
        prop = schema.get("properties", {}).get(name)
        if prop and "anyOf" in prop:
            kept = [branch for branch in prop.pop("anyOf") if branch.get("type") != "null"]
            prop.update(kept[0] if len(kept) == 1 else {"anyOf": kept})
        if prop is not None:
            prop.pop("default", None)


def exactly_one_of(*names: str) -> Any:
    def extra(schema: dict[str, Any]) -> None:
        _without_null(schema, *names)
        schema["oneOf"] = [{"required": [name]} for name in names]

    return extra


def _reference_schema(schema: dict[str, Any]) -> None:
    exactly_one_of("values", "rows")(schema)
    _without_null(schema, "tolerance")
    values = schema["properties"]["values"]
    for branch in values["items"].get("anyOf", []):
        if branch.get("type") == "string":
            branch["pattern"] = QUANTITY_PATTERN
            branch["maxLength"] = MAX_QUANTITY_CHARS
    rows = schema["properties"]["rows"]
    rows["minItems"] = 1
    rows["items"] = {"type": "object", "minProperties": 1,
                     "additionalProperties": {"type": ["string", "number", "boolean", "null"]}}


# An inline quantity's text: the longest gold of any split is under 30 characters. A reference is
# read where the request is (on the event loop for a single grade), in time that grows with its
# text, so an unbounded one ("1 s " two million times) held every other request for 25 s.
MAX_QUANTITY_CHARS = 256


class InlineReference(BaseModel):
    """A label passed without a task id, the way trainers carry ground truth."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_reference_schema)
    # Strict: a JSON true/false is not a quantity (lax float parsing would read it as 1.0/0.0).
    values: list[StrictStr | StrictFloat] | None = Field(
        None, min_length=1, max_length=32, description='required quantities, e.g. ["3.35 TB/s", "80 GB"]'
    )
    tolerance: float | None = Field(None, gt=0, lt=1)
    rows: list[dict[str, Any]] | None = Field(None, max_length=1000, description="expected JSON rows")

    @field_validator("values")
    @classmethod
    def _short_quantities(cls, values: list[str | float] | None) -> list[str | float] | None:
        if values is not None and any(isinstance(v, str) and len(v) > MAX_QUANTITY_CHARS for v in values):
            raise ValueError(f"a quantity is at most {MAX_QUANTITY_CHARS} characters")
        return values

    @model_validator(mode="after")
    def _one_kind(self) -> InlineReference:
        if (self.values is None) == (self.rows is None):
            raise ValueError("a reference holds either 'values' or 'rows'")
        return self


class GradeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=exactly_one_of("task_id", "reference"))
    task_id: str | None = Field(None, min_length=1, max_length=200)
    reference: InlineReference | None = None
    completion: Completion
    tolerance: float | None = Field(
        None, gt=0, lt=1,
        description="relative tolerance for an inline reference; a task-id grade uses the task's own (and says so)")
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
        # A task is graded at its own tolerance: a client's, wider or narrower, would make the
        # grade an oracle (a wide one passes any value near the gold; moving one bisects it).
        tolerance = None
        if self.reference is not None:
            tolerance = self.tolerance if self.tolerance is not None else self.reference.tolerance
        return GradeOptions(
            tolerance=tolerance,
            all_or_nothing=self.all_or_nothing,
            partial_credit=self.partial_credit,
            judge=self.judge,
        )


class GradeBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[GradeRequest] = Field(min_length=1)

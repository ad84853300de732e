"""Trainer labels to grade requests. Trainers carry the grading target in a dataset column
(OpenRLHF ``labels``, verl ``ground_truth``, a TRL ``task_id`` column); it may be:

- a task id: ``synthetic/3/17`` (its first segment names a split);
- JSON (a string or an already-decoded value): an inline reference object
  ``{"values": [...], "tolerance": ...}`` or ``{"rows": [...]}``, an object with ``task_id``,
  or a bare list of quantity strings ``["3.35 TB/s", "80 GB"]``;
- a single quantity, as a string (``"80 GB"``) or a JSON number (``42``).

A label that cannot be read becomes an unscored ``invalid_request`` result for that item
alone, never a failed batch."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pydantic import ValidationError

from app.errors import JobPending
from app.graders.result import GradeResult, Outcome
from app.grading.models import GradeRequest
from app.tasks.splits import is_split, split_names


class LabelError(ValueError):
    """The label names no usable target."""


# The `tasks` split's own export publishes its ids without the split prefix ("sc-000"): a label
# read from that dataset names the task "tasks/sc-000".
_BARE_ROWS_ID = re.compile(r"sc-\d{3}")


# Shaped like a task id ("nonsense/1", "synthtic/3/17"): a word, a slash, no spaces. Read as a
# quantity it would parse (a count of "nonsense") and grade as a trusted verdict, so one whose
# first segment is no split is a bad label instead.
_ID_SHAPED = re.compile(r"[A-Za-z][\w-]*(/[\w.:-]+)+")


# A label names a task or holds a small reference: bounded before any work on it, so that a label
# of hundreds of thousands of keys (validated, and refused key by key, in calls that hold the
# interpreter lock throughout) cannot stall every other request. Generous for a reference of a
# thousand rows; refused (an unscored bad label) past either bound.
MAX_LABEL_CHARS = 64 * 1024
MAX_LABEL_NODES = 16 * 1024


def _check_label_size(value: Any) -> None:
    """LabelError if ``value`` holds more than MAX_LABEL_NODES values and keys in all or strings
    longer than MAX_LABEL_CHARS; stops counting at the bound, so its cost is bounded too."""
    seen, stack = 0, [value]
    while stack:
        node = stack.pop()
        size = len(node) if isinstance(node, dict | list | tuple) else 1
        seen += size
        if seen > MAX_LABEL_NODES:  # checked before a container's items are looked at
            raise LabelError(f"a label holds at most {MAX_LABEL_NODES} values and keys")
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list | tuple):
            stack.extend(node)
        elif isinstance(node, str) and len(node) > MAX_LABEL_CHARS:
            raise LabelError(f"a label holds at most {MAX_LABEL_CHARS} characters")


def _is_task_id(text: str) -> bool:
    return is_split(text.partition("/")[0])


def target_from_label(label: Any) -> dict[str, Any]:
    """The grade-request fields a label stands for: {"task_id": ...} or {"reference": ...}."""
    _check_label_size(label)
    value = label
    if isinstance(label, str):
        text = label.strip()
        if not text:
            raise LabelError("empty label")
        if text[0] not in "[{":
            # "80 GB" or "3.35 TB/s" is an answer, not an id: ids start with their split's name
            if _BARE_ROWS_ID.fullmatch(text):
                return {"task_id": f"tasks/{text}"}
            if _ID_SHAPED.fullmatch(text) and not _is_task_id(text):
                raise LabelError(f"label {text[:60]!r} looks like a task id, but {text.partition('/')[0][:30]!r} is "
                                 f"not a split ({', '.join(sorted(split_names()))})")
            return {"task_id": text} if _is_task_id(text) else {"reference": {"values": [text]}}
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # nesting deeper than the stack: not a label either
            raise LabelError("label is neither a task id nor valid JSON") from None
        _check_label_size(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"reference": {"values": [float(value)]}}
    if isinstance(value, list | tuple):
        return {"reference": {"values": list(value)}}
    if isinstance(value, dict):
        if "task_id" in value:
            return {"task_id": value["task_id"]}
        return {"reference": value}
    raise LabelError("a label is a task id, a quantity, a JSON reference object or a list of quantities")


def request_for_label(label: Any, completion: Any, **options: Any) -> GradeRequest:
    """The grade request for one labelled completion; ``options`` are GradeRequest fields
    (tolerance, judge, ...), None meaning "not given". LabelError if unusable."""
    if label is None:
        raise LabelError("no label for this item (a task id or a reference is needed)")
    given = {k: v for k, v in options.items() if v is not None}
    try:
        return GradeRequest.model_validate({**target_from_label(label), "completion": completion, **given})
    except ValidationError as exc:
        first = exc.errors(include_input=False)[0]
        where = ".".join(_named(p) for p in first.get("loc", ())) or "label"
        raise LabelError(f"{where}: {_plain(str(first.get('msg', 'invalid')).removeprefix('Value error, '))}") from None


# A location may hold keys the trainer's label invented (an unknown field): those are client
# text, and a message is shown in logs and dashboards, so only short identifiers are repeated.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def _named(part: object) -> str:
    if isinstance(part, int):
        return str(part)
    return str(part) if _IDENTIFIER.fullmatch(str(part)) else "?"


def _plain(message: str) -> str:
    """A message with no markup: no angle bracket comes through."""
    return _MARKUP.sub("?", message)[:200]


_MARKUP = re.compile(r"[<>]")


# Why an item has no reward, as trainers log it (fixed names: OpenRLHF needs the same keys for
# every sample). Kept in the result's details by the functions below.
UNSCORED_REASONS = ("bad_label", "no_judge", "fault")


def unscored(detail: str, reason: str = "bad_label") -> GradeResult:
    return GradeResult(grading="unknown", outcome=Outcome.invalid_request, reward=0.0, explanation=detail[:200],
                       details={"unscored": reason})


def unscored_reason(result: GradeResult) -> str | None:
    """None for a scored result; else one of UNSCORED_REASONS."""
    if result.scored:
        return None
    if reason := result.details.get("unscored"):
        return str(reason)
    return "bad_label" if result.outcome is Outcome.invalid_request else "fault"


def settle(results: Iterable[Any]) -> list[GradeResult]:
    """Grading results with any still-queued item (``JobPending``) as an unscored result: a
    trainer needs a verdict now, and a job id is not one."""
    return [unscored(f"still queued when the wait ended (job {r.job_id})", "fault") if isinstance(r, JobPending)
            else r for r in results]


def requests_for(pairs: Iterable[tuple[Any, Any]], **options: Any) -> list[GradeRequest | GradeResult]:
    """Per (label, completion): its grade request, or the unscored result explaining why not."""
    slots: list[GradeRequest | GradeResult] = []
    for label, completion in pairs:
        try:
            slots.append(request_for_label(label, completion, **options))
        except LabelError as problem:
            slots.append(unscored(str(problem)))
    return slots


def pending(slots: Sequence[GradeRequest | GradeResult]) -> list[GradeRequest]:
    return [s for s in slots if isinstance(s, GradeRequest)]


def in_order(slots: Sequence[GradeRequest | GradeResult], graded: Iterable[GradeResult]) -> list[GradeResult]:
    """Put the results of ``pending(slots)`` back among the refused items, in the original order."""
    results: Iterator[GradeResult] = iter(graded)
    return [next(results) if isinstance(s, GradeRequest) else s for s in slots]

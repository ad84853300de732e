"""Reading and checking the committed grading annotations (annotations.toml)."""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from app.quantities import parse_quantity

ANNOTATIONS_FILE = Path(__file__).with_name("annotations.toml")


class AnnotationError(ValueError):
    """The annotations do not fit the parsed source (a missing, stray or malformed entry)."""


@dataclass(frozen=True, slots=True)
class RequiredValue:
    value: str  # quantity string for the numeric grader
    figure: str  # the answer's own figure, as it appears in the source answer
    derived: bool = False


@dataclass(frozen=True, slots=True)
class Annotation:
    key: str  # "<chapter>.q<n>"
    grading: Literal["numeric", "judge", "exclude"]
    tags: tuple[str, ...]
    ask: str | None = None
    values: tuple[RequiredValue, ...] = ()
    note: str | None = None
    reason: str | None = None
    # What the key assumes that the question leaves open (data, conventions): shown in the prompt.
    assume: str | None = None
    # Why the book's printed figures lie outside the tolerance of the computed key. The printed
    # figure is then a wrong answer to the served prompt, and is not accepted, unless ``admits``
    # is set too.
    differs: str | None = None
    # The words of the served prompt that admit the reading behind the printed figure as well:
    # only then is the printed figure a second key. They must occur in the prompt.
    admits: str | None = None
    # For a question whose answer follows it without an answer block: the literal text where the
    # answer starts inside the question's span (the question is cut there).
    answer_starts: str | None = None
    # Figures removed from the question's context, where the context states this question's own
    # answer (an earlier worked answer, a table row); see tests/tasks/test_answers_not_served.py.
    context_redact: tuple[str, ...] = ()


def annotations_digest() -> str:
    return hashlib.sha256(ANNOTATIONS_FILE.read_bytes()).hexdigest()


def _parse(key: str, body: dict) -> Annotation:
    grading = body.get("grading")
    if "tolerance" in body:  # keys are computed; an item never widens the tolerance around one value
        raise AnnotationError(f"{key}: per-item tolerances are not allowed")
    if grading not in ("numeric", "judge", "exclude"):
        raise AnnotationError(f"{key}: grading must be numeric, judge or exclude")
    values = tuple(
        RequiredValue(str(v["value"]), str(v["figure"]), bool(v.get("derived", False)))
        for v in body.get("values", ())
    )
    ann = Annotation(
        key=key,
        grading=grading,
        tags=tuple(body.get("tags", ())),
        ask=body.get("ask"),
        values=values,
        note=body.get("note"),
        reason=body.get("reason"),
        assume=body.get("assume"),
        differs=body.get("differs"),
        admits=body.get("admits"),
        answer_starts=body.get("answer_starts"),
        context_redact=tuple(str(f) for f in body.get("context_redact", ())),
    )
    if grading == "numeric":
        if not values or not ann.ask:
            raise AnnotationError(f"{key}: a numeric item needs values and an ask")
        for v in values:
            try:
                parse_quantity(v.value)
            except ValueError as exc:
                raise AnnotationError(f"{key}: value {v.value!r} does not parse: {exc}") from None
    elif values:
        raise AnnotationError(f"{key}: only numeric items carry values")
    if grading == "exclude" and not ann.reason:
        raise AnnotationError(f"{key}: an exclusion needs a reason")
    if grading != "numeric" and (ann.assume or ann.differs or ann.admits):
        raise AnnotationError(f"{key}: only numeric items carry assume, differs or admits")
    if ann.admits and not ann.differs:
        raise AnnotationError(f"{key}: `admits` names the words behind a second key, which needs `differs`")
    return ann


@lru_cache(maxsize=1)
def load_annotations() -> dict[str, Annotation]:
    with ANNOTATIONS_FILE.open("rb") as fh:
        raw = tomllib.load(fh)
    out: dict[str, Annotation] = {}
    for chapter, entries in raw.items():
        for q, body in entries.items():
            key = f"{chapter}.{q}"
            out[key] = _parse(key, body)
    return out

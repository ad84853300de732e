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
    tolerance: float | None = None
    note: str | None = None
    reason: str | None = None


def annotations_digest() -> str:
    return hashlib.sha256(ANNOTATIONS_FILE.read_bytes()).hexdigest()


def _parse(key: str, body: dict) -> Annotation:
    grading = body.get("grading")
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
        tolerance=body.get("tolerance"),
        note=body.get("note"),
        reason=body.get("reason"),
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
    if ann.tolerance is not None and not 0 < ann.tolerance < 1:
        raise AnnotationError(f"{key}: tolerance must be in (0, 1)")
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

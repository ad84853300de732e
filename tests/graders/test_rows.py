"""The rows grader as (gold, completion, expected outcome) tables, grouped by theme."""

from __future__ import annotations

import json

import pytest

from app.graders.result import Outcome
from app.graders.rows import grade_rows
from app.grading.references import InvalidRowsReference, reference_task
from app.settings import Settings

GOLD = [
    {"batch": 1, "intensity": 0.9995119570522206, "bound": "memory", "fits": True, "note": None},
    {"batch": 1024, "intensity": 682.6666666666666, "bound": "compute", "fits": False, "note": None},
]
TOL = 1e-9


def rows_json(rows: list[dict] | None = None, **extra: object) -> str:
    return json.dumps({"rows": GOLD if rows is None else rows, **extra})


def fenced(body: str, tag: str = "json") -> str:
    return f"```{tag}\n{body}\n```"


def with_change(i: int, field: str, value: object) -> list[dict]:
    rows = [dict(r) for r in GOLD]
    rows[i][field] = value
    return rows


def grade(completion: str, **kw: object):
    return grade_rows(GOLD, completion, tolerance=TOL, **kw)


EXTRACTION = [
    ("json fence", fenced(rows_json()), Outcome.correct),
    ("untagged fence", fenced(rows_json(), tag=""), Outcome.correct),
    ("tilde fence", f"~~~json\n{rows_json()}\n~~~", Outcome.correct),
    ("fence closed on the JSON's line", f"```json\n{rows_json()}```", Outcome.correct),
    ("bare JSON", rows_json(), Outcome.correct),
    ("bare JSON in prose", f"The rows are {rows_json()} as computed.", Outcome.correct),
    ("trailing prose after fence", fenced(rows_json()) + "\nHope this helps! {not json}", Outcome.correct),
    ("reasoning then fence", 'First, 2*B*D*F... {"draft": 1}\n' + fenced(rows_json()), Outcome.correct),
    (
        "last of several fences wins",
        fenced(rows_json(with_change(0, "batch", 2))) + fenced(rows_json()),
        Outcome.correct,
    ),
    (
        "last fence wrong, earlier right",
        fenced(rows_json()) + fenced(rows_json(with_change(0, "batch", 2))),
        Outcome.incorrect,
    ),
    (
        "last bare object wins",
        rows_json(with_change(1, "bound", "memory")) + " then " + rows_json(),
        Outcome.correct,
    ),
    (
        "fence beats a later bare object",
        fenced(rows_json()) + " " + rows_json(with_change(0, "batch", 3)),
        Outcome.correct,
    ),
    ("python fence is not an answer", fenced(rows_json(), tag="python"), Outcome.no_answer),
    (
        "python fence ignored, bare answer used",
        fenced("x = {'rows': []}", tag="python") + rows_json(),
        Outcome.correct,
    ),
    ("object nested in another is not top-level", json.dumps({"answer": {"rows": GOLD}}), Outcome.no_answer),
    ("extra top-level keys are fine", rows_json(units="s"), Outcome.correct),
    ("thinking is not an answer", f"<think>{rows_json()}</think> I am not sure.", Outcome.no_answer),
    (
        "answer after thinking",
        f"<think>{rows_json(with_change(0, 'batch', 9))}</think>" + fenced(rows_json()),
        Outcome.correct,
    ),
    ("unfinished thinking", f"<think>{rows_json()}", Outcome.no_answer),
    ("no JSON at all", "The intensity is 682.67 FLOPs/byte.", Outcome.no_answer),
    ("malformed last fence", fenced(rows_json()) + fenced('{"rows": [{"batch": 1,]}'), Outcome.no_answer),
    ("truncated fence", "```json\n" + rows_json()[:40], Outcome.no_answer),
    ("fence holds a list", fenced(json.dumps(GOLD)), Outcome.no_answer),
    ("rows is not a list", fenced(json.dumps({"rows": GOLD[0]})), Outcome.no_answer),
    ("duplicate keys are ambiguous", fenced('{"rows": [], "rows": []}'), Outcome.no_answer),
    ("stray brace and quote in prose", 'for the set {B, "D" and F ' + rows_json(), Outcome.correct),
]


@pytest.mark.parametrize(
    ("completion", "expected"), [c[1:] for c in EXTRACTION], ids=[c[0] for c in EXTRACTION]
)
def test_extraction(completion: str, expected: Outcome) -> None:
    assert grade(completion).outcome is expected


TYPES = [
    ("number as a string", with_change(1, "intensity", "682.6666666666666"), Outcome.incorrect, "wrong type"),
    ("integer as a string", with_change(0, "batch", "1"), Outcome.incorrect, "wrong type"),
    ("integer written as float", with_change(1, "batch", 1024.0), Outcome.correct, None),
    ("integer off by a fraction", with_change(1, "batch", 1024.5), Outcome.incorrect, "exactly"),
    ("boolean for an integer", with_change(0, "batch", True), Outcome.incorrect, "wrong type"),
    ("integer for a boolean", with_change(0, "fits", 1), Outcome.incorrect, "wrong type"),
    ("string for a boolean", with_change(0, "fits", "true"), Outcome.incorrect, "wrong type"),
    ("string case matters", with_change(0, "bound", "Memory"), Outcome.incorrect, "not equal"),
    ("null required", with_change(0, "note", 0), Outcome.incorrect, "wrong type"),
    ("null for a number", with_change(0, "intensity", None), Outcome.incorrect, "wrong type"),
    ("list for a number", with_change(0, "intensity", [0.9995]), Outcome.incorrect, "wrong type"),
    ("integer beyond float range for a float", with_change(1, "intensity", 10**400), Outcome.incorrect,
     "out of range"),
    ("huge integer for an integer", with_change(1, "batch", 1024 * 10**400), Outcome.incorrect, "exactly"),
]


@pytest.mark.parametrize(("rows", "expected", "reason"), [t[1:] for t in TYPES], ids=[t[0] for t in TYPES])
def test_types(rows: list[dict], expected: Outcome, reason: str | None) -> None:
    result = grade(fenced(rows_json(rows)))
    assert result.outcome is expected
    if reason:
        diffs = result.details["row_diffs"]
        assert any(reason in f["reason"] for d in diffs for f in d.get("fields", {}).values())


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_never_match(literal: str) -> None:
    body = rows_json().replace("682.6666666666666", literal)
    assert literal in body
    result = grade(fenced(body))
    assert result.outcome is Outcome.incorrect
    assert result.details["row_diffs"][0]["row"] == 1
    assert "never matches" in result.details["row_diffs"][0]["fields"]["intensity"]["reason"]


def test_nan_never_matches_even_at_a_loose_tolerance() -> None:
    result = grade_rows([{"x": 1.0}], '{"rows": [{"x": NaN}]}', tolerance=0.5)
    assert result.outcome is Outcome.incorrect


TOLERANCE = [
    ("exact", 682.6666666666666, Outcome.correct),
    ("reordered arithmetic (1e-15)", 682.6666666666667, Outcome.correct),
    ("1e-10 relative", 682.6666666666666 * (1 + 1e-10), Outcome.correct),
    ("2e-9 relative", 682.6666666666666 * (1 + 2e-9), Outcome.incorrect),
    ("one part in a million", 682.6666666666666 * (1 + 1e-6), Outcome.incorrect),
    ("rounded to 2 decimals", 682.67, Outcome.incorrect),
    ("factor of 2", 682.6666666666666 * 2, Outcome.incorrect),
    ("missing (N-1)/N with N=64", 682.6666666666666 * 64 / 63, Outcome.incorrect),
]


@pytest.mark.parametrize(("value", "expected"), [t[1:] for t in TOLERANCE], ids=[t[0] for t in TOLERANCE])
def test_float_tolerance(value: float, expected: Outcome) -> None:
    assert grade(fenced(rows_json(with_change(1, "intensity", value)))).outcome is expected


def test_tolerance_override_loosens_the_comparison() -> None:
    completion = fenced(rows_json(with_change(1, "intensity", 682.67)))
    assert grade_rows(GOLD, completion, tolerance=1e-5).outcome is Outcome.correct


STRUCTURE = [
    ("fields reordered", [dict(reversed(list(r.items()))) for r in GOLD], Outcome.correct),
    ("rows reordered", list(reversed(GOLD)), Outcome.incorrect),
    ("missing field", [GOLD[0], {k: v for k, v in GOLD[1].items() if k != "fits"}], Outcome.incorrect),
    ("extra field", [GOLD[0], {**GOLD[1], "unit": "FLOPs/byte"}], Outcome.incorrect),
    (
        "renamed field",
        [GOLD[0], {("Bound" if k == "bound" else k): v for k, v in GOLD[1].items()}],
        Outcome.incorrect,
    ),
    ("one row missing", GOLD[:1], Outcome.incorrect),
    ("one row too many", [*GOLD, GOLD[1]], Outcome.incorrect),
    ("no rows", [], Outcome.incorrect),
    ("row is not an object", [GOLD[0], [1024, 682.6666666666666]], Outcome.incorrect),
]


@pytest.mark.parametrize(("rows", "expected"), [s[1:] for s in STRUCTURE], ids=[s[0] for s in STRUCTURE])
def test_structure(rows: list, expected: Outcome) -> None:
    assert grade(fenced(rows_json(rows))).outcome is expected


def test_reordered_rows_are_reported_as_such() -> None:
    result = grade(fenced(rows_json(list(reversed(GOLD)))))
    assert result.details["reordered"] is True
    assert "order" in result.explanation
    assert result.reward == 0.0


def test_evidence_names_row_field_and_values() -> None:
    result = grade(fenced(rows_json(with_change(1, "intensity", 683))))
    (diff,) = result.details["row_diffs"]
    assert diff["row"] == 1
    assert diff["fields"]["intensity"]["expected"] == 682.6666666666666
    assert diff["fields"]["intensity"]["got"] == 683
    assert result.details["rows_right"] == 1
    assert result.explanation == "1 of 2 rows match"
    missing = grade(fenced(rows_json([GOLD[0], {k: v for k, v in GOLD[1].items() if k != "note"}])))
    assert missing.details["row_diffs"][0]["missing_fields"] == ["note"]


PARTIAL = [
    ("off: one row wrong", False, with_change(1, "bound", "memory"), Outcome.incorrect, 0.0),
    ("on: one row wrong", True, with_change(1, "bound", "memory"), Outcome.partial, 0.5),
    ("on: all right", True, GOLD, Outcome.correct, 1.0),
    (
        "on: none right",
        True,
        with_change(0, "batch", 7)[:1] + with_change(1, "batch", 7)[1:],
        Outcome.incorrect,
        0.0,
    ),
    (
        "on: padding cannot help",
        True,
        [GOLD[0], with_change(1, "batch", 7)[1], GOLD[1], GOLD[1]],
        Outcome.partial,
        0.25,
    ),
    ("on: a missing row costs its share", True, GOLD[:1], Outcome.partial, 0.5),
]


@pytest.mark.parametrize(
    ("on", "rows", "expected", "reward"), [p[1:] for p in PARTIAL], ids=[p[0] for p in PARTIAL]
)
def test_partial_credit(on: bool, rows: list, expected: Outcome, reward: float) -> None:
    result = grade(fenced(rows_json(rows)), partial_credit=on)
    assert result.outcome is expected
    assert result.reward == pytest.approx(reward)


@pytest.mark.parametrize(
    "completion",
    [
        "{" * 100_000,
        '{"a":' * 30_000,
        '{"a":' * 10_000 + "x" + "}" * 10_000,
        '{"' * 50_000,
        "```json\n" * 10_000,
    ],
    ids=["braces", "open-nesting", "closed-nesting", "quotes", "fences"],
)
def test_degenerate_output_is_no_answer(completion: str) -> None:
    assert grade(completion).outcome is Outcome.no_answer


def test_inline_reference_builds_a_gradeable_task() -> None:
    task = reference_task({"rows": GOLD}, Settings())
    assert task.grading == "rows" and task.id == "" and task.tolerance == 1e-9
    assert grade_rows(task.gold, fenced(rows_json()), tolerance=task.tolerance).outcome is Outcome.correct
    from_text = reference_task(json.dumps({"rows": GOLD}), Settings())
    assert from_text.gold == task.gold


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("not json", "not valid JSON"),
        ([{"a": 1}], "must be an object"),
        ({"answer": []}, "must be an object"),
        ({"rows": []}, "non-empty list"),
        ({"rows": {"a": 1}}, "non-empty list"),
        ({"rows": [1, 2]}, "row 0 must be a non-empty object"),
        ({"rows": [{}]}, "row 0 must be a non-empty object"),
        ({"rows": [{"a": [1]}]}, "scalars"),
        ({"rows": [{"a": float("nan")}]}, "finite"),
        ({"rows": [{"a": 1}] * 1001}, "more than"),
    ],
)
def test_inline_reference_rejects_unusable_labels(reference: object, message: str) -> None:
    with pytest.raises(InvalidRowsReference, match=message):
        reference_task(reference, Settings())

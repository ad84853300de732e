"""The rows order check explains a wrong answer ("right rows, wrong order"): it must find the
reorder a reference search would find, and never cost more than a bounded number of row
comparisons per expected row (it used to compare every pair: 26 KB of rows cost 0.75 s)."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from app.graders import rows
from app.graders.rows import compare_row, grade_rows


def reordered_by_search(gold: list[dict], got: list) -> bool:
    """The reference: try every assignment (tiny tables only)."""
    if len(gold) != len(got):
        return False
    return any(all(compare_row(g, got[j], tolerance=1e-9)["ok"] for g, j in zip(gold, order, strict=True))
               for order in itertools.permutations(range(len(got))))


def table(seed: int, n: int) -> list[dict]:
    rng = random.Random(seed)
    return [{"name": rng.choice("abc"), "flag": rng.random() < 0.5, "x": rng.choice([1.5, 2.5, 3.25]),
             "k": rng.randint(0, 2)} for _ in range(n)]


@pytest.mark.parametrize("seed", range(40))
def test_small_tables_agree_with_a_search_over_every_order(seed: int) -> None:
    rng = random.Random(seed)
    gold = table(seed, rng.randint(2, 6))
    got = [dict(r) for r in gold]
    rng.shuffle(got)
    if rng.random() < 0.4:  # sometimes one value is wrong, so no order matches
        victim = rng.choice(got)
        victim["x"] = victim["x"] * 2
    result = grade_rows(gold, json.dumps({"rows": got}), tolerance=1e-9)
    expected = reordered_by_search(gold, got) and got != gold
    assert result.details.get("reordered", False) is expected


@pytest.mark.parametrize("n", [100, 1000])
def test_the_worst_order_costs_a_bounded_number_of_comparisons(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # One bucket (every exact field equal) and the rows reversed: the pairwise check's worst case.
    gold = [{"name": "r", "x": i + 0.5} for i in range(n)]
    calls = 0
    real = rows.compare_row

    def counted(*args, **kwargs):
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(rows, "compare_row", counted)
    result = grade_rows(gold, json.dumps({"rows": gold[::-1]}), tolerance=1e-9)
    assert result.reward == 0.0  # the order is part of the answer, whatever the check explains
    # n for the row-by-row verdicts, then at most the order check's budget
    assert calls <= n + rows._ORDER_CHECK_BUDGET_PER_ROW * n + 64


def test_a_reorder_with_distinct_keys_is_found_at_any_size() -> None:
    gold = [{"id": f"row-{i}", "x": i * 0.25} for i in range(1000)]
    result = grade_rows(gold, json.dumps({"rows": gold[::-1]}), tolerance=1e-9)
    assert result.details["reordered"] is True


@pytest.mark.parametrize("candidate", [
    [{"id": "a", "x": True}, {"id": "b", "x": 1.0}],  # a boolean is not the number 1
    [{"id": "b", "x": [1.0]}, {"id": "a", "x": 0.5}],  # a list where a number is expected
    [{"id": "b", "x": 1.0, "y": 2}, {"id": "a", "x": 0.5}],  # an extra field
])
def test_near_misses_are_not_reported_as_reorders(candidate: list) -> None:
    gold = [{"id": "a", "x": 0.5}, {"id": "b", "x": 1.0}]
    result = grade_rows(gold, json.dumps({"rows": candidate}), tolerance=1e-9)
    assert result.reward == 0.0 and "reordered" not in result.details

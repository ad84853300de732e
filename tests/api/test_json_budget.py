"""Large bodies are scanned before the parse that holds the interpreter lock: an element of
hundreds of thousands of values is refused, a legitimate batch of large references is not."""

from __future__ import annotations

import json

import pytest

from app.api.json_budget import MAX_ELEMENT_VALUES, check_json_budget
from app.errors import ApiError


def test_a_label_of_many_keys_is_refused() -> None:
    body = {"items": [{"label": {f"k{j}": j for j in range(MAX_ELEMENT_VALUES)}, "completion": "1 s"}]}
    with pytest.raises(ApiError) as refused:
        check_json_budget(json.dumps(body).encode(), 512)
    assert refused.value.status == 413 and refused.value.error == "body_too_complex"


def test_a_long_flat_list_is_refused() -> None:
    with pytest.raises(ApiError):
        check_json_budget(json.dumps({"labels": [1] * 600, "query": ["x"]}).encode(), 512)


def test_commas_and_brackets_inside_strings_do_not_count() -> None:
    text = '[{"a": 1}, ' * 20_000 + '\\" ,' * 10_000
    check_json_budget(json.dumps({"items": [{"completion": text}] * 4}).encode(), 512)


def test_a_batch_of_thousand_row_references_passes() -> None:
    rows = [{"name": "r", "x": i + 0.5} for i in range(1000)]
    item = {"reference": {"rows": rows}, "completion": json.dumps({"rows": rows[::-1]})}
    check_json_budget(json.dumps({"items": [item] * 100}).encode(), 512)


def test_a_top_level_object_of_many_keys_is_refused() -> None:
    """Not a list, so no element bound applies: its keys are bounded as a list's entries are
    (GetRewardRequest ignores unknown keys, so they would all be parsed)."""
    body = {f"k{j}": 1 for j in range(600)} | {"query": ["x"]}
    with pytest.raises(ApiError) as refused:
        check_json_budget(json.dumps(body).encode(), 512)
    assert refused.value.status == 413 and "keys" in refused.value.detail
    check_json_budget(json.dumps({f"k{j}": 1 for j in range(500)}).encode(), 512)

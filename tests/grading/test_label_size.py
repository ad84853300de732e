"""A label is small: one of hundreds of thousands of keys is an unscored bad label, found after
looking at no more than the bound, while a reference of a thousand rows is still read."""

from __future__ import annotations

import pytest

from app.grading.labels import MAX_LABEL_CHARS, MAX_LABEL_NODES, LabelError, requests_for, target_from_label
from app.grading.models import GradeRequest


@pytest.mark.parametrize("label", [
    {f"k{j}": j for j in range(MAX_LABEL_NODES + 1)},
    [[1, 2]] * MAX_LABEL_NODES,
    {"values": ["x" * (MAX_LABEL_CHARS + 1)]},
    "[" + ",".join(["1"] * (MAX_LABEL_NODES + 1)) + "]",
], ids=["many-keys", "nested-lists", "long-string", "json-text"])
def test_an_oversized_label_is_a_bad_label(label: object) -> None:
    with pytest.raises(LabelError):
        target_from_label(label)
    (slot,) = requests_for([(label, "Final answer: 1 s")])
    assert not isinstance(slot, GradeRequest) and slot.details["unscored"] == "bad_label"


def test_a_reference_of_a_thousand_rows_is_read() -> None:
    label = {"rows": [{"name": "r", "x": i + 0.5} for i in range(1000)]}
    assert target_from_label(label) == {"reference": label}

"""The reader of the pages' examples cannot be edited around: a grading example whose answer is
missing, renamed or written in a shape the reader skips is an error, not an example left
unchecked while another one on the page keeps the guard in test_page_examples.py happy."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs_examples.examples import curl_examples, shown_fields

REPO = Path(__file__).resolve().parents[2]
SHOWN = '# answers {"reward": 0.0, "outcome": "incorrect", ...}'


def _api_page_with(tmp_path: Path, old: str, new: str) -> Path:
    text = (REPO / "docs" / "api.md").read_text()
    assert text.count(old) == 1, old
    page = tmp_path / "api.md"
    page.write_text(text.replace(old, new))
    return page


def test_the_pages_as_written_are_read_in_full() -> None:
    for page in (REPO / "README.md", REPO / "docs" / "api.md"):
        posted = [e for e in curl_examples(page) if "-d" in e.argv]
        assert posted and all(e.shown for e in posted), page.name


@pytest.mark.parametrize("drifted", [
    '# gives {"reward": 1.0, "outcome": "correct", ...}',  # the answer no longer marked as one
    '# answers {"reward": 1.0, "outcome": correct, ...}',  # a value the field reader skips
    '# answers {"reward": 1.0, "details": {"why": "x"}, ...}',  # a nested value it cannot compare
    "# answers: reward 1.0",
    "",  # the answer line deleted
])
def test_a_drifted_answer_is_an_error_not_an_unchecked_example(tmp_path: Path, drifted: str) -> None:
    with pytest.raises(ValueError):
        curl_examples(_api_page_with(tmp_path, SHOWN, drifted))


def test_the_answer_reader_reads_every_shape_a_page_uses() -> None:
    assert shown_fields('# answers {"reward": 1.0, "outcome": "correct", ...}') == {"reward": 1.0,
                                                                                    "outcome": "correct"}
    assert shown_fields('# answers {"ok": true, "n": 3, "error": null}') == {"ok": True, "n": 3, "error": None}
    assert shown_fields("# a remark, not an answer") == {}

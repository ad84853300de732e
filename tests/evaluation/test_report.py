"""The accuracy-by-chapter plot shows every chapter of the book in reading order, those without a
scored rollout included (and said to be so), then groups outside the book."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.evaluation.report import accuracy_figure, summarize, write_report
from app.tasks.book.source import CHAPTERS


def _record(task: str, chapter: str | None, outcome: str, scored: bool = True) -> dict:
    return {"task_id": task, "split": "synthetic", "chapter": chapter, "grading": "numeric", "rollout": 0,
            "outcome": outcome, "scored": scored, "reward": 1.0 if outcome == "correct" else 0.0,
            "sampling_error": None}


@pytest.mark.slow  # matplotlib renders a figure
def test_every_chapter_in_book_order_with_unscored_ones_shown(tmp_path: Path) -> None:
    records = [_record("a", "sharding", "correct"), _record("b", "sharding", "incorrect"),
               _record("c", "roofline", "correct"),
               _record("d", "inference", "error", scored=False),  # run, never scored
               _record("e", None, "correct")]  # a task outside the book's chapters
    summary = summarize(records, {"model": "m", "split": "synthetic"})
    fig = accuracy_figure(summary)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == [*CHAPTERS, "none"]
    texts = {t.get_position()[1]: t.get_text() for t in ax.texts}
    by_label = dict(zip(labels, [texts[i] for i in sorted(texts)], strict=True))
    assert by_label["sharding"] == "50% (n=2)" and by_label["roofline"] == "100% (n=1)"
    assert by_label["inference"] == "no scored rollouts (1 run)"
    assert by_label["gpus"] == "no scored rollouts (0 run)"
    write_report(tmp_path, records, {"model": "m", "split": "synthetic"})
    assert (tmp_path / "accuracy_by_chapter.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

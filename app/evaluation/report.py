"""The evaluation report: every rollout as JSONL, a summary by split, chapter and grading kind
(JSON and markdown), and a PNG of accuracy by chapter.

Accuracy counts a rollout right when its outcome is ``correct``, over the rollouts that were
graded and scored: a sampling failure or a grader fault says nothing about the model, so it is
counted separately and left out of the denominators. ``pass@k`` (k = rollouts per task) is the
share of tasks with at least one correct rollout among their scored ones."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from app.tasks.book.source import CHAPTERS

GROUPS = ("split", "chapter", "grading")


def group_stats(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    scored = [r for r in records if r.get("scored")]
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in scored:
        by_task[r["task_id"]].append(r["outcome"] == "correct")
    correct = sum(r["outcome"] == "correct" for r in scored)
    return {
        "rollouts": len(records),
        "tasks": len({r["task_id"] for r in records}),
        "scored": len(scored),
        "unscored": sum(1 for r in records if r.get("sampling_error") is None and not r.get("scored")),
        "sampling_errors": sum(1 for r in records if r.get("sampling_error") is not None),
        "accuracy": correct / len(scored) if scored else None,
        "mean_reward": sum(r["reward"] for r in scored) / len(scored) if scored else None,
        "pass_at_k": sum(any(v) for v in by_task.values()) / len(by_task) if by_task else None,
    }


def summarize(records: Sequence[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    summary: dict[str, Any] = {"meta": meta, "overall": group_stats(records)}
    for key in GROUPS:
        buckets: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            buckets[str(r.get(key) or "none")].append(r)
        summary[f"by_{key}"] = {name: group_stats(rs) for name, rs in sorted(buckets.items())}
    return summary


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _table(title: str, rows: dict[str, dict[str, Any]], k: int) -> list[str]:
    lines = [f"## {title}", "", f"| {title.split()[-1]} | tasks | rollouts | scored | accuracy | pass@{k} | "
             "mean reward | unscored | sampling errors |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, s in rows.items():
        reward = "n/a" if s["mean_reward"] is None else f"{s['mean_reward']:.3f}"
        lines.append(f"| {name} | {s['tasks']} | {s['rollouts']} | {s['scored']} | {_pct(s['accuracy'])} | "
                     f"{_pct(s['pass_at_k'])} | {reward} | {s['unscored']} | {s['sampling_errors']} |")
    return [*lines, ""]


def markdown(summary: dict[str, Any]) -> str:
    meta, k = summary["meta"], summary["meta"].get("rollouts", 1)
    lines = [f"# Evaluation: {meta.get('model')} on {meta.get('split')}", ""]
    lines += [f"- {key}: {value}" for key, value in meta.items() if value is not None]
    lines.append("")
    lines += _table("Overall", {"all": summary["overall"]}, k)
    lines += _table("By split", summary["by_split"], k)
    lines += _table("By chapter", summary["by_chapter"], k)
    lines += _table("By grading kind", summary["by_grading"], k)
    return "\n".join(lines)


def chapter_rows(summary: dict[str, Any]) -> list[tuple[str, dict[str, Any] | None]]:
    """(chapter, its stats or None) for every chapter of the book in reading order, then any
    other group (tasks without a chapter): a chapter the run never scored stays visible."""
    by_chapter = summary["by_chapter"]
    rows: list[tuple[str, dict[str, Any] | None]] = [(c, by_chapter.get(c)) for c in CHAPTERS]
    rows += [(name, stats) for name, stats in by_chapter.items() if name not in CHAPTERS]
    return rows


def accuracy_figure(summary: dict[str, Any]) -> Any:
    import matplotlib  # optional (the eval extra), and slow to import: only when a plot is written

    matplotlib.use("Agg")  # files only: no display on a training node
    import matplotlib.pyplot as plt

    rows = chapter_rows(summary)
    names = [name for name, _ in rows]
    values = [100 * s["accuracy"] if s and s["accuracy"] is not None else 0.0 for _, s in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(rows), 2) + 1.5))
    bars = ax.barh(names, values, color="#4C72B0")
    for bar, (_, s) in zip(bars, rows, strict=True):
        y = bar.get_y() + bar.get_height() / 2
        if s is None or s["accuracy"] is None:
            rollouts = s["rollouts"] if s else 0
            ax.text(1, y, f"no scored rollouts ({rollouts} run)", va="center", fontsize=8, color="#777777")
        else:
            ax.text(min(bar.get_width() + 1, 101), y, f"{bar.get_width():.0f}% (n={s['scored']})", va="center",
                    fontsize=8)
    ax.set_xlim(0, 115)
    ax.set_xlabel("accuracy (% of scored rollouts correct)")
    ax.invert_yaxis()  # the book's first chapter on top
    meta = summary["meta"]
    ax.set_title(f"{meta.get('model')} on {meta.get('split')}: accuracy by chapter")
    fig.tight_layout()
    return fig


def plot_accuracy_by_chapter(summary: dict[str, Any], path: Path) -> None:
    import matplotlib.pyplot as plt  # optional and slow to import, as in accuracy_figure

    fig = accuracy_figure(summary)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> int:
    count = 0
    with path.open("w", encoding="utf-8") as out:
        for r in records:
            out.write(json.dumps(r, ensure_ascii=False) + "\n")
            count += 1
    return count


def write_report(out_dir: Path, records: Sequence[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summarize(records, meta)
    write_jsonl(out_dir / "rollouts.jsonl", records)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    (out_dir / "summary.md").write_text(markdown(summary), encoding="utf-8")
    plot_accuracy_by_chapter(summary, out_dir / "accuracy_by_chapter.png")
    return summary

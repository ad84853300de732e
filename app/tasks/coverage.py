"""The coverage map: for every chapter, its key-content items and how many tasks of each split
are tagged with each item (the items: app/tasks/key_content.py)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from app.settings import Settings
from app.tasks import registry
from app.tasks.base import Task
from app.tasks.key_content import item_ids, key_content
from app.tasks.tag_check import mistagged

log = logging.getLogger(__name__)

# Unlimited (generated) banks are counted over one sample of this many tasks, or one task per
# family when the bank lists its families: a generator covers an item if any family does.
UNLIMITED_SAMPLE = 64


@dataclass
class Coverage:
    splits: list[str]
    # item id -> split -> number of tasks tagged with it
    counts: dict[str, dict[str, int]]
    # split -> how it was counted ("all N tasks", "one task per family (12)") or why it is missing
    basis: dict[str, str] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    unknown_tags: dict[str, int] = field(default_factory=dict)
    # item id -> task ids carrying its tag although they do not compute what it needs
    # (app/tasks/tag_check.py); such tasks are not counted in ``counts``
    mistagged: dict[str, list[str]] = field(default_factory=dict)
    # question id -> why the split does not serve it (a bank's exclusions, such as the book's
    # questions that a judge cannot grade)
    excluded: dict[str, str] = field(default_factory=dict)

    def uncovered(self) -> list[str]:
        return [item for item, per in self.counts.items() if not any(per.values())]

    def covered_only_by_mistagged(self) -> list[str]:
        """Items whose every tagged task is mis-tagged: covered in name only."""
        return [item for item in self.uncovered() if self.mistagged.get(item)]

    def as_dict(self) -> dict[str, Any]:
        chapters = []
        for chapter in key_content().values():
            chapters.append({
                "chapter": chapter.chapter,
                "title": chapter.title,
                "items": [
                    {"id": item.id, "title": item.title, "tasks": dict(self.counts[item.id]),
                     "total": sum(self.counts[item.id].values())}
                    for item in chapter.items
                ],
            })
        return {
            "splits": self.splits,
            "basis": self.basis,
            "unavailable": self.unavailable,
            "uncovered": self.uncovered(),
            "mistagged": {item: ids for item, ids in self.mistagged.items() if ids},
            "covered_only_by_mistagged": self.covered_only_by_mistagged(),
            "excluded": dict(self.excluded),
            "chapters": chapters,
        }


def _tasks_of(bank: Any) -> tuple[list[Task], str]:
    if bank.size() is not None and hasattr(bank, "tasks"):
        tasks = bank.tasks()
        return tasks, f"all {len(tasks)} tasks"
    families = bank.info().get("families") or []
    if families and hasattr(bank, "one_per_family"):
        return bank.one_per_family(), f"one generated task per family ({len(families)} families)"
    n = len(families) or UNLIMITED_SAMPLE
    tasks = bank.batch(seed=0, n=n)
    if families:
        return tasks, f"one generated task per family ({len(families)} families)"
    return tasks, f"a sample of {n} generated tasks"


def compute_coverage(settings: Settings, splits: list[str] | None = None) -> Coverage:
    """Count tasks per item for each split. A split that fails to load is reported, not fatal:
    the map is most useful exactly when something is missing."""
    names = splits if splits is not None else registry.split_names()
    known = item_ids()
    counts = {item: dict.fromkeys(names, 0) for item in sorted(known, key=_item_order())}
    cov = Coverage(splits=list(names), counts=counts)
    for split in names:
        try:
            tasks, basis = _tasks_of(registry.get_bank(split, settings))
        except Exception as exc:  # one broken split must not hide the others' coverage
            log.warning("coverage: split %s unavailable: %s", split, exc)
            cov.unavailable[split] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        cov.basis[split] = basis
        for exclusion in getattr(registry.get_bank(split, settings), "exclusions", ()):
            cov.excluded[exclusion.id] = exclusion.reason
        for task in tasks:
            wrong = mistagged(task)
            for tag in set(task.tags):
                if tag in wrong:
                    cov.mistagged.setdefault(tag, []).append(task.id)
                elif tag in known:
                    counts[tag][split] += 1
                elif "." in tag:
                    cov.unknown_tags[tag] = cov.unknown_tags.get(tag, 0) + 1
    return cov


def _item_order():
    order = {item.id: i for i, item in enumerate(i for c in key_content().values() for i in c.items)}
    return lambda item_id: order[item_id]


def render_markdown(cov: Coverage) -> str:
    """The coverage table as Markdown (for the README and the CLI)."""
    lines = [
        "| chapter | key-content item | " + " | ".join(cov.splits) + " | total |",
        "|---|---|" + "---:|" * (len(cov.splits) + 1),
    ]
    for chapter in key_content().values():
        for item in chapter.items:
            per = cov.counts[item.id]
            total = sum(per.values())
            cells = [str(per[s]) if s not in cov.unavailable else "n/a" for s in cov.splits]
            mark = "" if total else " **(uncovered)**"
            row = f"| {chapter.chapter} | `{item.id}` {item.title}{mark} | " + " | ".join(cells)
            lines.append(f"{row} | {total} |")
    uncovered = cov.uncovered()
    lines.append("")
    lines.append(f"{len(uncovered)} of {len(cov.counts)} key-content items have no task in any split"
                 + (f": {', '.join(uncovered)}." if uncovered else "."))
    for item_id, ids in sorted(cov.mistagged.items()):
        lines.append(f"- `{item_id}`: not counted for {len(ids)} mis-tagged task(s): {', '.join(ids[:5])}.")
    for split, basis in cov.basis.items():
        lines.append(f"- `{split}`: counted over {basis}.")
    if cov.excluded:
        lines.append("")
        lines.append(f"Excluded from their splits ({len(cov.excluded)}):")
        lines += [f"- `{qid}`: {why}" for qid, why in sorted(cov.excluded.items())]
    for split, why in cov.unavailable.items():
        lines.append(f"- `{split}`: unavailable ({why}).")
    return "\n".join(lines)

"""``scaling-grader export``: write any split's public task views to JSONL or Parquet, with a
dataset card. Only what ``Task.public()`` shows leaves (plus the effective tolerance): never
the gold answer, hidden cases, oracle code or private ``hidden`` fields.

The ``tasks`` split keeps its own published format (``app.tasks.tasks.export``: records with the
expected rows, which that split publishes by design, and its own card).

    scaling-grader export --split exam --format parquet --out export/exam
    scaling-grader export --split synthetic -n 5000 --seed 3 --format jsonl"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from app.commands import bank_or_complain
from app.settings import get_settings
from app.tasks.base import parse_chapters
from app.tasks.registry import get_bank
from app.tasks.splits import tolerance_for
from app.tasks.tasks.export import ExportUnavailable, export

DEFAULT_GENERATED = 1000  # tasks written for an unlimited (generated) split unless -n says otherwise


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="write a split's public tasks and a dataset card to a directory")
    p.add_argument("--split", default="tasks")
    p.add_argument("--format", choices=("jsonl", "parquet"), default="jsonl")
    p.add_argument("--out", type=Path, help="output directory (default: export/<split>)")
    p.add_argument("-n", type=int, help=f"number of tasks (default: all; {DEFAULT_GENERATED} of a generated split)")
    p.add_argument("--seed", type=int, default=0, help="order (and, for a generated split, which tasks)")
    p.add_argument("--chapters", help="comma-separated chapter filter")
    p.set_defaults(func=run)


OWN_FORMAT = ("tasks",)


def export_own_format(args: argparse.Namespace) -> int:
    try:
        paths = export(args.out or Path("export") / args.split, args.format)
    except ExportUnavailable as exc:
        print(str(exc), file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def public_rows(split: str, *, n: int | None, seed: int, chapters: list[str] | None) -> list[dict[str, Any]]:
    settings = get_settings()
    bank = get_bank(split, settings)
    count = n if n is not None else (bank.size() or DEFAULT_GENERATED)
    # task_id repeats id under the name TRL reward functions read by default (scaling_book.trl).
    return [{**task.public(), "task_id": task.id, "tolerance": task.tolerance or tolerance_for(task.split, settings)}
            for task in bank.batch(seed=seed, n=count, chapters=chapters)]


def write_rows(rows: list[dict[str, Any]], path: Path, fmt: str) -> None:
    if fmt == "jsonl":
        with path.open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
        return
    from datasets import Dataset  # optional (the export extra); only for Parquet
    # meta differs in shape from task to task (generator parameters): one JSON column keeps
    # Arrow from having to unify the structs.
    flat = [{**row, "meta": json.dumps(row["meta"], sort_keys=True)} for row in rows]
    Dataset.from_list(flat).to_parquet(str(path))


def dataset_card(split: str, description: str, rows: list[dict[str, Any]], data_file: str, fmt: str) -> str:
    kinds = Counter(r["grading"] for r in rows)
    chapters = Counter(r["chapter"] or "none" for r in rows)
    meta_note = "a JSON string" if fmt == "parquet" else "an object"
    lines = [
        "---",
        "license: mit",
        f"pretty_name: scaling-grader {split} split",
        "configs:",
        "- config_name: default",
        f"  data_files: {data_file}",
        "---",
        "",
        f"# scaling-grader: `{split}` split",
        "",
        description,
        "",
        f"{len(rows)} tasks. Grading kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ".",
        "",
        "| chapter | tasks |",
        "|---|---:|",
        *[f"| {name} | {count} |" for name, count in sorted(chapters.items())],
        "",
        "## Fields",
        "",
        "- `id`: stable task id; grade a completion with `POST /v1/grade {\"task_id\": id, \"completion\": ...}`",
        "- `task_id`: the same id, in the column TRL reward functions from `scaling_book.trl` read by default",
        "- `split`, `chapter` (a chapter of the book), `tags` (key-content items), `grading` (grading kind)",
        "- `prompt`: the question as a model sees it",
        f"- `meta`: public extras ({meta_note}); `tolerance`: relative tolerance numeric answers are graded at",
        "",
        "Reference answers, hidden test cases and oracle code are not in this export: rewards come",
        "from the grading service, so the data can be shared without leaking the answers.",
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.split in OWN_FORMAT:
        return export_own_format(args)
    if args.n is not None and args.n < 1:
        print("-n must be positive", file=sys.stderr)
        return 2
    bank = bank_or_complain(args.split, "export")
    if bank is None:
        return 2
    rows = public_rows(args.split, n=args.n, seed=args.seed, chapters=parse_chapters(args.chapters))
    if args.format == "parquet" and importlib.util.find_spec("datasets") is None:
        print("Parquet export needs the datasets package: pip install 'scaling-grader[export]'", file=sys.stderr)
        return 2
    out: Path = args.out or Path("export") / args.split
    out.mkdir(parents=True, exist_ok=True)
    data_file = f"{args.split}.{args.format}"
    write_rows(rows, out / data_file, args.format)
    (out / "README.md").write_text(dataset_card(args.split, bank.description, rows, data_file, args.format),
                                   encoding="utf-8")
    print(f"{len(rows)} tasks -> {out / data_file} (card: {out / 'README.md'})")
    return 0

"""Write the ``tasks`` split as a dataset: one record per task plus a dataset card whose field
table is generated from the same field list as the records."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.settings import get_settings
from app.tasks.splits import is_held_out
from app.tasks.tasks.bank import RowsTask, build_tasks
from app.tasks.tasks.conventions import API_DESCRIPTION


def digest(expected: Mapping[str, Any]) -> str:
    """SHA-256 of the expected outputs, as published in the dataset card."""
    return hashlib.sha256(json.dumps(expected, sort_keys=True).encode()).hexdigest()


# (name, type in the files, meaning). The records and the card's table both come from this list.
EXPORT_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("task_id", "string", "stable id, `sc-000` to `sc-034` (served as `tasks/sc-NNN`)"),
    ("category", "string", "roofline, flops, memory, sharding or inference"),
    ("prompt", "string", "the prompt exactly as `/v1/tasks` serves it: the shared conventions, then the question "
                         "with every number it needs and the exact shape of the answer"),
    ("api_description", "string", "the conventions preamble alone, as a separate column (the prompt already "
                                  "starts with it; same text in every record)"),
    (
        "expected_output",
        "string (JSON)",
        'the expected answer `{"rows": [...]}` computed by the reference solution, serialised as JSON text',
    ),
)
FORMATS = ("jsonl", "parquet")


class ExportUnavailable(RuntimeError):
    """The export cannot be written: the requested format needs a package that is not installed,
    or the split is held out on this deployment."""


def record(rt: RowsTask) -> dict[str, Any]:
    # expected_output is JSON text, not a nested object: row fields differ between tasks, and one
    # column type keeps the files loadable by `datasets` (Arrow needs a single schema).
    out = rt.record()
    out["expected_output"] = json.dumps(rt.expected_output)
    return {name: out[name] for name, _, _ in EXPORT_FIELDS}


def records() -> list[dict[str, Any]]:
    return [record(rt) for rt in build_tasks()]


def field_table() -> str:
    lines = ["| field | type | description |", "|---|---|---|"]
    lines += [f"| `{name}` | {kind} | {doc} |" for name, kind, doc in EXPORT_FIELDS]
    return "\n".join(lines)


def category_table(recs: list[dict[str, Any]]) -> str:
    counts = Counter(r["category"] for r in recs)
    lines = ["| category | tasks |", "|---|---|"]
    lines += [f"| {cat} | {n} |" for cat, n in counts.items()]
    lines.append(f"| total | {len(recs)} |")
    return "\n".join(lines)


def dataset_card(recs: list[dict[str, Any]], data_file: str) -> str:
    outputs = {r["task_id"]: json.loads(r["expected_output"]) for r in recs}
    return f"""---
license: mit
pretty_name: scaling-grader tasks split
task_categories:
- question-answering
configs:
- config_name: default
  data_files: {data_file}
---

# scaling-grader `tasks` split

{len(recs)} self-contained tasks on scaling transformer training and inference: rooflines, FLOP
counts, memory, sharding and collectives, inference. Every prompt states all the numbers it needs,
so no answer depends on remembering a chip's specification. The answer to each task is a JSON
object `{{"rows": [...]}}`.

## Fields

{field_table()}

## Tasks per category

{category_table(recs)}

## Grading

The answer is the last fenced JSON block of a completion or, when there is none, the last top-level
JSON object with a `rows` key. Rows are compared in order and fields by name: numbers written as
floats within 1e-9 relative, integers, strings, booleans and null exactly; the row count and the
field names must match exactly. `scaling-grader` serves the split as `GET /v1/tasks?split=tasks`
and grades it with `POST /v1/grade`.

Every `expected_output` is computed by the task's reference solution, not typed in;
`scaling-grader tasks verify` re-executes the solutions and checks that plausible wrong formulas
(a missing (N-1)/N, a factor of 2, one part in a million) are graded wrong.

SHA-256 of the expected outputs: `{digest(outputs)}`

## Conventions shared by all tasks

The `api_description` field of every record holds this text:

```text
{API_DESCRIPTION}
```
"""


def export(out_dir: Path, fmt: str) -> list[Path]:
    """Write the split and its card to out_dir; the paths written."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
    if is_held_out("tasks", get_settings()):
        # The records carry the expected rows: published, they would be a held-out split's gold.
        raise ExportUnavailable("the tasks split is held out on this deployment (SCALING_GRADER_HELD_OUT__SPLITS): "
                                "its export would publish the expected rows; not written")
    recs = records()
    data_file = f"tasks.{fmt}"
    out_dir.mkdir(parents=True, exist_ok=True)
    data_path = out_dir / data_file
    if fmt == "jsonl":
        with data_path.open("w", encoding="utf-8") as fh:
            for r in recs:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
    else:
        try:
            import datasets  # optional (the export extra)
        except ImportError:
            raise ExportUnavailable(
                "parquet export needs the 'datasets' package: pip install 'scaling-grader[export]'"
            ) from None
        datasets.Dataset.from_list(recs).to_parquet(str(data_path))
    card = out_dir / "README.md"
    card.write_text(dataset_card(recs, data_file), encoding="utf-8")
    return [data_path, card]

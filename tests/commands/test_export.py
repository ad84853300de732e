"""``scaling-grader export`` through the console script: every split, public fields only, a
dataset card whose counts come from the bank."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from app.settings import get_settings
from app.tasks.registry import get_bank
from app.tasks.splits import tolerance_for
from tests.support.server import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.low_priority]  # commands: left out of `make test-fast`


def export(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "export", *args], cwd=ROOT, env=dict(os.environ),
                          capture_output=True, text=True, timeout=600)  # low priority: minutes without a CPU


def _read(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    import datasets

    return [{**row, "meta": json.loads(row["meta"])} for row in datasets.Dataset.from_parquet(str(path))]


@pytest.mark.parametrize(("split", "fmt", "extra"), [
    ("synthetic", "jsonl", ["-n", "40", "--seed", "7"]),
    ("synthetic", "parquet", ["-n", "25", "--seed", "8", "--chapters", "roofline,sharding"]),
    ("exam", "jsonl", []),
    ("exam", "parquet", ["--chapters", "inference"]),
])
def test_export_writes_public_views_only(tmp_path: Path, split: str, fmt: str, extra: list[str]) -> None:
    done = export("--split", split, "--format", fmt, "--out", str(tmp_path), *extra)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _read(tmp_path / f"{split}.{fmt}")
    settings = get_settings()
    bank = get_bank(split, settings)
    for row in rows:
        task = bank.get(row["id"])
        public = json.loads(json.dumps(task.public()))  # tuples become lists, as in the files
        assert row == {**public, "task_id": task.id, "tolerance": task.tolerance or tolerance_for(split, settings)}
        if task.grading == "judge":  # a reference answer is long text: it must appear nowhere
            assert str(task.gold) not in json.dumps(row)
    chapters = Counter(r["chapter"] for r in rows)
    if "--chapters" in extra:
        assert set(chapters) <= set(extra[extra.index("--chapters") + 1].split(","))
    if split == "exam" and not extra:
        assert len(rows) == bank.size()
    card = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert f"data_files: {split}.{fmt}" in card and f"{len(rows)} tasks." in card
    for chapter, count in chapters.items():
        assert f"| {chapter} | {count} |" in card


def test_tasks_split_keeps_its_own_published_format(tmp_path: Path) -> None:
    done = export("--split", "tasks", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = _read(tmp_path / "tasks.jsonl")
    assert len(rows) == get_bank("tasks", get_settings()).size()
    assert "expected_output" in rows[0]


def test_unknown_split_is_refused_briefly(tmp_path: Path) -> None:
    done = export("--split", "nope", "--out", str(tmp_path))
    assert done.returncode == 2 and "unknown split" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(("split", "fmt"), [("synthetic", "parquet"), ("tasks", "jsonl"), ("tasks", "parquet")])
def test_exported_datasets_feed_trl_reward_functions_unchanged(tmp_path: Path, server_url: str, split: str,
                                                                fmt: str) -> None:
    """TRL (1.16, GRPOTrainer._calculate_rewards) passes every dataset column but the prompt and
    completion to reward functions by name: the default reward function must find its labels."""
    import datasets

    from scaling_book.trl import LABEL_COLUMN, make_reward_func
    from tests.support.oracle import right

    done = export("--split", split, "--format", fmt, "--out", str(tmp_path), "-n", "6", "--seed", "4")
    assert done.returncode == 0, done.stderr[-2000:]
    data_file = tmp_path / f"{split}.{fmt}"
    ds = (datasets.Dataset.from_parquet(str(data_file)) if fmt == "parquet"
          else datasets.Dataset.from_json(str(data_file)))
    inputs = ds.to_list()[:6]
    assert LABEL_COLUMN in ds.column_names and "prompt" in ds.column_names
    if split == "tasks":  # this split publishes its expected rows: answer with them, and wrongly
        completions = ["```json\n" + r["expected_output"] + "\n```" for r in inputs]
    else:
        completions = [right(r["id"]) for r in inputs]
    completions[0] = "Final answer: nothing useful"
    keys = [k for k in inputs[0] if k not in ("prompt", "completion", "completion_ids")]
    reward_kwargs = {k: [row[k] for row in inputs] for k in keys}
    rewards = make_reward_func(server_url)(prompts=[r["prompt"] for r in inputs], completions=completions,
                                           completion_ids=None, **reward_kwargs)
    assert rewards == [0.0] + [1.0] * (len(inputs) - 1)

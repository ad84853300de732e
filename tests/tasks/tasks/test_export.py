"""Export of the tasks split: jsonl, parquet through `datasets`, and the dataset card."""

from __future__ import annotations

import argparse
import builtins
import json
import re
from pathlib import Path

import pytest

from app.commands import export as export_command
from app.tasks.tasks.export import EXPORT_FIELDS, export


def card_fields(card: str) -> list[tuple[str, str]]:
    section = card.split("## Fields", 1)[1].split("##", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \| ([^|]+?) \|", section, flags=re.MULTILINE)


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    export_command.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_jsonl_export_matches_bank_and_card(tmp_path: Path, bank) -> None:
    assert run_cli(["export", "--split", "tasks", "--format", "jsonl", "--out", str(tmp_path)]) == 0
    lines = (tmp_path / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 35
    card = (tmp_path / "README.md").read_text(encoding="utf-8")
    table = card_fields(card)
    # The card's field table is exactly the fields of every record, in order, with their types.
    assert [name for name, _ in table] == [name for name, _, _ in EXPORT_FIELDS]
    for r in records:
        assert list(r) == [name for name, _ in table]
        for name, kind in table:
            assert isinstance(r[name], str), (name, kind)
        expected = json.loads(r["expected_output"])  # declared "string (JSON)"
        assert expected["rows"] == list(bank.get(f"tasks/{r['task_id']}").gold)
    assert "data_files: tasks.jsonl" in card
    assert "| total | 35 |" in card and "| flops | 8 |" in card


@pytest.mark.slow
def test_parquet_export_round_trips_through_datasets(tmp_path: Path) -> None:
    import datasets  # in the test extra: this test must run, never skip

    paths = export(tmp_path, "parquet")
    assert paths[0].name == "tasks.parquet"
    ds = datasets.Dataset.from_parquet(str(paths[0]))
    assert ds.num_rows == 35
    assert ds.column_names == [name for name, _, _ in EXPORT_FIELDS]
    jsonl = export(tmp_path / "j", "jsonl")[0]
    first = json.loads(jsonl.read_text(encoding="utf-8").splitlines()[0])
    assert ds[0] == first


def test_parquet_without_datasets_says_what_to_install(tmp_path: Path, monkeypatch, capsys) -> None:
    real_import = builtins.__import__

    def no_datasets(name, *args, **kwargs):
        if name == "datasets":
            raise ImportError("No module named 'datasets'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    assert run_cli(["export", "--format", "parquet", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "datasets" in err and "scaling-grader[export]" in err and "Traceback" not in err
    assert not (tmp_path / "tasks.parquet").exists()


def test_unknown_split_is_refused(tmp_path: Path, capsys) -> None:
    assert run_cli(["export", "--split", "no-such-split", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown split" in err and "Traceback" not in err

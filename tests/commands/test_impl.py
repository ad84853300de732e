"""The ``impl`` CLI commands, run through a parser holding just that module (the lead's CLI
lists it alongside the others)."""

from __future__ import annotations

import argparse
import json

import pytest

from app.commands import impl
from app.tasks.impl.exercises import ALL


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scaling-grader")
    impl.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_exercise_table_lists_every_exercise(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["impl", "exercises"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| `impl/")]
    assert [r.split("`")[1] for r in rows] == [e.task_id for e in ALL]
    assert f"{len(ALL)} exercises, {sum(e.case_count for e in ALL)} hidden cases per grade" in out


@pytest.mark.slow
def test_sandbox_status_reports_the_tier_in_force(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["impl", "sandbox"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert status["ok"] is True
    assert status["tier"] == next(p["tier"] for p in status["probes"] if p["ok"])

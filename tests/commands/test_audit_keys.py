"""`scaling-grader audit`: every numeric key of the finite splits re-derived from code; zero
disagreements on the committed banks, and a tampered key, a dropped printed figure or a changed
rows answer is reported by task id."""

from __future__ import annotations

import json
from dataclasses import replace

from app.cli import main
from app.commands.audit_keys import audit_book, audit_exam, audit_rows
from app.tasks import registry


def _tasks(split: str, settings):
    return registry.get_bank(split, settings).tasks()


def test_audit_command_finds_no_disagreement(service_env, capsys) -> None:
    assert main(["audit"]) == 0
    out = capsys.readouterr().out
    assert "DISAGREE" not in out
    for split in ("book", "exam", "tasks"):
        line = next(x for x in out.splitlines() if x.startswith(f"{split}: "))
        keys = int(line.split()[1])
        assert keys > 20 and line.endswith(" 0 disagreements"), line
    assert out.rstrip().endswith("total: 0 disagreements")


def test_audit_json_counts_every_numeric_key(service_env, capsys) -> None:
    assert main(["audit", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["disagreements"] == 0
    book_keys = sum(len(t.gold) for t in _tasks("book", service_env) if t.grading == "numeric")
    exam_keys = sum(len(t.gold) for t in _tasks("exam", service_env) if t.grading == "numeric")
    assert data["splits"]["book"]["keys"] == book_keys
    assert data["splits"]["exam"]["keys"] == exam_keys
    assert data["splits"]["tasks"]["keys"] == len(_tasks("tasks", service_env))


def test_a_tampered_book_key_is_reported(service_env) -> None:
    tasks = [replace(t, gold=("150 ms",)) if t.id == "book/tpus/q6" else t for t in _tasks("book", service_env)]
    result = audit_book(tasks)
    assert [d.task_id for d in result.disagreements] == ["book/tpus/q6"]


def test_a_printed_figure_outside_tolerance_must_be_explained(service_env) -> None:
    tasks = [
        replace(t, hidden={**t.hidden, "alternatives": [], "differs": None}) if t.id == "book/inference/q4" else t
        for t in _tasks("book", service_env)
    ]
    result = audit_book(tasks)
    assert [d.task_id for d in result.disagreements] == ["book/inference/q4"]
    assert "no note says why" in result.disagreements[0].detail


def test_a_tampered_exam_key_is_reported(service_env) -> None:
    tasks = [replace(t, gold=("1 s",)) if t.id == "exam/sharding/002" else t for t in _tasks("exam", service_env)]
    assert [d.task_id for d in audit_exam(tasks).disagreements] == ["exam/sharding/002"]


def test_an_exam_prompt_that_no_longer_states_its_data_is_reported(service_env) -> None:
    tasks = [
        replace(t, prompt=t.prompt.replace("4096", "4097", 1)) if t.id == "exam/sharding/002" else t
        for t in _tasks("exam", service_env)
    ]
    assert [d.task_id for d in audit_exam(tasks).disagreements] == ["exam/sharding/002"]


def test_a_tampered_rows_key_is_reported(service_env) -> None:
    tasks = _tasks("tasks", service_env)
    victim = tasks[0]
    rows = [dict(r) for r in victim.gold]
    field = next(k for k, v in rows[0].items() if isinstance(v, float) and v)
    rows[0][field] *= 1.01
    result = audit_rows([replace(victim, gold=tuple(rows)), *tasks[1:]])
    assert [d.task_id for d in result.disagreements] == [victim.id]


def test_unknown_split_is_refused(service_env, capsys) -> None:
    assert main(["audit", "--split", "synthetic"]) == 2
    assert "cannot audit split 'synthetic'" in capsys.readouterr().err

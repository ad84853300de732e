"""Verification for all 35 tasks, with independent wrong-formula checks through the real grader."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from app.commands import tasks_verify
from app.commands import tasks_verify as verify_mod
from app.graders.dispatch import grade
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.tasks.tasks.anchors import ANCHORS, Anchor
from app.tasks.tasks.catalog import ALL_SPECS
from app.tasks.tasks.conventions import SLIPS

IDS = [s.task_id for s in ALL_SPECS]
RING_TASKS = [s.task_id for s in ALL_SPECS if "missing_ring_factor" in s.slips]


def completion(rows: list[dict]) -> str:
    return "Working omitted.\n```json\n" + json.dumps({"rows": rows}) + "\n```\nDone."


def outcome(bank, settings, task_id: str, rows: list[dict]) -> Outcome:
    return grade(bank.get(f"tasks/{task_id}"), completion(rows), GradeOptions(), settings).outcome


@pytest.fixture(scope="module")
def report() -> verify_mod.VerifyReport:
    return verify_mod.verify()


def test_verification_passes_35_of_35(report) -> None:
    assert (report.passed, len(report.tasks), report.ok) == (35, 35, True)


@pytest.mark.parametrize("task_id", IDS)
def test_task_verification_checks(report, task_id: str) -> None:
    checks = next(t for t in report.tasks if t.task_id == task_id).checks
    assert {k: v for k, v in checks.items() if v not in ("ok", "n/a")} == {}
    for required in ("stored", "self", "stated", "doubled", "one_in_a_million"):
        assert checks[required] == "ok"


@pytest.mark.parametrize("task_id", IDS)
def test_wrong_formulas_fail(bank, settings, task_id: str) -> None:
    """Independently of verify.py: the gold grades correct; every declared convention slip, a
    factor of 2 and one part in a million on any single number grade incorrect."""
    spec = ALL_SPECS[int(task_id[3:])]
    gold = list(bank.get(f"tasks/{task_id}").gold)
    assert outcome(bank, settings, task_id, gold) is Outcome.correct
    if not spec.slips:  # answers that are ratios of FLOP counts (sc-012): no slip can move them
        assert all(spec.run(c) == spec.run() for c in SLIPS.values())
    for name in spec.slips:
        assert outcome(bank, settings, task_id, spec.run(SLIPS[name])) is Outcome.incorrect, name
    for factor in (2.0, 0.5, 1 + 1e-6, 1 - 1e-6):
        for i, row in enumerate(gold):
            for field, value in row.items():
                if isinstance(value, bool) or not isinstance(value, int | float) or value == 0:
                    continue
                wrong = [dict(r) for r in gold]
                wrong[i][field] = value * factor
                assert outcome(bank, settings, task_id, wrong) is Outcome.incorrect, (i, field, factor)


@pytest.mark.parametrize("task_id", RING_TASKS)
def test_missing_ring_factor_fails(bank, settings, task_id: str) -> None:
    spec = ALL_SPECS[int(task_id[3:])]
    assert outcome(bank, settings, task_id, spec.run(SLIPS["missing_ring_factor"])) is Outcome.incorrect


def test_ring_tasks_cover_every_collective_task() -> None:
    assert RING_TASKS == ["sc-021", "sc-022", "sc-023", "sc-024", "sc-025", "sc-026", "sc-027"]


@pytest.mark.parametrize("anchor", ANCHORS, ids=[f"{a.task_id}-{a.field}-{a.shown}" for a in ANCHORS])
def test_required_results(bank, anchor: Anchor) -> None:
    rows = [r for r in bank.get(f"tasks/{anchor.task_id}").gold if r[anchor.key[0]] == anchor.key[1]]
    assert len(rows) == 1
    value = rows[0][anchor.field]
    digits = len(anchor.shown.split(".")[1]) if "." in anchor.shown else 0
    assert math.isclose(round(value, digits), float(anchor.shown))


def test_anchor_rounding_detects_a_wrong_value() -> None:
    a = Anchor("sc-000", ("batch", 1024), "intensity", "682.67", "")
    assert a.rounded(682.6666666666666) == "682.67"
    assert a.rounded(682.6666666666666 * 64 / 63) != "682.67"
    assert Anchor("x", ("k", 1), "f", "11", "").rounded(11.0) == "11"


def test_tampered_expectation_is_reported(tmp_path: Path) -> None:
    doc = json.loads(verify_mod.EXPECTED_PATH.read_text())
    doc["tasks"]["sc-005"]["rows"][0]["t_comm_s"] *= 1.0000001
    del doc["tasks"]["sc-034"]
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(doc))
    report = verify_mod.verify(path)
    failed = {t.task_id: t.checks["stored"] for t in report.tasks if not t.ok}
    assert set(failed) == {"sc-005", "sc-034"}
    assert "differs" in failed["sc-005"] and "no stored" in failed["sc-034"]


def test_false_slip_declarations_are_reported(monkeypatch) -> None:
    spec = ALL_SPECS[10]  # counts parameters: FLOP conventions do not touch it
    rt = next(t for t in verify_mod.build_tasks() if t.task_id == spec.task_id)
    object.__setattr__(rt, "spec", _with_slips(spec, {"mac_as_one_flop", "bf16_as_one_byte"}))
    checks = verify_mod.check_task(rt, rt.expected_output).checks
    assert checks["mac_as_one_flop"].startswith("FAIL: declared")
    object.__setattr__(rt, "spec", _with_slips(spec, set()))
    checks = verify_mod.check_task(rt, rt.expected_output).checks
    assert checks["bf16_as_one_byte"].startswith("FAIL: the answer depends on it")


def _with_slips(spec, slips):
    from dataclasses import replace

    return replace(spec, slips=frozenset(slips))


def _verify_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    tasks_verify.add_verify(sub.add_parser("tasks").add_subparsers(dest="action"))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.mark.slow
def test_verify_command(capsys) -> None:
    assert _verify_cli(["tasks", "verify"]) == 0
    out = capsys.readouterr().out
    assert out.count("\ntasks/sc-") + out.startswith("tasks/sc-") == 35
    assert "35/35 tasks verified" in out
    assert _verify_cli(["tasks", "verify", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["ok"], doc["passed"], len(doc["tasks"])) == (True, 35, 35)
    assert _verify_cli(["tasks", "verify", "--markdown"]) == 0
    table = capsys.readouterr().out
    assert table.count("| yes |") == 35
    assert (
        "| sc-024 | sharding | Data-parallel gradient all-reduce" in table
        and "ring, mac, bf16, x2, 1e-6" in table
    )


def test_verify_command_fails_on_drift(tmp_path: Path, monkeypatch, capsys) -> None:
    doc = json.loads(verify_mod.EXPECTED_PATH.read_text())
    doc["tasks"]["sc-016"]["rows"][1]["chips"] = 10
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(verify_mod, "EXPECTED_PATH", path)
    assert _verify_cli(["tasks", "verify"]) == 1
    out = capsys.readouterr().out
    assert "tasks/sc-016  FAIL" in out and "34/35 tasks verified" in out

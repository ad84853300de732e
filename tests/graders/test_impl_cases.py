"""Fresh hidden cases per grade: seeds derived from the case secret and the request, recorded in
the result, and replayable by an operator holding the secret."""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path

import pytest

from app.commands import impl as impl_commands
from app.graders.dispatch import grade
from app.graders.impl_cases import case_seed, draw_cases
from app.graders.options import GradeOptions
from app.settings import ImplSettings, SandboxSettings, Settings, get_settings
from app.tasks import registry
from app.tasks.impl import reference
from app.tasks.impl.exercises import BY_NAME
from tests.support.wrong_solutions import WRONG

SANDBOX = SandboxSettings(wall_seconds=20, warm_pool_size=2)


def settings_with(secret: str | None) -> Settings:
    return Settings(sandbox=SANDBOX, impl=ImplSettings(case_secret=secret))


def completion(code: str) -> str:
    return f"```python\n{code}\n```\n"


def test_seed_depends_on_secret_task_and_completion() -> None:
    a, b = settings_with("secret-a"), settings_with("secret-b")
    seed = case_seed(a, "impl/kv_cache_bytes", "x")
    assert seed == case_seed(a, "impl/kv_cache_bytes", "x")  # reproducible
    others = {case_seed(a, "impl/kv_cache_bytes", "x "), case_seed(a, "impl/matmul_cost", "x"),
              case_seed(b, "impl/kv_cache_bytes", "x")}
    assert seed not in others and len(others) == 3


def test_a_known_seed_without_the_secret_draws_other_cases() -> None:
    """The seed is in every response; the inputs it stands for need the secret as well."""
    exercise = BY_NAME["roofline_time"]
    seed = case_seed(settings_with("secret-a"), exercise.task_id, "x")
    mine = draw_cases(exercise, seed, settings_with("secret-a"))
    assert mine == draw_cases(exercise, seed, settings_with("secret-a"))
    assert not {json.dumps(c.args) for c in mine} & {
        json.dumps(c.args) for c in draw_cases(exercise, seed, settings_with("secret-b"))}
    assert not {json.dumps(c.args) for c in mine} & {json.dumps(c.args) for c in exercise.hidden_cases(int(seed, 16))}


def test_unset_secret_is_random_per_process_and_still_consistent() -> None:
    unset = settings_with(None)
    assert case_seed(unset, "impl/x", "y") == case_seed(unset, "impl/x", "y")
    assert case_seed(unset, "impl/x", "y") != case_seed(settings_with("configured"), "impl/x", "y")


@pytest.mark.slow
def test_the_grade_records_its_seed_and_the_cases_follow_it() -> None:
    settings = settings_with("grade-secret")
    text = completion(WRONG["fsdp_tp_optimal_x"])
    task = registry.resolve_task("impl/fsdp_tp_optimal_x", settings)
    result = grade(task, text, GradeOptions(), settings)
    seed = result.details["case_seed"]
    assert seed == case_seed(settings, task.id, text)
    cases = draw_cases(BY_NAME["fsdp_tp_optimal_x"], seed, settings)
    # the wrong solution is right exactly where the FSDP and TP axis counts agree
    want = ["passed" if c.args[3] == c.args[4] else "wrong" for c in cases]
    assert [c["verdict"] for c in result.details["cases"]] == want


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="scaling-grader")
    impl_commands.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


@pytest.fixture
def operator_secret(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SCALING_GRADER_IMPL__CASE_SECRET", "operator-secret")
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def test_replay_prints_the_cases_of_a_grade(operator_secret: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    seed = case_seed(operator_secret, "impl/torus_stats", "some completion")
    assert run_cli(["impl", "replay", "--task", "impl/torus_stats", "--seed", seed]) == 0
    printed = json.loads(capsys.readouterr().out)
    drawn = draw_cases(BY_NAME["torus_stats"], seed, operator_secret)
    assert [p["args"] for p in printed] == [json.loads(json.dumps(list(c.args))) for c in drawn]
    assert [p["expected"] for p in printed] == [c.expected for c in drawn]


@pytest.mark.slow
def test_replay_regrades_a_completion_on_the_same_cases(operator_secret: Settings, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    text = completion(WRONG["fsdp_tp_optimal_x"])
    task = registry.resolve_task("impl/fsdp_tp_optimal_x", operator_secret)
    original = grade(task, text, GradeOptions(), operator_secret)
    path = tmp_path / "completion.txt"
    path.write_text(text)
    seed = original.details["case_seed"]
    assert run_cli(["impl", "replay", "--task", "fsdp_tp_optimal_x", "--seed", seed, "--completion", str(path)]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["details"]["cases"] == [
        {**c, "time": replayed["details"]["cases"][i]["time"]} for i, c in enumerate(original.details["cases"])]
    assert replayed["reward"] == original.reward and 0 < original.reward < 1


def test_replay_refuses_a_malformed_seed(operator_secret: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(["impl", "replay", "--task", "impl/torus_stats", "--seed", "../../etc"]) == 2
    assert "32 lowercase hex digits" in capsys.readouterr().err


@pytest.mark.slow
def test_reference_passes_under_many_secrets() -> None:
    """Fresh cases are still cases the reference solves (a few secrets, one exercise each)."""
    source = inspect.getsource(reference.torus_neighbors)
    task = registry.resolve_task("impl/torus_neighbors", settings_with("s"))
    for secret in ("s1", "s2", "s3"):
        result = grade(task, completion(source), GradeOptions(), settings_with(secret))
        assert result.reward == 1.0, result.details

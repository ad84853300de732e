"""The impl grader end to end through dispatch: extraction, rewards, all-or-nothing, failing
closed, thread safety, and what the details reveal."""

from __future__ import annotations

import inspect
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from app.graders.dispatch import grade
from app.graders.impl_cases import case_seed, draw_cases
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.settings import SandboxSettings, Settings
from app.tasks import registry
from app.tasks.impl import reference
from app.tasks.impl.exercises import BY_NAME
from tests.support.wrong_solutions import WRONG

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SETTINGS = Settings(sandbox=SandboxSettings(wall_seconds=20, warm_pool_size=2))


def completion(code: str) -> str:
    thinking = "<think>draft: def kv_cache_bytes(): return 0</think>"
    return f"{thinking}\nHere is my answer.\n\n```python\n{code}\n```\n"


def task(name: str):
    return registry.resolve_task(f"impl/{name}", SETTINGS)


def cases_for(name: str, text: str):
    """The cases a grade of this completion draws (the test shares the service's secret)."""
    return draw_cases(BY_NAME[name], case_seed(SETTINGS, f"impl/{name}", text), SETTINGS)


def test_registry_and_dispatch_know_the_split() -> None:
    assert "impl" in registry.split_names()
    t = task("kv_cache_bytes")
    assert t.grading == "impl" and "gold" not in t.public()


def test_correct_completion_earns_full_reward_with_per_case_verdicts() -> None:
    code = inspect.getsource(reference.kv_cache_bytes)
    result = grade(task("kv_cache_bytes"), completion(code), GradeOptions(), SETTINGS)
    assert result.outcome is Outcome.correct and result.reward == 1.0
    assert result.task_id == "impl/kv_cache_bytes"
    assert result.details["sandbox_tier"].split("+")[0] in ("bubblewrap", "plain")
    assert all(c["verdict"] == "passed" for c in result.details["cases"])


def test_partial_credit_and_all_or_nothing() -> None:
    # Right only where the FSDP and TP axis counts are equal: some cases pass, some do not.
    wrong = WRONG["fsdp_tp_optimal_x"]
    cases = cases_for("fsdp_tp_optimal_x", completion(wrong))
    expected_passes = sum(c.args[3] == c.args[4] for c in cases)
    assert 0 < expected_passes < len(cases)
    fraction = grade(task("fsdp_tp_optimal_x"), completion(wrong), GradeOptions(), SETTINGS)
    assert fraction.outcome is Outcome.partial
    assert fraction.reward == expected_passes / len(cases)
    strict = grade(task("fsdp_tp_optimal_x"), completion(wrong), GradeOptions(all_or_nothing=True), SETTINGS)
    assert strict.outcome is Outcome.partial and strict.reward == 0.0


def test_details_never_reveal_hidden_inputs_or_expected_values() -> None:
    name = "kv_cache_bytes"
    off_by_two = grade(task(name), completion(WRONG[name]), GradeOptions(), SETTINGS)
    assert off_by_two.reward == 0.0 and off_by_two.outcome is Outcome.incorrect
    # A submission that prints its inputs and puts them in its exception messages.
    nosy = "def kv_cache_bytes(*args):\n    print(args)\n    raise ValueError(repr(args))\n"
    leaky = grade(task(name), completion(nosy), GradeOptions(), SETTINGS)
    assert {c["verdict"] for c in leaky.details["cases"]} == {"exception"}
    # ... and names the classes it raises and returns after them (type names reach the parent).
    named = ("def kv_cache_bytes(*args):\n"
             "    raise type('E' + '_'.join(str(a) for a in args), (Exception,), {})()\n")
    by_name = grade(task(name), completion(named), GradeOptions(), SETTINGS)
    assert {c["verdict"] for c in by_name.details["cases"]} == {"exception"}
    typed = "def kv_cache_bytes(*args):\n    return type(repr(args), (), {})()\n"
    by_type = grade(task(name), completion(typed), GradeOptions(), SETTINGS)
    assert {c["verdict"] for c in by_type.details["cases"]} == {"wrong"}
    assert all(r.reward == 0.0 for r in (leaky, by_name, by_type))
    text = "".join(json.dumps(r.model_dump()) for r in (off_by_two, leaky, by_name, by_type))
    drawn = [c for code in (WRONG[name], nosy, named, typed) for c in cases_for(name, completion(code))]
    for case in drawn:
        assert str(case.expected) not in text
        assert repr(case.args) not in text and str(case.args[1]) not in text
        assert "_".join(str(a) for a in case.args) not in text


def test_no_code_is_no_answer() -> None:
    result = grade(task("roofline_time"), "The answer is 3 seconds.", GradeOptions(), SETTINGS)
    assert result.outcome is Outcome.no_answer and result.reward == 0.0


def test_ast_guard_rejects_forbidden_imports_before_running() -> None:
    code = "import socket\ndef kv_cache_bytes(*a):\n    return 0\n"
    result = grade(task("kv_cache_bytes"), completion(code), GradeOptions(), SETTINGS)
    assert result.outcome is Outcome.incorrect and result.details["rejected_imports"] == ["socket"]
    assert "cases" not in result.details


def test_timeouts_everywhere_are_a_timeout_outcome() -> None:
    quick = Settings(sandbox=SandboxSettings(wall_seconds=3, cpu_seconds=1, warm_pool_size=0,
                                             max_parallel_cases=8))
    code = "def critical_batch_size(*a):\n    while True:\n        pass\n"
    result = grade(task("critical_batch_size"), completion(code), GradeOptions(), quick)
    assert result.outcome is Outcome.timeout and result.reward == 0.0 and result.scored


def test_sandbox_that_cannot_start_fails_closed(tmp_path: Path) -> None:
    broken = Settings(sandbox=SandboxSettings(python=tmp_path / "no-such-python", warm_pool_size=0))
    code = inspect.getsource(reference.kv_cache_bytes)
    result = grade(task("kv_cache_bytes"), completion(code), GradeOptions(), broken)
    assert result.outcome is Outcome.sandbox_error
    assert result.reward == 0.0 and not result.scored


def test_concurrent_grades_from_threads_share_the_sandbox() -> None:
    names = ["kv_cache_bytes", "training_cost", "matmul_cost", "torus_stats"]

    def one(name: str) -> float:
        code = inspect.getsource(getattr(reference, BY_NAME[name].entry))
        return grade(task(name), completion(code), GradeOptions(), SETTINGS).reward

    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(one, names)) == [1.0] * len(names)

"""Every exercise: its reference solution passes every hidden case in a real sandbox, and a
plausibly wrong solution fails. Book figures serve as independent oracles where the book has one."""

from __future__ import annotations

import inspect
import math

import pytest

from app.graders.impl import grade_source
from app.graders.impl_cases import random_case_seed
from app.settings import SandboxSettings, Settings
from app.tasks.impl import reference
from app.tasks.impl.bank import load_bank
from app.tasks.impl.exercises import ALL, BY_NAME
from tests.support.wrong_solutions import WRONG

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SETTINGS = Settings(sandbox=SandboxSettings(wall_seconds=20, warm_pool_size=2))


def reference_source(name: str) -> str:
    return inspect.getsource(getattr(reference, BY_NAME[name].entry))


def test_bank_has_the_required_coverage() -> None:
    bank = load_bank(SETTINGS)
    tasks = bank.tasks()
    assert len(tasks) >= 12
    assert all(t.id.startswith("impl/") and t.grading == "impl" for t in tasks)
    assert sum(t.meta["needs_jax"] for t in tasks) >= 3
    tags = {tag for t in tasks for tag in t.tags}
    for needed in ("roofline.time-bounds", "roofline.matmul", "sharding.allgather-reducescatter",
                   "transformers.6nd", "training.mixed", "transformers.kv-cache", "tpus.networking",
                   "jax.auto-sharding", "jax.explicit-sharding"):
        assert needed in tags
    assert sum("training.mixed" in t.tags for t in tasks) >= 2


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.name)
def test_prompt_never_carries_the_solution_or_cases(exercise) -> None:
    prompt = load_bank(SETTINGS).get(exercise.task_id).public()["prompt"]
    body = inspect.getsource(getattr(reference, exercise.entry)).splitlines()[1:]
    assert not [line for line in body if len(line.strip()) > 20 and line.strip() in prompt]
    assert f"def {exercise.entry}(" in prompt
    for seed in range(20):
        for case in exercise.hidden_cases(seed):
            if isinstance(case.expected, float):
                assert repr(case.expected) not in prompt


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.name)
def test_hidden_cases_are_reproducible_per_seed_and_json_safe(exercise) -> None:
    import json

    first, second = exercise.hidden_cases(7), exercise.hidden_cases(7)
    assert first == second and len(first) == exercise.case_count >= 2
    json.dumps([(c.args, c.expected) for c in first])


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.name)
def test_every_seed_draws_new_inputs_with_distinct_general_answers(exercise) -> None:
    """Fresh cases per grade: over 50 seeds few general inputs ever repeat (a table of past inputs
    covers next to nothing), and within one draw the general answers are pairwise distinct (so a
    constant matches one at most)."""
    import json

    seen: set[str] = set()
    repeats = drawn = 0
    for seed in range(50):
        cases = exercise.hidden_cases(seed)
        assert len(cases) == exercise.case_count
        general = [json.dumps(c.expected, sort_keys=True) for c in cases if not c.edge]
        assert len(set(general)) == len(general)
        for c in cases:
            if not c.edge:
                key = json.dumps(c.args)
                repeats += key in seen
                drawn += 1
                seen.add(key)
    assert repeats / drawn < 0.05, "inputs repeat across seeds: a table could cover them"


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.name)
def test_reference_passes_every_case(exercise) -> None:
    result = grade_source(exercise, reference_source(exercise.name), all_or_nothing=False, settings=SETTINGS,
                          seed=random_case_seed())
    assert [c["verdict"] for c in result.details["cases"]] == ["passed"] * exercise.case_count
    assert result.outcome == "correct" and result.reward == 1.0


@pytest.mark.parametrize("exercise", ALL, ids=lambda e: e.name)
def test_plausibly_wrong_solution_fails(exercise) -> None:
    result = grade_source(exercise, WRONG[exercise.name], all_or_nothing=False, settings=SETTINGS,
                          seed=random_case_seed())
    verdicts = [c["verdict"] for c in result.details["cases"]]
    assert "wrong" in verdicts, result.details
    assert result.reward < 1.0 and result.outcome in ("partial", "incorrect")
    assert "sandbox_fault" not in verdicts


def test_every_exercise_has_a_wrong_solution() -> None:
    assert set(WRONG) == set(BY_NAME)


# Figures from the book's worked examples, independent of our own formulas.
BOOK_FIGURES = [
    # applied-training: optimal FSDP for the LLaMA 3 70B run, with M_X / M_Y = 2.
    ("fsdp_tp_optimal_x", (4.19e6, 28672, 8960, 2, 1), 1618, 0.001),
    # roofline: the TPU v5e's bf16 critical batch size is about 240.
    ("critical_batch_size", (1.97e14, 8.2e11, 2), 240, 0.01),
]


@pytest.mark.parametrize(("name", "args", "book_value", "rtol"), BOOK_FIGURES)
def test_reference_agrees_with_book_figures(name: str, args: tuple, book_value: float, rtol: float) -> None:
    got = getattr(reference, BY_NAME[name].entry)(*args)
    assert math.isclose(got, book_value, rel_tol=rtol)

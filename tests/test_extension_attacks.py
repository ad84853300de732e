"""The extension points (app/tasks/splits.py, app/graders/kinds.py) attacked by a careless plugin
author or a policy looking for reward: a registration must not replace or weaken a built-in split or
kind, move one split's tolerance or held-out rule onto another, make an answer read as a task id,
or let a grader's word turn a fault into a reward."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from app.errors import ApiError
from app.graders import dispatch, kinds, numeric
from app.graders.kinds import GraderSpec, grader_spec, register_grader
from app.graders.options import GradeOptions
from app.graders.result import GradeResult, Outcome
from app.grading.labels import target_from_label
from app.grading.models import GradeRequest
from app.grading.service import GradingService
from app.settings import Settings, Tolerances
from app.tasks import registry, splits
from app.tasks.base import FiniteBank, Task, UnknownTask
from app.tasks.splits import SplitSpec, is_held_out, register_split, split_spec, tolerance_for
from tests.support.server import ROOT

SETTINGS = Settings()


@pytest.fixture
def own_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splits, kinds and banks the test adds are gone after it."""
    monkeypatch.setattr(splits, "_SPECS", dict(splits._SPECS))
    monkeypatch.setattr(kinds, "_SPECS", dict(kinds._SPECS))
    monkeypatch.setattr(registry, "_banks", {})


def _split(name: str, tasks: list[Task] | None = None, **changes: Any) -> SplitSpec:
    fields: dict[str, Any] = {"name": name, "load": lambda s: FiniteBank(name, "a plugin's", tasks or []),
                              "tolerance": 0.05, "docs": "docs/splits.md", **changes}
    return SplitSpec(**fields)


@pytest.mark.parametrize("name", ["numeric", "exam", "impl", "synthetic", "tasks"])
def test_a_built_in_cannot_be_registered_again(own_registries: None, name: str) -> None:
    before_split = splits._SPECS.get(name)
    if before_split is not None:
        with pytest.raises(ValueError):
            register_split(_split(name, held_out=False, tolerance=0.5))
        assert split_spec(name) is before_split
    before_kind = kinds._SPECS.get(name)
    if before_kind is not None:
        with pytest.raises(ValueError):
            register_grader(GraderSpec(kind=name, grade=lambda *a: None))  # type: ignore[arg-type,return-value]
        assert grader_spec(name) is before_kind
    assert split_spec("exam").held_out and grader_spec("numeric").grade is numeric.grade_task


@pytest.mark.parametrize("name", ["Exam", "EXAM", "100 GB", "3.35 TB", "1e3", "x" * 51, "exam\n", "mine.v2"])
def test_a_split_name_that_could_shadow_an_id_or_an_answer_is_refused(own_registries: None, name: str) -> None:
    with pytest.raises(ValueError, match="split name"):
        register_split(_split(name))
    assert name not in splits.split_names()


def test_an_answer_label_stays_an_answer_whatever_a_plugin_registers(own_registries: None) -> None:
    # "100 GB" as a split would have read the answer "100 GB/s" as a task id of it
    for name in ("gb", "tb-s", "mine_2"):
        register_split(_split(name))
    assert target_from_label("100 GB/s") == {"reference": {"values": ["100 GB/s"]}}
    assert target_from_label("gb/1") == {"task_id": "gb/1"}


@pytest.mark.parametrize("setting", ["synthetic", "book", "exam", "rows", "inline"])
def test_a_tolerance_setting_widens_one_split_only(own_registries: None, setting: str) -> None:
    # Sharing "exam" would let an operator's exam tolerance widen the plugin's split (or the other
    # way round: the plugin's documented default silently replaced); "inline" is the inline
    # references' own tolerance.
    with pytest.raises(ValueError, match="tolerance setting"):
        register_split(_split("mine", tolerance_setting=setting))
    assert "mine" not in splits.split_names()


def test_an_operator_tolerance_reaches_its_own_split_only() -> None:
    wider = Settings(tolerances=Tolerances(exam=0.3))
    assert tolerance_for("exam", wider) == 0.3
    owned = {split_spec(s).tolerance_setting for s in splits.split_names()}
    for other in splits.split_names():
        if other != "exam":
            assert tolerance_for(other, wider) == tolerance_for(other, SETTINGS)
    assert "inline" not in owned


@pytest.mark.parametrize("filed", [
    Task(id="mine/1", split="synthetic", prompt="p", grading="numeric", gold=("1 s",)),  # another split's rules
    Task(id="synthetic/1/0", split="mine", prompt="p", grading="numeric", gold=("1 s",)),  # another split's id
])
def test_a_bank_that_files_a_task_under_another_split_serves_nothing(own_registries: None, filed: Task) -> None:
    # A held-out split whose bank labels its task "synthetic" would have it graded open (per-value
    # verdicts, no budget) at synthetic's tolerance.
    class Careless(FiniteBank):
        def get(self, task_id: str) -> Task:
            return filed

    register_split(_split("mine", held_out=True, load=lambda s: Careless("mine", "careless", [filed])))
    with pytest.raises(UnknownTask):
        registry.resolve_task("mine/1", SETTINGS)
    with pytest.raises(ApiError) as refused:
        GradingService(SETTINGS).prepare(GradeRequest(task_id="mine/1", completion="Final answer: 1 s"))
    assert refused.value.status == 404


def test_a_well_filed_held_out_plugin_split_is_held_out(own_registries: None) -> None:
    task = Task(id="mine/1", split="mine", prompt="p", grading="numeric", gold=("1 s",))
    register_split(_split("mine", [task], held_out=True))
    served = registry.resolve_task("mine/1", SETTINGS)
    assert served is task and GradingService(SETTINGS).held_out(served)


def test_a_misspelt_held_out_setting_does_not_open_the_exam() -> None:
    typo = Settings(held_out={"splits": ["exma"]})
    with pytest.raises(ValueError, match="not a split"):
        is_held_out("exam", typo)
    assert is_held_out("exam", Settings()) and not is_held_out("exam", Settings(held_out={"splits": []}))


def _register_kind(grade: Any) -> Task:
    register_grader(GraderSpec(kind="plugin", grade=grade))
    return Task(id="mine/1", split="mine", prompt="p", grading="plugin", gold=None)


@pytest.mark.parametrize("outcome", [Outcome.error, Outcome.sandbox_error, Outcome.judge_error,
                                     Outcome.invalid_request])
def test_a_grader_cannot_reward_an_unscored_outcome(own_registries: None, outcome: Outcome) -> None:
    task = _register_kind(lambda *a: GradeResult(grading="plugin", outcome=outcome, reward=1.0, explanation="x"))
    result = dispatch.grade(task, "anything", GradeOptions(), SETTINGS)
    assert (result.outcome, result.reward, result.scored) == (outcome, 0.0, False)


@pytest.mark.parametrize("returned", [1.0, True, {"reward": 1.0, "outcome": "correct"}, None])
def test_a_grader_that_returns_no_grade_result_earns_nothing(own_registries: None, returned: Any) -> None:
    task = _register_kind(lambda *a: returned)
    result = dispatch.grade(task, "anything", GradeOptions(), SETTINGS)
    assert (result.outcome, result.reward, result.task_id, result.grading) == (Outcome.error, 0.0, "mine/1", "plugin")


def test_a_grader_cannot_speak_for_another_kind(own_registries: None) -> None:
    task = _register_kind(lambda *a: GradeResult(grading="numeric", outcome=Outcome.correct, reward=1.0,
                                                 explanation="x"))
    assert dispatch.grade(task, "anything", GradeOptions(), SETTINGS).grading == "plugin"


def test_an_unregistered_kind_and_a_split_without_a_bank_earn_nothing(own_registries: None) -> None:
    orphan = Task(id="mine/1", split="mine", prompt="p", grading="nobody", gold=("1 s",))
    result = dispatch.grade(orphan, "Final answer: 1 s", GradeOptions(), SETTINGS)
    assert (result.outcome, result.reward) == (Outcome.error, 0.0) and kinds.is_inline("nobody")

    def missing(settings: Settings) -> FiniteBank:
        raise FileNotFoundError("the plugin's data file")

    register_split(_split("gone", load=missing))
    with pytest.raises(FileNotFoundError):  # a loud failure of the request, never a grade
        GradingService(SETTINGS).prepare(GradeRequest(task_id="gone/1", completion="Final answer: 1 s"))


def test_a_registered_split_changes_no_other_splits_tasks_for_a_seed(own_registries: None) -> None:
    before = [t.public() for t in registry.get_bank("synthetic", SETTINGS).batch(seed=3, n=8)]
    register_split(_split("aaa", [Task(id="aaa/1", split="aaa", prompt="p", grading="numeric", gold=("1 s",))]))
    registry._banks.clear()
    assert [t.public() for t in registry.get_bank("synthetic", SETTINGS).batch(seed=3, n=8)] == before


def test_a_service_does_not_start_on_a_misspelt_held_out_setting() -> None:
    with pytest.raises(ValueError, match="exma"):
        GradingService(Settings(held_out={"splits": ["exam", "exma"]}))


def test_extensions_are_loaded_once_from_the_variable_every_process_inherits() -> None:
    # a fresh interpreter, as a worker's lane is: the registration comes from the variable alone
    code = ("from app.extensions import load_extensions\n"
            "from app.tasks.registry import split_names\n"
            "from app.graders.kinds import grading_kinds\n"
            "print(load_extensions(), load_extensions(), 'toy' in split_names(), 'toy_echo' in grading_kinds())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "SCALING_GRADER_EXTENSIONS": " tests.support.toy_extension , "})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[0] == "['tests.support.toy_extension'] [] True True"


def test_an_extension_that_cannot_be_imported_stops_the_start() -> None:
    done = subprocess.run([sys.executable, "-m", "app.cli", "tasks", "--split", "synthetic", "-n", "1"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "SCALING_GRADER_EXTENSIONS": "no_such_module_here"})
    assert done.returncode == 2
    assert "no_such_module_here" in done.stderr and "Traceback" not in done.stderr

"""The split registry (app/tasks/splits.py) and the bank cache keyed by what each bank reads."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from pydantic import BaseModel

from app.graders.kinds import grading_kinds
from app.settings import Settings, Tolerances
from app.tasks import registry, splits
from app.tasks.base import FiniteBank, Task
from app.tasks.impl.spec import Exercise
from app.tasks.splits import SplitSpec, UnknownSplit, is_held_out, register_split, split_spec, tolerance_for


@pytest.fixture
def own_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splits registered by the test are gone after it."""
    monkeypatch.setattr(splits, "_SPECS", dict(splits._SPECS))


def test_a_bank_is_kept_per_value_of_the_settings_it_reads(fresh_registry: None) -> None:
    plain = Settings()
    wider = Settings(tolerances=Tolerances(rows=1e-6))
    first = registry.get_bank("tasks", plain)
    # the tasks bank bakes its rows tolerance into each task: a setting it reads
    assert first.get("tasks/sc-000").tolerance == plain.tolerances.rows == 1e-9
    assert registry.get_bank("tasks", wider).get("tasks/sc-000").tolerance == wider.tolerances.rows == 1e-6
    # equal settings, another object: the same bank, not a reload
    assert registry.get_bank("tasks", Settings()) is first
    # a setting the bank does not read shares it too
    assert registry.get_bank("tasks", Settings(reveal_expected=True)) is first


def test_a_bank_cache_keeps_a_bounded_number_per_split(fresh_registry: None) -> None:
    for i in range(registry.BANKS_PER_SPLIT + 3):
        registry.get_bank("tasks", Settings(tolerances=Tolerances(rows=1e-9 * (i + 1))))
    assert sum(1 for split, _ in registry._banks if split == "tasks") == registry.BANKS_PER_SPLIT


class Recording:
    """A settings object that records which settings are read from it (dotted names)."""

    def __init__(self, model: BaseModel, seen: set[str], prefix: str = "") -> None:
        self._model, self._seen, self._prefix = model, seen, prefix

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._model, name)
        if isinstance(value, BaseModel):
            return Recording(value, self._seen, f"{self._prefix}{name}.")
        self._seen.add(self._prefix + name)
        return value


@pytest.mark.parametrize("split", ["synthetic", "book", "tasks", "exam", "impl"])
def test_a_bank_reads_only_the_settings_its_spec_names(split: str) -> None:
    # What it reads and does not name would not reach the cache key: a changed setting would be
    # served the bank built under the old one.
    seen: set[str] = set()
    bank = split_spec(split).load(Recording(Settings(), seen))  # type: ignore[arg-type]
    assert bank.name == split
    assert seen <= set(split_spec(split).reads), seen - set(split_spec(split).reads)


@pytest.mark.parametrize("split", ["tasks", "impl", "exam"])
def test_every_task_of_a_split_has_a_registered_grading_kind(split: str) -> None:
    bank: Any = registry.get_bank(split, Settings())
    assert {t.grading for t in bank.tasks()} <= set(grading_kinds())


def test_the_impl_default_is_its_exercises_default() -> None:
    # (what `export` states for an impl task; its grader compares at each exercise's own rtol)
    assert split_spec("impl").tolerance == {f.name: f.default for f in fields(Exercise)}["rtol"]


def test_a_registered_split_is_served_with_its_own_tolerance(own_registry: None, fresh_registry: None) -> None:
    task = Task(id="mine/1", split="mine", prompt="p", grading="numeric", gold=("1 s",))
    register_split(SplitSpec(name="mine", load=lambda s: FiniteBank("mine", "d", [task]), tolerance=0.3,
                             docs="docs/splits.md"))
    assert "mine" in registry.split_names()
    assert registry.resolve_task("mine/1", Settings()) is task
    assert tolerance_for("mine", Settings()) == 0.3  # no Tolerances field: its default, no KeyError
    assert not is_held_out("mine", Settings())
    assert is_held_out("mine", Settings(held_out={"splits": ["mine"]}))


def test_held_out_defaults_to_the_registered_flag_and_the_setting_replaces_it() -> None:
    assert [s for s in registry.split_names() if is_held_out(s, Settings())] == ["exam"]
    chosen = Settings(held_out={"splits": ["book"]})
    assert [s for s in registry.split_names() if is_held_out(s, chosen)] == ["book"]


def _spec(**changes: Any) -> SplitSpec:
    fields: dict[str, Any] = {"name": "mine", "load": lambda s: FiniteBank("mine", "d", []), "tolerance": 0.05,
                              "docs": "docs/splits.md", **changes}
    return SplitSpec(**fields)


@pytest.mark.parametrize(("changes", "message"), [
    ({"name": "exam"}, "registered already"),  # a second exam cannot replace the held-out one
    ({"name": "a/b"}, "without '/'"),
    ({"name": ""}, "non-empty"),
    ({"tolerance": 0}, "between 0 and 1"),
    ({"tolerance": 1.5}, "between 0 and 1"),
    ({"tolerance_setting": "mine"}, "not a Tolerances field"),
    ({"reads": ("book_mirorr",)}, "not a setting"),
    ({"reads": ("tolerances",)}, "holding a value"),  # a group: unhashable, and too coarse
    ({"reads": ("tolerances.nope",)}, "not a setting"),
])
def test_a_spec_that_could_not_work_is_refused_at_registration(own_registry: None, changes: dict[str, Any],
                                                                message: str) -> None:
    with pytest.raises(ValueError, match=message):
        register_split(_spec(**changes))
    assert split_spec("exam").held_out


def test_unknown_splits_stay_unknown() -> None:
    with pytest.raises(UnknownSplit):
        registry.get_bank("mine", Settings())
    with pytest.raises(UnknownSplit):
        tolerance_for("mine", Settings())

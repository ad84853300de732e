"""Settings fail loudly: a misspelt variable stops the service, naming it and never its value."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from pydantic import ValidationError

from app.settings import (
    CLIENT_VARIABLES,
    Settings,
    UnknownSettingError,
    check_environment,
    unknown_variables,
)
from app.tasks.splits import UnknownSplit, split_spec, tolerance_for


def test_every_real_setting_is_known() -> None:
    environ = {
        "SCALING_GRADER_PORT": "1",
        "SCALING_GRADER_LIMITS__MAX_GRADES_PER_BATCH": "2",
        "SCALING_GRADER_SANDBOX__TIER": "plain",
        "SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": "[]",
        **{name: "x" for name in CLIENT_VARIABLES},
        "UNRELATED": "1",
    }
    assert unknown_variables(environ) == []


@pytest.mark.parametrize(
    "name",
    [
        "SCALING_GRADER_LIMITS__MAX_BATCH",  # the misspelling the old docstring itself showed
        "SCALING_GRADER_PROT",
        "SCALING_GRADER_SANDBOX__TEIR",
        "scaling_grader_redis",  # environment names are matched case-insensitively, as pydantic does
    ],
)
def test_unknown_variables_are_named(name: str) -> None:
    with pytest.raises(UnknownSettingError) as err:
        check_environment({name: "secret-value-123"})
    assert name in str(err.value)
    assert "secret-value-123" not in str(err.value)


def test_misspelt_nested_variable_is_not_silently_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALING_GRADER_LIMITS__MAX_BATCH", "256")
    with pytest.raises(ValidationError):
        Settings()


@pytest.mark.slow
def test_the_service_refuses_to_start_and_names_the_variable() -> None:
    env = {**os.environ, "SCALING_GRADER_QUEUE__RETRYS": "hunter2-value"}
    proc = subprocess.run(
        [sys.executable, "-m", "app.cli", "serve", "--port", "0"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "SCALING_GRADER_QUEUE__RETRYS" in proc.stderr
    assert "hunter2-value" not in proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("split", ["", "nonsense", "synthetics"])
def test_unknown_split_has_no_tolerance_fallback(split: str) -> None:
    with pytest.raises(UnknownSplit):
        tolerance_for(split, Settings())


@pytest.mark.parametrize("split", ["synthetic", "book", "exam", "tasks", "impl"])
def test_known_splits_have_their_own_tolerance(split: str) -> None:
    spec = split_spec(split)
    assert tolerance_for(split, Settings()) == spec.tolerance


@pytest.mark.parametrize(("split", "variable"), [("synthetic", "SYNTHETIC"), ("book", "BOOK"), ("exam", "EXAM"),
                                                 ("tasks", "ROWS")])
def test_the_tolerance_variables_still_override_a_split(split: str, variable: str, monkeypatch) -> None:
    monkeypatch.setenv(f"SCALING_GRADER_TOLERANCES__{variable}", "0.125")
    check_environment()
    assert tolerance_for(split, Settings()) == 0.125 != split_spec(split).tolerance

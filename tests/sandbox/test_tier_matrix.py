"""The rule that keeps the sandbox suites' tier matrix smaller without proving less: an attack or
test that makes no call the seccomp filter acts on is not run again on a tier without the filter
whose twin with it runs (tests/sandbox/tiers.py). These tests start no sandbox."""

from __future__ import annotations

import inspect
import io
import re
import tokenize

import pytest

from app.sandbox.child.seccomp import DENIED_SYSCALLS
from tests.sandbox import test_forkserver_attacks, test_isolation_attacks, test_sandbox_adversarial, tiers
from tests.sandbox.attacks import ALL
from tests.sandbox.tiers import FILTER_NEUTRAL, LaunchedTier, attack_matrix, without_filtered_twins

# clone3 is refused too, but only so that libc makes the same process or thread with clone.
_DENIED = re.compile(r"\b(" + "|".join(DENIED_SYSCALLS) + r")\b")


def _code_without_comments(source: str) -> str:
    """source with its comments and docstrings dropped (they may name a call they do not make),
    keeping string literals: an attack's code is one."""
    kept = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            continue
        if token.type == tokenize.STRING and token.string.lstrip("rbuRBU").startswith(('"""', "'''")) \
                and token.line.strip() == token.string.strip():
            continue
        kept.append(token.string)
    return " ".join(kept)


def _marked_tests() -> list[object]:
    modules = (test_sandbox_adversarial, test_isolation_attacks, test_forkserver_attacks)
    return [fn for module in modules for name, fn in vars(module).items()
            if name.startswith("test_") and any(m.name == "filter_neutral" for m in getattr(fn, "pytestmark", []))]


def test_every_filter_neutral_name_is_an_attack() -> None:
    assert not FILTER_NEUTRAL - {a.name for a in ALL}


def test_no_filter_neutral_attack_makes_a_denied_call() -> None:
    for attack in ALL:
        if attack.name in FILTER_NEUTRAL:
            assert not _DENIED.search(_code_without_comments(attack.source)), attack.name


def test_no_test_marked_filter_neutral_makes_a_denied_call() -> None:
    marked = _marked_tests()
    assert len(marked) > 10  # the mark is found where it is used
    for fn in marked:
        code = _code_without_comments(inspect.getsource(fn))  # type: ignore[arg-type]
        assert not _DENIED.search(code), fn.__name__  # type: ignore[attr-defined]


def test_the_denied_call_check_sees_the_attacks_that_need_the_filter() -> None:
    """The check above is not blind: it finds the calls of the attacks left out of the list."""
    needing = [a for a in ALL if a.name not in FILTER_NEUTRAL]
    assert needing and all(_DENIED.search(_code_without_comments(a.source)) for a in needing)


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> list[LaunchedTier]:
    """A machine offering bubblewrap with and without the filter on both launchers, and plain
    without the filter only."""
    launched = [LaunchedTier(name, launcher) for name in ("bubblewrap+seccomp", "bubblewrap")
                for launcher in ("exec", "forkserver")] + [LaunchedTier("plain", "forkserver")]
    monkeypatch.setattr(tiers, "fork_tiers", lambda: tuple(t for t in launched if t.launcher == "forkserver"))
    return launched


def test_a_tier_without_the_filter_runs_only_what_the_filter_takes_part_in(machine: list[LaunchedTier]) -> None:
    by_tier: dict[str, set[str]] = {}
    for param in attack_matrix(machine, ALL):
        tier, attack = param.values
        by_tier.setdefault(tier.id, set()).add(attack.name)
    needing = {a.name for a in ALL} - FILTER_NEUTRAL
    assert by_tier["bubblewrap-forkserver"] == needing  # its twin with the filter runs the rest
    assert by_tier["bubblewrap+seccomp-forkserver"] == {a.name for a in ALL}
    assert by_tier["plain-forkserver"] == {a.name for a in ALL}  # no twin with the filter here


def test_a_twin_counts_only_with_the_same_launcher(machine: list[LaunchedTier]) -> None:
    forked = [t for t in machine if t.launcher == "forkserver"]
    assert [t.id for t in without_filtered_twins([*forked, LaunchedTier("bubblewrap", "exec")])] == [
        "bubblewrap+seccomp-forkserver", "plain-forkserver", "bubblewrap-exec"]
    assert [t.id for t in without_filtered_twins(machine)] == [
        "bubblewrap+seccomp-exec", "bubblewrap+seccomp-forkserver", "plain-forkserver"]
    assert without_filtered_twins(["bubblewrap+seccomp", "bubblewrap", "plain"]) == ["bubblewrap+seccomp", "plain"]

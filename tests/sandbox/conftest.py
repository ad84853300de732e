"""Targets for the adversarial suite, and the tier parameters (see tiers.py)."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sandbox.tiers import LaunchedTier, fork_tiers, launched_tiers, without_filtered_twins


@dataclass
class Targets:
    """Things on the host that attacks aim at; none of them may be reached."""

    service_pid: int
    secret_file: Path  # 0600, like a deployment's settings file
    protected_dir: Path  # root-owned 0755: the candidate must not create files here
    source_file: Path  # the service's own code
    tcp_port: int
    unix_path: str
    canary: str  # set in the service's environment


@pytest.fixture(scope="session")
def targets() -> Iterator[Targets]:
    base = Path(tempfile.mkdtemp(prefix="sandbox-targets-"))
    os.chmod(base, 0o755)
    secret = base / "settings.env"
    secret.write_text("SCALING_GRADER_API_KEY=sk-canary-8d1f\n")
    os.chmod(secret, 0o600)
    protected = base / "protected"
    protected.mkdir()
    os.chmod(protected, 0o755)
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(16)
    unix_path = str(base / "service.sock")
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(unix_path)
    os.chmod(unix_path, 0o777)
    unix.listen(16)
    canary = "canary-" + os.urandom(8).hex()
    os.environ["GRADER_TEST_CANARY"] = canary
    yield Targets(
        service_pid=os.getpid(),
        secret_file=secret,
        protected_dir=protected,
        source_file=Path(__file__).resolve().parents[2] / "app" / "graders" / "impl.py",
        tcp_port=tcp.getsockname()[1],
        unix_path=unix_path,
        canary=canary,
    )
    tcp.close()
    unix.close()
    os.environ.pop("GRADER_TEST_CANARY", None)


def _parametrized_by_mark(metafunc: pytest.Metafunc, name: str) -> bool:
    """Whether the test's own parametrize mark already gives `name` (see tiers.attack_matrix)."""
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if name in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return True
    return False


def _tiers_for(metafunc: pytest.Metafunc, tiers: Iterable[LaunchedTier]) -> list[LaunchedTier]:
    """tiers, or for a test marked filter_neutral (it makes no call the filter acts on: see
    tiers.FILTER_NEUTRAL) those left without a twin with the filter among them."""
    if metafunc.definition.get_closest_marker("filter_neutral") is None:
        return list(tiers)
    return without_filtered_twins(tiers)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A run of `-m low_priority` skips the tier probe (tests/conftest.py): that mark is for tests
    # that start no sandbox, so no tier-parametrised test may carry it.
    if metafunc.definition.get_closest_marker("low_priority") and \
            {"tier", "os_tier", "fork_tier"} & set(metafunc.fixturenames):
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a sandbox tier test cannot be low_priority")
    # Each tier twice where the fork server serves it: children started, and children forked.
    if "tier" in metafunc.fixturenames and not _parametrized_by_mark(metafunc, "tier"):
        metafunc.parametrize("tier", _tiers_for(metafunc, launched_tiers()), ids=lambda t: t.id)
    if "os_tier" in metafunc.fixturenames and not _parametrized_by_mark(metafunc, "os_tier"):
        # Tiers that hold without the Python-level guards: the OS layers alone must contain
        # the attacks there (the plain tier without seccomp relies on the guards for some).
        os_tiers = [t for t in launched_tiers() if t != "plain"]
        metafunc.parametrize("os_tier", _tiers_for(metafunc, os_tiers), ids=lambda t: t.id)
    if "fork_tier" in metafunc.fixturenames:
        metafunc.parametrize("fork_tier", _tiers_for(metafunc, fork_tiers()), ids=lambda t: t.id)

"""Session-wide test settings: the verified book mirror from ../shared, a private book cache."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.mark.expression import Expression

from app.settings import Settings, get_settings
from app.tasks import registry
from tests.fake_openai import FakeOpenAI
from tests.sandbox import tiers
from tests.support.book_mirror import mirror_path
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[1]
BOOK_COMMIT = "772889525cbeca175408a0547b1b5fab4760f26c"
BOOK_MIRROR = (ROOT.parent / "shared" / "book" / BOOK_COMMIT).resolve()

os.environ.setdefault("SCALING_GRADER_BOOK_MIRROR", str(BOOK_MIRROR))
os.environ.setdefault("SCALING_GRADER_BOOK_CACHE", tempfile.mkdtemp(prefix="sg-book-cache-"))


def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None and "sandbox_tiers" in workerinput:
        tiers.use_probed(workerinput["sandbox_tiers"])
    elif _leaves_out_tier_tests(config):
        tiers.skip_probing()


def _leaves_out_tier_tests(config: pytest.Config) -> bool:
    """Whether `-m` deselects the tier-parametrised tests, all marked slow and serial and none
    low_priority (that mark is for tests that start no sandbox), as `make test-fast` and every part
    of `make test` but the serial one do: false for those marks with the other marks all absent
    and all present."""
    expression = config.getoption("markexpr")
    if not expression:
        return False
    compiled = Expression.compile(expression)
    marks = {"slow": True, "serial": True, "low_priority": False}
    return not any(compiled.evaluate(lambda name, others=others, **_: marks.get(name, others))
                   for others in (False, True))


# The modules that take longest (real workers under fault, a fuzz run, a verifiers venv, servers
# restarted), measured with --durations on the 2-core machine: under pytest-xdist they go first,
# so that idle workers take the rest from the others' queues instead of waiting at the end on one
# worker that met a long module late. Each module keeps its own order (its fixtures are shared).
LONG_MODULES = (
    "tests/jobs/test_lanes.py", "tests/api/test_openapi_fuzz.py", "tests/scaling_book/test_verifiers_v1.py",
    "tests/jobs/test_queue.py", "tests/commands/test_eval.py", "tests/commands/test_export.py",
    "tests/scaling_book/test_client.py", "tests/scaling_book/test_verifiers_env.py",
)


# A low-priority test's time limit: it gets mostly the CPU the rest of `make test` leaves idle
# (a tenth when the rest wants it all), so minutes of its wall time can pass with little of it.
LOW_PRIORITY_TIMEOUT = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("low_priority") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(LOW_PRIORITY_TIMEOUT))
    if getattr(config, "workerinput", None) is None:
        return  # not an xdist worker: plain pytest keeps the file order
    rank = {path: i for i, path in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable


# pytest-xdist's controller (the hook is optional: absent without -n): the tiers are probed once,
# here, and every worker collects the same tier-parametrised tests from that one result.
@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    config = node.config  # type: ignore[attr-defined]
    if not _leaves_out_tier_tests(config):
        node.workerinput["sandbox_tiers"] = tiers.probed()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def server_url():
    from tests.support.server import running_server

    with running_server() as url:
        yield url


# Shared by the tests that need their own Redis (function scope: a fresh server each) and a
# loopback judge (module scope: one per test module).
@pytest.fixture
def redis_server():
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def judge_server():
    fake = FakeOpenAI().start()
    try:
        yield fake
    finally:
        fake.stop()


# The judge tests' loopback judge (session scope, reset before each test); its slow models take
# 1.5 s, for the timeout tests.
@pytest.fixture(scope="session")
def fake_openai() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI(slow_seconds=1.5).start()
    yield server
    server.stop()


@pytest.fixture
def fake(fake_openai: FakeOpenAI) -> FakeOpenAI:
    fake_openai.reset()
    return fake_openai


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """No split loaded for this test, so its settings are the ones the banks load with; the banks
    loaded before come back after it."""
    monkeypatch.setattr(registry, "_banks", {})


@pytest.fixture
def service_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_registry: None) -> Iterator[Settings]:
    """The service's own settings path (environment -> get_settings) pointed at the verified
    mirror and a private book cache."""
    monkeypatch.setenv("SCALING_GRADER_BOOK_MIRROR", str(mirror_path()))
    monkeypatch.setenv("SCALING_GRADER_BOOK_CACHE", str(tmp_path / "cache"))
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()

"""End-to-end tests against the running container stack. They run only through `make
test-stack` (deploy/stack.sh test), which starts the stack and sets STACK_URL; a plain `pytest`
or `make test` skips them."""

from __future__ import annotations

import os

import httpx
import pytest

from tests.stack.stack import Stack


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("STACK_URL"):
        return
    skip = pytest.mark.skip(reason="needs the container stack: run `make test-stack`")
    for item in items:
        if "tests/stack/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def stack() -> Stack:
    return Stack.from_environment()


@pytest.fixture(scope="session")
def client(stack: Stack):
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    with httpx.Client(base_url=stack.url, headers=headers, timeout=60) as c:
        yield c

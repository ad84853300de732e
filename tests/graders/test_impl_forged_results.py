"""A candidate can write its own result frame to the reporter. Whatever it writes, the item must
stay scored: an integer beyond float range or a value nested nearly as deep as the parent's stack
once raised in the parent, so grading ended as an unscored ``error`` (a trainer drops those
items: a way to dodge a zero reward)."""

from __future__ import annotations

import textwrap

import pytest

from app.graders.dispatch import grade
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.settings import SandboxSettings, Settings
from app.tasks import registry

# Sandboxed children: left out of `make test-fast`, and run alone by `make test` (serial): their
# wall and CPU limits are what they test, and other tests' load on two cores breaks them.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

SETTINGS = Settings(sandbox=SandboxSettings(wall_seconds=20, warm_pool_size=2))


def forging(value_json: str) -> str:
    """A kv_cache_bytes() that writes a value frame on every descriptor and exits before the
    harness can send its own."""
    frame = '{"kind": "value", "value": ' + value_json + "}"
    return textwrap.dedent(f"""
        ```python
        import os

        def kv_cache_bytes(*args, **kwargs):
            frame = {frame!r}.encode()
            for fd in range(3, 64):
                try:
                    os.write(fd, len(frame).to_bytes(8, "big") + frame)
                except OSError:
                    pass
            os._exit(0)
        ```
    """)


FORGED = {
    "integer beyond float range": "1" + "0" * 400,
    "negative integer beyond float range": "-" + "9" * 1000,
    # depths either side of where the parent's json.loads or decode() run out of stack
    **{f"list nested {d} deep": "[" * d + "]" * d for d in (900, 960, 975, 985, 995)},
}


@pytest.mark.parametrize("name", FORGED)
def test_forged_values_are_scored_wrong(name: str) -> None:
    task = registry.resolve_task("impl/kv_cache_bytes", SETTINGS)
    result = grade(task, forging(FORGED[name]), GradeOptions(), SETTINGS)
    assert result.outcome is Outcome.incorrect, result.explanation
    assert result.scored and result.reward == 0.0
    assert {c["verdict"] for c in result.details["cases"]} <= {"wrong", "crashed"}

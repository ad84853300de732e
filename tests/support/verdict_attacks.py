"""Shared machinery for the verdict-trust attacks: grade a hostile completion through the real
grading path (dispatch -> impl grader -> real sandbox children on the tier the service picks by
default), and check that it earned nothing and that nothing of its hidden cases came back.

The verdict is decided in the service (decoding, checking, bucketing), the same whatever tier ran
the child; the attacks therefore run where a default deployment runs them (``tier = "auto"``:
bubblewrap with seccomp and the fork server where the host offers them), and the one attack whose
cost depends on the tier is repeated on every tier (test_impl_verdict_attacks.py)."""

from __future__ import annotations

import json
import resource
import textwrap
from dataclasses import dataclass
from typing import Any

from app.graders.dispatch import grade
from app.graders.impl_cases import case_seed, draw_cases
from app.graders.impl_verdict import VERDICTS, Reason, time_bucket
from app.graders.options import GradeOptions
from app.graders.result import GradeResult
from app.settings import ImplSettings, SandboxSettings, Settings
from app.tasks import registry
from app.tasks.impl.exercises import BY_NAME
from app.tasks.impl.spec import Case

# The service's default sandbox (tier, launcher, result caps: what is under test here), with
# longer limits than the sandbox suite's: JAX cases and the trusted check must not time out on a
# loaded machine. A fixed case secret makes every attack's draw the same on every run (the draw
# itself is not the point).
_DEFAULTS = SandboxSettings()
SETTINGS = Settings(
    sandbox=_DEFAULTS.model_copy(update={"wall_seconds": 20.0, "cpu_seconds": 8.0}),
    impl=ImplSettings(case_secret="verdict-attack-suite"),
)
BUCKETS = {time_bucket(s) for s in (0.0, 5.0, 50.0)}
# The service's CPU for one hostile grade: far below what a costly frame once took (~15 s), far
# above what a grade really costs (tens of ms), so machine load cannot make it flaky.
SERVICE_CPU_BOUND = 3.0


@dataclass
class Graded:
    result: GradeResult
    cases: list[Case]
    service_cpu: float

    @property
    def body(self) -> str:
        """The response as a client sees it, minus the case seed (an opaque HMAC output)."""
        dump = self.result.model_dump(mode="json")
        dump["details"] = {k: v for k, v in dump["details"].items() if k != "case_seed"}
        return json.dumps(dump)


def completion(source: str) -> str:
    return f"Here is my solution.\n\n```python\n{textwrap.dedent(source).strip()}\n```\n"


def _service_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def grade_hostile(exercise: str, source: str, settings: Settings = SETTINGS) -> Graded:
    text = completion(source)
    task = registry.resolve_task(f"impl/{exercise}", settings)
    before = _service_cpu()
    result = grade(task, text, GradeOptions(), settings)
    spent = _service_cpu() - before
    cases = draw_cases(BY_NAME[exercise], case_seed(settings, task.id, text), settings)
    return Graded(result, cases, spent)


def _needles(value: Any) -> set[str]:
    """Text forms in which a hidden input or expected value could show up in a response."""
    found: set[str] = set()
    if isinstance(value, bool) or value is None:
        return found
    if isinstance(value, float):
        found |= {repr(value), f"{value:.6g}"} if abs(value) >= 100 or value != int(value) else set()
    elif isinstance(value, int):
        if abs(value) >= 100:
            found.add(str(value))
    elif isinstance(value, str):
        if len(value) >= 6:
            found.add(value)
    elif isinstance(value, list | tuple):
        if len(value) >= 2 and all(isinstance(v, int | float) for v in value):
            found |= {json.dumps(list(value)), str(list(value)), str(tuple(value))}
        for v in value:
            found |= _needles(v)
    elif isinstance(value, dict):
        for v in value.values():
            found |= _needles(v)
    return found


def assert_earned_nothing(graded: Graded, *, costly: bool = False) -> None:
    result = graded.result
    assert result.reward == 0.0, (result.outcome, result.details)
    assert result.scored, result.explanation  # a grader fault would let a trainer drop the item
    for case in result.details.get("cases", []):
        assert set(case) == {"case", "verdict", "reason", "time"}, case
        assert case["verdict"] in VERDICTS and case["verdict"] != "sandbox_fault"
        assert case["reason"] in Reason.__members__, case
        assert case["time"] in BUCKETS
    body = graded.body
    for case in graded.cases:
        for needle in _needles([list(case.args), case.expected]):
            assert needle not in body, f"hidden value {needle!r} in the response"
    if costly:
        assert graded.service_cpu < SERVICE_CPU_BOUND, graded.service_cpu

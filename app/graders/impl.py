"""Grade an implementation exercise: extract the submitted function, run it on every hidden case
in its own fresh sandbox child, compare each returned value in the parent.

Thread-safe: in embedded mode each grade runs in a worker thread, and all of them share the
process-wide sandbox (and its warm pool)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.graders.impl_source import denied_imports, extract_code
from app.graders.impl_verdict import judge_case
from app.graders.result import GradeResult, Outcome
from app.graders.sandbox import get_sandbox
from app.graders.tier_policy import meets_minimum, refusal
from app.tasks.impl.exercises import get_exercise

if TYPE_CHECKING:
    from app.graders.dispatch import GradeOptions
    from app.settings import Settings
    from app.tasks.base import Task
    from app.tasks.impl.spec import Exercise


def _result(outcome: Outcome, reward: float, why: str, details: dict[str, Any]) -> GradeResult:
    return GradeResult(grading="impl", outcome=outcome, reward=reward, explanation=why, details=details)


def grade_source(exercise: Exercise, source: str, *, all_or_nothing: bool, settings: Settings) -> GradeResult:
    sb = settings.sandbox
    box = get_sandbox(sb)
    details: dict[str, Any] = {"exercise": exercise.name, "entry": exercise.entry}
    if sb.min_tier != "plain":  # fail closed: never run the code in a weaker tier than required
        tier = box.status()["tier"]
        refused = refusal(tier, sb.min_tier)
        if refused:
            details |= {"sandbox_tier": tier, "min_tier": sb.min_tier}
            return _result(Outcome.sandbox_error, 0.0, refused, details)
    if sb.ast_guard:
        denied = denied_imports(source)
        if denied:
            details["rejected_imports"] = denied
            return _result(Outcome.incorrect, 0.0, "the code imports modules the sandbox forbids", details)
    cases = exercise.hidden_cases()

    def run(case: Any) -> dict[str, Any]:
        outcome = box.run(source, exercise.entry, list(case.args), case.kwargs, profile=exercise.profile)
        return judge_case(case, outcome, exercise.rtol, sb.cpu_seconds) | {"tier": outcome.tier}

    with ThreadPoolExecutor(max_workers=min(sb.max_parallel_cases, len(cases))) as pool:
        verdicts = list(pool.map(run, cases))
    tiers = {v.pop("tier") for v in verdicts}
    details["sandbox_tier"] = ",".join(sorted(tiers))
    details["cases"] = [{"case": i, **v} for i, v in enumerate(verdicts)]
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    details["counts"] = counts
    passed, total = counts.get("passed", 0), len(verdicts)
    if counts.get("sandbox_fault"):
        # Fail closed: a case that never ran says nothing about the code.
        why = f"the sandbox failed on {counts['sandbox_fault']} case(s)"
        return _result(Outcome.sandbox_error, 0.0, why, details)
    fraction = passed / total
    reward = (1.0 if passed == total else 0.0) if all_or_nothing else fraction
    if passed == total:
        outcome = Outcome.correct
    elif passed:
        outcome = Outcome.partial
    elif counts.get("timeout") == total:
        outcome = Outcome.timeout
    elif counts.get("memory") == total:
        outcome = Outcome.memory
    else:
        outcome = Outcome.incorrect
    return _result(outcome, reward, f"{passed} of {total} hidden cases passed", details)


def grade_task(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    exercise = get_exercise(str(task.gold))
    source = extract_code(completion, exercise.entry)
    if source is None:
        return _result(Outcome.no_answer, 0.0, f"no Python code defining {exercise.entry}() found",
                       {"exercise": exercise.name, "entry": exercise.entry})
    return grade_source(exercise, source, all_or_nothing=options.all_or_nothing, settings=settings)


def sandbox_status(settings: Settings) -> dict[str, Any]:
    """For /readyz and worker start-up: the tier in force (probing once), the warm pool's state,
    and whether the tier meets the deployment's minimum (not ok when it does not)."""
    status = get_sandbox(settings.sandbox).status()
    status["min_tier"] = settings.sandbox.min_tier
    status["meets_min_tier"] = meets_minimum(status.get("tier"), settings.sandbox.min_tier)
    status["ok"] = bool(status.get("ok")) and status["meets_min_tier"]
    return status

"""Grade an implementation exercise: extract the submitted function, draw this grade's hidden
cases (app/graders/impl_cases.py), run each in its own fresh sandbox child, judge each returned
value in the parent, establish JAX sharding facts in a trusted child, and score.

Scoring (docs/impl.md): general cases count one each; edge cases (degenerate inputs and cases
that must raise) count in proportion to the general cases passed, so raising everywhere or
answering only the degenerate inputs earns nothing; and a submission that returns the same value
for every general case (whose expected values are pairwise distinct) earns nothing.

Thread-safe: in embedded mode each grade runs in a worker thread, and all of them share the
process-wide sandbox (and its warm pool)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.graders.impl_cases import case_seed, draw_cases
from app.graders.impl_decode import JaxClaim, Returned
from app.graders.impl_jax import TrustedCheckFailed, established_shardings, meets
from app.graders.impl_source import denied_imports, extract_code
from app.graders.impl_verdict import NOTHING, CaseVerdict, Reason, assess
from app.graders.result import GradeResult, Outcome
from app.sandbox.pool import get_sandbox
from app.sandbox.tier_order import above_weakest, meets_minimum, refusal

if TYPE_CHECKING:
    from app.graders.options import GradeOptions
    from app.sandbox.pool import Sandbox
    from app.settings import Settings
    from app.tasks.base import Task
    from app.tasks.impl.spec import Case, Exercise

CONSTANT_ANSWER = "constant_answer"


def _result(outcome: Outcome, reward: float, why: str, details: dict[str, Any]) -> GradeResult:
    return GradeResult(grading="impl", outcome=outcome, reward=reward, explanation=why, details=details)


def _check_shardings(box: Sandbox, cases: list[Case], verdicts: list[CaseVerdict], max_items: int) -> None:
    """Re-establish, in a trusted child, the sharding of every array whose values passed."""
    todo = [i for i, (c, v) in enumerate(zip(cases, verdicts, strict=True))
            if c.sharding is not None and v.verdict == "passed" and isinstance(v.got, JaxClaim)]
    facts = established_shardings(box, [verdicts[i].got for i in todo], max_items)
    for i, fact in zip(todo, facts, strict=True):
        if not meets(cases[i].sharding or {}, fact):
            verdicts[i].verdict, verdicts[i].reason = "wrong", Reason.sharding_not_as_asked


def _constant(cases: list[Case], verdicts: list[CaseVerdict]) -> bool:
    """The general cases that returned a value (two or more) all returned the same one, although
    their expected answers differ. Failing the other cases on purpose does not evade it."""
    answered = [(c, v) for c, v in zip(cases, verdicts, strict=True)
                if not c.edge and c.raises is None and v.got is not NOTHING]
    if len(answered) < 2 or len({json.dumps(c.expected, sort_keys=True) for c, _ in answered}) < 2:
        return False
    return len({_canonical(v.got) for _, v in answered}) == 1


def _canonical(value: Any) -> str:
    """One text per answer: dict order, container type and float noise below the tolerance do
    not make a constant look like several answers."""
    def walk(v: Any) -> Any:
        if isinstance(v, Returned | JaxClaim):
            return walk(v.data)
        if isinstance(v, dict):
            return sorted(([walk(k), walk(x)] for k, x in v.items()), key=repr)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, float):
            return float(f"{v:.6g}")
        return v if v is None or isinstance(v, bool | int | str) else repr(v)
    return json.dumps(walk(value))


def score(cases: list[Case], verdicts: list[CaseVerdict], *, all_or_nothing: bool) -> float:
    general = [v.verdict == "passed" for c, v in zip(cases, verdicts, strict=True) if not c.edge]
    edge = [v.verdict == "passed" for c, v in zip(cases, verdicts, strict=True) if c.edge]
    if all_or_nothing:
        return 1.0 if all(general) and all(edge) else 0.0
    share = sum(general) / len(general) if general else 0.0
    return (sum(general) + sum(edge) * share) / (len(general) + len(edge))


def grade_source(exercise: Exercise, source: str, *, all_or_nothing: bool, settings: Settings,
                 seed: str) -> GradeResult:
    """Grade source on the cases the seed draws (see impl_cases)."""
    sb = settings.sandbox
    box = get_sandbox(sb)
    details: dict[str, Any] = {"exercise": exercise.name, "entry": exercise.entry, "case_seed": seed}
    if above_weakest(sb.min_tier):  # fail closed: never run the code in a weaker tier than required
        tier = box.status()["tier"]
        refused = refusal(tier, sb.min_tier)
        if refused:
            details |= {"sandbox_tier": tier, "min_tier": sb.min_tier}
            return _result(Outcome.sandbox_error, 0.0, refused, details)
    if sb.ast_guard:
        denied = denied_imports(source)
        if denied:
            details["rejected_imports"] = sorted({d.split(".")[0] for d in denied})  # deny-list names only
            return _result(Outcome.incorrect, 0.0, "the code imports modules the sandbox forbids", details)
    cases = draw_cases(exercise, seed, settings)

    def run(case: Case) -> tuple[CaseVerdict, str]:
        outcome = box.run(source, exercise.entry, list(case.args), case.kwargs, profile=exercise.profile)
        return assess(case, outcome, exercise.rtol, sb.cpu_seconds, sb.max_result_items), outcome.tier

    pool = ThreadPoolExecutor(max_workers=min(sb.parallel_cases, len(cases)))
    try:
        ran = list(pool.map(run, cases))
    except BaseException:
        # The job's backstop deadline (worker.deadline) is raised here, in the waiting thread: the
        # cases not begun are dropped and the running ones are not waited for (each ends by its
        # own wall limit), or the deadline would wait out every case's wall time first.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    verdicts = [v for v, _ in ran]
    details["sandbox_tier"] = ",".join(sorted({tier for _, tier in ran}))
    if any(v.verdict == "sandbox_fault" for v in verdicts):
        # Fail closed: a case that never ran says nothing about the code.
        details["cases"] = [{"case": i, **v.public()} for i, v in enumerate(verdicts)]
        faults = sum(v.verdict == "sandbox_fault" for v in verdicts)
        return _result(Outcome.sandbox_error, 0.0, f"the sandbox failed on {faults} case(s)", details)
    try:
        _check_shardings(box, cases, verdicts, sb.max_result_items)
    except TrustedCheckFailed:
        details["cases"] = [{"case": i, **v.public()} for i, v in enumerate(verdicts)]
        return _result(Outcome.sandbox_error, 0.0, "the trusted sharding check failed", details)
    details["cases"] = [{"case": i, **v.public()} for i, v in enumerate(verdicts)]
    counts: dict[str, int] = {}
    for v in verdicts:
        counts[v.verdict] = counts.get(v.verdict, 0) + 1
    details["counts"] = counts
    passed, total = counts.get("passed", 0), len(verdicts)
    if _constant(cases, verdicts):
        details["rule"] = CONSTANT_ANSWER
        return _result(Outcome.incorrect, 0.0, "the same answer for every input earns nothing", details)
    reward = score(cases, verdicts, all_or_nothing=all_or_nothing)
    if passed == total:
        outcome = Outcome.correct
    elif score(cases, verdicts, all_or_nothing=False) > 0:
        outcome = Outcome.partial
    elif counts.get("timeout") == total:
        outcome = Outcome.timeout
    elif counts.get("memory") == total:
        outcome = Outcome.memory
    else:
        outcome = Outcome.incorrect
    return _result(outcome, reward, f"{passed} of {total} hidden cases passed", details)


def grade_task(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    exercise: Exercise = task.hidden["exercise"]
    source = extract_code(completion, exercise.entry)
    if source is None:
        return _result(Outcome.no_answer, 0.0, f"no Python code defining {exercise.entry}() found",
                       {"exercise": exercise.name, "entry": exercise.entry})
    seed = case_seed(settings, exercise.task_id, completion)
    return grade_source(exercise, source, all_or_nothing=options.all_or_nothing, settings=settings, seed=seed)


def sandbox_status(settings: Settings) -> dict[str, Any]:
    """For /readyz and worker start-up: the tier in force (probing once), the warm pool's state,
    and whether the tier meets the deployment's minimum (not ok when it does not)."""
    status = get_sandbox(settings.sandbox).status()
    status["min_tier"] = settings.sandbox.min_tier
    status["meets_min_tier"] = meets_minimum(status.get("tier"), settings.sandbox.min_tier)
    status["ok"] = bool(status.get("ok")) and status["meets_min_tier"]
    return status

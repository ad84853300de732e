"""From a grade request to a GradeResult: resolve the task (by id or from an inline reference),
then grade inline (numeric, rows) or through the job backend (judge, impl). The HTTP layer and
the reward adapters all come through here, so every entry point grades the same way."""

from __future__ import annotations

import asyncio
import re
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

from app.errors import ApiError, JobPending, QueueUnavailable
from app.graders import dispatch
from app.graders.judge import JudgeUnavailable, normalise_base_url, require_judge_for
from app.graders.kinds import is_inline, queue_of
from app.graders.options import JudgeSpec
from app.graders.result import GradeResult, Outcome, shown_result
from app.grading.budgets import GradeBudgets
from app.grading.models import ChatMessage, GradeRequest, completion_text, lacks_answer_message
from app.grading.offload import in_process, off_loop
from app.grading.processes import GradingProcessDied, GradingProcesses, GradingProcessFailed, child_settings
from app.grading.references import task_from_reference
from app.jobs.base import ClaimResult, JobBackend, JobView, QueuedGrading, body_digest
from app.jobs.embedded import EmbeddedJobs
from app.observability import record_grade
from app.settings import Settings
from app.tasks.base import Task, UnknownTask
from app.tasks.registry import resolve_task
from app.tasks.splits import check_held_out_setting, is_held_out
from app.tenants import LOCAL_TENANT, Tenant

# Inline items of a batch graded per trip to a grading process: at most this many, and no more
# completion text (and gold: an inline reference's rows) than INLINE_CHUNK_CHARS unless one item
# alone holds more. A trip is what another tenant's call may wait for (the processes are shared in
# turn), and what the API process pickles in one go, so it is kept short.
INLINE_CHUNK = 64
INLINE_CHUNK_CHARS = 64 * 1024
GOLD_ENTRY_CHARS = 24  # about what a row (or a value) of the gold weighs when pickled


_Inline = tuple[int, Task, str, GradeRequest]  # (index in the batch, task, completion text, request)


def _chunks(items: Sequence[_Inline]) -> Iterator[list[_Inline]]:
    chunk: list[_Inline] = []
    chars = 0
    for item in items:
        gold = item[1].gold
        weight = len(item[2]) + (GOLD_ENTRY_CHARS * len(gold) if isinstance(gold, (list, tuple)) else 0)
        if chunk and (len(chunk) >= INLINE_CHUNK or chars + weight > INLINE_CHUNK_CHARS):
            yield chunk
            chunk, chars = [], 0
        chunk.append(item)
        chars += weight
    if chunk:
        yield chunk
# A numeric completion up to this long is graded on the event loop (a trip to a grading process
# costs more than grading it); anything longer, and every rows answer, is graded in a grading process.
ON_LOOP_CHARS = 4096

_TASK_ID = re.compile(r"[A-Za-z0-9_.:/-]{1,200}")

# A batch item ready to grade: (position in the batch, task, completion text, request).
_Item = tuple[int, Task, str, GradeRequest]

TOLERANCE_NOT_APPLIED = ("the request's tolerance was not applied: a task is graded at its own tolerance, "
                         "never a client's")
PARTIAL_CREDIT_NOT_APPLIED = ("partial_credit was not applied: a held-out item is graded pass or fail at the "
                              "task's own rule")

# Details a held-out result keeps: how it was graded, never a verdict per value, row or case. Not the
# judge's attempts or latency: a verdict of correct is asked for twice (confirmed), so two asks and a
# fail would say the judge found the response correct once, a near miss finer than pass or fail.
HELD_OUT_DETAILS = frozenset({"judge_model", "judge_base_url", "constraint", "verdict",
                              "answer_source", "tolerance_not_applied", "partial_credit_not_applied", "too_long"})


def held_out_outcome(outcome: Outcome) -> Outcome:
    """The outcome a held-out grade may show: pass or fail, no dimension hint, no share of rows or
    cases (``partial``)."""
    return Outcome.incorrect if outcome in (Outcome.unit_mismatch, Outcome.partial) else outcome


def pass_or_fail(result: GradeResult) -> GradeResult:
    """A held-out item's reward: 1 for correct, else 0, whatever a grader's finer reward would
    be (a share of rows or hidden cases is an oracle a search climbs one edit at a time)."""
    if not result.outcome.scored or (result.reward in (0.0, 1.0) and result.outcome is not Outcome.partial):
        return result
    correct = result.outcome is Outcome.correct
    return result.model_copy(update={"reward": 1.0 if correct else 0.0,
                                     "outcome": Outcome.correct if correct else Outcome.incorrect})


def held_out_view(result: GradeResult) -> GradeResult:
    """A held-out item's result: pass or fail at the task's own tolerance, nothing finer. Per-value
    verdicts (which value was right, its dimension, its error) would let a search for the gold
    bisect; a bare pass/fail leaves it a scan (docs/splits.md)."""
    result = pass_or_fail(result)
    outcome = held_out_outcome(result.outcome)
    if outcome is Outcome.correct:
        why = "correct at the task's tolerance"
    elif outcome.scored:
        why = "not correct at the task's tolerance (verdicts per value are withheld on held-out splits)"
    else:
        why = result.explanation
    details = {k: v for k, v in result.details.items() if k in HELD_OUT_DETAILS}
    if details.get("tolerance_not_applied"):
        why = f"{why}; {TOLERANCE_NOT_APPLIED}"
    if details.get("partial_credit_not_applied"):
        why = f"{why}; {PARTIAL_CREDIT_NOT_APPLIED}"
    return result.model_copy(update={"outcome": outcome, "explanation": why, "values": [], "details": details})


def too_long_result(task: Task, limit: int) -> GradeResult:
    """An over-long completion is a wrong answer the policy wrote, not a refused request: scored 0,
    so a trainer cannot drop it (and a policy cannot escape a 0 by padding)."""
    return GradeResult(task_id=task.id or None, split=task.split or None, grading=task.grading,
                       outcome=Outcome.too_long, reward=0.0, details={"too_long": True},
                       explanation=f"the completion exceeds {limit} characters; scored 0")


def job_payload(request: GradeRequest, tenant: str) -> dict[str, Any]:
    """JSON-safe job arguments for a worker process: the request as sent (validated), and who sent it."""
    return {"request": request.model_dump(mode="json", exclude={"request_id", "wait"}), "tenant": tenant}


def apply_tenant_judge(request: GradeRequest, tenant: Tenant) -> GradeRequest:
    """The tenant's default judge when the request names none; refusal of a base URL outside the
    tenant's list, so a tenant cannot aim the service at addresses its operator did not allow."""
    judge = request.judge
    if judge is None and tenant.judge_model:
        base = tenant.judge_base_urls[0] if tenant.judge_base_urls else None
        return request.model_copy(update={"judge": JudgeSpec(model=tenant.judge_model, base_url=base)})
    if judge is not None and judge.base_url and tenant is not LOCAL_TENANT:
        try:  # compared in the same canonical form as the operator's allow-list
            allowed = judge.base_url and normalise_base_url(judge.base_url) in {
                normalise_base_url(u) for u in tenant.judge_base_urls
            }
        except JudgeUnavailable:
            allowed = False
        if not allowed:
            raise ApiError(403, "judge_not_allowed", "this judge base URL is not allowed for this tenant")
    return request


class GradingService:
    """``jobs`` carries queued grading. Left out, in-process threads are made on first use (a
    worker grading a job payload never needs them); a deployment with Redis passes its backend.
    ``grading_processes``: grade large inline items and batches in the grading processes (the API
    does: its event loop must not share an interpreter lock with grading); otherwise on the
    grading threads (in-process grading by the eval command, which has no loop to keep free)."""

    def __init__(self, settings: Settings, jobs: JobBackend | None = None,
                 budgets: GradeBudgets | None = None, *, grading_processes: bool = False) -> None:
        check_held_out_setting(settings)  # at start, not at the first held-out grade
        self.settings = settings
        self._jobs = jobs
        self._budgets = budgets
        self._processes: GradingProcesses | None = None
        self._in_processes = grading_processes

    @property
    def budgets(self) -> GradeBudgets:
        """Held-out grade budgets: in the job backend's Redis when it has one (shared by replicas)."""
        if self._budgets is None:
            self._budgets = GradeBudgets(getattr(self._jobs, "async_redis", None))
        return self._budgets

    def held_out(self, task: Task) -> bool:
        return bool(task.id) and is_held_out(task.split, self.settings)

    async def charge(self, tasks: Sequence[Task], tenant: Tenant) -> None:
        """Spend the tenant's grades on held-out items, all or nothing (a 429 past the budget)."""
        counts = Counter(t.id for t in tasks if self.held_out(t))
        if counts:
            budget = tenant.held_out_grades_per_item or self.settings.held_out.grades_per_item
            await self.budgets.spend(tenant.name, counts, budget, self.settings.held_out.window_seconds)

    def too_long(self, text: str) -> bool:
        return len(text) > self.settings.limits.max_completion_chars

    @property
    def jobs(self) -> JobBackend:
        if self._jobs is None:
            if self.settings.redis_url:
                raise RuntimeError("with a Redis URL configured, pass the service its Redis job backend")
            self._jobs = EmbeddedJobs(self.settings)
        return self._jobs

    def prepare(self, request: GradeRequest) -> tuple[Task, str]:
        text = completion_text(request.completion)
        if request.task_id is not None:
            try:
                task = resolve_task(request.task_id, self.settings)
            except UnknownTask:
                raise ApiError(404, "unknown_task", "no task has this id") from None
        else:
            assert request.reference is not None  # the model requires a task id or a reference
            task = task_from_reference(request.reference, self.settings)
        if task.grading == "judge" and not self.too_long(text):
            self.require_judge([task], request)
        return task, text

    def require_judge(self, tasks: Sequence[Task], request: GradeRequest) -> None:
        """Refuse up front when judge items have no usable judge, rather than a judge_error each."""
        try:
            require_judge_for(tasks, request.options(), self.settings)
        except JudgeUnavailable as exc:
            raise ApiError(422, "judge_unavailable", str(exc)[:300]) from None

    def grade_now(self, task: Task, text: str, request: GradeRequest, tenant: str | None = None) -> GradeResult:
        start = time.perf_counter()
        result, counted = self.graded(task, text, request)
        record_grade(result.split, result.grading, counted, time.perf_counter() - start, tenant)
        return result

    def graded_all(self, items: Sequence[tuple[Task, str, GradeRequest]]) -> list[tuple[GradeResult, str, float]]:
        """``graded`` for each item, with the seconds it took."""
        found = []
        for task, text, request in items:
            start = time.perf_counter()
            result, counted = self.graded(task, text, request)
            found.append((result, counted, time.perf_counter() - start))
        return found

    def graded(self, task: Task, text: str, request: GradeRequest) -> tuple[GradeResult, str]:
        """The result and the outcome to count for it: pure work, done in a grading process for
        large items; the caller records the grade (``record_grade``) in the API process."""
        held_out = self.held_out(task)
        if self.too_long(text):
            result = too_long_result(task, self.settings.limits.max_completion_chars)
        elif lacks_answer_message(request.completion):
            # A transcript without the policy's turn: the rollout produced no answer, a scored 0
            # (not a refusal, which a trainer would drop, nor a grade of someone else's text).
            result = GradeResult(task_id=task.id or None, split=task.split or None, grading=task.grading,
                                 outcome=Outcome.no_answer, reward=0.0,
                                 explanation="the transcript has no assistant message to grade")
        else:
            options = request.options()
            if held_out:  # pass or fail at the task's own rule: no share of rows or cases
                options = options.model_copy(update={"partial_credit": False, "all_or_nothing": True})
            result = dispatch.grade(task, text, options, self.settings)
        if request.task_id is not None and request.tolerance is not None:
            # Said, not silently dropped: a client that believes it set a tolerance learns it did not.
            result.explanation = f"{result.explanation}; {TOLERANCE_NOT_APPLIED}"
            result.details["tolerance_not_applied"] = True
        if held_out:
            result = pass_or_fail(result)
            if request.partial_credit:  # said, like the tolerance
                result.explanation = f"{result.explanation}; {PARTIAL_CREDIT_NOT_APPLIED}"
                result.details["partial_credit_not_applied"] = True
        # Counted as the held-out view shows it: /v1/status and /metrics are read by every tenant.
        outcome = held_out_outcome(result.outcome) if held_out else result.outcome
        return result, outcome.value

    def shown(self, result: GradeResult, tenant: Tenant) -> GradeResult:
        """The result as this tenant may see it: no gold unless its operator reveals it, and on a
        held-out split no verdict finer than pass or fail."""
        reveal = tenant.reveals_expected(self.settings.reveal_expected)
        result = shown_result(result, reveal)
        if not reveal and result.task_id is not None and is_held_out(result.split or "", self.settings):
            result = held_out_view(result)
        return result

    def run_job(self, payload: dict[str, Any]) -> GradeResult:
        """Grade a job payload (see ``job_payload``) in a worker process."""
        request = GradeRequest.model_validate(payload["request"])
        task, text = self.prepare(request)
        return self.grade_now(task, text, request, payload.get("tenant"))

    async def job(self, tenant: Tenant, job_id: str, wait: float) -> JobView | None:
        """A queued grading as its tenant sees it, after waiting at most the service's longest wait."""
        return await self.jobs.view(tenant.name, job_id, min(wait, self.settings.limits.max_wait_seconds))

    async def grade(self, request: GradeRequest, tenant: Tenant = LOCAL_TENANT, *,
                    reward_only: bool = False) -> GradeResult:
        """The result, or JobPending if queued work outlasts the request's wait. ``reward_only``:
        for callers that pass on nothing but its reward, outcome and unscored reason (the reward
        endpoints), which skip the copy without the gold that a shown result costs."""
        result = await self._grade(request, tenant)
        return result if reward_only else self.shown(result, tenant)

    async def _grade(self, request: GradeRequest, tenant: Tenant) -> GradeResult:
        """The full result (gold included, as stored for the job); callers show it via ``shown``."""
        request = apply_tenant_judge(request, tenant)
        if _long_completion(request.completion):
            # Trimming a completion's edges walks each special token and space there in Python: an
            # 8 MiB run of "<pad>" held the event loop (and /healthz) for over a second.
            task, text = await off_loop(self.prepare, request, tenant=tenant.name)
        else:
            task, text = self.prepare(request)
        return await self._grade_prepared(request, task, text, tenant)

    async def _grade_prepared(self, request: GradeRequest, task: Task, text: str, tenant: Tenant) -> GradeResult:
        claim = await self._claim(request, task, text, tenant)
        if claim is None:
            await self.charge([task], tenant)
            return await self.grade_off_loop(task, text, request, tenant.name)
        if claim.new:
            # The in-flight slot first, then the held-out budget: a request refused for either
            # spends neither, and a retry of an earlier request id (not new) spends nothing.
            try:
                if tenant.max_in_flight is not None and not self._inline(task, text):
                    await self.jobs.reserve(tenant.name, [claim.job_id], tenant.max_in_flight)
                await self.charge([task], tenant)
            except BaseException:
                await self.jobs.release(tenant.name, claim.job_id)
                raise
        return await self._finish(request, task, text, tenant, claim, cap=None)

    async def _claim(self, request: GradeRequest, task: Task, text: str, tenant: Tenant) -> ClaimResult | None:
        """The job id of an item that goes through the job store; None for an inline item to be
        graded straight away (no idempotency key, or no reachable store)."""
        inline = self._inline(task, text)
        if inline and request.request_id is None:
            return None
        digest = body_digest(request.model_dump_json(exclude={"request_id", "wait"}))
        try:
            return await self.jobs.claim(tenant.name, request.request_id, digest)
        except QueueUnavailable:
            if not inline:
                raise
            # Inline grading is deterministic: answer without the idempotency record rather than fail.
            return None

    async def _finish(self, request: GradeRequest, task: Task, text: str, tenant: Tenant, claim: ClaimResult,
                      cap: int | None) -> GradeResult:
        """Grade or queue a claimed item, then wait for it as the request asks. ``cap``: the
        in-flight cap to check on queueing (None when the caller reserved the slot already)."""
        if claim.new:
            if self._inline(task, text):
                result = await self.grade_off_loop(task, text, request, tenant.name)
                result.job_id = claim.job_id
                await self.jobs.store(tenant.name, claim.job_id, result)
                return result
            work = QueuedGrading(queue=queue_of(task.grading),
                                 run=lambda: self.grade_now(task, text, request, tenant.name),
                                 payload=lambda: job_payload(request, tenant.name))
            await self.jobs.enqueue(tenant.name, claim.job_id, work, cap)
        wait = self.settings.queue.default_wait if request.wait is None else request.wait
        view = await self.job(tenant, claim.job_id, wait)
        if view is None:  # the claim expired between the calls: treat as gone rather than guess
            raise ApiError(404, "unknown_job", "the job for this request is no longer known")
        if view.result is not None:
            # pass or fail even when the worker that graded it was configured otherwise
            return pass_or_fail(view.result) if self.held_out(task) else view.result
        raise JobPending(view.job_id, view.status)

    def _inline(self, task: Task, text: str) -> bool:
        """Graded in the request, never queued: the inline kinds, and an over-long completion
        (scored 0 at once as too_long, whatever its kind)."""
        return is_inline(task.grading) or self.too_long(text)

    async def grade_off_loop(self, task: Task, text: str, request: GradeRequest,
                             tenant: str | None = None) -> GradeResult:
        """Grade an inline item: on the event loop only when it is small enough that its cost is
        a fixed few milliseconds; otherwise in a grading process, so that one large completion
        cannot hold every other request (and /healthz) back."""
        if len(text) <= ON_LOOP_CHARS and task.grading == "numeric":
            return self.grade_now(task, text, request, tenant)
        return (await self.grade_items([(task, text, request)], tenant))[0]

    @property
    def processes(self) -> GradingProcesses:
        """The grading processes, made on first use and started at the first call (the app's
        lifespan starts and stops them)."""
        if self._processes is None:
            self._processes = GradingProcesses(self.settings, self.settings.grading_processes,
                                               preload=("app.grading.service",))
        return self._processes

    async def grade_items(self, items: Sequence[tuple[Task, str, GradeRequest]],
                               tenant: str | None) -> list[GradeResult]:
        """Grade ``items`` in a grading process (on a grading thread without them), each recorded
        here once, as ``grade_now`` does. A process that dies mid-call (killed, crashed, out of
        memory) costs these items an unscored fault, never a reward and never the request."""
        start = time.perf_counter()
        try:
            if self._in_processes:
                slim = [(task, text, _without_reference(request)) for task, text, request in items]
                graded = await in_process(self.processes, _grade_in_child, slim, tenant=tenant)
            else:
                graded = await off_loop(self.graded_all, list(items), tenant=tenant)
        except (GradingProcessDied, GradingProcessFailed):
            seconds = (time.perf_counter() - start) / max(1, len(items))
            graded = [(_fault(task), Outcome.error.value, seconds) for task, _, _ in items]
        results = []
        for result, counted, seconds in graded:
            record_grade(result.split, result.grading, counted, seconds, tenant)
            results.append(result)
        return results

    async def grade_many(self, requests: Sequence[GradeRequest], tenant: Tenant = LOCAL_TENANT, *,
                         reward_only: bool = False) -> list[GradeResult | JobPending]:
        """Grade in order; a bad item becomes an unscored invalid_request, not a failed batch;
        an item still queued when its wait ends is returned as JobPending. ``reward_only`` as
        for ``grade``.

        Inline items are graded in chunks in the grading processes: a batch of thousands graded
        on the event loop would hold every other request back for seconds."""
        # Checking items (resolving tasks, reading inline references) is work in proportion to
        # the batch: on a worker thread too.
        results, inline, others = await off_loop(self._prepare_all, requests, tenant, tenant=tenant.name)
        # Claimed (and in-flight slots reserved) before anything is graded: a refused batch
        # costs no grading and leaves nothing queued.
        claimed = await self._claim_all(others, tenant)
        # Held-out budgets are spent last, on what will be graded now: a batch refused for its
        # in-flight slots spends none, nor does a retried request id answered by its earlier job.
        fresh = [c for c in claimed if isinstance(c, ClaimResult) and c.new]
        try:
            await self.charge([task for _, task, _, _ in inline] + [task for (_, task, _, _), c in zip(
                others, claimed, strict=True) if c is None or c in fresh], tenant)  # a 429 refuses the batch
        except BaseException:
            for claim in fresh:
                await self.jobs.release(tenant.name, claim.job_id)
            raise

        for chunk in _chunks(inline):
            graded = await self.grade_items([(t, x, r) for _, t, x, r in chunk], tenant.name)
            for (i, *_), result in zip(chunk, graded, strict=True):
                results[i] = result if reward_only else self.shown(result, tenant)

        async def one(task: Task, text: str, request: GradeRequest, claim: ClaimResult | ApiError | None
                      ) -> GradeResult | JobPending:
            try:
                if isinstance(claim, ApiError):
                    raise claim
                if claim is None:
                    return await self.grade_off_loop(task, text, request, tenant.name)
                return await self._finish(request, task, text, tenant, claim, cap=None)
            except JobPending as pending:
                return pending
            except ApiError as problem:
                return self._refused(request, problem)

        queued = await asyncio.gather(*(one(t, x, r, c) for (_, t, x, r), c in zip(others, claimed, strict=True)))
        for (i, *_), outcome in zip(others, queued, strict=True):
            # a queued or idempotent item's result is the stored one, gold included
            if isinstance(outcome, GradeResult) and not reward_only:
                outcome = self.shown(outcome, tenant)
            results[i] = outcome
        return [r for r in results if r is not None]

    def _prepare_all(self, requests: Sequence[GradeRequest], tenant: Tenant) -> tuple[
            list[GradeResult | JobPending | None], list[_Item], list[_Item]]:
        """(results so far, inline items, items for the job store). Every item is checked before
        any is graded or queued, so a batch holding judge items without a usable judge is refused
        whole, up front."""
        results: list[GradeResult | JobPending | None] = [None] * len(requests)
        inline: list[_Item] = []
        others: list[_Item] = []
        for i, request in enumerate(requests):
            try:
                request = apply_tenant_judge(request, tenant)
                task, text = self.prepare(request)
            except ApiError as problem:
                results[i] = self._refused(request, problem)
                continue
            if self._inline(task, text) and request.request_id is None:
                inline.append((i, task, text, request))
            else:  # queued kinds, and idempotent items, go through the job store
                others.append((i, task, text, request))
        return results, inline, others

    async def _claim_all(self, items: Sequence[tuple[int, Task, str, GradeRequest]], tenant: Tenant
                         ) -> list[ClaimResult | ApiError | None]:
        """Claims for a batch's queued and idempotent items, with the in-flight slots of all its
        new queued work reserved at once: past the tenant's cap the whole batch is refused (429)
        and nothing of it is queued or remembered."""
        async def claim(task: Task, text: str, request: GradeRequest) -> ClaimResult | ApiError | None:
            try:
                return await self._claim(request, task, text, tenant)
            except ApiError as problem:  # a reused request id: that item's refusal
                return problem

        claims = list(await asyncio.gather(*(claim(t, x, r) for _, t, x, r in items)))
        try:
            # the job store unreachable (503) concerns the whole batch, as in _refused
            failure = next((c for c in claims if isinstance(c, ApiError) and c.status in (429, 503)), None)
            if failure is not None:
                raise failure
            fresh = [c.job_id for (_, task, text, _), c in zip(items, claims, strict=True)
                     if isinstance(c, ClaimResult) and c.new and not self._inline(task, text)]
            if fresh and tenant.max_in_flight is not None:
                await self.jobs.reserve(tenant.name, fresh, tenant.max_in_flight)
        except BaseException:
            for done in claims:  # nothing of a refused batch stays claimed
                if isinstance(done, ClaimResult) and done.new:
                    await self.jobs.release(tenant.name, done.job_id)
            raise
        return claims

    @staticmethod
    def _refused(request: GradeRequest, problem: ApiError) -> GradeResult:
        if problem.status in (429, 503) or problem.error == "judge_unavailable":
            raise problem  # these concern the whole batch: back off, or name a judge
        # the id is repeated only if it could be one: a refused id may be anything the client wrote
        task_id = request.task_id if request.task_id and _TASK_ID.fullmatch(request.task_id) else None
        return GradeResult(task_id=task_id, grading="unknown", outcome=Outcome.invalid_request,
                           reward=0.0, explanation=problem.detail)


def _long_completion(completion: str | list[ChatMessage]) -> bool:
    """Whether reading the graded text out of ``completion`` may cost more than a numeric grade
    on the event loop does: a string past ON_LOOP_CHARS, or a transcript whose messages (each
    counted as a character more) are longer, or may be (content parts are joined first)."""
    if isinstance(completion, str):
        return len(completion) > ON_LOOP_CHARS
    chars = 0
    for message in completion:
        if isinstance(message.content, list):
            return True
        chars += 1 + len(message.content or "")
        if chars > ON_LOOP_CHARS:
            return True
    return False


def _fault(task: Task) -> GradeResult:
    return GradeResult(task_id=task.id or None, split=task.split or None, grading=task.grading,
                       outcome=Outcome.error, reward=0.0,
                       explanation="the service failed while grading this item; it was not scored")


def _without_reference(request: GradeRequest) -> GradeRequest:
    """The request as a grading process needs it: an inline reference's values or rows are in the
    task already, and pickling them again (as models) would cost the API process more than the
    grade; only the reference's tolerance is read from it (``GradeRequest.options``)."""
    if request.reference is None:
        return request
    kept = type(request.reference).model_construct(tolerance=request.reference.tolerance)
    return request.model_copy(update={"reference": kept})


_child_service: GradingService | None = None


def _grade_in_child(items: list[tuple[Task, str, GradeRequest]]) -> list[tuple[GradeResult, str, float]]:
    """In a grading process: each item's result, the outcome to count and its grading time."""
    global _child_service
    if _child_service is None:
        _child_service = GradingService(child_settings())
    return _child_service.graded_all(items)

"""The task's tolerance is the task's, no field says which key matched, and held-out splits
(the exam by default) show pass or fail only and budget grades per tenant and item, in memory
and in a real Redis shared by replicas."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from app.errors import ApiError
from app.grade_ledger import MemoryLedger, ledger, use_ledger
from app.graders import dispatch
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.grading.budgets import GradeBudgets
from app.grading.models import GradeRequest, InlineReference
from app.grading.service import GradingService
from app.quantities import parse_quantity
from app.settings import Settings
from app.tasks.registry import get_bank
from app.tenants import Tenant, TenantsFileError, load_tenants
from tests.support.book_mirror import mirror_path
from tests.support.oracle import right, synthetic_tasks


def settings(**overrides) -> Settings:
    return Settings(book_mirror=mirror_path(), **overrides)


def exam_numeric(n: int = 1, values: int = 1):
    bank = get_bank("exam", settings())
    tasks = [t for t in bank.batch(seed=0, n=bank.size() or 0) if t.grading == "numeric" and len(t.gold) == values]
    return tasks[:n]


def answer(values: list[str], scale: float = 1.0) -> str:
    out = []
    for v in values:
        q = parse_quantity(v)
        unit = v.split(" ", 1)[1] if " " in v else ""
        out.append(f"{q.value * scale!r} {unit}".strip())
    return "Final answer: " + ", ".join(out)


def grade(service: GradingService, tenant: Tenant | None = None, **body) -> object:
    request = GradeRequest(**body)
    return asyncio.run(service.grade(request, tenant) if tenant else service.grade(request))


# ---- the task's own tolerance -------------------------------------------------------------------


@pytest.mark.parametrize("split_task", ["synthetic", "exam"])
def test_a_client_tolerance_cannot_widen_a_task(split_task):
    service = GradingService(settings())
    task = synthetic_tasks(1, seed=3)[0] if split_task == "synthetic" else exam_numeric()[0]
    far = answer(list(task.gold), scale=1.9)  # inside 0.999999 of the gold, far outside the task's own
    result = grade(service, task_id=task.id, completion=far, tolerance=0.999999)
    assert result.reward == 0.0 and result.details["tolerance_not_applied"] is True
    assert "tolerance was not applied" in result.explanation


def test_a_client_tolerance_cannot_narrow_a_task_either():
    # a narrowing tolerance bisects the gold as well as a widening one: the right answer stays right
    service = GradingService(settings())
    task = synthetic_tasks(1, seed=4)[0]
    near = answer(list(task.gold), scale=1.01)  # within the synthetic split's 2%
    assert grade(service, task_id=task.id, completion=near, tolerance=1e-9).reward == 1.0


def test_an_inline_reference_keeps_its_tolerance():
    service = GradingService(settings())
    ref = InlineReference(values=["100 s"], tolerance=0.5)
    assert grade(service, reference=ref, completion="Final answer: 140 s").reward == 1.0
    assert grade(service, reference=ref, completion="Final answer: 160 s").reward == 0.0


def test_no_field_says_which_key_matched():
    """No book item keeps a second key now (one key per item), so the check runs on a book task
    given one: an item whose prompt admits a second reading grades both alike, and says nothing
    of which key matched."""
    bank = get_bank("book", settings())
    base = next(t for t in bank.batch(seed=0, n=bank.size() or 0)
                if t.grading == "numeric" and len(t.gold) == 1 and " " in t.gold[0])
    number, _, unit = base.gold[0].partition(" ")
    second = f"{float(number) * 1.3:.4g} {unit}"
    task = dataclasses.replace(base, hidden={**base.hidden, "alternatives": [[second]]})
    computed = dispatch.grade(task, "Final answer: " + base.gold[0], GradeOptions(), settings())
    printed = dispatch.grade(task, "Final answer: " + second, GradeOptions(), settings())
    assert computed.reward == printed.reward == 1.0
    assert computed.details == printed.details and computed.explanation == printed.explanation
    assert "accepted_key" not in printed.model_dump_json()


# ---- held-out results ------------------------------------------------------------------------------


def test_a_held_out_result_is_pass_or_fail_only():
    service = GradingService(settings())
    [task] = exam_numeric(values=2)
    half_right = answer([task.gold[0]]) + ", " + answer([task.gold[1]], scale=3).removeprefix("Final answer: ")
    result = grade(service, task_id=task.id, completion=half_right)
    assert result.reward == 0.0 and result.values == [] and result.outcome is Outcome.incorrect
    assert "1 of 2" not in result.explanation and "withheld" in result.explanation
    # the same grade on a split that is not held out says which value was right
    open_service = GradingService(settings(held_out={"splits": []}))
    opened = grade(open_service, task_id=task.id, completion=half_right)
    assert [v.correct for v in opened.values] == [True, False]


def test_a_unit_mismatch_on_a_held_out_item_is_just_incorrect():
    service = GradingService(settings())
    [task] = exam_numeric()
    result = grade(service, task_id=task.id, completion="Final answer: 17 parsecs per fortnight, 3 W")
    assert result.outcome in (Outcome.incorrect, Outcome.no_answer) and result.values == []


# ---- budgets -------------------------------------------------------------------------------------


def test_the_budget_is_per_tenant_and_item_and_answers_429_past_it():
    service = GradingService(settings())
    first, second = exam_numeric(n=2)
    alice, bob = Tenant("alice", held_out_grades_per_item=3), Tenant("bob", held_out_grades_per_item=3)
    for _ in range(3):
        grade(service, alice, task_id=first.id, completion="Final answer: 1 s")
    with pytest.raises(ApiError) as refused:
        grade(service, alice, task_id=first.id, completion=answer(list(first.gold)))
    assert refused.value.status == 429 and refused.value.error == "grade_budget_exhausted"
    assert int(refused.value.headers["Retry-After"]) > 0
    # another item, another tenant: their own budgets
    assert grade(service, alice, task_id=second.id, completion=answer(list(second.gold))).reward == 1.0
    assert grade(service, bob, task_id=first.id, completion=answer(list(first.gold))).reward == 1.0


def test_a_batch_past_the_budget_is_refused_whole_and_costs_nothing():
    service = GradingService(settings())
    [task] = exam_numeric()
    tenant = Tenant("carol", held_out_grades_per_item=4)
    guesses = [GradeRequest(task_id=task.id, completion=answer(list(task.gold), scale=s)) for s in (1, 2, 3, 4, 5)]
    with pytest.raises(ApiError) as refused:
        asyncio.run(service.grade_many(guesses, tenant))
    assert refused.value.status == 429
    results = asyncio.run(service.grade_many(guesses[:4], tenant))  # the refused batch spent nothing
    assert [r.reward for r in results] == [1.0, 0.0, 0.0, 0.0]


def test_splits_that_are_not_held_out_are_not_budgeted():
    service = GradingService(settings(held_out={"grades_per_item": 1}))
    task = synthetic_tasks(1, seed=5)[0]
    assert all(grade(service, task_id=task.id, completion=right(task.id)).reward == 1.0 for _ in range(5))


def test_the_server_default_applies_without_a_tenant_setting():
    service = GradingService(settings(held_out={"grades_per_item": 2}))
    [task] = exam_numeric()
    grade(service, task_id=task.id, completion="Final answer: 1 s")
    grade(service, task_id=task.id, completion="Final answer: 1 s")
    with pytest.raises(ApiError):
        grade(service, task_id=task.id, completion="Final answer: 1 s")


def test_replicas_share_one_budget_in_redis(redis_server):
    async def run() -> list[bool]:
        clients = [aioredis.from_url(redis_server.url) for _ in range(2)]
        replicas = [GradeBudgets(c) for c in clients]  # two API replicas, one Redis
        allowed = []
        for i in range(6):
            try:
                await replicas[i % 2].spend("t", {"exam/x/001": 1}, budget=4, window=60)
                allowed.append(True)
            except ApiError as exc:
                assert exc.status == 429
                allowed.append(False)
        for c in clients:
            await c.aclose()
        return allowed

    assert asyncio.run(run()) == [True] * 4 + [False] * 2


def test_a_redis_batch_is_all_or_nothing(redis_server):
    async def run() -> None:
        client = aioredis.from_url(redis_server.url)
        budgets = GradeBudgets(client)
        await budgets.spend("t", {"a": 3}, budget=4, window=60)
        with pytest.raises(ApiError):
            await budgets.spend("t", {"b": 1, "a": 2}, budget=4, window=60)
        await budgets.spend("t", {"b": 4, "a": 1}, budget=4, window=60)  # "b" was not charged above
        assert int(await client.get("sg:budget:t:a")) == 4 and 0 < await client.ttl("sg:budget:t:a") <= 60
        await client.aclose()

    asyncio.run(run())


def test_budgets_are_set_per_tenant_in_the_tenants_file(tmp_path: Path):
    digest = "a" * 64
    path = tmp_path / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "eval"\nkey_sha256 = "{digest}"\nheld_out_grades_per_item = 500\n')
    assert load_tenants(path)[digest].held_out_grades_per_item == 500
    for bad in ("0", "-3", '"many"', "true"):
        path.write_text(f'[[tenant]]\nname = "eval"\nkey_sha256 = "{digest}"\nheld_out_grades_per_item = {bad}\n')
        with pytest.raises(TenantsFileError):
            load_tenants(path)



# ---- held out: the reward itself is pass or fail --------------------------------------------------


def test_partial_credit_is_not_applied_on_a_held_out_rows_item_and_says_so():
    service = GradingService(settings(held_out={"splits": ["tasks"]}))
    bank = get_bank("tasks", settings())
    task = next(t for t in bank.batch(seed=0, n=bank.size() or 0) if len(t.gold) >= 2)
    rows = [dict(r) for r in task.gold]
    field = next(k for k, v in rows[0].items() if isinstance(v, int | float) and not isinstance(v, bool))
    rows[0][field] = rows[0][field] * 3 + 1
    completion = "```json\n" + json.dumps({"rows": rows}) + "\n```"
    # the same grade on a training split earns a share of the rows: the held-out one may not
    training = asyncio.run(GradingService(settings()).grade(
        GradeRequest(task_id=task.id, completion=completion, partial_credit=True), reward_only=True))
    assert 0.0 < training.reward < 1.0
    for reward_only in (True, False):
        result = asyncio.run(service.grade(GradeRequest(task_id=task.id, completion=completion,
                                                        partial_credit=True), reward_only=reward_only))
        assert result.reward == 0.0 and result.outcome is Outcome.incorrect
        assert result.details["partial_credit_not_applied"] is True
    right_rows = "```json\n" + json.dumps({"rows": [dict(r) for r in task.gold]}) + "\n```"
    assert grade(service, task_id=task.id, completion=right_rows, partial_credit=True).reward == 1.0


def test_a_held_out_grade_is_counted_as_its_response_shows_it():
    service = GradingService(settings())
    task = next(t for t in exam_numeric(20) if parse_quantity(t.gold[0]).dimension
                != parse_quantity("1 FLOPs").dimension)

    use_ledger(MemoryLedger())  # the ledger /metrics and the status page read, of this process

    def count(outcome: str) -> float:
        return sum(n for (split, _, counted), n in ledger().totals().items() if split == "exam" and counted == outcome)

    before = count("unit_mismatch"), count("incorrect")
    raw = asyncio.run(service.grade(GradeRequest(task_id=task.id, completion="Final answer: 7 FLOPs"),
                                    reward_only=True))
    assert raw.outcome is Outcome.unit_mismatch  # the raw result (operators who reveal see it)
    assert (count("unit_mismatch"), count("incorrect")) == (before[0], before[1] + 1)

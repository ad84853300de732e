"""Grading in the grading processes (app/grading/processes.py) gives what grading in the API
process gives: the same result, reward and outcome for every completion of a table (numeric and
rows, by task id and by inline reference, right, wrong, struck through, over-long, held out, no
answer), and the same ``record_grade`` call in the API process, once per grade. The oracle is the
in-process grade of the same item (``grade_now``); the children are real processes."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from app.grading import service as service_module
from app.grading.models import GradeRequest
from app.grading.offload import in_process
from app.grading.processes import GradingProcessFailed
from app.grading.service import GradingService
from app.settings import Settings
from app.tasks.registry import get_bank, resolve_task
from tests.support.book_mirror import mirror_path
from tests.support.grading_probe_extension import started_at
from tests.support.oracle import gold, right, synthetic_tasks, wrong

Calls = list[tuple[Any, ...]]


def _struck(task_id: str, shown_right: bool) -> str:
    good, bad = ", ".join(gold(task_id)), wrong(task_id).rsplit("Final answer: ", 1)[1]
    struck, standing = (bad, good) if shown_right else (good, bad)
    return f"Working.\nFinal answer: <s>{struck}</s> ~~{bad}~~ {standing}"


def _table(settings: Settings) -> list[dict[str, Any]]:
    """Request bodies: every judge-free kind and the shapes that change a reward."""
    synthetic = synthetic_tasks(2, seed=41)
    exam = get_bank("exam", settings)
    exam_numeric = next(t for t in exam.batch(seed=0, n=exam.size() or 0) if t.grading == "numeric")
    rows_task = next(t for t in get_bank("tasks", settings).batch(seed=0, n=35) if t.grading == "rows")
    rows = list(resolve_task(rows_task.id, settings).gold)
    a, b = synthetic[0].id, synthetic[1].id
    long_right = "Reasoning. " * 900 + right(a)  # past the on-loop size: a child's work in the service
    too_long = wrong(b) + "\n" + "padding " * 30_000  # past max_completion_chars
    reference_rows = [{"name": "r", "x": i + 0.5} for i in range(200)]
    return [
        {"task_id": a, "completion": right(a)},
        {"task_id": a, "completion": wrong(a)},
        {"task_id": a, "completion": long_right},
        {"task_id": b, "completion": _struck(b, shown_right=True)},
        {"task_id": b, "completion": _struck(b, shown_right=False)},
        {"task_id": b, "completion": too_long},
        {"task_id": b, "completion": "I do not know."},
        {"task_id": b, "completion": [{"role": "user", "content": "What?"}]},  # no assistant turn
        {"task_id": a, "completion": right(a), "tolerance": 0.5},  # refused tolerance, said so
        {"task_id": exam_numeric.id, "completion": right(exam_numeric.id)},  # held out: pass or fail
        {"task_id": exam_numeric.id, "completion": wrong(exam_numeric.id), "partial_credit": True},
        {"task_id": rows_task.id, "completion": json.dumps({"rows": rows})},
        {"task_id": rows_task.id, "completion": json.dumps({"rows": rows[::-1]})},
        {"task_id": rows_task.id, "completion": json.dumps({"rows": rows[:-1]}), "partial_credit": True},
        {"reference": {"values": ["1 s", "2 GB"]}, "completion": "Final answer: 1000 ms, 2e9 bytes"},
        {"reference": {"values": ["1 s", "2 GB"]}, "completion": "Final answer: 1 s, 3 GB", "tolerance": 0.6},
        {"reference": {"values": ["1 s", "2 GB"], "tolerance": 0.6}, "completion": "Final answer: 1 s, 3 GB"},
        {
            "reference": {"values": ["1 s", "2 GB"], "tolerance": 0.6},
            "completion": "Final answer: 1 s, 3 GB",
            "tolerance": 0.1,
        },
        {"reference": {"values": ["1 s"]}, "completion": "Final answer: " + "1 s, " * 20_000},
        {"reference": {"rows": reference_rows}, "completion": json.dumps({"rows": reference_rows[::-1]})},
        {
            "reference": {"rows": reference_rows},
            "completion": json.dumps({"rows": reference_rows[1:]}),
            "partial_credit": True,
        },
    ]


@pytest.fixture(scope="module")
def service() -> Iterator[GradingService]:
    made = GradingService(Settings(book_mirror=mirror_path()), grading_processes=True)
    yield made
    made.processes.close()


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Calls:
    calls: Calls = []
    monkeypatch.setattr(service_module, "record_grade", lambda *args: calls.append(args))
    return calls


def _same_but_time(calls: Calls) -> list[tuple[Any, ...]]:
    return [(*args[:3], args[4]) for args in calls]  # (split, kind, outcome, tenant); args[3] is seconds


def test_every_completion_gets_in_a_child_what_it_gets_in_process(service: GradingService, recorded: Calls) -> None:
    requests = [GradeRequest.model_validate(body) for body in _table(service.settings)]
    prepared = [(*service.prepare(r), r) for r in requests]
    oracle = [service.grade_now(task, text, request, "t1") for task, text, request in prepared]
    in_process_calls = list(recorded)
    recorded.clear()

    graded = asyncio.run(service.grade_items(prepared, "t1"))
    one_by_one = [asyncio.run(service.grade_items([item], "t1"))[0] for item in prepared]

    assert [r.model_dump() for r in graded] == [r.model_dump() for r in oracle]
    assert [r.model_dump() for r in one_by_one] == [r.model_dump() for r in oracle]
    # counted here, once per grade, as in-process grading counts it
    assert _same_but_time(recorded) == _same_but_time(in_process_calls) * 2
    # the table does reach every outcome that matters (a test that cannot fail proves nothing)
    outcomes = {r.outcome.value for r in oracle}
    assert {"correct", "incorrect", "too_long", "no_answer"} <= outcomes, outcomes
    assert {r.reward for r in oracle} >= {0.0, 1.0}


def test_a_batch_is_graded_in_the_children_with_the_same_rewards(service: GradingService, recorded: Calls) -> None:
    bodies = _table(service.settings) * 3
    requests = [GradeRequest.model_validate(body) for body in bodies]
    oracle = [service.grade_now(*service.prepare(r), r, "local") for r in requests]
    recorded.clear()
    results = asyncio.run(service.grade_many(requests, reward_only=True))
    assert [(r.reward, r.outcome) for r in results] == [(r.reward, r.outcome) for r in oracle]  # type: ignore[union-attr]
    assert len(recorded) == len(requests)
    # and the children did it: they are processes of their own, at the niceness that lets the loop win
    children = service.processes.pids()
    assert len(children) == service.settings.grading_processes
    assert all(
        pid != os.getpid() and os.getpriority(os.PRIO_PROCESS, pid) > os.getpriority(os.PRIO_PROCESS, 0)
        for pid in children
    )


def test_a_call_that_raises_in_a_child_is_refused_by_type_and_the_child_stays(service: GradingService) -> None:
    before = set(service.processes.pids())
    assert before
    with pytest.raises(GradingProcessFailed) as failed:
        asyncio.run(in_process(service.processes, int, "not a number"))
    assert str(failed.value) == "ValueError"  # the type only: no traceback or input crosses over
    assert set(service.processes.pids()) == before  # nothing died, nothing was replaced
    assert asyncio.run(in_process(service.processes, abs, -3)) == 3


def test_tenants_take_turns_at_the_processes(service: GradingService) -> None:
    """A tenant with a backlog cannot make another tenant's call wait for the whole backlog: the
    order calls start in the children (a clock the machine shares) is the order of the turns."""

    async def run() -> list[tuple[str, float]]:
        async def call(name: str, tenant: str) -> tuple[str, float]:
            began, _ = await in_process(service.processes, started_at, 0.2, tenant=tenant)
            return name, began

        backlog = [asyncio.ensure_future(call(f"heavy-{i}", "heavy")) for i in range(8)]
        await asyncio.sleep(0.05)  # the backlog holds both children and waits for more
        small = [asyncio.ensure_future(call(f"small-{i}", f"small-{i}")) for i in range(2)]
        return list(await asyncio.gather(*backlog, *small))

    order = [name for name, _ in sorted(asyncio.run(run()), key=lambda found: found[1])]
    size = service.settings.grading_processes
    # the calls in the children when they came, one more heavy call and the other small one ahead
    # in the round (plus one: two children start calls granted a moment apart in either order);
    # first come, first served would start them last, after the whole backlog
    assert max(order.index("small-0"), order.index("small-1")) <= size + 3, order
    assert len(order) == 10

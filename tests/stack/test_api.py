"""Grades of every kind through the API container, tenant authentication and rate limits, the
workers' sandbox tier (gvisor), and what the images contain."""

from __future__ import annotations

import json

import httpx
import pytest

from app.settings import Settings
from tests.stack.stack import RIGHT, WRONG, Stack, collect, logs, run, submit

JUDGE_URL = "http://judge:8000/v1"  # the fake judge on the compose network (allow-listed)


def test_numeric_grade(client: httpx.Client) -> None:
    reference = {"values": ["3.35 TB/s"]}
    right = client.post("/v1/grade", json={"reference": reference, "completion": "Final answer: 3.35 TB/s"})
    wrong = client.post("/v1/grade", json={"reference": reference, "completion": "Final answer: 3.35 GB/s"})
    assert right.status_code == 200 and right.json()["reward"] == 1.0
    assert wrong.status_code == 200 and wrong.json()["reward"] == 0.0


def test_rows_grade(client: httpx.Client) -> None:
    from app.tasks.tasks.bank import load_bank

    bank = load_bank(Settings())  # the oracle: the same bank, computed on the host
    public = client.get("/v1/tasks", params={"split": "tasks", "n": 2, "seed": 5}).json()["tasks"]
    assert len(public) == 2
    for task in public:
        answer = "```json\n" + json.dumps({"rows": bank.get(task["id"]).gold}) + "\n```"
        graded = client.post("/v1/grade", json={"task_id": task["id"], "completion": answer}).json()
        assert graded["grading"] == "rows" and graded["reward"] == 1.0, graded["explanation"]
        empty = client.post("/v1/grade", json={"task_id": task["id"], "completion": '{"rows": []}'}).json()
        assert empty["reward"] == 0.0


def test_impl_grades_run_behind_gvisor_on_the_workers(client: httpx.Client, stack: Stack) -> None:
    body = {"task_id": "impl/critical_batch_size", "all_or_nothing": True, "wait": 120}
    right = client.post("/v1/grade", json={**body, "completion": RIGHT})
    wrong = client.post("/v1/grade", json={**body, "completion": WRONG})
    assert right.status_code == 200 and wrong.status_code == 200, (right.text, wrong.text)
    assert right.json()["reward"] == 1.0 and wrong.json()["reward"] == 0.0
    assert right.json()["details"]["sandbox_tier"] == "gvisor+seccomp"


@pytest.mark.skipif("not __import__('os').environ.get('STACK_BOOK_MIRROR')",
                    reason="the exam's judge items need the offline book mirror beside the checkout")
def test_judge_grade_through_the_fake_judge_on_the_compose_network(client: httpx.Client) -> None:
    from app.tasks.exam.bank import load_bank

    task = next(t for t in load_bank(Settings()).tasks() if t.grading == "judge")
    judge = {"model": "judge-match", "base_url": JUDGE_URL}
    right = client.post("/v1/grade", json={"task_id": task.id, "completion": task.gold, "judge": judge, "wait": 60})
    wrong = client.post("/v1/grade", json={"task_id": task.id, "completion": "No idea.", "judge": judge, "wait": 60})
    assert right.status_code == 200 and right.json()["outcome"] == "correct", right.text
    assert wrong.status_code == 200 and wrong.json()["reward"] == 0.0
    outside = client.post("/v1/grade", json={"task_id": task.id, "completion": task.gold,
                                             "judge": {"model": "judge-yes", "base_url": "http://10.9.9.9:8000/v1"}})
    assert outside.status_code == 403 and outside.json()["error"] == "judge_not_allowed"


def test_tenant_authentication(stack: Stack) -> None:
    body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"}
    for headers in ({}, {"Authorization": "Bearer sg_not-a-key"}, {"Authorization": f"Basic {stack.api_key}"}):
        r = httpx.post(f"{stack.url}/v1/grade", json=body, headers=headers, timeout=10)
        assert r.status_code == 401, headers
        assert stack.api_key not in r.text


def test_rate_limit_answers_429(stack: Stack) -> None:
    body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"}
    headers = {"Authorization": f"Bearer {stack.limited_key}"}
    codes = [httpx.post(f"{stack.url}/v1/grade", json=body, headers=headers, timeout=10) for _ in range(5)]
    assert [r.status_code for r in codes[:3]] == [200, 200, 200]  # the burst
    limited = [r for r in codes[3:] if r.status_code == 429]
    assert limited and limited[0].headers.get("retry-after")


def test_readyz_lists_each_worker_with_its_sandbox_tier(stack: Stack) -> None:
    workers = stack.wait_for_workers(stack.workers)
    assert len({w["name"] for w in workers}) == stack.workers
    for w in workers:
        assert w["sandbox_tier"] == "gvisor+seccomp" and w["min_tier"] == "gvisor" and w["meets_min_tier"]
    # and each worker said so in its log when it started
    for container in stack.containers("worker"):
        assert "sandbox tier gvisor+seccomp (minimum gvisor)" in logs(container)


def test_worker_image_has_no_compiler_and_holds_only_what_runsc_needs(stack: Stack) -> None:
    container = stack.containers("worker")[0]
    found = run("docker", "exec", container, "sh", "-c",
                "for c in gcc cc c++ g++ clang tcc as ld make; do command -v $c; done; true")
    assert found == ""
    inspect = json.loads(run("docker", "inspect", container))[0]["HostConfig"]
    # root in the container for runsc, with the few capabilities it needs and nothing else
    assert not inspect["Privileged"] and inspect["CapDrop"] == ["ALL"]
    assert {c.removeprefix("CAP_") for c in inspect["CapAdd"]} == {
        "SYS_ADMIN", "SYS_PTRACE", "SYS_CHROOT", "SETUID", "SETGID", "DAC_OVERRIDE"}
    assert inspect["ReadonlyRootfs"] is True


def test_book_cache_volume_is_writable_by_the_service_user(stack: Stack) -> None:
    for service in ("api", "worker"):
        container = stack.containers(service)[0]
        probe = "/home/grader/.cache/scaling-grader/book/.write-probe"
        run("docker", "exec", container, "sh", "-c", f"touch {probe} && rm {probe}")


def test_queued_jobs_are_collected_by_id(client: httpx.Client) -> None:
    ids = [submit(client, RIGHT, f"collect-{i}") for i in range(3)]
    results = collect(client, ids, timeout=120)
    assert len(results) == 3 and all(b["result"]["reward"] == 1.0 for b in results.values())

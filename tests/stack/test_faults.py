"""Faults across containers: a worker container killed mid-batch, Redis restarted mid-queue, a
worker cut off the network longer than its heartbeat, an idle worker cut off as jobs are queued,
and a worker added on the fly. No job a
client submitted may be lost or counted twice. (Runs after test_api.py: these tests disturb
the stack and leave it with its workers back up.)"""

from __future__ import annotations

import time
import uuid

import httpx

from tests.stack.stack import RIGHT, WRONG, Stack, collect, run, slow_right, submit


def _restore(stack: Stack) -> None:
    """Bring every worker container back up and wait until they are all live again."""
    for container in stack.containers("worker", running=False):
        run("docker", "start", container, check=False)
    stack.wait_for_workers(stack.workers)


def test_kill_9_of_a_worker_container_during_60_impl_jobs(client: httpx.Client, stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    expected = {}
    for i in range(60):
        right = i % 4 != 0
        expected[submit(client, RIGHT if right else WRONG, f"kill-{tag}-{i}")] = 1.0 if right else 0.0
    assert len(expected) == 60
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(collect(client, list(expected), 0)) < 5:
        time.sleep(0.5)
    victim = stack.containers("worker")[0]
    victim_lanes = next(w["lanes"] for w in stack.wait_for_workers(stack.workers) if victim.startswith(w["hostname"]))
    run("docker", "kill", "--signal", "KILL", victim)
    try:
        results = collect(client, list(expected), timeout=420)
    finally:
        _restore(stack)
    assert len(results) == 60, f"only {len(results)} of 60 results arrived"
    for job_id, body in results.items():
        assert body["status"] == "finished"
        assert body["result"]["reward"] == expected[job_id], body["result"]["explanation"]
    # none ran twice, except the jobs the killed worker held, one per lane (re-run by another worker)
    reruns = sum(body["result"]["details"]["attempt"] - 1 for body in results.values())
    assert reruns <= victim_lanes


def test_restarting_redis_mid_queue_loses_no_queued_job(client: httpx.Client, stack: Stack) -> None:
    tag = uuid.uuid4().hex[:8]
    ids = [submit(client, RIGHT, f"redis-{tag}-{i}") for i in range(20)]
    time.sleep(1.5)  # past appendfsync everysec: the queue is on disk
    queued = int(stack.redis_cli("llen", "rq:queue:impl"))
    assert queued > 0, "the workers emptied the queue before the restart; nothing was tested"
    run("docker", "restart", "--time", "5", stack.containers("redis")[0])
    results = collect(client, ids, timeout=420)
    assert len(results) == 20, f"only {len(results)} of 20 results arrived after the restart"
    assert all(b["status"] == "finished" and b["result"]["reward"] == 1.0 for b in results.values())
    stack.wait_for_workers(stack.workers)


def test_worker_cut_off_the_network_has_its_job_finished_by_another(client: httpx.Client, stack: Stack) -> None:
    stack.wait_for_workers(stack.workers)
    job_id = submit(client, slow_right(3), f"netsplit-{uuid.uuid4().hex[:8]}")
    deadline = time.monotonic() + 60
    holder = ""
    while time.monotonic() < deadline and not holder:
        holder = stack.job_worker(job_id)
        time.sleep(0.2)
    assert holder, "no worker started the job"
    container = stack.container_of(holder)
    run("docker", "network", "disconnect", stack.network, container)
    try:
        # heartbeat 1 s, grace 2 s: well past it the job must be re-queued and finished elsewhere
        results = collect(client, [job_id], timeout=120)
    finally:
        run("docker", "network", "connect", "--alias", "worker", stack.network, container, check=False)
    assert results, "the job of the cut-off worker was never finished"
    body = results[job_id]
    assert body["status"] == "finished" and body["result"]["reward"] == 1.0
    # re-run: finished by another worker (the holder was cut off until now; RQ drops a job's
    # records once it succeeded, so the result's attempt says it)
    assert body["result"]["details"]["attempt"] >= 2
    _restore(stack)


def test_jobs_queued_into_a_cut_idle_worker_are_all_run(client: httpx.Client, stack: Stack) -> None:
    """An idle worker is cut off the network and jobs are queued at once: Redis hands one to each
    of its lanes still waiting, and the answers never arrive (the cut outlasts the lanes' socket
    timeout, 11 s in this stack). Each such job must still run, once, right (worker.dequeue: it was
    in its queue's intermediate list, and the maintenance puts it back)."""
    tag = uuid.uuid4().hex[:8]
    swallowed: list[str] = []
    expected: list[str] = []
    for round_ in range(5):  # a round in which no cut lane waited as the jobs came tests nothing
        stack.wait_for_workers(stack.workers)
        assert int(stack.redis_cli("llen", "rq:queue:impl")) == 0
        container = stack.containers("worker")[0]
        run("docker", "network", "disconnect", stack.network, container)
        try:
            # at once: an idle lane waits 1 s at a time in this stack, and Redis hands the first jobs
            # to the lanes that have waited longest, the cut ones among them while their wait lasts
            ids = [submit(client, RIGHT, f"cut-idle-{tag}-{round_}-{i}") for i in range(8)]
            expected += ids
            time.sleep(2)  # the other worker's lanes start theirs (off the list); the cut lanes cannot
            swallowed = [i for i in stack.redis_cli("lrange", "rq:queue:impl:intermediate", "0", "-1").split()
                         if i in ids]
            time.sleep(20)
        finally:
            run("docker", "network", "connect", "--alias", "worker", stack.network, container, check=False)
        if swallowed:
            break
        collect(client, ids, timeout=120)
    assert swallowed, "in 5 rounds no cut lane took a job: nothing was tested"
    results = collect(client, expected, timeout=300)
    _restore(stack)
    assert len(results) == len(expected), f"only {len(results)} of {len(expected)} results arrived"
    for body in results.values():
        assert body["status"] == "finished" and body["result"]["reward"] == 1.0
    # a job left on the list never started before it went back: its first attempt is the one
    assert all(results[i]["result"]["details"]["attempt"] == 1 for i in swallowed)


def test_scaling_workers_from_2_to_3_on_the_fly(client: httpx.Client, stack: Stack) -> None:
    before = {w["name"] for w in stack.wait_for_workers(stack.workers)}
    stack.scale_workers(stack.workers + 1)
    try:
        after = {w["name"] for w in stack.wait_for_workers(stack.workers + 1)}
        (newcomer,) = after - before
        tag = uuid.uuid4().hex[:8]
        ids = [submit(client, RIGHT, f"scale-{tag}-{i}") for i in range(12)]
        results = collect(client, ids, timeout=300)
        assert len(results) == 12 and all(b["result"]["reward"] == 1.0 for b in results.values())
        # (RQ drops a job's records once it succeeded: the workers' own counts say who ran jobs,
        # written as a lane goes idle, a moment after its last result)
        ran_on: set[str] = set()
        deadline = time.monotonic() + 30
        while newcomer not in ran_on and time.monotonic() < deadline:
            ran_on = {stack.worker_of(w["name"]) for w in stack.live_workers() if stack.jobs_succeeded(w["name"])}
            time.sleep(1)
        assert newcomer in ran_on, f"the new worker took none of the jobs (ran on {ran_on})"
    finally:
        stack.scale_workers(stack.workers)
    stack.wait_for_workers(stack.workers)

"""Nothing piles up in the running stack: every container's pid 1 is an init, impl grades leave
no zombie in the worker containers, and the workers report healthy through their own check."""

from __future__ import annotations

import json

import httpx

from tests.stack.stack import EXERCISE, RIGHT, Stack, run


def _zombies(container: str) -> int:
    top = run("docker", "top", container, "-eo", "pid,stat")
    return sum(1 for line in top.splitlines()[1:] if line.split()[1].startswith("Z"))


def test_every_container_runs_an_init_as_pid_1(stack: Stack) -> None:
    for service in ("redis", "api", "worker"):
        for container in stack.containers(service):
            assert run("docker", "exec", container, "cat", "/proc/1/comm") in ("docker-init", "tini"), service


def test_impl_grades_leave_no_zombie_in_the_workers(stack: Stack, client: httpx.Client) -> None:
    for i in range(4):
        body = {"task_id": f"impl/{EXERCISE}", "completion": RIGHT, "wait": 120, "request_id": f"hygiene-{i}"}
        r = client.post("/v1/grade", json=body)
        assert r.status_code == 200 and r.json()["reward"] == 1.0, r.text
    for container in stack.containers("worker"):
        assert _zombies(container) == 0, container


def test_workers_check_healthy_with_their_sandbox_facts(stack: Stack) -> None:
    for container in stack.containers("worker"):
        out = run("docker", "exec", container, "python", "/opt/healthcheck.py", "worker")
        verdict = json.loads(out)
        assert verdict["ok"] is True and verdict["pids_max"] == 4096 and verdict["pids"] < 4096, verdict

"""A split and a grading kind added outside the service (tests/support/toy_extension.py: one
``register_split`` and one ``register_grader``) appear everywhere the built-in ones do, in a real
server and a real worker: the split list, task batches, the split's default tolerance, grading
dispatch, and the queue the kind names (Redis, the worker's default queues, the queue figures)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import httpx
import pytest
from rq import Queue

from app.extensions import ENV
from tests.support import toy_extension as toy
from tests.support.impl_jobs import FAST_QUEUE
from tests.support.server import ROOT, free_port, stop_process, wait_until_up

pytestmark = pytest.mark.slow  # real servers and a real worker


def _toy_command(args: list[str], env: Mapping[str, str]) -> subprocess.Popen:
    """The service's own command line, with the toy split and kind named as an extension."""
    return subprocess.Popen([sys.executable, "-m", "app.cli", *args], cwd=ROOT,
                            env={**os.environ, **env, ENV: "tests.support.toy_extension"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def toy_server(env: Mapping[str, str]) -> Iterator[httpx.Client]:
    port = free_port()
    process = _toy_command(["serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"], env)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process)
        with httpx.Client(base_url=url, timeout=90) as client:
            yield client
    finally:
        stop_process(process)


def grade(client: httpx.Client, task_id: str, completion: str, **extra: object) -> httpx.Response:
    return client.post("/v1/grade", json={"task_id": task_id, "completion": completion, **extra})


def test_a_registered_split_is_listed_served_and_graded_at_its_own_tolerance() -> None:
    with toy_server({}) as client:
        splits = {s["name"]: s for s in client.get("/v1/splits").json()["splits"]}
        assert splits[toy.SPLIT]["size"] == 2 and splits[toy.SPLIT]["available"]
        assert {"synthetic", "book", "exam", "tasks", "impl"} <= set(splits)  # the built-ins stay

        batch = client.get("/v1/tasks", params={"split": toy.SPLIT, "seed": 1, "n": 5}).json()
        assert sorted((t["id"], t["grading"]) for t in batch["tasks"]) == [("toy/e1", toy.KIND),
                                                                          ("toy/n1", "numeric")]
        assert client.get("/v1/tasks/toy/n1").json()["prompt"].startswith("How many bytes")
        assert "gold" not in str(client.get("/v1/tasks/toy/e1").json())

        # 8% off passes only at the toy split's 10% (every built-in default is tighter), 15% fails
        inside, outside = 108, 115
        assert abs(inside - 100) / 100 < toy.TOLERANCE < abs(outside - 100) / 100
        assert abs(inside - 100) / 100 > 0.05
        near = grade(client, "toy/n1", f"Final answer: {inside} GB").json()
        far = grade(client, "toy/n1", f"Final answer: {outside} GB").json()
        assert (near["outcome"], near["reward"], near["split"]) == ("correct", 1.0, toy.SPLIT)
        assert (far["outcome"], far["reward"]) == ("incorrect", 0.0)

        # a label naming the new split is read as its task id, not as an answer
        labelled = client.post("/v1/grade/labelled", json={"items": [
            {"label": "toy/n1", "completion": f"Final answer: {inside} GB"}]}).json()["results"]
        assert (labelled[0]["task_id"], labelled[0]["reward"]) == ("toy/n1", 1.0)

        # the new kind is dispatched to its grader; embedded mode runs its queue on threads
        echoed = grade(client, "toy/e1", "The word is forty-two", wait=60).json()
        assert (echoed["grading"], echoed["reward"], echoed["details"]) == (
            toy.KIND, 1.0, {"graded_by": "toy_extension"})
        silent = grade(client, "toy/e1", "forty-one", wait=60).json()
        assert (silent["grading"], silent["outcome"], silent["reward"]) == (toy.KIND, "incorrect", 0.0)


def test_a_registered_kind_goes_to_its_queue_and_a_worker_serves_it_by_default(redis_server) -> None:
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, **FAST_QUEUE}
    with toy_server(env) as client:
        pending = grade(client, "toy/e1", "forty-two", wait=0, request_id="toy-queued")
        assert pending.status_code == 202
        job_id = pending.json()["job_id"]
        assert Queue(toy.QUEUE, connection=redis_server.client()).count == 1
        assert Queue("judge", connection=redis_server.client()).count == 0
        metrics = client.get("/metrics").text
        assert f'scaling_grader_queue_jobs{{queue="{toy.QUEUE}",state="queued"}} 1.0' in metrics

        # no --queues: the worker serves every queued kind's queue, the new one too
        worker = _toy_command(["worker", "--name", "toy-worker", "--jobs", "1"], env)
        try:
            done = client.get(f"/v1/jobs/{job_id}", params={"wait": 90}).json()
            status = client.get("/v1/status").json()
        finally:
            stop_process(worker)
        assert done["status"] == "finished"
        assert (done["result"]["grading"], done["result"]["reward"]) == (toy.KIND, 1.0)
        assert any(toy.QUEUE in w["queues"] and "impl" in w["queues"] for w in status["workers"])
        assert set(status["queues"]) == {"impl", "judge", toy.QUEUE}

"""The running stack as the tests drive it: its API, its containers (through the docker CLI),
its Redis (through redis-cli inside the Redis container). Traffic goes only to the API on
loopback and, inside the compose network, between the containers."""

from __future__ import annotations

import inspect
import json
import os
import shlex
import subprocess
import time
from dataclasses import dataclass

import httpx

from app.tasks.impl import reference
from tests.support.server import ROOT

EXERCISE = "critical_batch_size"  # few, quick hidden cases


def completion(source: str) -> str:
    return f"My implementation:\n\n```python\n{source}\n```\n"


RIGHT_SOURCE = inspect.getsource(getattr(reference, EXERCISE))
RIGHT = completion(RIGHT_SOURCE)
# Plausibly wrong: forgets the bytes per weight.
WRONG = completion(
    "def critical_batch_size(peak_flops, hbm_bandwidth, bytes_per_weight):\n"
    "    import math\n"
    "    return math.ceil(peak_flops / hbm_bandwidth)\n"
)


def slow_right(seconds: float) -> str:
    """The reference, sleeping in every case: a job that is still running when a fault strikes."""
    sleep = f"    import math\n    import time\n    time.sleep({seconds})\n"
    source = RIGHT_SOURCE.replace("    import math\n", sleep, 1)
    assert source != RIGHT_SOURCE
    return completion(source)


def run(*args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    if check and done.returncode != 0:
        raise AssertionError(f"{shlex.join(args)} failed: {done.stderr.strip()[-800:]}")
    return done.stdout.strip()


def logs(container: str) -> str:
    """What a container wrote to stdout and stderr (where the worker logs)."""
    done = subprocess.run(["docker", "logs", container], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


@dataclass
class Stack:
    url: str
    api_key: str
    limited_key: str
    workers: int
    project: str
    book_mirror: bool

    @classmethod
    def from_environment(cls) -> Stack:
        state = ROOT / ".build" / "stack"
        return cls(
            url=os.environ["STACK_URL"],
            api_key=os.environ["STACK_API_KEY"],
            limited_key=(state / "limited-key").read_text().strip(),
            workers=int(os.environ.get("STACK_WORKERS", "2")),
            project=os.environ.get("COMPOSE_PROJECT_NAME", "scaling-grader"),
            book_mirror=os.environ.get("STACK_BOOK_MIRROR") == "1",
        )

    @property
    def network(self) -> str:
        return f"{self.project}_default"

    def containers(self, service: str, running: bool = True) -> list[str]:
        """Container ids of a compose service (workers started by `docker run` carry the labels too)."""
        args = ["docker", "ps", "-q", "--no-trunc", "--filter", f"label=com.docker.compose.project={self.project}",
                "--filter", f"label=com.docker.compose.service={service}"]
        if not running:
            args.append("-a")
        return run(*args).split()

    def redis_cli(self, *args: str) -> str:
        return run("docker", "exec", self.containers("redis")[0], "redis-cli", *args)

    def scale_workers(self, n: int) -> None:
        run(str(ROOT / "deploy" / "stack.sh"), "scale", str(n), timeout=300)

    def live_workers(self) -> list[dict]:
        try:
            # the workers are the operator's to see (anonymous callers get ready / not ready)
            return httpx.get(f"{self.url}/readyz", timeout=10,
                             headers={"authorization": f"Bearer {self.api_key}"}).json().get("workers", [])
        except (httpx.HTTPError, ValueError):
            return []

    def wait_for_workers(self, n: int, timeout: float = 240) -> list[dict]:
        """Wait until n worker processes are live, each with all its lanes; their first lanes'
        records (a worker's first lane bears the worker's name)."""
        deadline = time.monotonic() + timeout
        records: list[dict] = []
        while time.monotonic() < deadline:
            records = self.live_workers()
            firsts = [w for w in records if w.get("lane", 1) == 1]
            if len(firsts) == n and len(records) == sum(w.get("lanes", 1) for w in firsts):
                return firsts
            time.sleep(1)
        raise AssertionError(f"{len(records)} live lanes, expected {n} workers: {json.dumps(records)[:500]}")

    def worker_of(self, lane_name: str) -> str:
        """The worker (process) name of one of its lanes: NAME for NAME, NAME-2, ..."""
        lane = next(w for w in self.live_workers() if w["name"] == lane_name)
        return next(w["name"] for w in self.live_workers()
                    if w["hostname"] == lane["hostname"] and w["pid"] == lane["pid"] and w.get("lane", 1) == 1)

    def container_of(self, worker_name: str) -> str:
        """The container running a worker (its hostname is the container id's first 12 digits)."""
        host = next(w["hostname"] for w in self.live_workers() if w["name"] == worker_name)
        return next(c for c in self.containers("worker", running=False) if c.startswith(host))

    def job_worker(self, job_id: str) -> str:
        """The lane running a job (RQ drops the job's record once it has succeeded)."""
        return self.redis_cli("hget", f"rq:job:{job_id}", "worker_name")

    def jobs_succeeded(self, lane_name: str) -> int:
        """The jobs a lane has finished, by RQ's own count in the worker's record."""
        count = self.redis_cli("hget", f"rq:worker:{lane_name}", "successful_job_count")
        return int(count) if count.isdigit() else 0


def submit(client: httpx.Client, completion_text: str, request_id: str) -> str:
    body = {"task_id": f"impl/{EXERCISE}", "completion": completion_text, "wait": 0, "request_id": request_id,
            "all_or_nothing": True}
    r = client.post("/v1/grade", json=body)
    assert r.status_code == 202, r.text
    return r.json()["job_id"]


def collect(client: httpx.Client, job_ids: list[str], timeout: float) -> dict[str, dict]:
    """Final bodies of the jobs that finished (or failed) within timeout; a 503 while Redis is
    restarting is waited out."""
    results: dict[str, dict] = {}
    deadline = time.monotonic() + timeout
    while len(results) < len(job_ids) and time.monotonic() < deadline:
        for job_id in job_ids:
            if job_id in results:
                continue
            try:
                r = client.get(f"/v1/jobs/{job_id}", params={"wait": 0})
            except httpx.HTTPError:
                break
            if r.status_code == 503:
                break
            assert r.status_code == 200, r.text
            if r.json()["status"] in ("finished", "failed"):
                results[job_id] = r.json()
        time.sleep(0.5)
    return results

"""Load on the distributed setup: a real Redis, the API, RQ workers. 64 concurrent clients post
a mix of numeric (inline) and impl (queued, waited for) gradings; printed: throughput, p50/p99
per kind, errors (target: zero). Then the impl throughput with one worker against two, measured
in the same run (ratio printed)."""

from __future__ import annotations

import asyncio
import inspect
import json
import time

import httpx

from app.tasks.impl import reference
from app.tasks.synthetic.bank import SyntheticBank
from bench.loadgen import request_bytes, run_load
from bench.timing import percentile
from tests.support.redis_server import RedisServer
from tests.support.server import running_server
from tests.support.workers import start_worker, stop_worker

EXERCISE = "critical_batch_size"
ENV = {"SCALING_GRADER_SANDBOX__WARM_POOL_SIZE": "2", "SCALING_GRADER_QUEUE__DEFAULT_WAIT": "120"}


def _impl_completion() -> str:
    return "```python\n" + inspect.getsource(getattr(reference, EXERCISE)) + "\n```"


def _numeric_bodies() -> list[dict]:
    return [{"task_id": t.id, "completion": "Final answer: " + ", ".join(t.gold)}
            for t in SyntheticBank().batch(seed=4, n=48)]


def _impl_throughput(url: str, redis_url: str, workers: int, jobs: int) -> float:
    procs = [start_worker(redis_url, f"bench-{workers}-{i}", ENV) for i in range(workers)]
    try:
        with httpx.Client(base_url=url, timeout=300) as client:
            # warm the workers (pool start, imports) before timing
            for _ in range(workers * 2):
                client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": _impl_completion()})
            start = time.perf_counter()
            ids = [client.post("/v1/grade", json={"task_id": f"impl/{EXERCISE}", "completion": _impl_completion(),
                                                  "wait": 0}).json()["job_id"] for _ in range(jobs)]
            for job_id in ids:
                body = client.get(f"/v1/jobs/{job_id}", params={"wait": 300}).json()
                assert body["status"] == "finished" and body["result"]["reward"] == 1.0, body
            return jobs / (time.perf_counter() - start)
    finally:
        for p in procs:
            stop_worker(p)


def main(smoke: bool) -> None:
    seconds, impl_jobs = (3.0, 4) if smoke else (20.0, 30)
    redis = RedisServer().start()
    try:
        env = {"SCALING_GRADER_REDIS_URL": redis.url, **ENV}
        with running_server(env) as url:
            port = int(url.rsplit(":", 1)[1])
            numeric = [request_bytes("127.0.0.1", port, "POST", "/v1/grade", b) for b in _numeric_bodies()]
            impl = request_bytes("127.0.0.1", port, "POST", "/v1/grade",
                                 {"task_id": f"impl/{EXERCISE}", "completion": _impl_completion()})

            def check(i: int, body: bytes) -> bool:
                return json.loads(body)["reward"] == 1.0

            async def mixed() -> tuple:
                # 56 clients grade numeric answers while 8 post impl gradings that wait for their
                # result: a closed loop per client, all 64 at once.
                return await asyncio.gather(
                    run_load("127.0.0.1", port, lambda i: numeric[i % len(numeric)], connections=56,
                             seconds=seconds, check=check),
                    run_load("127.0.0.1", port, lambda i: impl, connections=8, seconds=seconds, check=check),
                )

            workers = [start_worker(redis.url, f"load-{i}", ENV) for i in range(2)]
            try:
                loads = asyncio.run(mixed())
            finally:
                for w in workers:
                    stop_worker(w)
            for kind, load in zip(("numeric", "impl"), loads, strict=True):
                p50, p99 = (percentile(load.latencies, q) * 1e3 for q in (0.5, 0.99))
                print(f"   {kind}: {load.ok} done, {load.rps:,.1f}/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms, "
                      f"errors {load.errors}")
            total = sum(load.ok for load in loads) / max(load.seconds for load in loads)
            print(f"   64 clients, 2 workers: {total:,.0f} grades/s in all, errors {sum(x.errors for x in loads)}")
            one = _impl_throughput(url, redis.url, 1, impl_jobs)
            two = _impl_throughput(url, redis.url, 2, impl_jobs)
            print(f"   impl throughput: 1 worker {one:.2f}/s, 2 workers {two:.2f}/s, ratio {two / one:.2f}")
    finally:
        redis.close()

"""POST /v1/grade requests per second against a bare FastAPI endpoint returning a constant,
both served by one uvicorn worker with the same settings, loaded by the same client in the same
run. Target: ours at least 0.6x of the bare endpoint."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from contextlib import contextmanager

import httpx

from app.tasks.synthetic.bank import SyntheticBank
from bench.loadgen import request_bytes, run_load
from bench.timing import percentile
from tests.support.server import ROOT, free_port, wait_until_up


@contextmanager
def uvicorn_server(target: list[str]):
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", *target, "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning", "--no-access-log"]
    process = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        if "bench.bare_app:app" in target:
            _wait_bare(url, process)
        else:
            wait_until_up(url, process)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait_bare(url: str, process: subprocess.Popen) -> None:
    for _ in range(300):
        try:
            httpx.post(url + "/v1/grade", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("bare server did not start")


def _grade_request(port: int):
    bank = SyntheticBank()
    tasks = bank.batch(seed=1, n=64)
    bodies = [
        request_bytes("127.0.0.1", port, "POST", "/v1/grade",
                      {"task_id": t.id, "completion": "Some reasoning.\nFinal answer: " + ", ".join(t.gold)})
        for t in tasks
    ]
    return lambda i: bodies[i % len(bodies)]


def _measure(port: int, make, seconds: float, check=None):
    asyncio.run(run_load("127.0.0.1", port, make, connections=4, seconds=min(0.5, seconds)))  # warm-up
    return asyncio.run(run_load("127.0.0.1", port, make, connections=16, seconds=seconds, check=check))


def main(smoke: bool) -> None:
    seconds = 1.0 if smoke else 8.0
    with uvicorn_server(["--factory", "app.main:create_app"]) as port:
        ours = _measure(port, _grade_request(port), seconds,
                        check=lambda i, body: json.loads(body)["reward"] == 1.0)
    with uvicorn_server(["bench.bare_app:app"]) as port:
        bare_req = request_bytes("127.0.0.1", port, "POST", "/v1/grade", {"x": 1})
        bare = _measure(port, lambda i: bare_req, seconds)
    for name, r in (("POST /v1/grade", ours), ("bare FastAPI constant", bare)):
        print(f"   {name}: {r.rps:,.0f} req/s, p50 {percentile(r.latencies, 0.5) * 1e3:.2f} ms, "
              f"p99 {percentile(r.latencies, 0.99) * 1e3:.2f} ms, errors {r.errors}")
    print(f"   ratio (ours / bare): {ours.rps / bare.rps:.2f}   target >= 0.6")

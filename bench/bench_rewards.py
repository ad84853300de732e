"""Reward endpoints against the batch grading endpoint they wrap, in the same run on the same
server and the same items:

1. items/s through POST /v1/rewards and OpenRLHF's POST /get_reward (which also cuts prompts
   off queries) vs POST /v1/grade/batch (target: rewards >= 0.9x of batch: the wrapper is thin);
2. the Python client: ``GraderClient.rewards`` on a list (chunked batches) vs one ``grade`` call
   per item, the way a naive reward function would do it (the batching pays: expect >> 1x);
3. OpenRLHF as current versions call it, ONE rollout per ``/get_reward`` request (0.11.x's
   ``SingleTurnAgentExecutor``), in requests/s against a bare FastAPI endpoint returning a
   constant, both on one uvicorn worker, sent the same request bytes by the same client
   (target: >= 0.6x of bare)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from app.tasks.synthetic.bank import SyntheticBank
from bench.bench_http import compare, cpu_ratio, server_cpu, uvicorn_server
from bench.loadgen import request_bytes, run_load
from bench.timing import percentile
from scaling_book.client import GraderClient

CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def _items(n: int) -> tuple[list[dict], list[str], list[str], list[str]]:
    tasks = SyntheticBank().batch(seed=9, n=n)
    items, prompts, queries, labels = [], [], [], []
    for i, t in enumerate(tasks):
        gold = list(t.gold)
        if i % 2:  # half wrong: grading work is not all on the happy path
            gold[0] = "1e-30 " + gold[0].split(" ", 1)[-1]
        completion = "Reasoning.\nFinal answer: " + ", ".join(gold)
        items.append({"task_id": t.id, "completion": completion})
        prompt = CHATML.format(t.prompt)
        prompts.append(prompt)
        queries.append(prompt + completion + "<|im_end|>")
        labels.append(t.id)
    return items, prompts, queries, labels


def _items_per_second(port: int, path: str, body: dict, batch: int, seconds: float) -> float:
    raw = request_bytes("127.0.0.1", port, "POST", path, body)
    asyncio.run(run_load("127.0.0.1", port, lambda i: raw, connections=2, seconds=min(0.5, seconds)))  # warm-up
    result = asyncio.run(run_load("127.0.0.1", port, lambda i: raw, connections=4, seconds=seconds))
    assert result.errors == 0, result.statuses
    return result.ok * batch / result.seconds


def openrlhf_single_rollouts(smoke: bool) -> None:
    """OpenRLHF's current traffic: one {"query": [q], "prompts": [p], "labels": [l]} per rollout."""
    seconds = 1.0 if smoke else 6.0
    _, prompts, queries, labels = _items(64)
    bodies = [{"query": [q], "prompts": [p], "labels": [lab]} for q, p, lab in zip(queries, prompts, labels,
                                                                                   strict=True)]
    expected = [0.0 if i % 2 else 1.0 for i in range(len(bodies))]
    ours_best, bare_best = compare(
        "/get_reward", bodies, seconds, rounds=1 if smoke else 3,
        check=lambda i, body: json.loads(body)["scores"] == [expected[i % len(expected)]])
    for r in (ours_best, bare_best):
        assert r.errors == 0, r.statuses
    for name, r in (("POST /get_reward, 1 rollout/request", ours_best), ("bare FastAPI constant", bare_best)):
        print(f"   {name}: {r.rps:,.0f} req/s, p50 {percentile(r.latencies, 0.5) * 1e3:.2f} ms{server_cpu(r)}")
    print(f"   OpenRLHF single-rollout ratio (ours / bare): {ours_best.rps / bare_best.rps:.2f}   target >= 0.6"
          f"{cpu_ratio(ours_best, bare_best)}")


def main(smoke: bool) -> None:
    batch = 64 if smoke else 256
    seconds = 1.0 if smoke else 9.0
    rounds = 1 if smoke else 3
    items, prompts, queries, labels = _items(batch)
    with uvicorn_server(["--factory", "app.main:create_app"]) as port:
        bodies: dict[str, dict[str, Any]] = {"/v1/grade/batch": {"items": items}, "/v1/rewards": {"items": items},
                  "/get_reward": {"query": queries, "prompts": prompts, "labels": labels}}
        # Interleaved rounds, best of each: the machine is shared, and a slow spell should not
        # land on one endpoint only.
        best = dict.fromkeys(bodies, 0.0)
        for _ in range(rounds):
            for path, body in bodies.items():
                best[path] = max(best[path], _items_per_second(port, path, body, batch, seconds / rounds))
        grade_batch, rewards, openrlhf = best["/v1/grade/batch"], best["/v1/rewards"], best["/get_reward"]
        url = f"http://127.0.0.1:{port}"
        n = 64 if smoke else 512
        many = (items * (n // len(items) + 1))[:n]
        with GraderClient(url) as client:
            client.rewards(many[:8])  # connect and warm up
            start = time.perf_counter()
            batched = client.rewards(many)
            batched_s = time.perf_counter() - start
            start = time.perf_counter()
            single = [client.grade(**item).reward for item in many]
            single_s = time.perf_counter() - start
        assert batched == single, "batched and one-by-one rewards differ"
    print(f"   POST /v1/grade/batch: {grade_batch:,.0f} items/s (batches of {batch})")
    print(f"   POST /v1/rewards:     {rewards:,.0f} items/s   ratio vs batch {rewards / grade_batch:.2f} (>= 0.9)")
    print(f"   POST /get_reward:     {openrlhf:,.0f} items/s   ratio vs batch {openrlhf / grade_batch:.2f}")
    print(f"   client.rewards({n} items): {n / batched_s:,.0f} items/s; one grade() per item: {n / single_s:,.0f} "
          f"items/s; ratio {single_s / batched_s:.1f}x")
    print("   (rewards identical both ways: " + json.dumps(batched[:4]) + " ...)")
    openrlhf_single_rollouts(smoke)

"""The stack soak's clients behave as rollout workers: each posts a completion, waits for its reward
with the API's wait (no polling), and posts the next. Run against a real server: every answered job
is recorded as the job's view shows it, so the soak's checks (rewritten, differing rewards) compare
like with like, and the reference completion earns the full reward."""

from __future__ import annotations

import threading
import time

import pytest

from bench.bench_stack_soak import Ledger, SoakStack, _calls, _verdict, rollout_worker
from tests.support.server import running_server


@pytest.mark.slow  # impl grades, hostile ones among them, in a real server
def test_rollout_workers_wait_for_their_rewards() -> None:
    with running_server() as url:
        soak = SoakStack("unused", int(url.rsplit(":", 1)[1]), {}, api_key="open-mode-ignores-keys")
        ledger, stop = Ledger(), threading.Event()
        workers = [threading.Thread(target=rollout_worker, args=(soak, ledger, stop, i, []), daemon=True)
                   for i in range(3)]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            with ledger.lock:
                if len(ledger.first_result) >= 6:
                    break
            time.sleep(0.5)
        stop.set()
        for w in workers:
            w.join(timeout=90)
    assert not any(w.is_alive() for w in workers)
    assert len(ledger.first_result) >= 6, dict(ledger.submit_errors)
    rewards: dict[str, set] = {}
    for job_id, body in ledger.first_result.items():
        status, reward, _ = _verdict(body)
        assert status in ("finished", "failed") and body["job_id"] == job_id
        assert reward is not None
        rewards.setdefault(ledger.jobs[job_id][1], set()).add(reward)
    assert all(len(v) == 1 for v in rewards.values()), rewards
    assert rewards.get("right", {1.0}) == {1.0}


def test_command_calls_between_two_readings() -> None:
    before = {"calls:get": 3, "calls:hset": 1, "used_memory": 10}
    after = {"calls:get": 5, "calls:hset": 1, "calls:eval": 2, "used_memory": 99}
    assert _calls(before, after) == {"get": 2, "hset": 0, "eval": 2}

"""The API process's connections to Redis are bounded (app.jobs.redis_jobs.API_REDIS_CONNECTIONS):
a burst of concurrent requests, each a rate-limit check in Redis, does not leave one connection
per request of the burst open for the process's life. redis-py's default pool did: every
command in flight opened a connection and kept it, up to Redis's cap on clients (10,000 by
default), which every replica and worker of the deployment shares."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.jobs.redis_jobs import API_REDIS_CONNECTIONS
from tests.support.redis_clients import OTHERS, clients_but_mine
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # a real server and Redis

BURST = 400  # requests in flight at once, on as many connections


def test_a_burst_of_requests_leaves_a_bounded_number_of_redis_connections(tmp_path, redis_server) -> None:
    from app.tenants import new_key

    key, digest = new_key()
    tenants = tmp_path / "tenants.toml"  # a tenant's rate limit is a Redis command a request
    tenants.write_text(f'[[tenant]]\nname = "busy"\nkey_sha256 = "{digest}"\n'
                       f'rate_per_second = 100000\nburst = 100000\n')
    body = {"reference": {"values": ["2 s"]}, "completion": "Final answer: 2 s"}
    env = {"SCALING_GRADER_REDIS_URL": redis_server.url, "SCALING_GRADER_TENANTS_FILE": str(tenants)}
    headers = {"Authorization": f"Bearer {key}"}
    with running_server(env) as url:

        async def burst() -> list[float]:
            limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
            async with httpx.AsyncClient(limits=limits, timeout=120) as client:
                answers = await asyncio.gather(
                    *(client.post(url + "/v1/grade", json=body, headers=headers) for _ in range(BURST)))
            return [a.json().get("reward") if a.status_code == 200 else a.status_code for a in answers]

        rounds = [asyncio.run(burst()) for _ in range(3)]
        held = clients_but_mine(redis_server)
    # every request answered as the grade, none refused or failed for want of a connection
    assert all(r == [1.0] * BURST for r in rounds), [sorted(set(map(str, r))) for r in rounds]
    print("connections the API process held after the bursts:", held)
    assert held <= API_REDIS_CONNECTIONS + OTHERS, held

"""The containers' health checks (HEALTHCHECK in docker/*.Dockerfile):

    python /opt/healthcheck.py api       the API answers /healthz on its port
    python /opt/healthcheck.py worker    the worker's sandbox still starts cases and its tasks are
                                         not near the pid limit (app/sandbox/health.py); Redis answers

One process that starts no other and ends itself (SIGALRM, whose default action ends it) before
Docker's own timeout: Docker never has to kill it, and a check that hangs under load leaves
nothing behind, neither an orphan nor a zombie. Exit 0 healthy, 1 not, with the reason on
stdout (``docker inspect`` shows it)."""

from __future__ import annotations

import json
import os
import signal
import sys
import urllib.request
from pathlib import Path

# Below the HEALTHCHECK --timeout of the images (api 5 s, worker 30 s), with room for the
# interpreter's start.
DEADLINE_SECONDS = {"api": 3, "worker": 20}


def api() -> tuple[bool, str]:
    port = os.environ.get("SCALING_GRADER_PORT", "8000")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=DEADLINE_SECONDS["api"] - 1) as r:
        return r.status == 200, f"/healthz {r.status}"


def worker() -> tuple[bool, str]:
    from app.sandbox.health import health_from_file  # the worker image's package

    health_file = os.environ.get("SCALING_GRADER_SANDBOX__HEALTH_FILE")
    verdict = health_from_file(Path(health_file)) if health_file else {"ok": True, "reason": None}
    if not verdict["ok"]:
        return False, json.dumps(verdict)
    import redis

    # RESP2: a new connection's first command is the PING itself (RESP3 sends HELLO first: two
    # commands every 30 s per worker, counted by Redis like the grading's own)
    client = redis.Redis.from_url(os.environ["SCALING_GRADER_REDIS_URL"], socket_timeout=5,
                                  socket_connect_timeout=5, protocol=2)
    client.ping()
    return True, json.dumps(verdict)


def main(argv: list[str]) -> int:
    checks = {"api": api, "worker": worker}
    if len(argv) != 1 or argv[0] not in checks:
        print(f"usage: healthcheck.py {'|'.join(checks)}")
        return 2
    signal.alarm(DEADLINE_SECONDS[argv[0]])
    try:
        ok, why = checks[argv[0]]()
    except Exception as exc:  # unreachable, refused, timed out: unhealthy, with the reason
        ok, why = False, f"{type(exc).__name__}: {exc}"[:300]
    print(why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

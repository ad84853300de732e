"""Counting an API process's connections to a test's Redis, from Redis's side."""

from __future__ import annotations

from typing import Any

# Beside the API process's bounded async pool (app.jobs.redis_jobs.API_REDIS_CONNECTIONS): its
# blocking client's (RQ's enqueue, API_SYNC_REDIS_CONNECTIONS) and the book cache's; generous,
# and far below what a burst opened before the pools were bounded.
OTHERS = 12


def clients_but_mine(redis_server: Any) -> int:
    """Connections to the server other than the one this count is made on."""
    connection = redis_server.client()
    own = connection.client_id()
    return sum(1 for client in connection.client_list() if int(client["id"]) != own)

"""OpenRLHF (0.10.2 and later: ``--reward.remote_url``, ``--data.label_key``).

The service itself is OpenRLHF's remote reward model: point ``--reward.remote_url`` at
``http://grader:8000/get_reward`` and ``--data.label_key`` at the dataset column holding each
prompt's label (a task id, a quantity or a JSON reference). OpenRLHF posts from a fresh session
with no way to add a header, so a service with a tenants file is reached through the tenant's
reward URL, ``/get_reward/<reward key>`` (``reward_url`` below builds it).

This module is also a reward function file for OpenRLHF (``--reward.remote_url`` ending in
``.py`` loads ``reward_func(queries, prompts, labels)`` from it, and its executor calls it on a
thread per rollout): it posts to $SCALING_GRADER_URL with the bearer key in
$SCALING_GRADER_API_KEY, waits as long as a 429's ``Retry-After`` asks and retries through service
restarts for up to $SCALING_GRADER_DEADLINE seconds (120 by default), where OpenRLHF's own URL
route tries five times a second apart and logs the URL, key included, when it gives up::

    --reward.remote_url "$(python -c 'import scaling_book.openrlhf as m; print(m.__file__)')"

Its other settings come from the environment too, since OpenRLHF passes the file nothing else:
$SCALING_GRADER_TIMEOUT (seconds per request) and $SCALING_GRADER_HEADERS (a JSON object of
extra headers)."""

from __future__ import annotations

import json
import os
from typing import Any

from scaling_book.client import ClientOptions
from scaling_book.grading import service_url, sync_client

REWARD_PATH = "/get_reward"


def reward_url(base_url: str, reward_key: str | None = None) -> str:
    """The URL to give ``--reward.remote_url``: the service's /get_reward, with the tenant's
    reward key as its last segment when the service has tenants."""
    url = base_url.rstrip("/") + REWARD_PATH
    return f"{url}/{reward_key}" if reward_key else url


def reward_func(queries: list[str], prompts: list[str], labels: list[Any], **_: Any) -> dict[str, Any]:
    """OpenRLHF's reward function file protocol: the /get_reward answer for these rollouts."""
    url = service_url()
    if not url:
        raise RuntimeError("set SCALING_GRADER_URL to the grading service for the OpenRLHF reward function")
    body = {"query": list(queries), "prompts": list(prompts), "labels": list(labels)}
    answer: dict[str, Any] = sync_client(url, options_from_env()).request("POST", REWARD_PATH, body)
    return answer


def _seconds(name: str) -> float | None:
    value = os.environ.get(name)
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"${name} must be a number of seconds, not {value!r}") from None


def options_from_env() -> ClientOptions:
    """The reward function file's client settings: $SCALING_GRADER_API_KEY, $SCALING_GRADER_TIMEOUT,
    $SCALING_GRADER_DEADLINE, $SCALING_GRADER_HEADERS (JSON)."""
    headers = json.loads(os.environ.get("SCALING_GRADER_HEADERS") or "{}")
    if not isinstance(headers, dict):
        raise ValueError("$SCALING_GRADER_HEADERS must be a JSON object of header names to values")
    return ClientOptions.of(os.environ.get("SCALING_GRADER_API_KEY"), _seconds("SCALING_GRADER_TIMEOUT"),
                            _seconds("SCALING_GRADER_DEADLINE"), {str(k): str(v) for k, v in headers.items()})

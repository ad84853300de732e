"""OpenRLHF (0.10.2 and later: ``--reward.remote_url``, ``--data.label_key``).

The service itself is OpenRLHF's remote reward model: point ``--reward.remote_url`` at
``http://grader:8000/get_reward`` and ``--data.label_key`` at the dataset column holding each
prompt's label (a task id, a quantity or a JSON reference). OpenRLHF posts from a fresh session
with no way to add a header, so a service with a tenants file is reached through the tenant's
reward URL, ``/get_reward/<reward key>`` (``reward_url`` below builds it).

This module is also a reward function file for OpenRLHF (``--reward.remote_url`` ending in
``.py`` loads ``reward_func(queries, prompts, labels)`` from it): it posts to
$SCALING_GRADER_URL with the bearer key in $SCALING_GRADER_API_KEY and retries through service
restarts, for setups where a key in a URL is not wanted::

    --reward.remote_url "$(python -c 'import scaling_book.openrlhf as m; print(m.__file__)')"
"""

from __future__ import annotations

from typing import Any

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
    return sync_client(url).request("POST", REWARD_PATH, {"query": list(queries), "prompts": list(prompts),
                                                           "labels": list(labels)})

"""OpenRLHF's remote reward model protocol as its current versions speak it, against a real server.

OpenRLHF 0.11.2 (openrlhf/utils/agent.py, ``SingleTurnAgentExecutor._fetch_rewards_via_http``)
posts ONE rollout per request, ``{"query": [q], "prompts": [p], "labels": [l]}``, from a fresh
aiohttp session per request with no way to add a header; ``raise_for_status`` turns any 4xx into
a None reward. It reads ``scores`` (falling back to ``rewards``) and ``extra_logs``, whose every
value becomes ``torch.tensor([value])`` (samples_generator.py), and ``Experience.concat`` reads
the keys of the first sample on every other one: so values must be numbers and the keys the same
on every response. 0.10.x with several URLs also sends empty shards ``{"query": []}``.
``pull_rewards`` below replays that client code path (without torch)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import aiohttp
import httpx
import pytest

from app.settings import get_settings
from app.tasks.registry import get_bank
from app.tenants import new_key
from tests.support.oracle import gold, right, synthetic_tasks, wrong
from tests.support.server import ROOT, free_port, running_server, stop_process, wait_until_up

CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
FLAG_KEYS = {"scored", "correct", "no_answer", "unscored_bad_label", "unscored_no_judge", "unscored_fault"}


async def _openrlhf_post(url: str, payload: dict) -> dict:
    """OpenRLHF 0.11.2's request: a fresh session, json=, raise_for_status, .json()."""
    async with (aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=180)) as session,
                session.post(url, json=payload) as response):
        response.raise_for_status()
        return await response.json()


def pull_rewards(url: str, rollouts: list[tuple[str, str, object]]) -> list[dict]:
    """One request per rollout (prompt, response, label), read as agent.py reads it."""

    async def run() -> list[dict]:
        out = []
        for prompt, response, label in rollouts:
            query = prompt + response + "<|im_end|>"
            info = await _openrlhf_post(url, {"query": [query], "prompts": [prompt], "labels": [label]})
            score = info.get("scores")
            if score is None:
                score = info.get("rewards")
            out.append({"reward": info.get("rewards"), "scores": score, "extra_logs": info.get("extra_logs") or {}})
        return out

    return asyncio.run(run())


def _tensor_safe(outputs: list[dict]) -> None:
    """What samples_generator + Experience.concat need: same keys, one number per value."""
    keys = set(outputs[0]["extra_logs"])
    for o in outputs:
        assert set(o["extra_logs"]) == keys
        for value in o["extra_logs"].values():
            assert len(value) == 1 and isinstance(value[0], float)
        assert len(o["reward"]) == 1 and isinstance(o["scores"][0], float)


def test_labels_of_every_json_type_reach_their_reward(server_url: str) -> None:
    tasks = synthetic_tasks(8, seed=31)
    rows = []
    for i, t in enumerate(tasks):
        values = gold(t.id)
        label: object = [t.id, {"values": values}, values, json.dumps({"values": values}),
                         {"task_id": t.id}, t.id, json.dumps(values), values][i]
        response, expected = (right(t.id), 1.0) if i % 2 == 0 else (wrong(t.id), 0.0)
        rows.append((CHATML.format(t.prompt), response, label, expected))
    outputs = pull_rewards(server_url + "/get_reward", [(p, r, label) for p, r, label, _ in rows])
    assert [o["scores"][0] for o in outputs] == [e for *_, e in rows]
    assert all(o["extra_logs"]["scored"] == [1.0] for o in outputs)
    _tensor_safe(outputs)


def test_a_bare_quantity_label_as_string_or_number(server_url: str) -> None:
    prompt = CHATML.format("How many seconds?")
    outputs = pull_rewards(server_url + "/get_reward", [
        (prompt, "Final answer: 42", 42), (prompt, "Final answer: 41", 42),
        (prompt, "Final answer: 80 GB", "80 GB"), (prompt, "Final answer: 3.35 TB/s", "3.35 TB/s"),
    ])
    assert [o["scores"][0] for o in outputs] == [1.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("label", [None, True, "", "{not json", "synthetic/unknown", [], {"nope": 1}, 1e400])
def test_unreadable_labels_cost_their_item_only_never_the_request(server_url: str, label: object) -> None:
    prompt = CHATML.format("q")
    body = {"query": [prompt + "Final answer: 1 s"], "prompts": [prompt], "labels": [label]}
    raw = json.dumps(body).replace("Infinity", "1e400")  # a JSON number too large for a float
    reply = httpx.post(server_url + "/get_reward", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 200, reply.text
    logs = reply.json()["extra_logs"]
    assert reply.json()["scores"] == [0.0] and logs["scored"] == [0.0] and logs["unscored_bad_label"] == [1.0]


def test_judge_label_without_a_judge_is_unscored_with_the_reason(server_url: str) -> None:
    assert get_settings().judge.default_model is None  # the test server has no judge
    judged = next(t for t in get_bank("book", get_settings()).batch(seed=0, n=200) if t.grading == "judge")
    numeric = synthetic_tasks(1, seed=32)[0]
    outputs = pull_rewards(server_url + "/get_reward", [
        (CHATML.format(judged.prompt), "Some explanation.", judged.id),
        (CHATML.format(numeric.prompt), right(numeric.id), numeric.id),
    ])
    assert outputs[0]["scores"] == [0.0] and outputs[0]["extra_logs"]["unscored_no_judge"] == [1.0]
    assert outputs[0]["extra_logs"]["scored"] == [0.0]
    assert outputs[1]["scores"] == [1.0] and outputs[1]["extra_logs"]["unscored_no_judge"] == [0.0]
    _tensor_safe(outputs)
    # In one multi-item request too (older versions batch): the judge item alone is unscored.
    both = httpx.post(server_url + "/get_reward", json={
        "query": [CHATML.format(judged.prompt) + "x", CHATML.format(numeric.prompt) + right(numeric.id)],
        "labels": [judged.id, numeric.id]}).json()
    assert both["scores"] == [0.0, 1.0] and both["extra_logs"]["unscored_no_judge"] == [1.0, 0.0]


def test_an_empty_shard_gets_200_and_empty_lists(server_url: str) -> None:
    reply = asyncio.run(_openrlhf_post(server_url + "/get_reward", {"query": [], "prompts": [], "labels": []}))
    assert reply["rewards"] == [] and reply["scores"] == []
    assert set(reply["extra_logs"]) == FLAG_KEYS and all(v == [] for v in reply["extra_logs"].values())


def _reward_tenant(tmp_path) -> tuple[str, str, str]:
    api_key, api_digest = new_key()
    reward_key, reward_digest = new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "rl-team"\nkey_sha256 = ["{api_digest}"]\n'
                    f'reward_key_sha256 = ["{reward_digest}"]\nrate_per_second = 1000\nburst = 1000\noperator = true\n')
    return str(path), api_key, reward_key


@pytest.mark.slow
def test_tenant_protected_service_with_remote_url_alone(tmp_path) -> None:
    tenants, api_key, reward_key = _reward_tenant(tmp_path)
    task = synthetic_tasks(1, seed=33)[0]
    rollout = [(CHATML.format(task.prompt), right(task.id), task.id)]
    with running_server({"SCALING_GRADER_TENANTS_FILE": tenants}) as url:
        assert pull_rewards(f"{url}/get_reward/{reward_key}", rollout)[0]["scores"] == [1.0]
        for refused in (f"{url}/get_reward", f"{url}/get_reward/{api_key}", f"{url}/get_reward/{reward_key}x",
                        f"{url}/get_reward/"):
            with pytest.raises(aiohttp.ClientResponseError) as err:
                pull_rewards(refused, rollout)
            assert err.value.status == 401
        # The reward key opens the reward route only, not the rest of the API.
        assert httpx.get(f"{url}/v1/tasks", headers={"authorization": f"Bearer {reward_key}"}).status_code == 401
        assert httpx.get(f"{url}/get_reward/{reward_key}/../../v1/tasks").status_code in (401, 404, 405)
        metrics = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {api_key}"}).text
        assert reward_key not in metrics and 'route="/get_reward"' in metrics


@pytest.mark.slow
def test_the_reward_key_never_reaches_an_access_log(tmp_path) -> None:
    tenants, _, reward_key = _reward_tenant(tmp_path)
    port = free_port()
    # uvicorn with its access log on (the service's own `serve` turns it off): the worst case.
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "info"],
        cwd=ROOT, env={**__import__("os").environ, "SCALING_GRADER_TENANTS_FILE": tenants},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, process)
        task = synthetic_tasks(1, seed=34)[0]
        assert pull_rewards(f"{url}/get_reward/{reward_key}", [(CHATML.format(task.prompt), right(task.id),
                                                                 task.id)])[0]["scores"] == [1.0]
        httpx.post(f"{url}/get_reward/{reward_key}-wrong", json={"query": []})
    finally:
        stop_process(process)
    log = process.stdout.read() if process.stdout else ""
    assert "POST /get_reward HTTP/1.1\" 200" in log  # the access log did run
    assert reward_key not in log

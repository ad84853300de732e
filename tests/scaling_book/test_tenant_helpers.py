"""Every trainer helper against a tenant-protected service: the key given as an argument (verl's
in reward_kwargs, verifiers' by the name of its variable, OpenRLHF's file from the environment)
reaches the service; two tenants share one URL and one thread without sharing a client; a
missing or wrong key is a refusal, never a reward; a burst far over a tenant's rate limit gets
every reward, by waiting as the service's Retry-After asks."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scaling_book import openrlhf
from scaling_book.client import GraderError
from scaling_book.trl import make_async_reward_func, make_reward_func
from scaling_book.verl import compute_score, compute_score_async
from tests.scaling_book.tenant_server import TenantService, tenant_service
from tests.support.oracle import right, synthetic_tasks, wrong

pytestmark = pytest.mark.slow
CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantService]:
    with tenant_service(Path(tmp_path_factory.mktemp("tenants"))) as running:
        yield running


@pytest.fixture(autouse=True)
def no_key_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCALING_GRADER_API_KEY", raising=False)
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)


def test_two_tenants_share_a_url_and_a_thread(service: TenantService) -> None:
    tasks = synthetic_tasks(4, seed=81)
    completions = [right(t.id) if i % 2 else wrong(t.id) for i, t in enumerate(tasks)]
    labels = [t.id for t in tasks]
    expected = [1.0 if i % 2 else 0.0 for i in range(4)]
    for key in (service.key_a, service.key_b, service.key_a):
        reward = make_reward_func(service.url, api_key=key, timeout=30, deadline=30)
        assert reward(prompts=[""] * 4, completions=completions, task_id=labels) == expected
    areward = make_async_reward_func(service.url, api_key=service.key_b)
    assert asyncio.run(areward(completions=completions, task_id=labels)) == expected
    for refused in (None, service.key_a + "x", service.reward_key_a):
        with pytest.raises(GraderError) as err:
            make_reward_func(service.url, api_key=refused)(completions=completions, task_id=labels)
        assert err.value.status == 401
        assert service.key_a not in str(err.value)


def test_verl_honours_the_api_key_in_reward_kwargs(service: TenantService) -> None:
    task = synthetic_tasks(1, seed=82)[0]
    kwargs = {"scaling_grader_url": service.url, "api_key": service.key_a}
    assert compute_score("x", right(task.id), task.id, {}, **kwargs)["score"] == 1.0
    assert asyncio.run(compute_score_async(data_source="x", solution_str=right(task.id), ground_truth=task.id,
                                           extra_info={}, **kwargs))["score"] == 1.0
    with pytest.raises(GraderError) as err:
        compute_score("x", right(task.id), task.id, {}, scaling_grader_url=service.url)
    assert err.value.status == 401


def test_verifiers_reads_the_key_from_the_variable_it_names(service: TenantService,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling_book.selection import Selection

    monkeypatch.setenv("TEAM_B_GRADER_KEY", service.key_b)
    selection = Selection(split="synthetic", num_synthetic_examples=2, seed=83, service_url=service.url,
                          service_api_key_var="TEAM_B_GRADER_KEY", service_timeout=30, service_deadline=60)
    tasks = selection.tasks()  # fetched from the service with the key
    assert asyncio.run(selection.grade(tasks[0]["id"], right(tasks[0]["id"]))).reward == 1.0
    assert "TEAM_B_GRADER_KEY" in str(selection.env_args()) and service.key_b not in str(selection.env_args())
    with pytest.raises(ValueError, match="not set"):
        Selection(service_url=service.url, service_api_key_var="UNSET_GRADER_KEY_VAR").tasks()


def test_a_burst_over_the_rate_limit_gets_every_reward(service: TenantService,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenRLHF's executor calls the reward function file on a thread per rollout, all at once:
    32 rollouts against tenant b's 4 requests/s, burst 4."""
    monkeypatch.setenv("SCALING_GRADER_URL", service.url)
    monkeypatch.setenv("SCALING_GRADER_API_KEY", service.key_b)
    tasks = synthetic_tasks(32, seed=84)
    prompts = [CHATML.format(t.prompt) for t in tasks]
    rollouts = [(p + (right(t.id) if i % 2 else wrong(t.id)) + "<|im_end|>", p, t.id)
                for i, (p, t) in enumerate(zip(prompts, tasks, strict=True))]
    with ThreadPoolExecutor(32) as pool:
        replies = list(pool.map(lambda r: openrlhf.reward_func([r[0]], [r[1]], [r[2]]), rollouts))
    assert [reply["rewards"] for reply in replies] == [[1.0 if i % 2 else 0.0] for i in range(32)]

"""verifiers 0.4's `vf-eval scaling-book` with docs/trainers.md's flags (the subprocess runtime,
--no-push, the client flags), in the verifiers-0.4 venv of test_verifiers_v1: vf-eval resolves
every flag into the run's config (the agent's local runtime, no upload, the policy's endpoint,
the taskset's arguments and the service's settings), checked with vf-eval's own --dry-run; and
the same command runs its rollouts: the agent in a local subprocess calls the loopback policy
(streaming), and each rollout's reward is the tenant-protected service's grade of its reply."""

from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.scaling_book.tenant_server import tenant_service
from tests.scaling_book.test_verifiers_v1 import venv_python  # noqa: F401  (the venv fixture)
from tests.support.oracle import right, synthetic_tasks, wrong
from tests.support.policy import PolicyFake
from tests.trainers import doc_commands

pytestmark = [pytest.mark.timeout(1800), pytest.mark.slow]


def _documented(vf_eval: Path, base_url: str, key_var: str) -> list[str]:
    words = doc_commands.words("verifiers-0.4")
    assert words[:2] == ["vf-eval", "scaling-book"]
    assert {"--no-push", "--env.agent.runtime.type", "--client.base-url", "--client.api-key-var"} <= set(words)
    out = [{"<model>": "policy", "<base-url>": base_url, "<key-var>": key_var}.get(w, w) for w in words]
    # the test's own selection: synthetic tasks need no judge
    cut = out.index("--env.taskset.split")
    out = out[:cut]
    out[out.index("-n") + 1] = "2"
    out[out.index("-r") + 1] = "1"
    return [str(vf_eval), *out[1:]]


def _taskset(service_url: str) -> list[str]:
    return ["--env.taskset.split", "synthetic", "--env.taskset.num-synthetic-examples", "2",
            "--env.taskset.seed", "141", "--env.taskset.service-url", service_url,
            "--env.taskset.service-api-key-var", "TEAM_GRADER_KEY"]


def test_the_documented_command_resolves_to_a_local_unpushed_run(venv_python: Path, tmp_path: Path) -> None:  # noqa: F811
    vf_eval = venv_python.parent / "vf-eval"
    with tenant_service(tmp_path) as service:
        command = [*_documented(vf_eval, "http://127.0.0.1:9/v1", "FAKE_POLICY_KEY"), *_taskset(service.url),
                   "-o", str(tmp_path / "out")]
        env = {**os.environ, "FAKE_POLICY_KEY": "sk-test", "TEAM_GRADER_KEY": service.key_b}
        dry = subprocess.run([*command, "--dry-run"], capture_output=True, text=True, timeout=600, env=env,
                             cwd=tmp_path)
        assert dry.returncode == 0, dry.stderr[-3000:]
        [resolved] = glob.glob(str(tmp_path / "out" / "*" / "configs" / "resolved" / "eval.json"))
        config = json.loads(Path(resolved).read_text())
        assert config["push"] is False and config["env"]["agent"]["runtime"]["type"] == "subprocess"
        assert config["client"]["base_url"] == "http://127.0.0.1:9/v1"
        assert config["client"]["api_key_var"] == "FAKE_POLICY_KEY"
        taskset_config = config["env"]["taskset"]
        assert (taskset_config["split"], taskset_config["service_url"], taskset_config["service_api_key_var"]) == (
            "synthetic", service.url, "TEAM_GRADER_KEY")
        assert service.key_b not in Path(resolved).read_text()


def test_the_documented_command_runs_rollouts_the_service_grades(venv_python: Path, tmp_path: Path) -> None:  # noqa: F811
    vf_eval = venv_python.parent / "vf-eval"
    first, second = synthetic_tasks(2, seed=141)  # what the taskset serves for these arguments
    policy = PolicyFake(answers={first.prompt: right(first.id), second.prompt: wrong(second.id)}).start()
    try:
        with tenant_service(tmp_path) as service:
            command = [*_documented(vf_eval, policy.base_url, "FAKE_POLICY_KEY"), *_taskset(service.url),
                       "-o", str(tmp_path / "out")]
            env = {**os.environ, "FAKE_POLICY_KEY": "sk-test", "TEAM_GRADER_KEY": service.key_b}
            run = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)
            assert run.returncode == 0, run.stderr[-3000:]
    finally:
        policy.stop()
    streamed = [r.body for r in policy.requests if r.body.get("model") == "policy"]
    assert streamed and all(body.get("stream") is True for body in streamed)
    [traces] = glob.glob(str(tmp_path / "out" / "*" / "traces.jsonl"))
    rewards = {}
    for line in Path(traces).read_text().splitlines():
        episode = json.loads(line)
        [trace] = episode["traces"]
        assert episode["ok"] and not episode["errors"], episode["errors"]
        rewards[episode["task"]["data"]["task_id"]] = (trace["rewards"]["scaling_grader"]["score"],
                                                       trace["metrics"]["scored"])
    # the reply built from the gold answer earns the reward, the one outside tolerance does not
    assert rewards == {first.id: (1.0, 1.0), second.id: (0.0, 1.0)}
    assert service.key_b not in Path(traces).read_text()

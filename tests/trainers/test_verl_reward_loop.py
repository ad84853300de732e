"""verl 0.9.1's own reward loop, as its trainer builds it, from docs/trainers.md's command line:
Hydra composes verl's ppo_trainer config with the overrides the page shows (the `+` ones
included), RewardLoopManager starts its RewardLoopWorker actors on a local Ray, each loads
`pkg://scaling_book.verl`'s compute_score_async and builds the naive reward manager, and
compute_rm_score grades a batch through a tenant-protected service. The key reaches the workers
through Ray's runtime_env only (the driver's environment has none)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.scaling_book.tenant_server import TenantService
from tests.support.oracle import right, synthetic_tasks, wrong
from tests.trainers import doc_commands
from tests.trainers.conftest import SCRIPTS, run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
DOC_URL = "http://grader:8000"


def _overrides(url: str) -> list[str]:
    words = doc_commands.words("verl")
    assert words[:3] == ["python", "-m", "verl.trainer.main_ppo"]
    overrides = [w.replace(DOC_URL, url) for w in words[3:]]
    model = [o for o in overrides if o.startswith("actor_rollout_ref.model.path=")]
    assert model, "the command names the model"
    overrides = [o for o in overrides if o not in model]
    # a tiny model built by the script; one reward worker (the default is 8) on a 2-core machine
    return [*overrides, "actor_rollout_ref.model.path=<model>", "reward.num_workers=1"]


def test_verls_reward_loop_grades_through_the_documented_overrides(trainers_python: Path, service: TenantService,
                                                                   tmp_path: Path) -> None:
    overrides = _overrides(service.url)
    assert any(o.startswith("+reward.custom_reward_function.reward_kwargs.") for o in overrides)
    assert "reward.custom_reward_function.name=compute_score_async" in overrides
    tasks = synthetic_tasks(6, seed=111)
    prompts = [t.prompt for t in tasks]
    responses = [right(t.id) if i % 2 else wrong(t.id) for i, t in enumerate(tasks)]
    settings = {"model_dir": str(tmp_path / "model"), "overrides": overrides, "prompts": prompts,
                "responses": responses, "labels": [t.id for t in tasks],
                "worker_env": {"SCALING_GRADER_API_KEY": service.key_a}}
    [out], _ = run_script(trainers_python, "verl_reward_loop.py", settings)
    assert out["manager"] == "NaiveRewardManager" and out["function"] == "compute_score_async"
    assert out["scores"] == [1.0 if i % 2 else 0.0 for i in range(6)]
    assert out["extra"]["scored"] == [True] * 6
    assert out["extra"]["task_id"] == [t.id for t in tasks]


def test_without_the_plus_hydra_refuses_the_reward_kwargs(trainers_python: Path, tmp_path: Path) -> None:
    """Why the page shows `+`: verl's config has no reward_kwargs key to override."""
    overrides = [o.removeprefix("+") for o in _overrides("http://127.0.0.1:9")]
    settings = {"model_dir": str(tmp_path / "model"), "overrides": overrides, "prompts": ["p"],
                "responses": ["r"], "labels": ["synthetic/1/1"], "compose_only": True}
    done = subprocess.run([str(trainers_python), str(SCRIPTS / "verl_reward_loop.py"), json.dumps(settings)],
                          capture_output=True, text=True, timeout=600, cwd=SCRIPTS)
    assert done.returncode != 0
    assert "reward_kwargs" in done.stderr and "not in struct" in done.stderr

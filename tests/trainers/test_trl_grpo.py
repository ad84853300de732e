"""TRL 1.16's real GRPOTrainer.train(), two steps on CPU with a tiny random Qwen2 built locally,
rewarded by scaling_book.trl's reward function through a tenant-protected service: TRL passes the
label column by name, every completion gets the reward the service's own grading gives it, and
the training steps run to the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaling_book.client import ClientOptions
from scaling_book.grading import grade_labelled
from tests.scaling_book.tenant_server import TenantService
from tests.support.oracle import synthetic_tasks
from tests.trainers.conftest import run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def test_grpo_trainer_trains_two_steps_on_the_services_rewards(trainers_python: Path, service: TenantService,
                                                               tmp_path: Path) -> None:
    tasks = synthetic_tasks(8, seed=101)
    settings = {"url": service.url, "api_key": service.key_a, "model_dir": str(tmp_path / "model"),
                "output_dir": str(tmp_path / "out"), "prompts": [t.prompt for t in tasks],
                "labels": [t.id for t in tasks]}
    [out], _ = run_script(trainers_python, "trl_grpo.py", settings)
    assert out["steps"] == 2
    seen = out["seen"]
    # 2 steps x 4 completions per step (one generation batch per step)
    assert len(seen) >= 8 and {label for label, _, _ in seen} <= {t.id for t in tasks}
    labels = [label for label, _, _ in seen]
    completions = [completion for _, completion, _ in seen]
    expected = [r.reward if r.scored else None
                for r in grade_labelled(labels, completions, service.url,
                                        client_options=ClientOptions.of(api_key=service.key_a))]
    assert [reward for _, _, reward in seen] == expected
    assert len(out["logged_rewards"]) == 2 and all(r is not None for r in out["logged_rewards"])


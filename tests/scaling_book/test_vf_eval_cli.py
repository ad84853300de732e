"""`vf-eval scaling-book` as users run it, with the verifiers 0.3 installed by the test extra:
the real console script resolves the id to the `scaling_book` module, its env server worker
rebuilds the environment from env_id/env_args in another process, and the rollouts against a
fake OpenAI-compatible policy get the rewards their answers deserve."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scaling_book.verifiers_env import load_environment
from tests.support.oracle import right, wrong
from tests.support.policy import PolicyFake

pytestmark = pytest.mark.low_priority

VF_EVAL = shutil.which("vf-eval", path=str(Path(__import__("sys").executable).parent))


@pytest.mark.slow
@pytest.mark.skipif(VF_EVAL is None, reason="vf-eval is installed by the test extra")
def test_vf_eval_scaling_book_with_its_env_server(tmp_path: Path, server_url: str, monkeypatch) -> None:
    # The service comes from the environment, as a trainer's launcher would set it, so the
    # arguments saved with the results hold no address.
    monkeypatch.setenv("SCALING_GRADER_URL", server_url)
    args = {"split": "synthetic", "num_synthetic_examples": 4, "seed": 53, "chapters": None}
    rows = load_environment(**args).get_eval_dataset().to_list()
    answers = {r["prompt"][-1]["content"]: (right if i % 2 else wrong)(r["answer"]) for i, r in enumerate(rows)}
    fake = PolicyFake(answers).start()
    try:
        done = subprocess.run(
            [VF_EVAL, "scaling-book", "-a", json.dumps(args), "-m", "policy", "-b", fake.base_url,
             "-k", "FAKE_POLICY_KEY", "-n", "4", "-r", "1", "--disable-tui", "--save-results", "-o", str(tmp_path)],
            env={**os.environ, "FAKE_POLICY_KEY": "sk-test"}, capture_output=True, text=True, timeout=600,
            cwd=tmp_path)  # not the repository root: the package must come from its installation
    finally:
        fake.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = glob.glob(str(tmp_path / "evals" / "scaling-book--policy" / "*"))
    meta = json.loads(Path(run, "metadata.json").read_text())
    assert meta["env_id"] == "scaling-book"
    assert {k: meta["env_args"][k] for k in args} == args and "judge_model" in meta["env_args"]
    results = [json.loads(line) for line in Path(run, "results.jsonl").read_text().splitlines()]
    expected = {r["answer"]: (1.0 if i % 2 else 0.0) for i, r in enumerate(rows)}
    assert {r["answer"]: r["reward"] for r in results} == expected
    assert all(r["scored"] == 1.0 for r in results)
    # the worker process loaded the environment itself, from the id and the arguments
    assert "Successfully loaded environment 'scaling-book'" in Path(run, "env_worker_0.log").read_text()

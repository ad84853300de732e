"""`vf-eval scaling-book` (verifiers 0.3, from the test extra) with docs/trainers.md's flags,
grading through a tenant-protected service: the key reaches the service from the variable that
`service_api_key_var` names (in vf-eval's env-server worker too), every rollout gets the reward
its answer deserves, and the key is in none of the files vf-eval writes."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scaling_book.verifiers_env import load_environment
from tests.scaling_book.tenant_server import tenant_service
from tests.support.oracle import right, wrong
from tests.support.policy import PolicyFake
from tests.trainers import doc_commands

VF_EVAL = shutil.which("vf-eval", path=str(Path(sys.executable).parent))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _documented(model: str, base_url: str, key_var: str, args: dict[str, object], n: int) -> list[str]:
    words = doc_commands.words("verifiers-0.3")
    assert words[:2] == ["vf-eval", "scaling-book"]
    out = [{"<model>": model, "<base-url>": base_url, "<key-var>": key_var}.get(w, w) for w in words]
    out[out.index("-a") + 1] = json.dumps(args)  # the test's own split and service
    out[out.index("-n") + 1] = str(n)
    out[out.index("-r") + 1] = "1"
    return [VF_EVAL or "vf-eval", *out[1:]]


@pytest.mark.skipif(VF_EVAL is None, reason="vf-eval is installed by the test extra")
def test_vf_eval_grades_through_a_tenant_protected_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with tenant_service(tmp_path) as service:
        args = {"split": "synthetic", "num_synthetic_examples": 4, "seed": 131, "chapters": None,
                "service_url": service.url, "service_api_key_var": "TEAM_GRADER_KEY"}
        monkeypatch.setenv("TEAM_GRADER_KEY", service.key_b)
        monkeypatch.delenv("SCALING_GRADER_API_KEY", raising=False)
        rows = load_environment(**args).get_eval_dataset().to_list()
        answers = {r["prompt"][-1]["content"]: (right if i % 2 else wrong)(r["answer"]) for i, r in enumerate(rows)}
        fake = PolicyFake(answers).start()
        try:
            command = _documented("policy", fake.base_url, "FAKE_POLICY_KEY", args, 4)
            done = subprocess.run([*command, "--disable-tui", "--save-results", "-o", str(tmp_path / "out")],
                                  env={**os.environ, "FAKE_POLICY_KEY": "sk-test"},
                                  capture_output=True, text=True, timeout=900, cwd=tmp_path)
        finally:
            fake.stop()
    assert done.returncode == 0, done.stderr[-3000:]
    [run] = glob.glob(str(tmp_path / "out" / "evals" / "scaling-book--policy" / "*"))
    results = [json.loads(line) for line in Path(run, "results.jsonl").read_text().splitlines()]
    expected = {r["answer"]: (1.0 if i % 2 else 0.0) for i, r in enumerate(rows)}
    assert {r["answer"]: r["reward"] for r in results} == expected
    assert all(r["scored"] == 1.0 for r in results)
    written = "".join(Path(f).read_text(errors="replace") for f in glob.glob(f"{run}/**", recursive=True)
                      if Path(f).is_file())
    assert "TEAM_GRADER_KEY" in written and service.key_b not in written

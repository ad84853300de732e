"""The stack's case secret lives in a file the stack keeps, not only in Redis: deploy/stack.sh
generates it once and the compose file gives the same value to the API and every worker."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from tests.deploy.compose_files import interpolated
from tests.support.server import ROOT

STACK_SH = (ROOT / "deploy" / "stack.sh").read_text()


def _case_secret_function() -> str:
    match = re.search(r"^case_secret\(\) \{\n.*?^\}\n", STACK_SH, re.S | re.M)
    assert match, "deploy/stack.sh has no case_secret function"
    return match[0]


def _run(state: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    script = f'set -euo pipefail\nSTATE={state}\nlog() {{ echo "$*" >&2; }}\n{_case_secret_function()}\n' \
             f'case_secret {" ".join(args)}\necho "${{CASE_SECRET:-}}"\n'
    base = {k: v for k, v in os.environ.items() if k != "CASE_SECRET"}
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True,
                          env={**base, **(env or {})})


def test_the_stack_generates_its_secret_once_and_keeps_it(tmp_path: Path) -> None:
    first = _run(tmp_path).stdout.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    assert (tmp_path / "case-secret").stat().st_mode & 0o077 == 0  # owner-only
    assert _run(tmp_path).stdout.strip() == first  # a re-run (or `scale`) keeps it
    assert _run(tmp_path, env={"CASE_SECRET": "operator"}).stdout.strip() == "operator"


def test_a_worker_only_host_never_draws_a_secret_of_its_own(tmp_path: Path) -> None:
    assert _run(tmp_path, "keep").stdout.strip() == ""  # falls back to the one in Redis, says so
    assert not (tmp_path / "case-secret").exists()


def test_the_api_and_every_worker_get_the_same_secret() -> None:
    services = interpolated(env={"CASE_SECRET": "s3cret"})["services"]
    for name in ("api", "worker"):
        assert services[name]["environment"]["SCALING_GRADER_IMPL__CASE_SECRET"] == "s3cret", name
    # unset: empty, which the service reads as no secret (app.jobs.case_secret)
    assert interpolated()["services"]["worker"]["environment"]["SCALING_GRADER_IMPL__CASE_SECRET"] == ""

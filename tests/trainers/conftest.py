"""The trainers' own code (TRL, verl, OpenRLHF) runs in a venv of its own (tests/trainers/venv.py);
each test hands a script there its inputs as JSON and checks the JSON it prints against the
service's own grading, here. The service is tenant-protected, as a shared deployment is."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.scaling_book.tenant_server import TenantService, tenant_service
from tests.trainers import venv

SCRIPTS = Path(__file__).with_name("scripts")
RESULT = "RESULT "  # how the scripts mark the lines they print for the test (trainers print dicts too)


@pytest.fixture(scope="session")
def trainers_python() -> Path:
    return venv.python()


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantService]:
    with tenant_service(Path(tmp_path_factory.mktemp("tenants"))) as running:
        yield running


def run_script(python: Path, name: str, settings: dict[str, Any], env: dict[str, str] | None = None,
               timeout: float = 600) -> tuple[list[dict[str, Any]], str]:
    """(the JSON lines the script printed, all it printed). The child's environment has no grader
    settings but those given: what reaches the trainer is what the test passed."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("SCALING_GRADER_")}
    done = subprocess.run([str(python), str(SCRIPTS / name), json.dumps(settings)], capture_output=True, text=True,
                          timeout=timeout, env={**base, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                                                **(env or {})}, cwd=SCRIPTS)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line.removeprefix(RESULT)) for line in done.stdout.splitlines() if line.startswith(RESULT)]
    return lines, done.stdout + done.stderr

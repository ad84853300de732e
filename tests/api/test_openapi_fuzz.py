"""The OpenAPI document says what the service does: schemathesis generates requests from it
against a real server (a bounded, seeded run) and finds no schema-valid request refused, no 5xx,
no undocumented status code or content type and no response outside its schema.

Requests that break the schema are not part of the claim: the service accepts more than it
documents on purpose (null for "not given", any unit its parser knows, over-long completions
graded as unscored items on the label endpoints)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # thousands of generated requests against a real server: left out of `make test-fast`

CHECKS = ("not_a_server_error,positive_data_acceptance,status_code_conformance,content_type_conformance,"
          "response_schema_conformance,response_headers_conformance")


def test_schema_valid_requests_are_served_as_documented(server_url: str, tmp_path: Path) -> None:
    st = shutil.which("st", path=str(Path(sys.executable).parent))
    assert st, "schemathesis comes with the test extra"
    done = subprocess.run(
        [st, "run", f"{server_url}/openapi.json", "--checks", CHECKS, "--phases", "examples,coverage,fuzzing",
         "--max-examples", "12", "--seed", "20261130", "--no-color", "--request-timeout", "60",
         "--max-response-time", "60",
         # hypothesis times how fast it makes examples: that is this machine's load, not the service
         "--suppress-health-check", "too_slow"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    summary = done.stdout[-6000:]
    assert done.returncode == 0, summary
    counts = re.search(r"(\d+) generated, (\d+) passed", done.stdout)
    assert counts and counts[1] == counts[2] and int(counts[1]) > 500, summary

"""Attack on the tenant's status view: another tenant's 429s are another tenant's activity. A
tenant that is rate limited must not show up in a different tenant's /v1/status, while the
operator still sees every refusal (real server, tenants file, embedded mode)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from app.tenants import new_key
from tests.support.server import running_server

pytestmark = pytest.mark.slow  # a real server


def _tenants(tmp: Path) -> tuple[Path, dict[str, str]]:
    keys, lines = {}, []
    for name, rate, burst, operator in (
        ("ops", 10000, 10000, True),
        ("noisy", 0.001, 1, False),
        ("quiet", 10000, 10000, False),
    ):
        keys[name], digest = new_key()
        lines.append(
            f'[[tenant]]\nname = {json.dumps(name)}\nkey_sha256 = "{digest}"\nrate_per_second = {rate}\n'
            f"burst = {burst}\noperator = {'true' if operator else 'false'}\n"
        )
    path = tmp / "tenants.toml"
    path.write_text("\n".join(lines))
    return path, keys


def test_a_tenants_status_never_shows_another_tenants_refusals(tmp_path: Path) -> None:
    path, keys = _tenants(tmp_path)
    body = {"reference": {"values": ["3"]}, "completion": "Final answer: 3"}
    with running_server(
        {"SCALING_GRADER_TENANTS_FILE": str(path), "SCALING_GRADER_SANDBOX__ALLOW_PLAIN": "true"}
    ) as url:
        statuses = [
            httpx.post(
                url + "/v1/grade", json=body, headers={"Authorization": f"Bearer {keys['noisy']}"}, timeout=30
            ).status_code
            for _ in range(6)
        ]
        refused = statuses.count(429)
        assert refused >= 4, statuses  # the noisy tenant was refused: there is something to leak

        def status(who: str) -> dict:
            r = httpx.get(url + "/v1/status", headers={"Authorization": f"Bearer {keys[who]}"}, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()

        # the operator sees the deployment's refusals ...
        assert sum((status("ops")["refused"] or {}).values()) >= refused
        # ... the quiet tenant nothing of them (a tenant sees its own grades and faults only)
        assert not any((status("quiet").get("refused") or {}).values()), status("quiet").get("refused")

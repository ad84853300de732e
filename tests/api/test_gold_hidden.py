"""No response to a task-id grade gives the gold away (issue: two probes per task used to reveal
every expected value), on every path a client reads: /v1/grade, /v1/grade/batch, /v1/jobs/{id},
the reward endpoints and the Python client. Operators can reveal it per tenant or per server."""

from __future__ import annotations

import json

import httpx
import pytest

from app.quantities import parse_quantity
from app.settings import Settings
from app.tasks.registry import resolve_task
from app.tenants import new_key
from scaling_book.client import GraderClient
from tests.support.server import running_server

pytestmark = pytest.mark.low_priority

NUMERIC_ID = "synthetic/3/17"
ROWS_ID = "tasks/sc-004"


def _gold_numeric() -> list[str]:
    return list(resolve_task(NUMERIC_ID, Settings()).gold)


def _gold_rows() -> list[dict]:
    return [dict(r) for r in resolve_task(ROWS_ID, Settings()).gold]


def _probes() -> list[dict]:
    """The probes that used to reveal the gold: wrong numbers, nothing, nulls of the right shape."""
    rows = _gold_rows()
    nulls = [dict.fromkeys(r) for r in rows]
    wrong = [{k: (v * 3 + 1 if isinstance(v, int | float) and not isinstance(v, bool) else v) for k, v in r.items()}
             for r in rows]
    numeric_wrong = "Final answer: " + ", ".join(f"{parse_quantity(g).value * 1.7:.6g}" for g in _gold_numeric())
    return [
        {"task_id": NUMERIC_ID, "completion": numeric_wrong},
        {"task_id": NUMERIC_ID, "completion": "Final answer: 1 s, 1 B, 1 FLOP, 1"},
        {"task_id": ROWS_ID, "completion": json.dumps({"rows": []})},
        {"task_id": ROWS_ID, "completion": json.dumps({"rows": nulls})},
        {"task_id": ROWS_ID, "completion": json.dumps({"rows": wrong})},
    ]


def _gold_texts() -> list[str]:
    """Every spelling of a gold value that must not appear in a response."""
    out = []
    for g in _gold_numeric():
        q = parse_quantity(g)
        out += [g, f"{q.value!r}", f"{q.value:.6g}"]
    for row in _gold_rows():
        for v in row.values():
            if isinstance(v, float):
                out += [repr(v), json.dumps(v)]
    return out


GOLD_KEYS = ("expected", "expected_si", "relative_error", "judge_reply")


def _gold_fields(node: object) -> list[tuple[str, object]]:
    """Every gold-bearing key holding a value, anywhere in a response."""
    if isinstance(node, dict):
        own = [(k, v) for k, v in node.items() if k in GOLD_KEYS and v is not None]
        return own + [f for v in node.values() for f in _gold_fields(v)]
    if isinstance(node, list):
        return [f for v in node for f in _gold_fields(v)]
    return []


def assert_no_gold(payload: object) -> None:
    text = json.dumps(payload)
    assert _gold_fields(payload) == [], text[:400]
    for gold in _gold_texts():
        assert gold not in text, (gold, text[:400])


def _verdicts_kept(result: dict) -> None:
    if result["grading"] == "numeric":
        assert result["values"] and all("correct" in v and "dimension" in v for v in result["values"])
    if result["grading"] == "rows" and result["details"].get("row_diffs"):
        assert all("ok" in d for d in result["details"]["row_diffs"])


@pytest.fixture(scope="module")
def client(server_url):
    with httpx.Client(base_url=server_url, timeout=30) as c:
        yield c


def test_single_grades_hold_no_gold(client: httpx.Client) -> None:
    for probe in _probes():
        result = client.post("/v1/grade", json=probe).json()
        assert result["reward"] == 0.0
        _verdicts_kept(result)
        assert_no_gold(result)


def test_batch_holds_no_gold(client: httpx.Client) -> None:
    body = client.post("/v1/grade/batch", json={"items": _probes()}).json()
    assert len(body["results"]) == len(_probes())
    assert_no_gold(body)


def test_idempotent_batch_items_hold_no_gold(client: httpx.Client) -> None:
    # Items with an idempotency key go through the job store, which keeps the full result: the
    # batch used to answer them with it, gold included.
    items = [{**probe, "request_id": f"gold-hidden-batch-{i}"} for i, probe in enumerate(_probes())]
    for _ in range(2):  # first claimed, then answered from the store
        body = client.post("/v1/grade/batch", json={"items": items}).json()
        assert [r["reward"] for r in body["results"]] == [0.0] * len(items)
        assert all(r["job_id"] for r in body["results"])
        for result in body["results"]:
            _verdicts_kept(result)
        assert_no_gold(body)


def test_idempotent_grade_and_its_job_hold_no_gold(client: httpx.Client) -> None:
    for i, probe in enumerate(_probes()):
        result = client.post("/v1/grade", json={**probe, "request_id": f"gold-hidden-{i}"}).json()
        assert result["job_id"]
        assert_no_gold(result)
        job = client.get(f"/v1/jobs/{result['job_id']}").json()
        assert job["status"] == "finished" and job["result"]["reward"] == 0.0
        assert_no_gold(job)


def test_reward_endpoints_hold_numbers_only(client: httpx.Client) -> None:
    rewards = client.post("/v1/rewards", json={"items": _probes()}).json()
    assert rewards == {"rewards": [0.0] * len(_probes())}
    got = client.post("/get_reward", json={"query": [p["completion"] for p in _probes()],
                                          "labels": [p["task_id"] for p in _probes()]}).json()
    assert got["rewards"] == [0.0] * len(_probes())
    assert_no_gold(got)


def test_python_client_sees_no_gold(server_url: str) -> None:
    with GraderClient(server_url) as grader:
        results = grader.grade_batch(_probes())
    for result in results:
        assert result.reward == 0.0
        assert all(v.get("expected") is None and v.get("expected_si") is None and v.get("relative_error") is None
                   for v in result.values)
        assert_no_gold(result.to_json())


def test_inline_reference_may_echo_what_the_client_sent(client: httpx.Client) -> None:
    r = client.post("/v1/grade", json={"reference": {"values": ["3.35 TB/s"]},
                                       "completion": "Final answer: 2 TB/s"}).json()
    assert r["values"][0]["expected"] == "3.35 TB/s" and r["values"][0]["relative_error"] > 0


def _tenants(tmp_path) -> tuple[str, str, str]:
    open_key, open_digest = new_key()
    closed_key, closed_digest = new_key()
    path = tmp_path / "tenants.toml"
    path.write_text(f'''
[[tenant]]
name = "debugging"
key_sha256 = "{open_digest}"
reveal_expected = true

[[tenant]]
name = "training"
key_sha256 = "{closed_digest}"
''')
    return str(path), open_key, closed_key


@pytest.mark.slow
def test_reveal_is_per_tenant(tmp_path) -> None:
    path, open_key, closed_key = _tenants(tmp_path)
    probe = _probes()[0]
    with running_server({"SCALING_GRADER_TENANTS_FILE": path}) as url:
        shown = httpx.post(url + "/v1/grade", json=probe, headers={"authorization": f"Bearer {open_key}"}).json()
        hidden = httpx.post(url + "/v1/grade", json=probe, headers={"authorization": f"Bearer {closed_key}"}).json()
    assert [v["expected"] for v in shown["values"]] == _gold_numeric()
    assert_no_gold(hidden)
    assert [v["correct"] for v in shown["values"]] == [v["correct"] for v in hidden["values"]]


@pytest.mark.slow
def test_reveal_setting_without_tenants() -> None:
    probe = _probes()[3]
    with running_server({"SCALING_GRADER_REVEAL_EXPECTED": "true"}) as url:
        shown = httpx.post(url + "/v1/grade", json=probe).json()
    fields = [f for d in shown["details"]["row_diffs"] for f in d.get("fields", {}).values()]
    assert fields and all("expected" in f for f in fields)


def test_tenants_file_refuses_a_non_boolean_reveal(tmp_path) -> None:
    from app.tenants import TenantsFileError, load_tenants

    _, digest = new_key()
    path = tmp_path / "t.toml"
    path.write_text(f'[[tenant]]\nname = "x"\nkey_sha256 = "{digest}"\nreveal_expected = "yes"\n')
    with pytest.raises(TenantsFileError, match="reveal_expected"):
        load_tenants(path)


@pytest.mark.slow
def test_eval_report_keeps_expected_values_only_when_revealed(tmp_path) -> None:
    import os
    import subprocess
    import sys

    from app.integrations.tasks import local_public_tasks
    from tests.support.oracle import wrong
    from tests.support.policy import PolicyFake
    from tests.support.server import ROOT

    tasks = local_public_tasks("synthetic", chapters=None, n=2, seed=5)
    fake = PolicyFake({t["prompt"]: wrong(t["id"]) for t in tasks}).start()
    try:
        records = {}
        for flag in ((), ("--reveal-expected",)):
            out = tmp_path / ("revealed" if flag else "hidden")
            done = subprocess.run(
                [sys.executable, "-m", "app.cli", "eval", "--model", "policy", "--base-url", fake.base_url,
                 "--split", "synthetic", "-n", "2", "--seed", "5", "--no-progress", "-o", str(out), *flag],
                cwd=ROOT, env={**os.environ, "OPENAI_API_KEY": "x"}, capture_output=True, text=True,
                timeout=400)  # twice within the low-priority test limit (tests/conftest.py)
            assert done.returncode == 0, done.stderr[-2000:]
            records[bool(flag)] = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    finally:
        fake.stop()
    assert all(r["values"] and all("expected" not in v for v in r["values"]) for r in records[False])
    assert all(r["values"] and all(v["expected"] for v in r["values"]) for r in records[True])

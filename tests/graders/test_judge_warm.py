"""A process that will call judges warms its transport at start (judge.warm_clients, called by
worker lanes on the judge queue): the first real judge call then loads nothing more, so a worker's
memory does not step up at its first judge job, hours into a run (a stack soak read that step as
growth: about 20 MiB per worker). Checked in a fresh interpreter, against the loopback judge."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from app.graders.judge import resolve_judge
from app.graders.options import GradeOptions, JudgeSpec
from app.settings import JudgeSettings, Settings

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent("""
    import json, sys
    from app.graders.judge import JudgeTarget, _clients, call_judge, warm_clients
    from app.settings import JudgeSettings

    url, warm, key_env = sys.argv[1], sys.argv[2] == "warm", sys.argv[3] or None
    judge = JudgeSettings(allowed_base_urls=[url, url + "/", "http://10.9.9.9:1/v1", "not a url"],
                          api_key_env=key_env, max_retries=0)
    before = "openai" in sys.modules
    made = warm_clients(judge) if warm else 0
    clients = len(_clients)
    loaded = set(sys.modules)
    target = JudgeTarget(model="judge-yes", base_url=url, api_key="EMPTY")
    reply = call_judge(target, [{"role": "user", "content": "Is it right?"}], judge).verdict
    print(json.dumps({"openai_before": before, "made": made, "clients": clients, "reply": reply,
                      "loaded_by_first_call": sorted(set(sys.modules) - loaded)}))
    """)


def _run(url: str, *, warm: bool, key_env: str = "") -> dict:
    done = subprocess.run([sys.executable, "-c", PROGRAM, url, "warm" if warm else "cold", key_env],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_after_warming_the_first_judge_call_loads_nothing(judge_server) -> None:
    got = _run(judge_server.base_url, warm=True)
    assert got["openai_before"] is False  # the module alone does not import openai (a second and more)
    # one client per allow-listed endpoint (the same URL spelled twice is one; a bad entry none)
    assert got["made"] == got["clients"] == 2
    assert got["reply"] is True  # the warmed client really serves a call
    assert got["loaded_by_first_call"] == []


def test_without_warming_the_first_call_would_load_the_transport(judge_server) -> None:
    # The control: what warming saves is real (openai and its HTTP stack, loaded at the first call).
    got = _run(judge_server.base_url, warm=False)
    assert got["made"] == got["clients"] == 0
    assert got["reply"] is True
    assert "openai" in got["loaded_by_first_call"]


def test_no_clients_are_made_when_the_key_is_missing(judge_server) -> None:
    # Every judge call would be refused for the missing key: nothing is warmed under a wrong key.
    got = _run(judge_server.base_url, warm=True, key_env="SG_TEST_KEY_NOT_SET")
    assert got["made"] == got["clients"] == 0


def test_an_odd_allow_list_entry_does_not_stop_a_lane_from_starting(caplog) -> None:
    # warm_clients runs as a judge lane starts (worker/lane.py): an entry the HTTP stack refuses
    # (a NUL in the host) raised there, so the lane died at start, again and again, where before it
    # cost only the judge calls aimed at that entry. It is passed over, said without the key.
    import os

    from app.graders.judge import _clients, warm_clients
    from app.settings import JudgeSettings

    os.environ["SG_TEST_WARM_KEY"] = "sk-warm-secret"
    try:
        _clients.clear()
        judge = JudgeSettings(allowed_base_urls=["http://ho\x00st/v1", "http://127.0.0.1:9/v1"],
                              api_key_env="SG_TEST_WARM_KEY")
        assert warm_clients(judge) == 1
    finally:
        del os.environ["SG_TEST_WARM_KEY"]
        _clients.clear()
    assert "sk-warm-secret" not in caplog.text


def test_an_ipv6_endpoint_keeps_its_brackets() -> None:
    # normalise_base_url rebuilt the address from the bare host: "http://[::1]:8000/v1" became
    # "http://::1:8000/v1", which the HTTP stack reads as host ":" and port ":1:8000": warming such
    # an allow-list failed the lane's start, and every judge call to it raised (InvalidURL).
    from app.graders.judge import JudgeTarget, _client, _clients, normalise_base_url, warm_clients
    from app.settings import JudgeSettings

    assert normalise_base_url("http://[::1]:8000/v1/") == "http://[::1]:8000/v1"
    assert normalise_base_url("HTTP://[FE80::1]/v1") == "http://[fe80::1]/v1"
    _clients.clear()
    try:
        judge = JudgeSettings(allowed_base_urls=["http://[::1]:8000/v1"])
        assert warm_clients(judge) == 1
        client = _client(JudgeTarget(model="m", base_url=normalise_base_url("http://[::1]:8000/v1"),
                                     api_key="EMPTY"), judge.timeout_seconds)
        assert len(_clients) == 1  # the client a call uses is the warmed one
        assert str(client.base_url) == "http://[::1]:8000/v1/"
    finally:
        _clients.clear()


def test_a_malformed_allow_list_entry_is_logged_once_not_per_request(caplog: pytest.LogCaptureFixture) -> None:
    judge = JudgeSettings(allowed_base_urls=[f"ftp://malformed-{uuid.uuid4().hex}", "http://judge.internal/v1"])
    options = GradeOptions(judge=JudgeSpec(model="m", base_url="http://judge.internal/v1"))
    with caplog.at_level(logging.WARNING, logger="app.graders.judge"):
        for _ in range(5):
            assert resolve_judge(options, Settings(judge=judge)).base_url == "http://judge.internal/v1"
    assert sum("malformed entry" in r.getMessage() for r in caplog.records) == 1

"""Attacks on the grading processes and the grade ledger together, through a real server in
embedded mode: a mix of every way a grade is made (small items on the loop, large ones and batch
chunks in the grading processes, idempotent items retried with their request id, a held-out
split, over-long completions, refused items, OpenRLHF's /get_reward with labels, a body over
64 KiB parsed in a grading process) must be counted exactly once: /metrics and the status page
agree with each other and with what the clients were answered."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from app.jobs import grade_log
from app.settings import Settings
from app.tasks.registry import get_bank
from app.tasks.synthetic.bank import SyntheticBank
from app.tenants import new_key
from tests.support.book_mirror import mirror_path
from tests.support.proc_tree import descendants as _descendants
from tests.support.proc_tree import stat as _stat
from tests.support.redis_server import RedisServer
from tests.support.server import ROOT, free_port, logged_server, running_server, stop_process, wait_until_up
from tests.support.tcp_proxy import PausableProxy

pytestmark = pytest.mark.slow  # a real server

GRADES = re.compile(
    r'^scaling_grader_grades_total\{grading="([^"]+)",outcome="([^"]+)",split="([^"]+)"\} (\S+)$', re.MULTILINE
)
BANK = SyntheticBank()
PAD = "Working it out step by step. " * 400  # past the size graded on the loop: a grading process grades it


def _tenants(tmp: Path) -> tuple[Path, dict[str, str]]:
    keys, lines = {}, []
    for name in ("ops", "alpha", "beta"):
        keys[name], digest = new_key()
        lines.append(
            f'[[tenant]]\nname = "{name}"\nkey_sha256 = "{digest}"\nrate_per_second = 10000\nburst = 10000\n'
            f"operator = {'true' if name == 'ops' else 'false'}\n"
        )
    path = tmp / "tenants.toml"
    path.write_text("\n".join(lines))
    return path, keys


def _right(task_id: str) -> str:
    return "Final answer: " + ", ".join(BANK.get(task_id).gold)


def _counted(results: list[dict]) -> Counter:
    """The grades the client was answered: every result but a refused item (nothing was graded)."""
    return Counter(
        (r["split"] or "inline", r["grading"], r["outcome"]) for r in results if r["outcome"] != "invalid_request"
    )


def test_every_route_and_every_path_through_the_pool_counts_each_grade_once(tmp_path: Path) -> None:
    tenants, keys = _tenants(tmp_path)
    exam = get_bank("exam", Settings(book_mirror=mirror_path()))
    held_out = next(t for t in exam.batch(seed=0, n=exam.size() or 0) if t.grading == "numeric")
    env = {"SCALING_GRADER_TENANTS_FILE": str(tenants), "SCALING_GRADER_BOOK_MIRROR": str(mirror_path())}
    made: dict[str, Counter] = {"alpha": Counter(), "beta": Counter()}
    rewards = Counter()  # /get_reward answers rewards only: how many grades it made, per tenant
    with running_server(env) as url, httpx.Client(base_url=url, timeout=120) as client:

        def post(who: str, path: str, body: object) -> httpx.Response:
            r = client.post(path, json=body, headers={"Authorization": f"Bearer {keys[who]}"})
            assert r.status_code == 200, r.text
            return r

        for who, seed in (("alpha", 51), ("beta", 53)):
            tasks = [f"synthetic/{seed}/{i}" for i in range(6)]
            rid = uuid.uuid4().hex
            items = [
                {"task_id": tasks[0], "completion": _right(tasks[0])},  # on the loop
                {"task_id": tasks[1], "completion": PAD + _right(tasks[1])},  # in a grading process
                {"task_id": tasks[2], "completion": PAD + "Final answer: 12345 furlongs"},
                {"task_id": tasks[3], "completion": "x" * 300_000},  # too_long
                {"task_id": "synthetic/nope", "completion": "Final answer: 1"},  # refused item
                {"reference": {"values": ["3 s"]}, "completion": PAD + "Final answer: 3 s"},
                {"task_id": held_out.id, "completion": PAD + "Final answer: 1 GB"},  # held out
                {"task_id": tasks[4], "completion": _right(tasks[4]), "request_id": rid},  # idempotent
            ]
            batch = {"items": items}
            assert len(json.dumps(batch)) > 64 * 1024  # parsed in a grading process too
            for _ in range(2):  # the retry of the same batch: only its idempotent item is answered from its job
                results = post(who, "/v1/grade/batch", batch).json()["results"]
                made[who] += _counted(results)
            made[who][BANK.get(tasks[4]).split or "inline", "numeric", "correct"] -= 1  # the retry's: not a grade
            for body in [*items[:2], items[-1]]:  # single grades, the idempotent one a third time
                made[who] += _counted([post(who, "/v1/grade", body).json()])
            made[who][BANK.get(tasks[4]).split or "inline", "numeric", "correct"] -= 1
            queries = [PAD + _right(tasks[5]), "Final answer: 7", "y" * 300_000]
            got = post(who, "/get_reward", {"query": queries, "labels": [tasks[5], "7", tasks[5]]}).json()
            assert got["rewards"] == [1.0, 1.0, 0.0]
            rewards[who] += len(queries)

        ops = {"Authorization": f"Bearer {keys['ops']}"}
        text = client.get("/metrics", headers=ops).text
        metrics = Counter(
            {(split, grading, outcome): int(float(n)) for grading, outcome, split, n in GRADES.findall(text)}
        )

        def by_split_outcome(status: dict) -> Counter:
            return Counter({(s, o): n for s, row in status["grades"]["by_split"].items() for o, n in row.items()})

        def collapsed(counts: Counter) -> Counter:
            found: Counter = Counter()
            for (split, _, outcome), n in counts.items():
                found[split, outcome] += n
            return +found

        operator = client.get("/v1/status", headers=ops).json()
        # /metrics and the status page: the same ledger, the same figures
        assert collapsed(metrics) == by_split_outcome(operator)
        # every grade the clients were answered, once (the rewards route: its number of grades)
        expected = sum(made.values(), Counter())
        assert sum(metrics.values()) == sum(expected.values()) + sum(rewards.values())
        assert not +(expected - metrics), expected - metrics  # nothing answered is missing
        for who in ("alpha", "beta"):
            own = client.get("/v1/status", headers={"Authorization": f"Bearer {keys[who]}"}).json()
            assert sum(by_split_outcome(own).values()) == sum(made[who].values()) + rewards[who], who


def test_a_killed_multi_process_server_leaves_no_api_or_grading_process_serving(tmp_path: Path) -> None:
    """SIGKILL to ``serve --workers 2`` (its supervisor: what an OOM killer or ``kill -9`` of the
    command hits): its API processes must not go on serving the port, orphaned, with their
    grading processes, and they write their last grade counts on the way out."""
    redis_server = RedisServer().start()
    port = free_port()
    env = {**os.environ, "SCALING_GRADER_REDIS_URL": redis_server.url}
    with (tmp_path / "server.log").open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                "2",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    everything: set[int] = set()
    try:
        wait_until_up(url, process)
        body = {"reference": {"values": ["3"]}, "completion": PAD + "Final answer: 3"}  # a grading process's
        for _ in range(6):  # new connections: both API processes take some
            assert httpx.post(url + "/v1/grade", json=body, timeout=120).json()["reward"] == 1.0
        everything = _descendants(process.pid)
        assert len(everything) >= 4, everything  # two API processes, their fork servers and children
        process.kill()
        process.wait(10)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and {p for p in everything if _stat(p) is not None}:
            time.sleep(0.2)
        left = {p for p in everything if _stat(p) is not None}
        assert not left, [Path(f"/proc/{p}/cmdline").read_bytes()[:120] for p in left if _stat(p)]
        with pytest.raises(httpx.TransportError):
            httpx.get(url + "/healthz", timeout=2)
        # what the API processes graded is in the ledger: they stopped, not vanished
        assert sum(grade_log.totals(redis_server.client()).values()) == 6
    finally:
        for pid in everything:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        stop_process(process)
        redis_server.close()


def test_a_grading_process_that_died_idle_costs_no_later_item_a_fault(tmp_path: Path) -> None:
    """A grading process killed while idle (the OOM killer takes them first, busy or not) had
    nothing of anyone's: the next item, maybe another tenant's, is graded, not made a fault."""
    body = {"reference": {"values": ["3"]}, "completion": PAD + "Final answer: 3"}
    with logged_server({}, tmp_path / "server.log") as (url, process):
        assert httpx.post(url + "/v1/grade", json=body, timeout=120).json()["outcome"] == "correct"
        servers = {p for p in _descendants(process.pid) if (s := _stat(p)) and int(s[1]) == process.pid}
        children = {p for p in _descendants(process.pid) if (s := _stat(p)) and int(s[1]) in servers}
        assert len(children) == 2, (servers, children)  # the pool, idle
        for pid in children:
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any((s := _stat(p)) and s[0] != "Z" for p in children):
            time.sleep(0.1)
        outcomes = [httpx.post(url + "/v1/grade", json=body, timeout=120).json()["outcome"] for _ in range(4)]
        assert outcomes == ["correct"] * 4


# Bodies a JSON parser may read more than one way: parsed on the loop when small, in a grading
# process (bounded, then validated a piece at a time) when over 64 KiB. The same item must be
# answered alike either way.
ODD_ITEMS = {
    "duplicate key": b'{"reference": {"values": ["3"]}, "completion": "Final answer: 4", '
    b'"completion": "Final answer: 3"}',
    "duplicate reference": b'{"reference": {"values": ["4"]}, "reference": {"values": ["3"]}, '
    b'"completion": "Final answer: 3"}',
    "lone surrogate": b'{"reference": {"values": ["3"]}, "completion": "Final answer: 3 \\ud800"}',
    "huge float": b'{"reference": {"values": ["3"]}, "completion": "Final answer: 3", "tolerance": 1e400}',
    "NaN": b'{"reference": {"values": ["3"]}, "completion": "Final answer: 3", "tolerance": NaN}',
    "huge int": b'{"reference": {"values": [' + b"9" * 5000 + b']}, "completion": "Final answer: 3"}',
    "escaped key": b'{"reference": {"values": ["3"]}, "compl\\u0065tion": "Final answer: 3"}',
    "NUL": b'{"reference": {"values": ["3"]}, "completion": "Final answer: 3\\u0000"}',
    "string bool": b'{"reference": {"values": ["3"]}, "completion": "Final answer: 3", "partial_credit": "true"}',
    "invalid UTF-8": b'{"reference": {"values": ["3"]}, "completion": "Final answer: 3 \xff"}',
}


def test_an_odd_item_is_answered_alike_in_a_small_and_a_large_body() -> None:
    filler = json.dumps({"reference": {"values": ["3"]}, "completion": "Final answer: 3 " + "p" * 70_000}).encode()
    with running_server({}) as url, httpx.Client(base_url=url, timeout=120) as client:

        def answer(body: bytes) -> tuple[int, object]:
            r = client.post("/v1/grade/batch", content=body, headers={"content-type": "application/json"})
            first = r.json()["results"][0] if r.status_code == 200 else r.json()["error"]
            return r.status_code, (first["outcome"], first["reward"]) if isinstance(first, dict) else first

        answers = {}
        for name, item in ODD_ITEMS.items():
            small = answer(b'{"items": [' + item + b"]}")
            large = answer(b'{"items": [' + item + b", " + filler + b"]}")
            assert small == large, name
            answers[name] = small
    assert answers["duplicate key"] == (200, ("correct", 1.0))  # the last one, as the loop's parser reads it
    assert {code for code, _ in answers.values()} >= {200, 400, 422}  # the table reaches every answer


def test_a_ledger_write_whose_answer_is_lost_in_a_partition_is_counted_once() -> None:
    """The API's Redis is partitioned away (packets dropped, nothing closed) while it holds inline
    grades: its write goes out, times out unanswered, and reaches Redis when the partition heals,
    just before the write is retried. Each grade is in the ledger once, the large ones graded in
    a grading process included."""
    redis_server = RedisServer().start()
    proxy = PausableProxy(int(redis_server.url.rsplit(":", 1)[1].split("/")[0]))
    direct = redis_server.client()
    try:
        with running_server({"SCALING_GRADER_REDIS_URL": proxy.url}) as url, httpx.Client(base_url=url) as client:
            made = 0

            def grade(n: int) -> int:
                for i in range(n):
                    completion = (PAD if i % 2 else "") + f"Final answer: {3 + i % 2}"
                    body = {"reference": {"values": ["3"]}, "completion": completion}
                    assert client.post("/v1/grade", json=body, timeout=120).status_code == 200
                return n

            def written() -> int:
                return sum(grade_log.totals(direct).values())

            made += grade(4)
            deadline = time.monotonic() + 30
            while written() != made and time.monotonic() < deadline:
                time.sleep(0.2)
            assert written() == made
            proxy.pause()
            made += grade(6)  # inline grading needs no Redis: it goes on
            time.sleep(12)  # the ledger's write went out and timed out unanswered
            assert written() == 4  # nothing of it reached Redis meanwhile
            proxy.resume()
            deadline = time.monotonic() + 40
            while written() != made and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3)  # a retry that would count twice has had its chance
            assert written() == made
    finally:
        proxy.close()
        redis_server.close()

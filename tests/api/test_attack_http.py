"""Attacks by a hostile tenant of a shared deployment, against a real server over real HTTP.

Each test names the hole it shows: a request whose work is unbounded, or one tenant taking what
is shared with the others. Every server is a child process on a free loopback port (embedded
mode, a tenants file of two plain tenants and an operator), stopped when its test ends, so that a
server a test pinned holds nothing back for the next one. Every request loop is bounded in count
and in time."""

from __future__ import annotations

import concurrent.futures
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.server import logged_server
from tests.support.tenants_file import write_tenants

pytestmark = pytest.mark.slow  # a real HTTP server per test

# Bob is the honest tenant; mallory the hostile one, with limits an operator would give a big RL
# run (a burst of a few rollout steps). Both are plain tenants.
TENANTS = {
    "ops": "operator = true\n",
    "bob": "",
    "mallory": "rate_per_second = 100000\nburst = 100000\nmax_in_flight = 100000\n",
    "eve": "",  # hostile, with the default limits (100 grades a second, a burst of 4096)
}


@dataclass
class Served:
    url: str
    keys: dict[str, str]
    log: Path
    pid: int

    def client(self, tenant: str, timeout: float = 60.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout,
                            headers={"authorization": f"Bearer {self.keys[tenant]}"})


@contextmanager
def serving(**env_extra: str) -> Iterator[Served]:
    tmp = Path(tempfile.mkdtemp(prefix="sg-attack-"))
    keys = write_tenants(tmp / "tenants.toml", TENANTS)
    log = tmp / "server.log"
    env = {"SCALING_GRADER_TENANTS_FILE": str(tmp / "tenants.toml"), **env_extra}
    with logged_server(env, log) as (url, process):
        yield Served(url, keys, log, process.pid)


def numeric_item(i: int, request_id: str | None = None) -> dict:
    item: dict = {"reference": {"values": [f"{i + 1} s"]}, "completion": f"Final answer: {i + 1} s"}
    if request_id is not None:
        item["request_id"] = request_id
    return item


# ---- hole 1: an OpenRLHF query whose cutting is quadratic pins the shared grading threads ---------

# ChatML's assistant opener is matched up to the end of its line (``[^\n]*\n``): a query of many
# openers and no newline makes every match attempt scan to the end of the query and fail, so the
# cut is quadratic in the query's length. The query is cut before the completion-length cap
# applies, and the body may be megabytes; the cut runs on one of the two grading threads every
# tenant shares.
UNCLOSED_OPENERS = "<|im_start|>assistant" * 60_000  # 1.26 MB, well under the 8 MiB body limit


def test_unclosed_chatml_openers_in_a_reward_query_do_not_pin_grading_for_other_tenants() -> None:
    with serving() as served:
        with served.client("mallory", timeout=30) as mallory, served.client("bob", timeout=30) as bob, \
                concurrent.futures.ThreadPoolExecutor(2) as pool:
            attacks = [pool.submit(mallory.post, "/get_reward", json={"query": [UNCLOSED_OPENERS]})
                       for _ in range(2)]  # one per grading thread
            time.sleep(2.0)  # both bodies are in and being cut
            # Bob's ordinary batch: more than eight results, so written on a grading thread.
            started = time.monotonic()
            try:
                r = bob.post("/v1/grade/batch", json={"items": [numeric_item(i) for i in range(16)]},
                             timeout=15)
                bob_seconds = time.monotonic() - started
                bob_status = r.status_code
            except httpx.TimeoutException:
                bob_seconds, bob_status = time.monotonic() - started, None
            attack_outcomes: list[object] = []
            for attack in attacks:
                try:
                    attack_outcomes.append(attack.result().status_code)
                except httpx.TimeoutException:
                    attack_outcomes.append("timed out after 30 s")
        assert bob_status == 200 and bob_seconds < 10, (
            f"another tenant's 16-item numeric batch took {bob_seconds:.1f} s (status {bob_status}) "
            f"while two 1.26 MB reward queries were being cut; those answered {attack_outcomes}")


def test_one_reward_query_of_unclosed_chatml_openers_is_answered_promptly() -> None:
    with serving() as served, served.client("mallory", timeout=30) as mallory:
        started = time.monotonic()
        try:
            r = mallory.post("/get_reward", json={"query": [UNCLOSED_OPENERS]})
            outcome: object = r.status_code
        except httpx.TimeoutException:
            outcome = "no answer"
        seconds = time.monotonic() - started
        assert seconds < 10, f"one 1.26 MB reward request took {seconds:.1f} s ({outcome})"


# ---- hole 2: one tenant's fresh idempotency keys push another tenant's results out ---------------

# Embedded mode keeps at most ``max_kept_jobs`` records (default 10,000) for the whole process,
# the oldest finished first, whoever they belong to. A tenant sending cheap numeric items with
# fresh request ids (one grade each) fills the store, and another tenant's finished job is gone:
# its poll is a 404 within the TTL and a retry with the same request_id runs the work again.

def test_another_tenants_fresh_request_ids_do_not_evict_my_finished_job() -> None:
    with serving() as served, served.client("bob") as bob, served.client("mallory") as mallory:
        mine = bob.post("/v1/grade", json=numeric_item(0, request_id="bob-step-1"))
        assert mine.status_code == 200, mine.text
        job_id = mine.json()["job_id"]
        assert job_id and bob.get(f"/v1/jobs/{job_id}").status_code == 200
        deadline = time.monotonic() + 240
        for batch in range(20):  # 20 x 512 = 10,240 fresh keys: the default store size, plus some
            assert time.monotonic() < deadline, "flood did not finish in time"
            r = mallory.post("/v1/grade/batch", timeout=120, json={"items": [
                numeric_item(i, request_id=f"m-{batch}-{i}") for i in range(512)]})
            assert r.status_code == 200, r.text[:300]
        after = bob.get(f"/v1/jobs/{job_id}")
        assert after.status_code == 200, (
            f"bob's finished job, polled seconds after it ran, answers {after.status_code} {after.text[:200]} "
            "after another tenant sent 10,240 numeric grades with fresh request ids")


# ---- hole 3: a body that stops half-way is held (and its memory with it) for ever ----------------

# A request costs one token when its headers arrive; its body is then buffered as it comes, with
# no deadline. A tenant that sends most of a body under the size limit and then stops holds that
# memory and the connection until it chooses to close: at the default 100 requests a second that
# is gigabytes within a minute.

def _rss_mib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def test_a_stalled_upload_is_cut_off_and_its_memory_released() -> None:
    import socket

    with serving() as served:
        port = int(served.url.rsplit(":", 1)[1])
        before = _rss_mib(served.pid)
        head = (f"POST /v1/grade HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                f"Authorization: Bearer {served.keys['mallory']}\r\nContent-Type: application/json\r\n"
                "Content-Length: 8000000\r\n\r\n").encode()
        chunk = b" " * 65536
        stalled: list[socket.socket] = []
        try:
            for _ in range(24):  # 24 uploads of 7.9 MB each, every one 100 kB short of its length
                conn = socket.create_connection(("127.0.0.1", port), timeout=30)
                conn.sendall(head)
                for _ in range(7_900_000 // len(chunk)):
                    conn.sendall(chunk)
                stalled.append(conn)
            time.sleep(3.0)
            held = _rss_mib(served.pid) - before
            time.sleep(42.0)  # far past any reasonable body deadline
            still_open = 0
            for conn in stalled:
                conn.setblocking(False)
                try:
                    answered = conn.recv(64)
                except BlockingIOError:
                    still_open += 1
                    continue
                still_open += 0 if (answered == b"" or answered.startswith(b"HTTP/1.1 4")) else 1
            later = _rss_mib(served.pid) - before
        finally:
            for conn in stalled:
                conn.close()
        assert still_open == 0, (
            f"{still_open} of 24 uploads stalled 100 kB short are still open 45 s later; the server held "
            f"{held} MiB more right after they stalled and {later} MiB more 45 s on")


# ---- hole 4: a label of many keys stalls the event loop for seconds --------------------------------

# A label is any JSON value. A body of a few megabytes whose label is an object of 440,000 keys
# is parsed and read (on a "grading thread", but in calls that hold the interpreter lock from end
# to end, so the loop gets no turn) for seconds, and /healthz with every other request waits.

MANY_KEYS = {f"k{j}": j for j in range(440_000)}  # about 8.1 MB of JSON, just under the body limit


def _worst_healthz_while(served: Served, tenant: str, path: str, body: dict) -> tuple[float, float, object]:
    """The slowest /healthz answer while one request ran, that request's own time and its status."""
    import json
    import threading

    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        deadline = time.monotonic() + 120
        while not stop.is_set() and time.monotonic() < deadline:
            started = time.monotonic()
            httpx.get(served.url + "/healthz", timeout=60)
            latencies.append(time.monotonic() - started)
            time.sleep(0.02)

    content = json.dumps(body).encode()
    with served.client(tenant, timeout=120) as client:
        prober = threading.Thread(target=probe)
        prober.start()
        time.sleep(0.3)
        started = time.monotonic()
        try:
            status: object = client.post(path, content=content, headers={"content-type": "application/json"}
                                         ).status_code
        finally:
            took = time.monotonic() - started
            stop.set()
            prober.join()
    return max(latencies), took, status


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/grade/labelled", {"items": [{"label": MANY_KEYS, "completion": "Final answer: 1 s"}]}),
    ("/get_reward", {"query": ["Final answer: 1 s"], "labels": [MANY_KEYS]}),
], ids=["labelled", "get_reward"])
def test_a_label_of_many_keys_does_not_stall_healthz(path: str, body: dict) -> None:
    with serving() as served:
        worst, took, status = _worst_healthz_while(served, "mallory", path, body)
    # A stalled loop answers /healthz only once the request is through, so its wait is most of the
    # request's time. A loaded machine stretches both, and a /healthz answer over a second is then
    # no stall unless it took at least half of the request's time.
    assert worst < max(1.0, took / 2), (
        f"/healthz took {worst:.2f} s while one {path} request with a 440,000-key label ran {took:.2f} s ({status})")



# ---- hole 5: one tenant's legitimate batches take the grading threads from every other tenant ------

# Grading CPU runs on two threads shared by the whole process, first come first served. Four
# batches of 100 rows answers (1,000 rows each, in reverse order) are 400 grades, a tenth of the
# default burst; while they run, another tenant's batch of 16 numeric answers waits for a thread.

def test_one_tenants_rows_batches_do_not_starve_another_tenants_small_batch() -> None:
    """Told by order, not by time (a loaded machine stretches both): the small batch is answered
    while the other tenant's batches, sent before it, are still being graded."""
    import json

    rows = [{"name": "r", "x": i + 0.5} for i in range(1000)]
    item = {"reference": {"rows": rows}, "completion": json.dumps({"rows": rows[::-1]})}
    content = json.dumps({"items": [item] * 100}).encode()
    eve_done: list[float] = []

    def eve_batch(client: httpx.Client) -> int:
        status = client.post("/v1/grade/batch", content=content,
                             headers={"content-type": "application/json"}).status_code
        eve_done.append(time.monotonic())
        return status

    with serving() as served, served.client("eve", timeout=600) as eve, served.client("bob", timeout=600) as bob, \
            concurrent.futures.ThreadPoolExecutor(4) as pool:
        batches = [pool.submit(eve_batch, eve) for _ in range(4)]
        time.sleep(2.0)
        assert not all(b.done() for b in batches), "the other tenant's batches ended before the test began"
        r = bob.post("/v1/grade/batch", json={"items": [numeric_item(i) for i in range(16)]})
        bob_done = time.monotonic()
        eve_statuses = [b.result() for b in batches]
    assert r.status_code == 200 and eve_statuses == [200] * 4
    assert bob_done < max(eve_done), ("a 16-item numeric batch waited until another tenant's four 100-item rows "
                                      "batches were all graded")


# ---- hole 6: embedded idempotency records are bounded in number, not in bytes ----------------------

# The store keeps up to ``max_kept_jobs`` (10,000) records, but a record keeps its whole result,
# and a rows answer graded wrong carries its evidence row by row: hundreds of kilobytes as JSON and
# more as Python objects. A tenant sending such items with fresh request ids (within its default
# limits) makes the process hold that for every record, up to the count cap.

def test_idempotency_records_of_large_rows_results_stay_bounded_in_bytes() -> None:
    import json

    rows = [{"name": "r" * 60, "x": i + 0.5} for i in range(1000)]
    wrong = json.dumps({"rows": [{"name": "q" * 60, "x": i + 0.7} for i in range(1000)]})
    kept_cap = 10_000  # SCALING_GRADER_QUEUE__MAX_KEPT_JOBS, default
    with serving() as served, served.client("eve", timeout=120) as eve:
        # A warm-up batch of the same items without request ids: it keeps no record, and sets the
        # process's working set for such a batch (the body, 40 results of 330 KB being written),
        # which the allocator keeps afterwards. Measured from there, the growth is the records'.
        warm = eve.post("/v1/grade/batch", json={"items": [
            {"reference": {"rows": rows}, "completion": wrong} for _ in range(40)]})
        assert warm.status_code == 200, warm.text[:200]
        before = _rss_mib(served.pid)
        sent = 0
        for batch in range(8):  # 8 x 40 = 320 records, 320 grades
            r = eve.post("/v1/grade/batch", json={"items": [
                {"reference": {"rows": rows}, "completion": wrong, "request_id": f"e-{batch}-{i}"}
                for i in range(40)]})
            assert r.status_code == 200, r.text[:200]
            sent += 40
        grown = _rss_mib(served.pid) - before
    at_cap = grown * kept_cap / sent
    assert at_cap < 2048, (f"{sent} idempotency records grew the server by {grown} MiB: the {kept_cap}-record cap "
                           f"allows about {at_cap / 1024:.1f} GiB, from one tenant within its default limits")

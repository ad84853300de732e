"""Round 3 of attacks on the HTTP surface, against a real server process with tenants.

- A request's head (request line and headers) is bounded below the application: an endless URL or
  header is a 431 and its memory is not kept; a connection that sends nothing, or trickles its
  headers (slowloris), is closed with a 408 after ``limits.header_seconds``, so idle connections
  cannot pile up until the process runs out of file descriptors. What clients legitimately do on
  one connection (pipelining, ``Expect: 100-continue``, a slow body after a prompt head, large
  cookies) still works.
- No tenant holds the event loop or the shared thread pool: 200 listings of 1024 tasks at once
  (one token each) kept /healthz waiting about 50 s, and a 404 for a path of 60 KB cost a tenth of
  a second of the loop (difflib over the whole path, for the nearest-route hint).
- A refused request spends nothing: a batch refused for the tenant's in-flight cap spends no
  held-out grade budget (before, two such refusals used up a budget of 2 for items never graded),
  and a retry of an idempotent request, answered by its earlier job, spends none either (before,
  each retry did, until the tenant's own result was refused as over budget).
- Attacks that held, kept as regression tests: path tricks never reach a route by another name,
  an API key is only read from the Authorization header (not a query string, not a reward URL),
  ``HEAD`` and odd methods on grading routes are 405, a websocket upgrade reaches nothing."""

from __future__ import annotations

import base64
import json
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.tenants import new_key
from tests.fake_openai import FakeOpenAI
from tests.support.judge_asks import ASKS_PER_CORRECT
from tests.support.server import logged_server

pytestmark = pytest.mark.slow  # a real HTTP server for the module: left out of `make test-fast`

SLOW_JUDGE_SECONDS = 3.0
HELD_OUT_BUDGET = 2
HEADER_SECONDS = 2.0
MAX_HEADER_BYTES = 64 * 1024
GRADE = json.dumps({"task_id": "synthetic/3/17", "completion": "Final answer: 1 s"}).encode()


@dataclass
class Served:
    url: str
    port: int
    pid: int
    log: Path
    keys: dict[str, str]
    judge: FakeOpenAI

    def client(self, tenant: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, headers={"authorization": f"Bearer {self.keys[tenant]}"})

    def rss_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS")

    def healthz_seconds(self) -> float:
        start = time.monotonic()
        assert httpx.get(self.url + "/healthz", timeout=30).status_code == 200
        return time.monotonic() - start


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    judge = FakeOpenAI(slow_seconds=SLOW_JUDGE_SECONDS).start()
    tmp = Path(tempfile.mkdtemp(prefix="sg-attack3-"))
    keys, lines = {}, []
    capped = (f'max_in_flight = 2\nheld_out_grades_per_item = {HELD_OUT_BUDGET}\n'
              f'judge_base_urls = ["{judge.base_url}"]\n')
    retrier = f'held_out_grades_per_item = {HELD_OUT_BUDGET}\njudge_base_urls = ["{judge.base_url}"]\n'
    tenants = {"ops": "operator = true\n", "alpha": "", "beta": "", "capped": capped, "retrier": retrier}
    for name, extra in tenants.items():
        keys[name], digest = new_key()
        reward = ""
        if name == "alpha":
            keys["alpha-reward"], reward_digest = new_key()
            reward = f'reward_key_sha256 = ["{reward_digest}"]\n'
        lines.append(f'[[tenant]]\nname = "{name}"\nkey_sha256 = "{digest}"\n{extra}{reward}')
    (tmp / "tenants.toml").write_text("\n".join(lines))
    env = {"SCALING_GRADER_TENANTS_FILE": str(tmp / "tenants.toml"),
           "SCALING_GRADER_JUDGE__ALLOWED_BASE_URLS": json.dumps([judge.base_url]),
           "SCALING_GRADER_JUDGE__MAX_RETRIES": "0",
           "SCALING_GRADER_LIMITS__HEADER_SECONDS": str(HEADER_SECONDS),
           "SCALING_GRADER_LIMITS__MAX_HEADER_BYTES": str(MAX_HEADER_BYTES)}
    log = tmp / "server.log"
    try:
        with logged_server(env, log) as (url, process):
            yield Served(url, int(url.rsplit(":", 1)[1]), process.pid, log, keys, judge)
    finally:
        judge.stop()
    assert "Traceback" not in log.read_text(errors="replace")


def connect(served: Served) -> socket.socket:
    return socket.create_connection(("127.0.0.1", served.port), timeout=30)


def read_until_closed(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    start = time.monotonic()
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return out, time.monotonic() - start


def request(served: Served, method: str, path: str, body: bytes = b"", tenant: str | None = "alpha",
            extra: bytes = b"") -> bytes:
    auth = f"Authorization: Bearer {served.keys[tenant]}\r\n".encode() if tenant else b""
    return (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode() + auth + extra +
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


# ---- a request's head is bounded in size ------------------------------------------------------

@pytest.mark.parametrize("opening", [b"GET /healthz?", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: "],
                         ids=["endless-url", "endless-header"])
def test_an_endless_request_head_is_refused_and_not_buffered(served: Served, opening: bytes) -> None:
    """Anonymous and before any route: uvicorn's parser would append to the URL or header for as
    long as the client sends (the copying quadratic, on the event loop)."""
    before = served.rss_kib()
    sent, chunk = 0, b"a" * 65536
    with connect(served) as sock:
        sock.sendall(opening)
        try:
            while sent < 64 * 1024 * 1024:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer, _ = read_until_closed(sock, 10)
    assert sent < 64 * 1024 * 1024, "the server read 64 MiB of a request head"
    if answer:  # a reset can overtake the answer when the client is still sending
        assert status_of(answer) == 431 and b"headers_too_large" in answer
    assert served.rss_kib() - before < 32 * 1024
    assert served.healthz_seconds() < 2


def test_large_but_legitimate_headers_are_served(served: Served) -> None:
    cookie = "c=" + "x" * (MAX_HEADER_BYTES // 2)
    with httpx.Client(base_url=served.url, timeout=30) as client:
        r = client.post("/v1/grade", content=GRADE, headers={"authorization": f"Bearer {served.keys['alpha']}",
                                                             "content-type": "application/json", "cookie": cookie})
    assert r.status_code == 200, r.text


# ---- and in time --------------------------------------------------------------------------------

@pytest.mark.parametrize("trickle", [False, True], ids=["silent", "slowloris"])
def test_a_connection_that_never_completes_its_head_is_closed_with_408(served: Served, trickle: bool) -> None:
    with connect(served) as sock:
        start = time.monotonic()
        if trickle:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        answer = b""
        sock.settimeout(0.5)
        while time.monotonic() - start < HEADER_SECONDS + 10:
            if trickle:
                try:
                    sock.sendall(b"X-A: 1\r\n")  # a header line every half second, never the end
                except (BrokenPipeError, ConnectionResetError):
                    break
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        elapsed = time.monotonic() - start
    assert elapsed < HEADER_SECONDS + 5, "the connection was held past the head deadline"
    assert answer == b"" or status_of(answer) == 408


def test_many_idle_connections_are_shed_and_the_service_keeps_answering(served: Served) -> None:
    sockets = [connect(served) for _ in range(300)]
    try:
        time.sleep(HEADER_SECONDS + 3)
        closed = 0
        for sock in sockets:
            sock.settimeout(2)
            try:
                data = sock.recv(65536)
                while data:
                    data = sock.recv(65536)
                closed += 1
            except ConnectionResetError:
                closed += 1
            except TimeoutError:
                pass
        assert closed == len(sockets)
        assert served.healthz_seconds() < 2
    finally:
        for sock in sockets:
            sock.close()


def test_a_body_slower_than_the_head_deadline_is_not_cut_by_it(served: Served) -> None:
    """The head deadline ends with the head: a body is the body limit's (grace of 15 s by default)."""
    with connect(served) as sock:
        whole = request(served, "POST", "/v1/grade", GRADE)
        head, body = whole[: -len(GRADE)], whole[-len(GRADE):]
        sock.sendall(head)
        time.sleep(HEADER_SECONDS + 1)
        sock.sendall(body)
        sock.settimeout(30)
        answer = sock.recv(65536)
    assert status_of(answer) == 200, answer[:300]


def test_pipelined_requests_and_expect_100_continue_still_work(served: Served) -> None:
    with connect(served) as sock:
        sock.sendall(request(served, "POST", "/v1/grade", GRADE) * 3 + b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Connection: close\r\n\r\n")
        answer, _ = read_until_closed(sock, 30)
    assert answer.count(b"HTTP/1.1 200 OK") == 4, answer[:500]
    with connect(served) as sock:
        whole = request(served, "POST", "/v1/grade", GRADE, extra=b"Expect: 100-continue\r\n")
        sock.sendall(whole[: -len(GRADE)])
        sock.settimeout(10)
        assert sock.recv(65536).startswith(b"HTTP/1.1 100")
        time.sleep(HEADER_SECONDS + 1)  # a client that takes its time after the 100 is in its body
        sock.sendall(GRADE)
        assert status_of(sock.recv(65536)) == 200


def test_a_websocket_upgrade_reaches_nothing(served: Served) -> None:
    """Websocket scopes pass the tenant middleware (it guards http): no route may take one."""
    for path in ("/docs/assets/swagger-ui.css", "/v1/grade", "/", "/get_reward/x", "/healthz"):
        with connect(served) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
            answer, _ = read_until_closed(sock, 10)
        assert status_of(answer) == 403, (path, answer[:200])


# ---- a 404's hint costs what a short path's does ------------------------------------------------

def test_a_long_unknown_path_costs_no_more_than_a_short_one(served: Served) -> None:
    """The 404 names the nearest route (difflib, on the event loop): a path of 60 KB of route
    names took about a tenth of a second of the loop each, so a tenant's stream of them held
    every request back. Twenty at once should take about what twenty short ones take."""
    with served.client("ops") as client:
        routes = "".join(client.get("/openapi.json").json()["paths"])
    long_path = "/x" + routes * ((MAX_HEADER_BYTES - 4096) // len(routes))  # under the head limit

    def twenty_at_once(path: str) -> float:
        sockets = [connect(served) for _ in range(20)]
        start = time.monotonic()
        for sock in sockets:
            sock.sendall(request(served, "GET", path, extra=b"Connection: close\r\n"))
        for sock in sockets:
            answer, _ = read_until_closed(sock, 60)
            sock.close()
            assert status_of(answer) == 404 and b"nearest" in answer, answer[:200]
        return time.monotonic() - start

    short = min(twenty_at_once("/v1/grades") for _ in range(2))
    long = min(twenty_at_once(long_path) for _ in range(2))
    assert long < short + 0.5, (long, short)


# ---- attacks that held ----------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["//v1//grade", "/v1//grade", "/v1/./grade", "/v1/../v1/grade", "/V1/grade",
                                  "/v1/grade;x", "/v1/grade%00", "/v1/grade%2e", "//grade", "/v1/v1/grade"])
def test_path_tricks_reach_no_route_and_echo_nothing(served: Served, path: str) -> None:
    with connect(served) as sock:
        sock.sendall(request(served, "POST", path, GRADE, extra=b"Connection: close\r\n"))
        answer, _ = read_until_closed(sock, 30)
    assert status_of(answer) == 404, answer[:300]
    assert b"grade;" not in answer and b"%00" not in answer and b"outcome" not in answer


@pytest.mark.parametrize("method", ["HEAD", "GET", "PUT", "PATCH", "DELETE", "OPTIONS", "PROPFIND", "TRACE"])
@pytest.mark.parametrize("path", ["/v1/grade", "/v1/grade/batch", "/v1/rewards", "/get_reward", "/grade"])
def test_odd_methods_on_grading_routes_are_405_and_grade_nothing(served: Served, method: str, path: str) -> None:
    with httpx.Client(base_url=served.url, timeout=30) as client:
        r = client.request(method, path, content=GRADE, headers={"authorization": f"Bearer {served.keys['alpha']}",
                                                                 "content-type": "application/json"})
    assert r.status_code == 405, r.text
    assert b"outcome" not in r.content and b"rewards" not in r.content


@pytest.mark.parametrize("where", ["query", "basic-user", "reward-key-as-bearer", "tab", "cookie"])
def test_a_key_anywhere_but_the_authorization_header_opens_nothing(served: Served, where: str) -> None:
    key = served.keys["alpha"]
    params: dict[str, str] = {}
    headers = {"content-type": "application/json"}
    if where == "query":
        params = {"api_key": key, "key": key, "access_token": key, "token": key}
    elif where == "basic-user":  # the key is the password of Basic credentials, never the user name
        headers["authorization"] = "Basic " + base64.b64encode(f"{key}:".encode()).decode()
    elif where == "reward-key-as-bearer":  # good only as the last segment of /get_reward/<key>
        headers["authorization"] = f"Bearer {served.keys['alpha-reward']}"
    elif where == "tab":
        headers["authorization"] = f"Bearer\t{key}x"
    else:
        headers["cookie"] = f"authorization=Bearer {key}; key={key}"
    with httpx.Client(base_url=served.url, timeout=30) as client:
        for method, path in (("POST", "/v1/grade"), ("GET", "/v1/status"), ("GET", "/v1/tasks")):
            r = client.request(method, path, params=params, headers=headers, content=GRADE)
            assert r.status_code == 401, (where, path, r.text)
            assert key not in r.text


FRAMING = {  # name: (what follows the request line and Host, status)
    "chunked": (b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(GRADE), GRADE), 200),
    "chunk extension": (b"Transfer-Encoding: chunked\r\n\r\n%x;a=b\r\n%s\r\n0\r\n\r\n" % (len(GRADE), GRADE), 200),
    "chunked and content-length": (
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n5\r\nabcde\r\n0\r\n\r\n", 400),
    "chunk size past 64 bits": (b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nabc", 400),
    "gzip, chunked": (b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 400),
    "two content-lengths": (b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef", 400),
    "negative content-length": (b"Content-Length: -1\r\n\r\n", 400),
    "signed content-length": (b"Content-Length: +%d\r\n\r\n%s" % (len(GRADE), GRADE), 400),
    "folded header": (b"X-A: 1\r\n  folded\r\nContent-Length: 0\r\n\r\n", 400),
    "space before colon": (b"Content-Length : 3\r\n\r\nabc", 400),
}


@pytest.mark.parametrize("name", list(FRAMING))
def test_odd_framing_is_graded_as_sent_or_refused_with_a_4xx(served: Served, name: str) -> None:
    rest, status = FRAMING[name]
    head = (f"POST /v1/grade HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {served.keys['alpha']}\r\n"
            "Content-Type: application/json\r\nConnection: close\r\n").encode()
    with connect(served) as sock:
        sock.sendall(head + rest)
        answer, took = read_until_closed(sock, 20)
    assert status_of(answer) == status, answer[:300]
    assert took < 10
    if status == 200:
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["task_id"] == "synthetic/3/17"


def test_the_same_request_id_in_two_tenants_is_two_jobs_and_leaks_nothing(served: Served) -> None:
    rid = "shared-" + os.urandom(4).hex()
    with served.client("alpha") as alpha, served.client("beta") as beta:
        first = alpha.post("/v1/grade", json={"task_id": "synthetic/3/17", "completion": "Final answer: 1 s",
                                              "request_id": rid})
        # another body under the same id: a 409 here would tell beta that alpha used the id
        second = beta.post("/v1/grade", json={"task_id": "synthetic/3/18", "completion": "Final answer: 2 s",
                                              "request_id": rid})
        assert first.status_code == 200 and second.status_code == 200, (first.text, second.text)
        assert first.json()["job_id"] != second.json()["job_id"]
        assert beta.get(f"/v1/jobs/{first.json()['job_id']}").status_code == 404
        assert alpha.get(f"/v1/jobs/{first.json()['job_id']}").json()["status"] == "finished"


def test_repeated_query_parameters_stay_bounded(served: Served) -> None:
    with served.client("alpha") as client:
        assert client.get("/v1/tasks?n=1&n=5000").status_code == 422
        assert client.get("/v1/tasks?offset=1&offset=-1").status_code == 422
        start = time.monotonic()
        assert client.get("/v1/jobs/abc?wait=0&wait=1e300").status_code == 404  # capped at the longest wait
        assert client.get("/v1/jobs/abc?wait=nan").status_code == 422
        assert time.monotonic() - start < 120


# ---- a refused request spends nothing ------------------------------------------------------------

def held_out_judge_ids(served: Served, n: int) -> list[str]:
    with served.client("ops") as client:
        r = client.get("/v1/tasks", params={"split": "exam", "n": 1000})
        assert r.status_code == 200, r.text
    found = [t["id"] for t in r.json()["tasks"] if t["grading"] == "judge"]
    assert len(found) >= n
    return found[-n:]


def wait_until_idle(client: httpx.Client, jobs: list[str]) -> None:
    for job in jobs:
        assert client.get(f"/v1/jobs/{job}", params={"wait": 60}).json()["status"] == "finished"


def test_a_batch_refused_for_its_in_flight_slots_spends_no_held_out_budget(served: Served) -> None:
    ids = held_out_judge_ids(served, 3)
    slow = {"model": "judge-slow", "base_url": served.judge.base_url}
    yes = {"model": "judge-yes", "base_url": served.judge.base_url}
    items = [{"task_id": i, "completion": "Final answer: yes", "judge": slow, "wait": 0} for i in ids]
    with served.client("capped") as client:
        for _ in range(HELD_OUT_BUDGET + 1):  # three items for a cap of two: refused whole, every time
            refused = client.post("/v1/grade/batch", json={"items": items})
            assert refused.status_code == 429 and refused.json()["error"] == "too_many_in_flight", refused.text
            assert refused.headers["retry-after"].isdigit()
        for task_id in ids:  # never graded: each still has its whole budget
            for _ in range(HELD_OUT_BUDGET):
                r = client.post("/v1/grade", json={"task_id": task_id, "completion": "Final answer: yes", "judge": yes})
                assert r.status_code == 200, r.text
        over = client.post("/v1/grade", json={"task_id": ids[0], "completion": "Final answer: yes", "judge": yes})
        assert over.status_code == 429 and over.json()["error"] == "grade_budget_exhausted", over.text


def test_a_single_grade_refused_for_its_in_flight_slot_spends_no_held_out_budget(served: Served) -> None:
    ids = held_out_judge_ids(served, 6)[:3]
    slow = {"model": "judge-slow", "base_url": served.judge.base_url}
    yes = {"model": "judge-yes", "base_url": served.judge.base_url}
    with served.client("capped") as client:
        busy = [client.post("/v1/grade", json={"task_id": i, "completion": "Final answer: yes", "judge": slow,
                                                "wait": 0}) for i in ids[:2]]
        assert [r.status_code for r in busy] == [202, 202], [r.text for r in busy]
        for _ in range(HELD_OUT_BUDGET + 1):
            refused = client.post("/v1/grade", json={"task_id": ids[2], "completion": "Final answer: yes",
                                                      "judge": slow, "wait": 0})
            assert refused.status_code == 429 and refused.json()["error"] == "too_many_in_flight", refused.text
        wait_until_idle(client, [r.json()["job_id"] for r in busy])
        for _ in range(HELD_OUT_BUDGET):
            r = client.post("/v1/grade", json={"task_id": ids[2], "completion": "Final answer: yes", "judge": yes})
            assert r.status_code == 200, r.text


@pytest.mark.parametrize("route", ["/v1/grade", "/v1/grade/batch"])
def test_retries_of_one_request_id_spend_the_held_out_budget_once(served: Served, route: str) -> None:
    task_id = held_out_judge_ids(served, 8)[0 if route == "/v1/grade" else 1]
    yes = {"model": "judge-yes", "base_url": served.judge.base_url}
    item = {"task_id": task_id, "completion": "Final answer: yes", "judge": yes, "request_id": f"retry-{route[-5:]}"}
    body = item if route == "/v1/grade" else {"items": [item]}
    asked = len(served.judge.requests)
    with served.client("retrier") as client:
        answers = [client.post(route, json=body) for _ in range(HELD_OUT_BUDGET + 2)]
        assert [r.status_code for r in answers] == [200] * len(answers), [r.text for r in answers]
        results = [r.json() if route == "/v1/grade" else r.json()["results"][0] for r in answers]
        assert len({r["job_id"] for r in results}) == 1
        # the budget left is the budget less the one grade made
        fresh = {**item, "request_id": None, "completion": "Final answer: no"}
        for _ in range(HELD_OUT_BUDGET - 1):
            assert client.post("/v1/grade", json=fresh).status_code == 200
        over = client.post("/v1/grade", json=fresh)
        assert over.status_code == 429 and over.json()["error"] == "grade_budget_exhausted", over.text
    # the retries graded nothing (judge-yes finds every answer correct: each grade asks it twice)
    assert len(served.judge.requests) - asked == HELD_OUT_BUDGET * ASKS_PER_CORRECT


# ---- one tenant's listings hold nobody back (kept last: its backlog outlives the test) ----------

def test_a_backlog_of_large_listings_does_not_hold_back_healthz_or_another_tenant(served: Served) -> None:
    """A thousand synthetic tasks take a tenth of a second or more to make and write, and a listing
    costs one token whatever its size. Sent 200 at once (well within the default burst), they used
    to fill the shared thread pool, where /healthz (a plain def route) waited about 50 s behind
    them; listings now run on the grading threads, in turn per tenant."""
    warm = httpx.get(served.url + "/v1/tasks", params={"n": 1024, "seed": 999},
                     headers={"authorization": f"Bearer {served.keys['beta']}"}, timeout=120)
    assert warm.status_code == 200 and len(warm.json()["tasks"]) == 1024
    sockets = []
    try:
        for i in range(200):
            sock = connect(served)
            sock.sendall(f"GET /v1/tasks?n=1024&seed={i} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         f"Authorization: Bearer {served.keys['beta']}\r\n\r\n".encode())
            sockets.append(sock)
        time.sleep(1)
        assert served.healthz_seconds() < 10
        start = time.monotonic()
        with served.client("alpha") as alpha:
            small = alpha.get("/v1/tasks", params={"n": 4, "seed": 5})
        assert small.status_code == 200 and small.json()["n"] == 4
        assert time.monotonic() - start < 10
    finally:
        for sock in sockets:
            sock.close()

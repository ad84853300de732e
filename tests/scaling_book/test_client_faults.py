"""The clients under the faults RL runs meet: forked children (verl's prime manager and
multiprocessing pools fork a process that already holds a client), replies garbled in transit,
errors httpx raises that are not worth a retry, and the same arguments (key, time-out, deadline,
headers) reaching the service from every helper."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from scaling_book.client import ClientOptions, GraderClient, GraderError, RetryPolicy
from scaling_book.grading import sync_client
from scaling_book.openrlhf import options_from_env
from tests.support.oracle import right, synthetic_tasks, wrong
from tests.support.server import ROOT as ROOT_DIR

FAST = RetryPolicy(backoff=0.01, max_backoff=0.05, deadline=30.0)


@contextmanager
def garbling_proxy(upstream: str, garble: int) -> Iterator[tuple[str, list[dict[str, str]]]]:
    """Forwards to the service, but cuts the body of its first ``garble`` replies in half (a 200
    whose JSON does not decode, as when two processes read one socket); records each request's
    headers."""
    seen: list[dict[str, str]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
            with lock:
                index = len(seen)
                seen.append({k.lower(): v for k, v in self.headers.items()})
            forwarded = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
            reply = httpx.request(self.command, upstream + self.path, content=body, headers=forwarded, timeout=60)
            payload = reply.content[: len(reply.content) // 2] if index < garble else reply.content
            self.send_response(reply.status_code)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _handle

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _items(n: int, seed: int) -> tuple[list[dict[str, str]], list[float]]:
    tasks = synthetic_tasks(n, seed=seed)
    items = [{"task_id": t.id, "completion": right(t.id) if i % 2 else wrong(t.id)} for i, t in enumerate(tasks)]
    return items, [1.0 if i % 2 else 0.0 for i in range(n)]


def test_a_garbled_reply_is_retried_not_raised_as_a_json_error(server_url: str) -> None:
    items, expected = _items(4, seed=71)
    with garbling_proxy(server_url, garble=2) as (url, seen), GraderClient(url, retry=FAST) as client:
        assert client.rewards(items) == expected
    assert len(seen) == 3  # two garbled replies, then the good one


def test_a_reply_that_stays_garbled_is_a_grader_error_after_the_deadline(server_url: str) -> None:
    items, _ = _items(1, seed=72)
    with garbling_proxy(server_url, garble=10**6) as (url, seen), \
            GraderClient(url, retry=RetryPolicy(backoff=0.01, max_backoff=0.02, deadline=5.0)) as client, \
            pytest.raises(GraderError) as err:
        client.rewards(items)
    assert err.value.status is None and err.value.error == "CorruptReply"
    assert len(seen) >= 2


def test_an_httpx_error_not_worth_a_retry_is_a_grader_error_at_once() -> None:
    # a scheme httpx cannot speak: UnsupportedProtocol, raised before anything is sent
    with GraderClient("ftp://127.0.0.1:9", api_key="sg_secret", retry=FAST) as client, \
            pytest.raises(GraderError) as err:
        client.rewards([{"task_id": "synthetic/1/1", "completion": "x"}])
    assert err.value.error == "UnsupportedProtocol"
    assert "sg_secret" not in str(err.value) and "127.0.0.1" not in str(err.value)


# Run in a fresh, single-threaded interpreter: a test process (pytest-xdist's worker) has threads
# of its own, and a fork taken while one of them holds a lock deadlocks the child, whatever the
# client does. A trainer forks its rollout workers from its own main thread, as this script does.
FORK_SCRIPT = textwrap.dedent("""
    import json, multiprocessing, sys
    from scaling_book.grading import sync_client

    url, items, expected = json.loads(sys.stdin.read())
    client = sync_client(url)
    PARENT = {}

    def child(_):
        rewards = client.rewards(items)  # the parent's cached client, copied by fork
        return rewards, client._session() is not PARENT["http"] and sync_client(url) is not client

    if __name__ == "__main__":
        assert client.rewards(items) == expected  # the parent now holds a kept-alive connection
        PARENT["http"] = client._session()
        with multiprocessing.get_context("fork").Pool(4) as pool:
            # the parent keeps calling on its own connections while the children call too
            results = pool.map_async(child, range(32))
            parent_ok = all(client.rewards(items) == expected for _ in range(8))
            outcomes = results.get(timeout=240)
        print(json.dumps({"parent_ok": parent_ok, "children_right": all(r == expected for r, _ in outcomes),
                          "children_own": all(own for _, own in outcomes),
                          "parent_untouched": client._session() is PARENT["http"]}))
""")


@pytest.mark.slow
def test_forked_children_never_use_the_parents_connections(server_url: str) -> None:
    items, expected = _items(8, seed=73)
    done = subprocess.run([sys.executable, "-c", FORK_SCRIPT], input=json.dumps([server_url, items, expected]),
                          capture_output=True, text=True, timeout=280, cwd=str(ROOT_DIR))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # a new pool in each child and a new cached client; the parent's own is untouched
    assert report == {"parent_ok": True, "children_right": True, "children_own": True, "parent_untouched": True}


def test_per_tenant_clients_on_one_url_are_separate() -> None:
    url = "http://127.0.0.1:9"  # never contacted: making a client opens no connection
    a, b = ClientOptions.of(api_key="sg_a"), ClientOptions.of(api_key="sg_b")
    assert sync_client(url, a) is sync_client(url, ClientOptions.of(api_key="sg_a"))
    assert sync_client(url, a) is not sync_client(url, b)
    assert sync_client(url, a)._headers["authorization"] == "Bearer sg_a"
    assert sync_client(url, b)._headers["authorization"] == "Bearer sg_b"
    assert "sg_a" not in repr(a)


def test_client_options_refuse_nonsense() -> None:
    with pytest.raises(ValueError):
        ClientOptions.of(timeout=0)
    with pytest.raises(ValueError):
        ClientOptions.of(deadline=-1)


def test_the_openrlhf_file_reads_its_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALING_GRADER_API_KEY", "sg_env")
    monkeypatch.setenv("SCALING_GRADER_TIMEOUT", "7")
    monkeypatch.setenv("SCALING_GRADER_DEADLINE", "90")
    monkeypatch.setenv("SCALING_GRADER_HEADERS", json.dumps({"x-run": "r1"}))
    options = options_from_env()
    assert (options.api_key, options.timeout, options.deadline, dict(options.headers)) == ("sg_env", 7.0, 90.0,
                                                                                          {"x-run": "r1"})
    client = options.sync_client("http://127.0.0.1:9")
    assert client.retry.deadline == 90.0 and client._http.timeout.read == 7.0
    monkeypatch.setenv("SCALING_GRADER_HEADERS", "[1]")
    with pytest.raises(ValueError, match="JSON object"):
        options_from_env()
    monkeypatch.setenv("SCALING_GRADER_HEADERS", "{}")
    monkeypatch.setenv("SCALING_GRADER_DEADLINE", "soon")
    with pytest.raises(ValueError, match="SCALING_GRADER_DEADLINE"):
        options_from_env()


def test_the_v1_names_are_plain_missing_attributes_without_verifiers() -> None:
    # A child where importing verifiers fails, as in a trainer's environment without it.
    probe = textwrap.dedent("""
        import sys
        sys.modules["verifiers"] = None  # import verifiers now raises ImportError
        import scaling_book
        out = [hasattr(scaling_book, "ScalingBookTaskset"), getattr(scaling_book, "ScalingBookHarness", None)]
        try:
            scaling_book.ScalingBookTaskset
        except AttributeError as e:
            out.append(str(e))
        out.append(callable(scaling_book.load_environment))
        print(json.dumps(out))
    """)
    done = subprocess.run([sys.executable, "-c", "import json\n" + probe], capture_output=True, text=True,
                          timeout=120, check=True)
    has, harness, message, loader = json.loads(done.stdout)
    assert has is False and harness is None and loader is True
    assert "verifiers 0.4" in message


def test_extra_headers_reach_the_service_from_every_helper(server_url: str) -> None:
    from scaling_book.trl import make_reward_func
    from scaling_book.verl import compute_score

    task = synthetic_tasks(1, seed=74)[0]
    with garbling_proxy(server_url, garble=0) as (url, seen):
        trl = make_reward_func(url, headers={"x-run": "trl"}, timeout=30, deadline=30)
        assert trl(prompts=["p"], completions=[right(task.id)], task_id=[task.id]) == [1.0]
        verl = compute_score("x", right(task.id), task.id, None, scaling_grader_url=url, headers={"x-run": "verl"})
        assert verl["score"] == 1.0
    assert [h.get("x-run") for h in seen] == ["trl", "verl"]


def test_a_client_in_a_child_made_by_os_fork_is_fresh(server_url: str) -> None:
    """The pid check alone (no at-fork hook): a client object held across a bare os.fork()."""
    items, expected = _items(2, seed=75)
    with GraderClient(server_url) as client:
        assert client.rewards(items) == expected
        parent_http = client._session()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report and leave without running the parent's cleanup
            try:
                ok = client.rewards(items) == expected and client._session() is not parent_http
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.waitpid(pid, 0)
        os.close(read)
        assert answer == b"1"
        assert client._session() is parent_http and client.rewards(items) == expected

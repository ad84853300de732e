"""Attacks on the trainer helpers and the reward routes they call, by an RL policy looking for
reward without work, an unlucky operator and a user following docs/trainers.md to the letter.
Each finding was a failing test here first; attacks that found nothing stay as cheap guards.

Expected rewards come from the bank's own gold answers (tests.support.oracle), never typed in."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from scaling_book.client import GraderClient, GraderError, RetryPolicy
from scaling_book.trl import make_async_reward_func, make_reward_func
from scaling_book.verl import compute_score, compute_score_async
from tests.scaling_book.tenant_server import TenantService, tenant_service
from tests.support.flaky import Script, flaky_proxy
from tests.support.oracle import right, synthetic_tasks, wrong
from tests.support.server import running_server

FAST = RetryPolicy(backoff=0.01, max_backoff=0.05, deadline=20.0)
CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture(autouse=True)
def no_grader_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCALING_GRADER_API_KEY", raising=False)
    monkeypatch.delenv("SCALING_GRADER_URL", raising=False)


def _mixed(n: int, seed: int) -> tuple[list[str], list[str], list[float]]:
    """(labels, completions, expected rewards): right and wrong answers interleaved."""
    tasks = synthetic_tasks(n, seed=seed)
    completions = [right(t.id) if i % 3 == 0 else wrong(t.id) for i, t in enumerate(tasks)]
    return [t.id for t in tasks], completions, [1.0 if i % 3 == 0 else 0.0 for i in range(n)]


# --- (b) an operator whose tenant's burst is smaller than a rollout batch ------------------------

@pytest.fixture(scope="module")
def small_burst(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TenantService]:
    """Tenant b may grade 4 items at once (rate 200/s, so waiting is never the point)."""
    with tenant_service(Path(tmp_path_factory.mktemp("tenants")), b_rate=200.0, b_burst=4) as running:
        yield running


@pytest.mark.slow
def test_a_trl_batch_larger_than_the_tenants_burst_gets_every_reward(small_burst: TenantService) -> None:
    """Found: the helpers send the whole generation batch as one request, the service refuses a
    request of more items than the tenant's burst (422 batch_exceeds_burst, "split it"), and no
    helper lets the user set a batch size: the training step failed. The client now splits."""
    labels, completions, expected = _mixed(11, seed=301)
    reward = make_reward_func(small_burst.url, api_key=small_burst.key_b, deadline=30)
    assert reward(prompts=[""] * 11, completions=completions, task_id=labels) == expected
    areward = make_async_reward_func(small_burst.url, api_key=small_burst.key_b, deadline=30)
    assert asyncio.run(areward(completions=completions, task_id=labels)) == expected


@pytest.mark.slow
def test_a_verl_batch_larger_than_the_tenants_burst_gets_every_reward(small_burst: TenantService) -> None:
    labels, completions, expected = _mixed(9, seed=302)
    kwargs = {"scaling_grader_url": small_burst.url, "api_key": small_burst.key_b, "deadline": 30}

    async def burst() -> list[dict]:
        return await asyncio.gather(*(compute_score_async(data_source="x", solution_str=c, ground_truth=label,
                                                          extra_info={}, **kwargs)
                                      for label, c in zip(labels, completions, strict=True)))

    assert [d["score"] for d in asyncio.run(burst())] == expected


@pytest.mark.slow
def test_the_client_splits_a_batch_over_the_services_item_cap(tmp_path: Path) -> None:
    """Found: an operator who lowers max_grades_per_batch below the client's batch size (256)
    got 422 on every rollout batch. The client now halves a refused chunk until it passes."""
    labels, completions, expected = _mixed(13, seed=303)
    items = [{"task_id": label, "completion": c} for label, c in zip(labels, completions, strict=True)]
    with running_server({"SCALING_GRADER_LIMITS__MAX_GRADES_PER_BATCH": "5"}) as url, \
            GraderClient(url, retry=FAST) as client:
        assert [r.reward for r in client.grade_labelled(labels, completions)] == expected
        assert client.rewards(items) == expected
        assert [r.reward for r in client.grade_batch(items)] == expected


# --- (b) the total deadline -----------------------------------------------------------------------

@pytest.mark.slow
def test_the_deadline_bounds_an_attempt_that_hangs(server_url: str) -> None:
    """Found: ``deadline`` ("seconds for all retries of one request", 60 by default) did not bound
    an attempt in flight: against a service that hangs, a call with deadline=1.5 waited for the
    whole per-request timeout (120 s by default). Each attempt now gets at most what is left."""
    labels, completions, _ = _mixed(2, seed=304)
    script = Script(stall_seconds=25.0, stalls=1)
    with flaky_proxy(server_url, script) as url:
        reward = make_reward_func(url, deadline=1.5)
        started = time.monotonic()
        with pytest.raises(GraderError) as caught:
            reward(completions=completions, task_id=labels)
        took = time.monotonic() - started
    assert caught.value.status is None and took < 15.0  # the stall is 25 s; the deadline 1.5 s


# --- (a) rewards put on the wrong sample ----------------------------------------------------------

@contextmanager
def dropping_proxy(upstream: str) -> Iterator[str]:
    """Forwards to the service, but drops the first entry of every list of results or rewards in
    a 200 reply: a reply that no longer says which sample each verdict belongs to (a version-
    skewed service, a proxy rewriting bodies)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0") or 0))
            forwarded = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
            reply = httpx.request(self.command, upstream + self.path, content=body, headers=forwarded, timeout=60)
            payload = reply.content
            if reply.status_code == 200:
                decoded = reply.json()
                for key in ("results", "rewards"):
                    if isinstance(decoded.get(key), list):
                        decoded[key] = decoded[key][1:]
                payload = json.dumps(decoded).encode()
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
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_reply_with_a_verdict_missing_is_an_error_never_shifted_rewards(server_url: str) -> None:
    """Found: the client took whatever list came back, so a reply one verdict short shifted every
    later reward onto the wrong sample (across chunks), and verl's batched coroutine left the
    callers past the end waiting forever. Now the count is checked: a GraderError, no reward."""
    labels, completions, _ = _mixed(6, seed=305)
    items = [{"task_id": label, "completion": c} for label, c in zip(labels, completions, strict=True)]
    with dropping_proxy(server_url) as url, GraderClient(url, retry=FAST, batch_size=3) as client:
        for call in (lambda: client.grade_labelled(labels, completions), lambda: client.rewards(items),
                     lambda: client.grade_batch(items)):
            with pytest.raises(GraderError, match="verdicts"):
                call()
        with pytest.raises(GraderError):
            make_reward_func(url)(completions=completions, task_id=labels)

        async def verl_batch() -> list[object]:
            calls = (compute_score_async(data_source="x", solution_str=c, ground_truth=label, extra_info={},
                                         scaling_grader_url=url) for label, c in zip(labels, completions, strict=True))
            return await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout=30)

        outcomes = asyncio.run(verl_batch())  # a hang would be a TimeoutError here
        assert all(isinstance(o, GraderError) for o in outcomes)


@pytest.mark.slow
def test_duplicates_and_mixed_labels_keep_each_reward_on_its_own_sample(server_url: str) -> None:
    """Not found (guard): the same completion for the same task several times, bad labels and
    references between them, through every helper: each reward stays on its sample."""
    labels, completions, expected = _mixed(4, seed=306)
    labels = [labels[0], "nonsense/1", labels[1], labels[0], '{"values": ["80 GB"]}', labels[2], labels[0], labels[3]]
    completions = [completions[0], completions[0], completions[1], completions[0], "Final answer: 80 GB",
                   completions[2], wrong(labels[0]), completions[3]]
    expected_trl = [expected[0], None, expected[1], expected[0], 1.0, expected[2], 0.0, expected[3]]
    reward = make_reward_func(server_url)
    assert reward(completions=completions, task_id=labels) == expected_trl
    scores = [compute_score("x", c, label, {}, scaling_grader_url=server_url)["score"]
              for label, c in zip(labels, completions, strict=True)]
    assert scores == [0.0 if e is None else e for e in expected_trl]


# --- (a) a policy's answers through OpenRLHF's route ----------------------------------------------

@pytest.mark.slow
def test_get_reward_gives_nothing_for_empty_echoed_or_prompt_only_responses(server_url: str) -> None:
    """Not found (guard): an empty response, a response that repeats the prompt, and a query cut
    before the response earn nothing; the right answer in the same batch still does."""
    task = synthetic_tasks(1, seed=307)[0]
    prompt = CHATML.format(task.prompt)
    queries = [prompt + "<|im_end|>", prompt + task.prompt + "<|im_end|>", prompt, prompt + right(task.id)]
    body = {"query": queries, "prompts": [prompt] * 4, "labels": [task.id] * 4}
    reply = httpx.post(server_url + "/get_reward", json=body, timeout=60).json()
    assert reply["rewards"] == [0.0, 0.0, 0.0, 1.0]
    assert reply["extra_logs"]["scored"] == [1.0, 1.0, 1.0, 1.0]


@pytest.mark.slow
def test_the_reward_key_never_comes_back_from_the_service(small_burst: TenantService) -> None:
    """Not found (guard): a wrong, a trailing-slashed or a queried reward URL is refused without
    repeating the key; the right one grades."""
    task = synthetic_tasks(1, seed=308)[0]
    body = {"query": [right(task.id)], "labels": [task.id]}
    key = small_burst.reward_key_a
    for path in (f"/get_reward/{key}x", f"/get_reward/{key}/", f"/get_reward/{key}/more", f"/v1/rewards/{key}"):
        reply = httpx.post(small_burst.url + path, json=body, timeout=30)
        assert reply.status_code >= 400 and key not in reply.text
    assert httpx.post(small_burst.url + f"/get_reward/{key}", json=body, timeout=30).json()["rewards"] == [1.0]


# --- (b) a key set with a stray newline or a pasted curly quote ---------------------------------

@pytest.mark.slow
def test_a_key_read_with_its_newline_still_works(small_burst: TenantService, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: a key kept in a file or a secret ends with a newline; every reward then failed with
    "LocalProtocolError: the request could not be sent", which names no cause. Surrounding
    whitespace is no part of a key: it is dropped."""
    labels, completions, expected = _mixed(2, seed=310)
    reward = make_reward_func(small_burst.url, api_key=small_burst.key_a + "\n")
    assert reward(completions=completions, task_id=labels) == expected
    monkeypatch.setenv("SCALING_GRADER_API_KEY", f" {small_burst.key_a}\r\n")
    assert make_reward_func(small_burst.url)(completions=completions, task_id=labels) == expected


@pytest.mark.parametrize("where", ["key", "header"])
def test_a_key_or_header_no_http_header_can_carry_is_a_clear_error(where: str) -> None:
    """Found: a key with a character outside ASCII (a curly quote pasted with it) raised a raw
    UnicodeEncodeError from inside httpx. Now a ValueError naming what to fix, and not the key."""
    secret = "sg_\u201csecret\u201d"
    kwargs = {"api_key": secret} if where == "key" else {"headers": {"X-Team": secret}}
    with pytest.raises(ValueError, match="ASCII") as caught:
        GraderClient("http://127.0.0.1:9", **kwargs)  # type: ignore[arg-type]
    assert "secret" not in str(caught.value)
    with pytest.raises(ValueError, match="ASCII"):
        make_reward_func("http://127.0.0.1:9", **kwargs)(completions=["x"], task_id=["synthetic/0/0"])  # type: ignore[arg-type]


def test_client_options_refuse_a_nan_timeout_or_deadline() -> None:
    """Found: NaN passed the "positive seconds" check (every comparison with NaN is false)."""
    from scaling_book.client import ClientOptions

    for bad in ({"timeout": float("nan")}, {"deadline": float("nan")}, {"deadline": "-1"}):
        with pytest.raises(ValueError, match="positive"):
            ClientOptions.of(**bad)  # type: ignore[arg-type]
    # verl's config may give seconds as text (interpolated from the environment): read as numbers
    assert ClientOptions.of(timeout="30", deadline="90") == ClientOptions.of(timeout=30.0, deadline=90.0)  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_client_splits_a_batch_over_the_services_body_limit() -> None:
    """A rollout batch of long completions past the batch routes' byte limit (413): halved until
    each part fits, every reward on its own sample."""
    labels, completions, expected = _mixed(12, seed=311)
    padded = ["Let me think. " * 300 + c for c in completions]  # ~4 kB each, ~50 kB in all
    env = {"SCALING_GRADER_LIMITS__MAX_REQUEST_BYTES": "16384",
           "SCALING_GRADER_LIMITS__MAX_BATCH_REQUEST_BYTES": "16384"}
    with running_server(env) as url, GraderClient(url, retry=FAST) as client:
        assert [r.reward for r in client.grade_labelled(labels, padded)] == expected
        reward = make_reward_func(url)
        assert reward(completions=padded, task_id=labels) == expected


@pytest.mark.slow
def test_the_reward_key_stays_out_of_the_services_own_log(tmp_path: Path) -> None:
    """Not found (guard): right, wrong, trailing-slashed, extended and malformed-body requests on
    reward URLs, at the info log level: the reward key is in none of the service's log lines."""
    from app.tenants import new_key
    from tests.support.server import logged_server

    reward_key, digest = new_key()
    _, api_digest = new_key()
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "a"\nkey_sha256 = ["{api_digest}"]\nreward_key_sha256 = ["{digest}"]\n')
    task = synthetic_tasks(1, seed=312)[0]
    body = {"query": [right(task.id)], "labels": [task.id]}
    log = tmp_path / "server.log"
    with logged_server({"SCALING_GRADER_TENANTS_FILE": str(tenants)}, log, log_level="info") as (url, _):
        assert httpx.post(f"{url}/get_reward/{reward_key}", json=body, timeout=30).json()["rewards"] == [1.0]
        for path in (f"/get_reward/{reward_key}x", f"/get_reward/{reward_key}/", f"/get_reward/{reward_key}/more",
                     f"/get_reward/{reward_key}?k={reward_key}"):
            httpx.post(url + path, json=body, timeout=30)
        httpx.post(f"{url}/get_reward/{reward_key}", content=b"{not json", timeout=30)
    text = log.read_text(errors="replace")
    assert "Started server process" in text  # the log was written
    assert reward_key not in text


def test_a_long_timeout_without_a_deadline_keeps_all_of_it() -> None:
    """The deadline bounds an attempt in flight: a user who asks for 300 s per request and names
    no deadline must not be cut at the default deadline's 120 s."""
    assert GraderClient("http://127.0.0.1:9", timeout=300.0).retry.deadline == 300.0
    assert GraderClient("http://127.0.0.1:9", timeout=300.0, retry_deadline=10.0).retry.deadline == 10.0
    assert GraderClient("http://127.0.0.1:9").retry.deadline == RetryPolicy().deadline


@pytest.mark.slow
def test_an_async_client_used_from_one_event_loop_after_another(server_url: str) -> None:
    """Found: an AsyncGraderClient made once and used by two ``asyncio.run`` calls (a script, or
    a trainer that runs each step in a fresh loop) failed its second call with a raw
    ``RuntimeError: Event loop is closed`` (its pooled connection belonged to the first loop),
    and that batch got no reward. A client in a new loop now opens connections of its own."""
    from scaling_book.client import AsyncGraderClient

    labels, completions, expected = _mixed(3, seed=313)
    items = [{"task_id": label, "completion": c} for label, c in zip(labels, completions, strict=True)]
    client = AsyncGraderClient(server_url, retry=FAST)
    assert [asyncio.run(client.rewards(items)) for _ in range(3)] == [expected] * 3

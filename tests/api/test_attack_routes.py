"""A hostile client and an RL policy against the graded routes as they are now routed and read:
paths rewritten by one middleware (app/api/routing.py), large bodies validated a list element at
a time (app/api/json_pieces.py), a body deadline on asyncio.timeout_at (app/observability.py).

- Path tricks on a real server with a tenants file: a reward key anywhere but
  ``/get_reward/<key>`` (double slashes, dot segments, case, ``;params``, a trailing slash, a
  /v1 prefix) reaches nothing graded, and the key never reaches the server's output; percent-
  encodings of the right path are the right path.
- Body tricks: whatever the piecewise validator answers is what pydantic answers for the whole
  body (the oracle), for duplicate and escaped keys, keys after the list, BOM, non-UTF-8, lone
  surrogates, NaN, huge numbers, whitespace floods and nesting at the parser's limit; through a
  real server, a large body gets the answer its small twin (parsed whole) gets.
- Timing: stalled, aborted and concurrent large uploads on a real server: /healthz is answered
  throughout and nothing is counted as a 5xx."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from app.api.bodies import ON_LOOP_BODY_BYTES
from app.api.errors import describe_validation_errors
from app.api.json_budget import outline_json
from app.api.json_pieces import InvalidBody, validate_in_pieces
from app.api.rewards import GetRewardRequest, LabelledRequest
from app.errors import ApiError
from app.grading.models import GradeBatchRequest
from app.observability import BodyLimitMiddleware
from app.settings import Settings
from app.tenants import new_key
from tests.support.server import logged_server, running_server

MODELS: tuple[type[BaseModel], ...] = (GetRewardRequest, LabelledRequest, GradeBatchRequest)


def _whole(model: type[BaseModel], raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", repr(model.model_validate_json(raw).model_dump())  # repr: NaN == NaN
    except ValidationError as exc:
        return "refused", describe_validation_errors(list(exc.errors(include_input=False)), located=False)


def _pieces(model: type[BaseModel], raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", repr(validate_in_pieces(model, raw, outline_json(raw, 512)).model_dump())
    except (ValidationError, InvalidBody) as exc:
        errors = exc.errors if isinstance(exc, InvalidBody) else list(exc.errors(include_input=False))
        return "refused", describe_validation_errors(errors, located=False)


# --- body tricks, against pydantic on the whole body -------------------------------------------

def _nested(depth: int, rnd: random.Random) -> bytes:
    """A JSON value inside ``depth`` arrays and objects, with a scalar or an empty leaf."""
    inner = rnd.choice([b"1", b'"s"', b"[]", b"{}", b" [ ] ", b"null"])
    for _ in range(depth):
        inner = b"[" + inner + b"]" if rnd.random() < 0.5 else b'{"k": ' + inner + b" }"
    return inner


@pytest.mark.parametrize("depth", range(194, 204))
def test_nesting_at_the_parsers_limit_is_refused_as_the_whole_body_would_be(depth: int) -> None:
    # Found: an element parsed alone is two levels shallower than in the body, so a label nested
    # 199 deep passed piecewise while the whole body is refused as too deep.
    rnd = random.Random(depth)
    for _ in range(6):
        deep = _nested(depth, rnd)
        for model, raw in ((GetRewardRequest, b'{"query": ["x"], "labels": [1, ' + deep + b"]}"),
                           (LabelledRequest, b'{"items": [{"label": ' + deep + b', "completion": "c"}]}'),
                           (GetRewardRequest, b'{"query": ["x"], "meta": ' + deep + b', "labels": [1]}')):
            assert _pieces(model, raw) == _whole(model, raw), (depth, raw[:60])


TRICKS: list[tuple[type[BaseModel], bytes]] = [
    (GetRewardRequest, b'{"query": ["a"], "query": ["b", "c"]}'),  # a list key given twice
    (GetRewardRequest, b'{"query": ["a"], "\\u0071uery": ["b"]}'),  # ... spelt with an escape
    (GetRewardRequest, b'{"query": ["a"], "labels": ["1"], "query": "b"}'),  # list, then not a list
    (GetRewardRequest, b'{"labels": ["1", "2"], "query": ["a", "b"], "prompts": ["p", "q"]}'),  # keys after
    (GetRewardRequest, b'\xef\xbb\xbf{"query": ["a"]}'),  # BOM
    (GetRewardRequest, b'{"query": ["a\xff\xfe"]}'),  # not UTF-8
    (GetRewardRequest, b'{"query": ["\\ud800"], "labels": ["\\udfff x"]}'),  # lone surrogates
    (GetRewardRequest, b'{"query": ["a"], "labels": [NaN, Infinity, -Infinity, 1e400, -0]}'),
    (GetRewardRequest, b'{"query": ["a"], "labels": [' + b"9" * 5000 + b"]}"),  # a huge integer
    (GetRewardRequest, b'{"query": [' + b" " * 20000 + b'"a"' + b"\n" * 20000 + b"]}"),  # whitespace
    (GetRewardRequest, b'{"query": ["a",]}'),  # trailing comma
    (GetRewardRequest, b'{"query": [,"a"]}'),
    (GetRewardRequest, b'{"query": ["a"] , }'),
    (GetRewardRequest, b'{"query": ["a" "b"]}'),
    (GetRewardRequest, b'{"query": ["a\\\n"], "labels": ["]"]}'),  # a bad escape before a bracket
    (GetRewardRequest, b'{"query": ["a"]} {"query": ["b"]}'),  # two bodies
    (GetRewardRequest, b'[{"query": ["a"]}]'),  # not an object
    (GetRewardRequest, b'{"query": ["a"], "extra": [1, 2], "more": {"x": [3]}}'),  # extra fields ignored
    (LabelledRequest, b'{"items": [{"label": 1, "completion": "c", "extra": 2}], "oops": [1]}'),  # forbidden
    (LabelledRequest, b'{"items": [{"label": 1, "completion": "c"}], "items": []}'),
    (LabelledRequest, b'{"tolerance": 2, "items": [{"completion": 5}, {"label": 1}], "judge": 3}'),
    (LabelledRequest, b'{"items": [{"label": 1, "completion": "c"}], "tolerance": 0.1, "tolerance": 7}'),
    (GradeBatchRequest, b'{"items": []}'),  # the list's own constraint (min_length)
    (GradeBatchRequest, b'{"items": [{"task_id": "t", "completion": "c"}, {"taskId": "t"}]}'),
]


@pytest.mark.parametrize("case", range(len(TRICKS)))
def test_a_tricky_body_gets_what_the_whole_body_gets(case: int) -> None:
    model, raw = TRICKS[case]
    assert _pieces(model, raw) == _whole(model, raw)


@pytest.mark.parametrize("seed", range(4))
def test_mutated_bodies_get_what_the_whole_body_gets(seed: int) -> None:
    rnd = random.Random(seed)
    seeds = [(GetRewardRequest, {"query": ["a", "b <|im_end|>"], "prompts": ["a", "b"], "labels": ["x", 3, [1]]}),
             (LabelledRequest, {"items": [{"label": "x", "completion": "y"}, {"label": [1], "completion": "z"}]}),
             (GradeBatchRequest, {"items": [{"task_id": "t", "completion": "y"}, {"task_id": "u", "completion": "z"}]})]
    marks = [b'"', b"\\", b"\n", b",", b"[", b"]", b"{", b"}", b":", b"\xef\xbb\xbf", b"\xff", b'"\\ud800"', b"NaN",
             b"1e400", b"null", b'"query":', b'"items":', b'"labels":', b'"x":1,', b"[]", b'"\\u0071uery"']
    for _ in range(1500):
        model, value = rnd.choice(seeds)
        raw = bytearray(json.dumps(value).encode())
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randint(0, len(raw))
            if rnd.random() < 0.6:
                raw[at:at] = rnd.choice(marks)
            else:
                del raw[at:at + rnd.randint(1, 3)]
        assert _pieces(model, bytes(raw)) == _whole(model, bytes(raw)), bytes(raw)


# --- the same through a real server: a large body answers as its small twin ---------------------

def _padded(body: bytes, to: int) -> bytes:
    """``body`` (an object) with a padding field, to ``to`` bytes at least (GetRewardRequest
    ignores unknown fields, so the padding changes nothing but the size)."""
    return body[:-1] + b', "padding": "' + b"p" * to + b'"}'


def test_a_large_body_is_answered_as_its_small_twin_on_a_real_server() -> None:
    rnd = random.Random(5)
    bodies = [b'{"query": ["x"], "labels": [' + _nested(depth, rnd) + b"]}" for depth in (150, 199, 200, 201, 205)]
    bodies += [raw for model, raw in TRICKS if model is GetRewardRequest and raw.startswith(b"{")]
    with running_server() as url, httpx.Client(base_url=url, timeout=60) as http:
        for body in bodies:
            small = http.post("/get_reward", content=body, headers={"content-type": "application/json"})
            large = http.post("/get_reward", content=_padded(body, ON_LOOP_BODY_BYTES + 1),
                              headers={"content-type": "application/json"})
            assert small.status_code < 500 and "Traceback" not in small.text
            if small.status_code == 200 and large.status_code == 400:
                # only a body whose padding broke it: a trailing comma, two bodies
                assert _whole(GetRewardRequest, _padded(body, 1))[0] == "refused", body[:80]
                continue
            assert (large.status_code, large.json()) == (small.status_code, small.json()), body[:80]


# --- path tricks with a reward key ---------------------------------------------------------------

REWARD_BODY = b'{"query": ["Final answer: 1 s"], "labels": ["1 s"]}'


def _post_raw(url: str, target: bytes, body: bytes = REWARD_BODY, headers: bytes = b"Content-Type: application/json\r\n"
              ) -> tuple[int, bytes]:
    """POST with the request target sent byte for byte (no client normalises it)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                  % (target, headers, len(body), body))
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), payload


def test_a_reward_key_anywhere_else_grades_nothing_and_is_never_printed(tmp_path: Path) -> None:
    key, digest = new_key()
    reward_key, reward_digest = new_key()
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[[tenant]]\nname = "a"\nkey_sha256 = ["{digest}"]\nreward_key_sha256 = ["{reward_digest}"]\n'
                       "rate_per_second = 1000\nburst = 1000\n")
    k = reward_key.encode()
    log = tmp_path / "server.log"
    with logged_server({"SCALING_GRADER_TENANTS_FILE": str(tenants)}, log, log_level="info") as (url, _):
        right = _post_raw(url, b"/get_reward/" + k)
        assert right[0] == 200 and json.loads(right[1])["rewards"] == [1.0]
        # percent-encodings of the same path are the same path
        for same in (b"/get_reward%2F" + k, b"/get%5Freward/" + k, b"/get_reward/" + k + b"?x=1"):
            assert _post_raw(url, same) == right, same.replace(k, b"KEY")
        odd = [b"//get_reward/" + k, b"/get_reward//" + k, b"/GET_REWARD/" + k, b"/get_reward;x/" + k,
               b"/./get_reward/" + k, b"/x/../get_reward/" + k, b"/get_reward/" + k + b"/",
               b"/get_reward/" + k + b";p", b"/get_reward/" + k + b"%00", b"/v1/get_reward/" + k,
               b"/get_rewards/" + k, b"/v1/grade/batch/" + k, b"/get_reward/" + k[:-1]]
        for target in odd:
            status, payload = _post_raw(url, target)
            assert status == 401, target.replace(k, b"KEY")
            assert k not in payload and b"Traceback" not in payload
        # a page on another site posting a form (no preflight) to the reward URL grades nothing
        for cross_site in (b"Content-Type: text/plain\r\nOrigin: https://evil.example\r\n"
                           b"Sec-Fetch-Site: cross-site\r\n",
                           b"Content-Type: application/x-www-form-urlencoded\r\nOrigin: https://evil.example\r\n",
                           b"Content-Type: text/plain\r\n"):
            status, payload = _post_raw(url, b"/get_reward/" + k, headers=cross_site)
            assert status in (403, 415) and b"rewards" not in payload, cross_site
        # the tenant's own key does not work as a reward URL key either (nor the reverse)
        assert _post_raw(url, b"/get_reward/" + key.encode())[0] == 401
        # a very long path: refused before anything, without the key coming back
        status, payload = _post_raw(url, b"/get_reward/" + k + b"x" * 70_000)
        assert status in (400, 401, 414, 431) and k not in payload
        metrics = httpx.get(url + "/metrics", headers={"authorization": f"Bearer {key}"}, timeout=60).text
        assert reward_key not in metrics
    assert reward_key not in log.read_text(errors="replace")


# --- timing ----------------------------------------------------------------------------------------

def _slow_upload(url: str, path: str, length: int, sent: int, abort: bool) -> None:
    """Announce ``length`` bytes, send ``sent`` of them, then stall (or hang up if ``abort``)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % (path.encode(), length))
        s.sendall(b'{"query": ["' + b"x" * max(0, sent - 12))
        if abort:
            return
        with contextlib.suppress(OSError):
            s.recv(65536)  # the 408, once the deadline passes


def _five_xx(metrics: str) -> list[str]:
    return [line for line in metrics.splitlines()
            if line.startswith("scaling_grader_http_requests_total") and 'status="5' in line]


def test_stalled_aborted_and_concurrent_large_uploads_leave_healthz_answered_and_no_5xx(tmp_path: Path) -> None:
    env = {"SCALING_GRADER_LIMITS__BODY_GRACE_SECONDS": "2"}
    with logged_server(env, tmp_path / "server.log") as (url, _):
        large = _padded(b'{"query": ["x"], "labels": [' + b"[1]," * 20000 + b"1]}", 2_000_000)
        threads = [threading.Thread(target=_slow_upload, args=(url, path, 3_000_000, sent, abort))
                   for path in ("/get_reward", "/v1/rewards", "/v1/grade")
                   for sent, abort in ((0, False), (100_000, False), (1_000_000, True), (2_000_000, False))]
        threads += [threading.Thread(target=httpx.post, args=(url + "/get_reward",),
                                     kwargs={"content": large, "timeout": 120,
                                             "headers": {"content-type": "application/json"}})
                    for _ in range(4)]
        for t in threads:
            t.start()
        with httpx.Client(base_url=url, timeout=30) as http:
            while any(t.is_alive() for t in threads):
                assert http.get("/healthz").status_code == 200
                time.sleep(0.2)
            for t in threads:
                t.join()
            assert http.get("/healthz").status_code == 200
            assert _five_xx(http.get("/metrics").text) == []
    assert "Traceback" not in (tmp_path / "server.log").read_text(errors="replace")


# --- bounds that must hold for the whole body, not only its list items -------------------------

def test_a_legal_reward_batch_of_the_largest_size_is_not_refused_as_too_complex() -> None:
    # Found: the entries of all lists were counted together, so an OpenRLHF body of 400 rollouts
    # (queries, prompts and labels: three lists of 400, under max_grades_per_batch) got 413.
    settings = Settings()
    n = settings.limits.max_grades_per_batch
    prompts = [f"Question {i}: " + "how long does the all-reduce take? " * 4 for i in range(n)]
    body = {"query": [f"{p} Final answer: {i} s" for i, p in enumerate(prompts)], "prompts": prompts,
            "labels": [f"{i if i % 2 else 2 * i + 1} s" for i in range(n)]}
    raw = json.dumps(body).encode()
    assert len(raw) > ON_LOOP_BODY_BYTES
    with running_server() as url:
        answer = httpx.post(url + "/get_reward", content=raw, timeout=120,
                            headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["rewards"] == [0.0 if i % 2 == 0 else 1.0 for i in range(n)]


TINY = b"[" + b",".join([b"1"] * 60_000) + b"]"  # under the bound for one piece


@pytest.mark.parametrize("body", [
    b'{"query": ["x"], "ignored": [' + b",".join([TINY] * 3) + b"]}",  # an ignored field
    b'{"query": ["x"], "ignored": {"a": ' + TINY + b', "b": ' + TINY + b"}}",
    b'{"query": "x", "labels": {"a": ' + TINY + b', "b": ' + TINY + b"}}",  # nothing split: parsed whole
    b'{"query": ["x"], "labels": [' + b",".join([TINY] * 3) + b'], "labels": []}',  # a list key twice
])
def test_what_is_parsed_in_one_go_is_bounded_like_one_piece(body: bytes) -> None:
    # Found: the rest of the body beside the split lists (an ignored field of up to a batch
    # body's hundred megabytes of tiny values) was parsed in one go, holding the interpreter
    # lock (and the event loop) for seconds.
    with pytest.raises(ApiError) as refused:
        validate_in_pieces(GetRewardRequest, body, outline_json(body, 1024))
    assert refused.value.status == 413 and refused.value.error == "body_too_complex"


def test_an_oversized_ignored_field_is_refused_on_a_real_server() -> None:
    body = b'{"query": ["x"], "labels": ["1 s"], "ignored": [' + b",".join([TINY] * 3) + b"]}"
    with running_server() as url:
        answer = httpx.post(url + "/get_reward", content=body, timeout=120,
                            headers={"content-type": "application/json"})
        assert (answer.status_code, answer.json()["error"]) == (413, "body_too_complex")
        assert httpx.get(url + "/healthz", timeout=30).status_code == 200


def test_a_client_that_stalls_in_a_large_body_slot_gives_it_back_after_the_grace() -> None:
    # Found: the deadline is the whole announced length at the slowest allowed rate, so two
    # clients announcing a 100 MB batch, sending just past the large-body threshold and going
    # silent, held both large-body slots for minutes (every other large body waited).
    async def stalls(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            while (await receive()).get("more_body"):
                pass
            status = 200
        except HTTPException as exc:
            status = exc.status_code
        await send({"type": "http.response.start", "status": status, "headers": []})

    async def run() -> int:
        sent: list[dict[str, Any]] = []
        pending = [b" " * 500]

        async def receive() -> dict[str, Any]:
            if pending:
                return {"type": "http.request", "body": pending.pop(0), "more_body": True}
            await asyncio.Event().wait()  # silent from here on
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        # a whole-length deadline of 0.5 s + 10 MB at 1 kB/s: hours
        middleware = BodyLimitMiddleware(stalls, max_bytes=100, path_limits={"/v1/grade/batch": 10**7},
                                         large_bodies=1, grace_seconds=0.5, min_bytes_per_second=1000)
        scope = {"type": "http", "path": "/v1/grade/batch", "headers": [(b"content-length", b"10000000")]}
        await asyncio.wait_for(middleware(scope, receive, send), 30)
        return int(sent[0]["status"])

    assert asyncio.run(run()) == 408

"""A fresh hostile HTTP client against a real server: each test is one attack that worked, kept as
its reproduction. Servers are child processes on free loopback ports (embedded mode; one with a
tenants file of an honest and a hostile tenant). No timing is asserted: a stall shows as a bounded
client's timeout on /healthz or on another tenant's request, or as a refusal's wording."""

from __future__ import annotations

import concurrent.futures
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from app.grading.models import MAX_QUANTITY_CHARS, GradeRequest
from app.grading.service import ON_LOOP_CHARS, GradingService
from app.settings import get_settings
from tests.support.server import logged_server
from tests.support.tenants_file import write_tenants

pytestmark = pytest.mark.slow  # real HTTP servers

# A bounded client: the liveness checks below never wait longer than this for /healthz.
HEALTHZ_TIMEOUT = 10.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("sg-fresh") / "server.log"
    with logged_server({}, log) as (url, _):
        yield url, log


def healthz_while(url: str, hostile: concurrent.futures.Future) -> list[int]:
    """/healthz statuses, asked one after another (at most 20) while ``hostile`` runs; a timeout
    of the bounded client is recorded as 0."""
    statuses = []
    with httpx.Client(base_url=url, timeout=HEALTHZ_TIMEOUT) as client:
        while not hostile.done() and len(statuses) < 20:
            try:
                statuses.append(client.get("/healthz").status_code)
            except httpx.TimeoutException:
                statuses.append(0)
            time.sleep(0.2)
    return statuses


# ---- 1: an inline reference value of any length was read on the event loop ----------------------
# A reference's quantities are parsed where the request is handled: for a single grade, on the
# event loop, before anything is graded. "1 s " two million times (8 MB) took 25 s there, and
# "1 111 111 ... 1111" (40 kB, quadratic to read) 5 s: every other request, /healthz included, waited.

def test_an_overlong_inline_reference_value_is_refused_before_it_is_read(served) -> None:
    url, log = served
    value = "1 s " * 2_000_000
    with concurrent.futures.ThreadPoolExecutor(1) as pool, httpx.Client(base_url=url, timeout=120) as client:
        hostile = pool.submit(client.post, "/v1/grade",
                              json={"reference": {"values": [value]}, "completion": "Final answer: 1 s"})
        statuses = healthz_while(url, hostile)
        r = hostile.result()
    assert r.status_code == 422, r.text[:300]
    assert r.json() == {"error": "invalid_request",
                        "detail": f"reference.values: a quantity is at most {MAX_QUANTITY_CHARS} characters"}
    assert all(s == 200 for s in statuses), statuses
    # the documented form of a quantity is still graded
    ok = httpx.post(url + "/grade", json={"reference": {"values": ["3.35 TB/s"]},
                                          "completion": "Final answer: 3.35 TB/s"}, timeout=60)
    assert ok.status_code == 200 and ok.json()["reward"] == 1.0, ok.text[:300]
    assert "Traceback" not in log.read_text(errors="replace")


def test_an_overlong_quantity_label_is_unscored_without_stalling_healthz(served) -> None:
    url, _ = served
    label = "1" + " 111" * 16_000  # under a label's 64 KiB, quadratic to read before the fix
    with concurrent.futures.ThreadPoolExecutor(1) as pool, httpx.Client(base_url=url, timeout=120) as client:
        hostile = pool.submit(client.post, "/get_reward", json={"query": ["Final answer: 1 s"], "labels": [label]})
        statuses = healthz_while(url, hostile)
        r = hostile.result()
    assert r.status_code == 200, r.text[:300]
    logs = r.json()["extra_logs"]
    assert logs["scored"] == [0.0] and logs["unscored_bad_label"] == [1.0]
    assert all(s == 200 for s in statuses), statuses


# ---- 2: a run of space-separated digits that is no grouped number was read in quadratic time -----
# "1 000" is one number; the pattern that joined such groups was tried again from every group of a
# run that does not end as a number does, scanning to its end each time. One answer line of 196,000
# characters held a grading process for over two minutes; two of them held both, and another
# tenant's two-item batch waited for them.

TENANTS = {"bob": "", "mallory": "rate_per_second = 100000\nburst = 100000\n"}


@contextmanager
def tenants_server() -> Iterator[tuple[str, dict[str, str]]]:
    tmp = Path(tempfile.mkdtemp(prefix="sg-fresh-tenants-"))
    keys = write_tenants(tmp / "tenants.toml", TENANTS)
    with logged_server({"SCALING_GRADER_TENANTS_FILE": str(tmp / "tenants.toml")}, tmp / "server.log") as (url, _):
        yield url, keys


def test_digit_groups_that_are_no_number_do_not_hold_the_grading_processes() -> None:
    completion = "Final answer: 1" + " 111" * 49_000 + "1"  # 196,016 characters, under the 200,000 cap
    with tenants_server() as (url, keys), concurrent.futures.ThreadPoolExecutor(2) as pool:
        mallory = httpx.Client(base_url=url, timeout=300, headers={"authorization": f"Bearer {keys['mallory']}"})
        hostile = [pool.submit(mallory.post, "/v1/grade",
                               json={"reference": {"values": ["1 s"]}, "completion": completion}) for _ in range(2)]
        time.sleep(2)  # (ordering only) mallory's two answers are in the grading processes
        # Bob's small batch goes to the grading processes too; with both held it waited minutes.
        with httpx.Client(base_url=url, timeout=60, headers={"authorization": f"Bearer {keys['bob']}"}) as bob:
            r = bob.post("/v1/grade/batch", json={"items": [
                {"reference": {"values": ["17.02 ms"]}, "completion": "Final answer: 17.02 ms"}] * 2})
        assert r.status_code == 200, r.text[:300]
        assert [x["reward"] for x in r.json()["results"]] == [1.0, 1.0]
        for future in hostile:
            answer = future.result()
            assert answer.status_code == 200, answer.text[:300]
            assert answer.json()["reward"] == 0.0
        mallory.close()


@pytest.mark.parametrize(("gold", "answer", "reward"), [
    ("1000000 s", "Final answer: 1 000 000 s", 1.0),  # still one grouped number
    ("12345678", "Final answer: 12 345 678", 1.0),
    ("1.5", "Final answer: 1.5 000", 1.0),  # a decimal is never joined to what follows
    ("1111", "Final answer: 1 111 1111", 0.0),  # no number's groups: nothing is joined
    ("1", "Final answer: 1 111 1111", 1.0),
], ids=lambda v: str(v))
def test_grouped_numbers_read_as_before(served, gold: str, answer: str, reward: float) -> None:
    url, _ = served
    r = httpx.post(url + "/v1/grade", json={"reference": {"values": [gold]}, "completion": answer}, timeout=60)
    assert r.status_code == 200 and r.json()["reward"] == reward, r.text[:300]


# ---- 3: trimming a long completion's edges ran on the event loop -----------------------------------
# A single grade's completion is read (its special tokens and spaces at either end dropped, a Python
# walk per token) before it is graded: 8 MiB of "<pad>" after the answer held the loop for over a
# second per request. A completion longer than what is graded on the loop is read on a grading thread.

def test_a_long_completion_is_read_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    import asyncio

    service = GradingService(get_settings())
    threads: list[str] = []
    prepare = service.prepare

    def recording(request: GradeRequest):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return prepare(request)

    monkeypatch.setattr(service, "prepare", recording)
    short = GradeRequest(task_id="synthetic/3/0", completion="Final answer: 17.02 ms")
    padded = GradeRequest(task_id="synthetic/3/0", completion="Final answer: 17.02 ms" + "<pad>" * ON_LOOP_CHARS)
    transcript = GradeRequest.model_validate({"task_id": "synthetic/3/0", "completion": [
        {"role": "assistant", "content": [{"type": "text", "text": "Final answer: 17.02 ms"}]}]})

    async def grade_all() -> list[float]:
        return [(await service.grade(r)).reward for r in (short, padded, transcript)]

    main = threading.current_thread().name
    assert asyncio.run(grade_all()) == [1.0, 1.0, 1.0]
    assert threads[0] == main and threads[1] != main and threads[2] != main, threads


def test_a_padded_completion_of_the_body_limit_still_grades(served) -> None:
    url, _ = served
    completion = "Final answer: 17.02 ms" + "<pad>" * 1_600_000
    with concurrent.futures.ThreadPoolExecutor(1) as pool, httpx.Client(base_url=url, timeout=120) as client:
        hostile = pool.submit(client.post, "/v1/grade", json={"task_id": "synthetic/3/0", "completion": completion})
        statuses = healthz_while(url, hostile)
        r = hostile.result()
    assert r.status_code == 200 and r.json()["reward"] == 1.0, r.text[:300]
    assert all(s == 200 for s in statuses), statuses


# ---- 4: synthetic task ids no listing hands out ------------------------------------------------------
# The synthetic id pattern read its numbers with "\d", which takes any Unicode digit, and int()
# ignores leading zeros: "synthetic/003/0", "synthetic/٣/0" (Arabic-Indic) and "synthetic/３/0"
# (full-width) were each graded, and listed, as synthetic/3/0.

ALIASES = ["synthetic/003/0", "synthetic/3/00", "synthetic/\u0663/0", "synthetic/\uff13/0", "synthetic/\U0001d7d1/0",
           "synthetic-v2/03/0", "synthetic/0000000000000000003/0"]


@pytest.mark.parametrize("task_id", ALIASES)
def test_a_synthetic_id_is_only_the_one_a_listing_writes(served, task_id: str) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=60) as client:
        for path in ("/v1/grade", "/grade"):
            r = client.post(path, json={"task_id": task_id, "completion": "Final answer: 17.02 ms"})
            assert r.status_code == 404 and r.json()["error"] == "unknown_task", (path, r.text[:300])
        for prefix in ("/v1/tasks/", "/tasks/"):
            r = client.get(prefix + task_id)
            assert r.status_code == 404 and r.json()["error"] == "unknown_task", (prefix, r.text[:300])
        item = {"task_id": task_id, "completion": "Final answer: 1 s"}
        batch = client.post("/v1/grade/batch", json={"items": [item]})
        assert batch.status_code == 200 and batch.json()["results"][0]["outcome"] == "invalid_request"


def test_the_listed_synthetic_ids_still_resolve(served) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=60) as client:
        for split in ("synthetic", "synthetic-v2"):
            listed = client.get("/v1/tasks", params={"split": split, "seed": 0, "n": 12}).json()["tasks"]
            for task in listed:
                assert client.get(f"/v1/tasks/{task['id']}").json()["id"] == task["id"]
        r = client.post("/grade", json={"task_id": "synthetic/3/0", "completion": "Final answer: 17.02 ms"})
        assert r.status_code == 200 and r.json()["reward"] == 1.0


# ---- 5: a path ending in a newline reached the /v1 route but not its card twin -----------------------
# Starlette's route patterns end in "$", which also matches before a final newline: "/v1/grade%0A"
# graded while "/grade%0A" was a 404, and "/v1/rewards%0A" got the single-body size limit.

@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/grade%0A"), ("POST", "/grade%0A"), ("POST", "/v1/rewards%0A"), ("POST", "/rewards%0A"),
    ("POST", "/get_reward%0A"), ("GET", "/v1/tasks%0A"), ("GET", "/tasks%0A"), ("GET", "/v1/splits%0A"),
    ("GET", "/v1/tasks/synthetic/3/0%0A"), ("GET", "/tasks/synthetic/3/0%0A"),
])
def test_a_path_ending_in_a_newline_reaches_no_route(served, method: str, path: str) -> None:
    url, _ = served
    body = {"task_id": "synthetic/3/0", "completion": "Final answer: 17.02 ms"}
    r = httpx.request(method, url + path, json=body if method == "POST" else None, timeout=60)
    assert r.status_code == 404, r.text[:300]
    assert r.json()["error"] == "not_found" and "synthetic" not in r.text


# ---- 6 (not fixed): a range or a list of candidates is graded as the one value given a unit ------
# Only a quantity's own unit gives it a dimension, so in "2-3 s" or "1, 2, 3 s" the bare numbers are
# counts and the first time is the last number: against a gold of 3 s the hedge scores 1. It earns
# no more than stating its last value alone would (one value per dimension is ever compared), so a
# policy gains nothing by it; but the answer does not commit to a value. Whether such an answer
# should score 0 is a grading rule to decide (docs/grading.md says how "2-3 s" is not read, not how it is).

HEDGES = ["Final answer: 2-3 s", "Final answer: 2\u20133 s", "Final answer: between 0.001 and 3 s",
          "Final answer: 1, 2, 3 s", "Final answer: 1 or 3 s", "Final answer: 1 \u2264 t \u2264 3 s"]


@pytest.mark.xfail(strict=True, reason="ATTACK SUCCEEDS (not fixed, a grading rule to decide): a range or list "
                                       "whose other values carry no unit is graded as its one value with a unit")
@pytest.mark.parametrize("answer", HEDGES)
def test_a_range_or_a_list_of_candidates_earns_no_reward(served, answer: str) -> None:
    url, _ = served
    r = httpx.post(url + "/v1/grade", json={"reference": {"values": ["3 s"]}, "completion": answer}, timeout=60)
    assert r.status_code == 200
    assert r.json()["reward"] == 0.0, r.text[:300]


def test_digit_groups_are_joined_exactly_as_the_former_pattern_joined_them() -> None:
    """The run-at-a-time reading of item 2 against the pattern it replaced, on seeded random text."""
    import random
    import re

    from app.quantities import _DIGIT_RUN, _join_groups

    former = re.compile(r"(?<![\d.,])[1-9]\d{0,2}(?: \d{3})+(?![\d.,]\d| ?\d)")
    rng = random.Random(7)
    pieces = ["0", "1", "9", "00", "000", "123", "1234", "012", " ", "  ", ".", ",", "a", "\u0663", "\u00a0"]
    for _ in range(50_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 16)))
        assert _DIGIT_RUN.sub(_join_groups, text) == former.sub(lambda m: m.group().replace(" ", ""), text), text


# ---- 7: an unreadable gold was matched by any unreadable answer ---------------------------------
# A unit the reader cannot take ("s^2", a chain of more than 8 words) gives a quantity the
# dimension "unreadable unit". A gold so written was accepted, and matched an answer of the same
# value with any other unreadable unit: "1 B/B/B/B/B/B/B/B/B" scored 1 against "1 s/s/s/s/s/s/s/s/s",
# and "1 B^2" against a label "1 s^2". docs/grading.md: an unreadable unit matches no required value.

UNREADABLE_GOLDS = [("1 " + "/".join("s" * 9), "Final answer: 1 " + "/".join("B" * 9)),
                    ("1 s^2", "Final answer: 1 B^2")]


@pytest.mark.parametrize(("gold", "answer"), UNREADABLE_GOLDS)
def test_an_unreadable_gold_is_refused_and_matches_nothing(served, gold: str, answer: str) -> None:
    url, _ = served
    with httpx.Client(base_url=url, timeout=60) as client:
        r = client.post("/v1/grade", json={"reference": {"values": [gold]}, "completion": answer})
        assert r.status_code == 422, r.text[:300]
        assert r.json() == {"error": "invalid_reference",
                            "detail": "reference.values[0] has a unit the service cannot read"}
        r = client.post("/get_reward", json={"query": [answer], "labels": [gold]})
        assert r.status_code == 200
        assert r.json()["rewards"] == [0.0] and r.json()["extra_logs"]["unscored_bad_label"] == [1.0]


@pytest.mark.parametrize(("gold", "answer"), UNREADABLE_GOLDS)
def test_an_unreadable_unit_is_no_answer_to_an_unreadable_gold(gold: str, answer: str) -> None:
    from app.graders.numeric import grade_numeric

    assert grade_numeric([gold], answer, tolerance=0.02).reward == 0.0
    assert grade_numeric([gold], answer.replace("B", "s"), tolerance=0.02).reward == 0.0

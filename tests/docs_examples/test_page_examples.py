"""The README's and docs/api.md's examples, run as written (curl, against a real server): a
newcomer's first grade must be the verdict the page shows, not a silent ``incorrect``."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.docs_examples.examples import CurlExample, curl_examples, error_examples, posted_task_id, shown_fields

pytestmark = pytest.mark.slow  # a real server and curl processes: left out of `make test-fast`

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "docs" / "api.md"]
DOCUMENTED_BASE = "http://127.0.0.1:8000"
EXAMPLES = [e for page in PAGES for e in curl_examples(page)]


def _curl(argv: tuple[str, ...], server_url: str) -> dict:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    args = [a.replace(DOCUMENTED_BASE, server_url) for a in argv]
    assert args != list(argv), f"{argv} does not address {DOCUMENTED_BASE}"
    done = subprocess.run([*args, "--max-time", "60"], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_pages_hold_the_examples_this_file_checks() -> None:
    # Guards the reader below: a page edited into a shape it no longer parses must fail here,
    # not leave the other tests checking nothing.
    for page in PAGES:
        graded = [e for e in EXAMPLES if e.page == page.name and e.shown]
        assert graded, f"{page.name} shows no grade with its answer"
        assert any(posted_task_id(e) is None and "/tasks" in " ".join(e.argv) for e in EXAMPLES
                   if e.page == page.name), f"{page.name} shows no task listing"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.shown], ids=lambda e: f"{e.page}:{e.argv[-1][:60]}")
def test_a_shown_grade_is_what_the_service_answers(example: CurlExample, server_url: str) -> None:
    answer = _curl(example.argv, server_url)
    assert {k: answer.get(k) for k in example.shown} == example.shown, answer


@pytest.mark.parametrize("page", [p.name for p in PAGES])
def test_the_graded_task_is_one_the_pages_listing_returns(page: str, server_url: str) -> None:
    """The example's story holds: the task graded is one the listing before it handed out."""
    listed = {t["id"] for e in EXAMPLES if e.page == page and posted_task_id(e) is None
              for t in _curl(e.argv, server_url)["tasks"]}
    graded = {posted_task_id(e) for e in EXAMPLES if e.page == page} - {None}
    assert graded and graded <= listed, (graded, listed)


def test_a_correct_example_answer_changed_grades_incorrect(server_url: str) -> None:
    # The verdict comes from the task, not from the page: the same request with the number
    # moved by half is a wrong answer.
    for example in (e for e in EXAMPLES if e.shown.get("outcome") == "correct"):
        argv = list(example.argv)
        body = argv.index("-d") + 1
        number = re.search(r"Final answer: ([\d.]+)", argv[body])
        assert number, argv[body]
        moved = float(number.group(1)) * 1.5
        argv[body] = argv[body].replace(f"Final answer: {number.group(1)}", f"Final answer: {moved:g}")
        answer = _curl(tuple(argv), server_url)
        assert (answer["outcome"], answer["reward"]) == ("incorrect", 0.0), answer


@pytest.mark.parametrize("example", [e for page in PAGES for e in error_examples(page)],
                         ids=lambda e: f"{e.page}:{e.method} {e.path}")
def test_a_shown_error_is_what_the_service_answers(example, server_url: str) -> None:
    reply = httpx.request(example.method, server_url + example.path, json={}, timeout=30)
    assert reply.json() == example.body


def test_the_answer_reader_reads_what_a_page_writes() -> None:
    assert shown_fields('# answers {"reward": 1.0, "outcome": "correct", ...}') == {"reward": 1.0,
                                                                                    "outcome": "correct"}
    assert shown_fields("# a remark, not an answer") == {}

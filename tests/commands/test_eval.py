"""``scaling-grader eval`` end to end: the console script in a child process samples from the
fake OpenAI-compatible server, grades (in-process or through a real service), shows progress
and writes its report. Expected outcomes come from how each answer was built."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.integrations.tasks import local_public_tasks
from scaling_book.tasks import SYSTEM_PROMPT
from tests.support.oracle import right, wrong
from tests.support.policy import PolicyFake
from tests.support.server import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.low_priority]  # servers and commands: left out of `make test-fast`

SEED, N, R = 41, 8, 2


@pytest.fixture(scope="module")
def tasks() -> list[dict]:
    return local_public_tasks("synthetic", chapters=None, n=N, seed=SEED)


@pytest.fixture(scope="module")
def policy(tasks: list[dict]) -> Iterator[PolicyFake]:
    # Every third task answered wrongly, the others rightly.
    answers = {t["prompt"]: (wrong if i % 3 == 0 else right)(t["id"]) for i, t in enumerate(tasks)}
    fake = PolicyFake(answers).start()
    yield fake
    fake.stop()


def _expected_correct(tasks: list[dict]) -> dict[str, bool]:
    return {t["id"]: i % 3 != 0 for i, t in enumerate(tasks)}


def run_eval(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OPENAI_API_KEY": "sk-test-not-a-secret"}
    return subprocess.run([sys.executable, "-m", "app.cli", "eval", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # low priority: minutes without a CPU


def _check_report(out: Path, tasks: list[dict]) -> dict:
    correct = _expected_correct(tasks)
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert [(r["task_id"], r["rollout"]) for r in records] == [(t["id"], k) for t in tasks for k in range(R)]
    for r in records:
        assert r["outcome"] == ("correct" if correct[r["task_id"]] else "incorrect")
        assert r["reward"] == float(correct[r["task_id"]]) and r["sampling_error"] is None
    summary = json.loads((out / "summary.json").read_text())
    share = sum(correct.values()) / len(correct)
    assert summary["overall"]["accuracy"] == pytest.approx(share)
    assert summary["overall"]["pass_at_k"] == pytest.approx(share)
    assert summary["overall"]["rollouts"] == N * R and summary["overall"]["scored"] == N * R
    by_chapter: dict[str, list[bool]] = defaultdict(list)
    for t in tasks:
        by_chapter[t["chapter"]].append(correct[t["id"]])
    assert set(summary["by_chapter"]) == set(by_chapter)
    for chapter, flags in by_chapter.items():
        assert summary["by_chapter"][chapter]["accuracy"] == pytest.approx(sum(flags) / len(flags))
        assert summary["by_chapter"][chapter]["tasks"] == len(flags)
    assert summary["by_grading"]["numeric"]["rollouts"] == N * R
    markdown = (out / "summary.md").read_text()
    for chapter in by_chapter:
        assert f"| {chapter} |" in markdown
    png = (out / "accuracy_by_chapter.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    import matplotlib.image

    height, width = matplotlib.image.imread(out / "accuracy_by_chapter.png").shape[:2]
    assert height > 100 and width > 100
    return summary


def test_eval_in_process_writes_report_plot_and_shows_progress(tmp_path: Path, tasks, policy: PolicyFake) -> None:
    policy.reset()
    out = tmp_path / "report"
    done = run_eval("--model", "policy", "--base-url", policy.base_url, "--split", "synthetic", "-n", str(N),
                    "-r", str(R), "--seed", str(SEED), "-c", "4", "-o", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{N * R}/{N * R}" in done.stderr  # the progress bar reached the end
    summary = _check_report(out, tasks)
    assert summary["meta"]["graded_by"] == "in-process graders"
    sent = [r for r in policy.requests if r.path == "/v1/chat/completions"]
    assert len(sent) == N * R
    assert {r.body["model"] for r in sent} == {"policy"}
    assert all(r.body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT} for r in sent)
    assert {r.body["messages"][1]["content"] for r in sent} == {t["prompt"] for t in tasks}
    assert all(r.headers["authorization"] == "Bearer sk-test-not-a-secret" for r in sent)


def test_eval_through_the_service_gives_the_same_report(tmp_path: Path, tasks, policy: PolicyFake,
                                                        server_url: str) -> None:
    out = tmp_path / "report"
    done = run_eval("--model", "policy", "--base-url", policy.base_url, "--split", "synthetic", "-n", str(N),
                    "-r", str(R), "--seed", str(SEED), "--service-url", server_url, "--no-progress",
                    "-o", str(out))
    assert done.returncode == 0, done.stderr[-2000:]
    assert _check_report(out, tasks)["meta"]["graded_by"] == server_url


def test_sampling_failures_are_recorded_not_graded(tmp_path: Path, policy: PolicyFake) -> None:
    out = tmp_path / "report"
    done = run_eval("--model", "policy-500", "--base-url", policy.base_url, "-n", "3", "-r", "1",
                    "--max-retries", "0", "--no-progress", "-o", str(out))
    assert done.returncode == 1  # nothing could be sampled
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == 3
    assert all(r["sampling_error"] and r["reward"] is None and r["outcome"] is None for r in records)
    overall = json.loads((out / "summary.json").read_text())["overall"]
    assert overall["sampling_errors"] == 3 and overall["accuracy"] is None and overall["scored"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (["--split", "no-such-split"], "unknown split"),
    (["-r", "0"], "positive"),
])
def test_bad_arguments_are_refused_briefly(tmp_path: Path, policy: PolicyFake, args: list[str], message: str) -> None:
    done = run_eval("--model", "policy", "--base-url", policy.base_url, "-o", str(tmp_path / "r"), *args)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_exam_split_with_a_judge_reports_by_grading_kind(tmp_path: Path) -> None:
    exam = local_public_tasks("exam", chapters=["roofline"], n=None, seed=0)
    kinds = {t["grading"] for t in exam}
    assert kinds == {"numeric", "judge"}
    # Numeric items answered from the bank's reference values; judge items with prose the
    # judge-yes model accepts.
    answers = {t["prompt"]: right(t["id"]) if t["grading"] == "numeric" else "It is memory-bound." for t in exam}
    fake = PolicyFake(answers).start()
    try:
        out = tmp_path / "report"
        done = run_eval("--model", "policy", "--base-url", fake.base_url, "--split", "exam", "--chapters", "roofline",
                        "-n", "0", "--judge-model", "judge-yes", "--judge-base-url", fake.base_url,
                        "--no-progress", "-o", str(out))
    finally:
        fake.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((out / "summary.json").read_text())
    for kind in kinds:
        group = summary["by_grading"][kind]
        assert group["tasks"] == sum(t["grading"] == kind for t in exam)
        assert group["accuracy"] == 1.0
    assert {r.body["model"] for r in fake.requests} == {"policy", "judge-yes"}


def _roofline_exam() -> tuple[list[dict], dict[str, str]]:
    exam = local_public_tasks("exam", chapters=["roofline"], n=None, seed=0)
    answers = {t["prompt"]: right(t["id"]) if t["grading"] == "numeric" else "It is memory-bound." for t in exam}
    return exam, answers


def test_judge_items_without_a_judge_are_refused_before_sampling(tmp_path: Path) -> None:
    exam, answers = _roofline_exam()
    fake = PolicyFake(answers).start()
    try:
        done = run_eval("--model", "policy", "--base-url", fake.base_url, "--split", "exam", "--chapters", "roofline",
                        "-n", "0", "--no-progress", "-o", str(tmp_path / "report"))
    finally:
        fake.stop()
    judged = sum(t["grading"] == "judge" for t in exam)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"{judged} of the {len(exam)} tasks are judge-graded" in done.stderr and "--judge-model" in done.stderr
    assert fake.requests == [] and not (tmp_path / "report").exists()  # nothing sampled, nothing written


def test_a_grade_the_service_refuses_is_one_unscored_rollout(tmp_path: Path, server_url: str) -> None:
    # The test service has no judge: it refuses each judge item (422), which must cost that
    # rollout only, not the run.
    exam, answers = _roofline_exam()
    fake = PolicyFake(answers).start()
    try:
        out = tmp_path / "report"
        done = run_eval("--model", "policy", "--base-url", fake.base_url, "--split", "exam", "--chapters", "roofline",
                        "-n", "0", "--service-url", server_url, "--no-progress", "-o", str(out))
    finally:
        fake.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    kinds = {t["id"]: t["grading"] for t in exam}
    records = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == len(exam)
    for r in records:
        if kinds[r["task_id"]] == "judge":
            assert (r["outcome"], r["reward"], r["scored"]) == ("invalid_request", None, False)
            assert r["explanation"].startswith("judge_unavailable: ")
        else:
            assert (r["outcome"], r["reward"]) == ("correct", 1.0)
    overall = json.loads((out / "summary.json").read_text())["overall"]
    assert overall["unscored"] == sum(k == "judge" for k in kinds.values()) and overall["accuracy"] == 1.0

"""Exam and judge benchmarks.

1. Judge-grading throughput against the fake OpenAI-compatible server (a separate process): the
   baseline is bare ``openai`` chat-completion calls with the same messages; the measured path is
   ``app.graders.judge.grade_task`` (allow-list check, prompt building, verdict parsing, retries
   machinery, and the second call that confirms a verdict of correct), sequentially and with 8
   threads; the overhead is printed per call a grade makes.
2. Exam bank load: building every task (oracles run, chapters verified, locators resolved) against
   a baseline of only reading and hashing the chapter files it needs."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

from app.graders.judge import grade_task
from app.graders.judge_prompt import build_messages
from app.graders.options import GradeOptions, JudgeSpec
from app.settings import JudgeSettings, Settings
from app.tasks.base import Task
from app.tasks.book.source import CHAPTER_DIGESTS, COMMIT
from app.tasks.exam import source
from app.tasks.exam.bank import build_tasks

REPO = Path(__file__).resolve().parents[1]
TASK = Task(id="exam/bench/101", split="exam", prompt="Why is decode memory-bound?", grading="judge",
            gold="Each step streams all weights for very few tokens.",
            hidden={"context": "passage " * 200})


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


SIMULATED_LATENCY = 0.02  # seconds the "judge-slow" model takes to answer


def _start_fake() -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "tests.fake_openai", "--slow-seconds", str(SIMULATED_LATENCY)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def bench_judge(n: int) -> None:
    proc, base_url = _start_fake()
    try:
        settings = Settings(judge=JudgeSettings(allowed_base_urls=[base_url]))
        options = GradeOptions(judge=JudgeSpec(model="judge-yes", base_url=base_url))
        client = openai.OpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)
        messages = build_messages("Why is decode memory-bound?", str(TASK.gold), "weights dominate",
                                  TASK.hidden["context"])
        grade_task(TASK, "warm-up", options, settings)  # open the pooled connection first
        client.chat.completions.create(model="judge-yes", messages=messages, max_tokens=256)  # type: ignore[arg-type]

        start = time.perf_counter()
        for _ in range(n):
            client.chat.completions.create(model="judge-yes", messages=messages, max_tokens=256)  # type: ignore[arg-type]
        raw = time.perf_counter() - start

        start = time.perf_counter()
        results = [grade_task(TASK, f"weights dominate {i}", options, settings) for i in range(n)]
        seq = time.perf_counter() - start
        assert all(r.reward == 1.0 for r in results)

        # A real judge takes time to answer: threads hide that latency.
        slow = GradeOptions(judge=JudgeSpec(model="judge-slow", base_url=base_url))
        m = max(8, n // 4)
        start = time.perf_counter()
        results = [grade_task(TASK, f"w {i}", slow, settings) for i in range(m)]
        slow_seq = time.perf_counter() - start
        with ThreadPoolExecutor(8) as pool:
            start = time.perf_counter()
            results += list(pool.map(lambda i: grade_task(TASK, f"w {i}", slow, settings), range(m)))
            slow_par = time.perf_counter() - start
        assert all(r.reward == 1.0 for r in results)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
    # A verdict of correct is asked for twice (the second ask confirms it, JudgeSettings.confirm_correct):
    # the overhead is per call the grade makes.
    asks = 2 if settings.judge.confirm_correct else 1
    print(f"   judge overhead: bare openai calls {_rate(n, raw):.0f}/s, grade_task {_rate(n, seq):.0f}/s "
          f"with {asks} calls per correct grade (grade_task time per call / bare call time = "
          f"{seq / (raw * asks):.2f}), n={n}")
    print(f"   judge with {SIMULATED_LATENCY * 1e3:.0f} ms model latency: "
          f"sequential {_rate(m, slow_seq):.0f}/s, 8 threads {_rate(m, slow_par):.0f}/s "
          f"(speed-up {slow_seq / slow_par:.2f}x), n={m}")


def bench_bank(repeats: int) -> None:
    mirror = REPO.parent / "shared" / "book" / COMMIT
    settings = Settings(book_mirror=mirror)
    chapters = [c for c in CHAPTER_DIGESTS if (mirror / f"{c}.md").is_file()]

    start = time.perf_counter()
    for _ in range(repeats):
        for c in chapters:
            hashlib.sha256((mirror / f"{c}.md").read_bytes()).hexdigest()
    baseline = (time.perf_counter() - start) / repeats

    start = time.perf_counter()
    for _ in range(repeats):
        source._cache.clear()  # cold: re-read and re-verify the chapters every time
        tasks = build_tasks(settings)
    build = (time.perf_counter() - start) / repeats
    print(f"   bank: {len(tasks)} tasks built in {build * 1e3:.1f} ms vs {baseline * 1e3:.1f} ms to read "
          f"and hash the chapters alone (ratio {build / baseline:.2f}x), repeats={repeats}")


def main(smoke: bool) -> None:
    bench_judge(20 if smoke else 500)
    bench_bank(2 if smoke else 20)

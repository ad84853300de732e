"""Rows grading cost per completion against a naive baseline measured in the same run.

The baseline is what a trainer might write inline: find the last ```json fence with rfind,
json.loads it and compare rows with math.isclose. The grader does more (think stripping, fence
and bare-object extraction, type rules, per-field evidence); the ratio says what that costs."""

from __future__ import annotations

import json
import math
import random
import time

from app.graders.rows import grade_rows
from app.tasks.tasks.bank import build_tasks

REASONING = (
    "The matmul reads both inputs and writes the output once, so bytes = 2(BD + DF + BF); "
    "FLOPs are 2BDF, and the ratio decides which roofline applies. "
)


def completions(rng: random.Random, n: int) -> list[tuple[list[dict], str]]:
    tasks = build_tasks()
    out = []
    for i in range(n):
        gold = tasks[i % len(tasks)].expected_output["rows"]
        rows = [dict(r) for r in gold]
        if rng.random() < 0.5:  # half wrong somewhere
            row = rng.choice(rows)
            key = next((k for k, v in row.items() if isinstance(v, float)), None)
            if key:
                row[key] *= 1 + 1e-6
        body = json.dumps({"rows": rows})
        prose = REASONING * rng.randint(5, 30)
        if rng.random() < 0.7:
            text = f"{prose}\n```json\n{body}\n```\nThat is the answer."
        else:
            text = f"{prose}\nAnswer: {body}"
        out.append((gold, text))
    return out


def naive(gold: list[dict], completion: str) -> bool:
    start = completion.rfind("```json")
    if start != -1:
        end = completion.find("```", start + 7)
        text = completion[start + 7 : end if end != -1 else None]
    else:
        text = completion[completion.find("{") :]
        text = text[: text.rfind("}") + 1]
    try:
        rows = json.loads(text)["rows"]
    except (ValueError, KeyError, TypeError):
        return False
    if len(rows) != len(gold):
        return False
    for g, r in zip(gold, rows, strict=True):
        if set(g) != set(r):
            return False
        for k, v in g.items():
            if isinstance(v, float):
                if not math.isclose(r[k], v, rel_tol=1e-9):
                    return False
            elif r[k] != v:
                return False
    return True


def _time(fn, items, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        for gold, text in items:
            fn(gold, text)
        best = min(best, time.perf_counter() - start)
    return best / len(items)


def main(smoke: bool) -> None:
    rng = random.Random(0)
    items = completions(rng, 35 if smoke else 2000)
    repeat = 1 if smoke else 5
    agree = sum(
        (grade_rows(g, t, tolerance=1e-9).outcome.value == "correct") == naive(g, t) for g, t in items
    )
    t_naive = _time(naive, items, repeat)
    t_rows = _time(lambda g, t: grade_rows(g, t, tolerance=1e-9), items, repeat)
    chars = sum(len(t) for _, t in items) / len(items)
    print(f"   {len(items)} completions, mean {chars:.0f} chars; verdicts agree on {agree}/{len(items)}")
    print(f"   naive json.loads + compare: {t_naive * 1e6:8.1f} us/completion")
    print(f"   rows grader:                {t_rows * 1e6:8.1f} us/completion")
    print(f"   ratio rows/naive: {t_rows / t_naive:.1f}x")
    size = 20_000 if smoke else 200_000
    for name, text in (("braces", "{" * size), ("nested", '{"a":' * (size // 5))):
        start = time.perf_counter()
        grade_rows([{"a": 1}], text, tolerance=1e-9)
        t_bad = time.perf_counter() - start
        start = time.perf_counter()
        json.loads(json.dumps({"rows": [{"a": 1}], "pad": "x" * size}))
        t_parse = time.perf_counter() - start
        print(
            f"   degenerate {name} ({size} chars): {t_bad * 1e3:.1f} ms, "
            f"{t_bad / t_parse:.0f}x one json.loads of the same size"
        )

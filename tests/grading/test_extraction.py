"""Clients that want the answers, through a real server: a bisection client (the tolerance
override and per-value verdicts that once made every grade an exact oracle), a 512-guess batch,
and a scan of every served prompt and public field of every finite split for another item's gold.
Each fails if a gold comes out in fewer grades than the held-out budget allows.

What stays true of any reward (docs/splits.md): given enough grades it is an oracle; with only a
pass/fail at the task's own tolerance, a search costs hundreds of grades per item, and the budget
bounds it."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable

import httpx
import pytest

from app.quantities import find_quantities, parse_quantity
from app.settings import Settings
from app.tasks.base import Task
from app.tasks.registry import get_bank, split_names
from tests.support.book_mirror import mirror_path
from tests.support.server import running_server

pytestmark = pytest.mark.slow
BUDGET = Settings().held_out.grades_per_item
LOW, HIGH = 1e-15, 1e25  # an attacker's prior: any value an answer could have, in SI units


def _settings() -> Settings:
    return Settings(book_mirror=mirror_path())


def _single_value_tasks(split: str, n: int) -> list[Task]:
    bank = get_bank(split, _settings())
    tasks = [t for t in bank.batch(seed=0, n=bank.size() or 64) if t.grading == "numeric" and len(t.gold) == 1]
    return tasks[:n]


def _unit(gold_text: str) -> str:
    return gold_text.split(" ", 1)[1] if " " in gold_text else ""


def bisect_for_the_gold(passes: Callable[[float], bool], max_grades: int) -> tuple[float | None, int]:
    """The attack that used to work: with a tolerance of 0.999999 a value passes iff it lies in
    (1e-6 g, ~2 g). Scan decades for a passing value, then bisect the upper edge of the passing
    range (2 g) in log space. Returns (estimate of g or None, grades spent)."""
    spent = 0
    inside = None
    x = LOW
    while x < HIGH and spent < max_grades:
        spent += 1
        if passes(x):
            inside = x
            break
        x *= 100
    if inside is None:
        return None, spent
    lo, hi = inside, HIGH
    while hi / lo > 1.0005 and spent < max_grades:
        mid = math.sqrt(lo * hi)
        spent += 1
        if passes(mid):
            lo = mid
        else:
            hi = mid
    return lo / (1 + 0.999999), spent


def test_the_bisection_client_is_a_real_attack() -> None:
    # against the old oracle (the client's tolerance honoured) it recovers a gold to 0.1% quickly
    for g in (3.7e-4, 1.6e10, 2.0e17):
        estimate, spent = bisect_for_the_gold(lambda x, g=g: 1e-6 * g < x <= g * 1.999999, max_grades=200)
        assert estimate is not None and abs(estimate - g) / g < 1e-3 and spent < BUDGET


@pytest.fixture(scope="module")
def http() -> Iterable[httpx.Client]:
    with running_server() as url, httpx.Client(base_url=url, timeout=120) as client:
        yield client


def _reward(http: httpx.Client, task_id: str, value: float, unit: str) -> float | None:
    """The reward for one guess, or None once the server refuses (429)."""
    r = http.post("/v1/grade", json={"task_id": task_id, "completion": f"Final answer: {value!r} {unit}".strip(),
                                      "tolerance": 0.999999})
    if r.status_code == 429:
        return None
    assert r.status_code == 200, r.text
    body = r.json()
    # nothing finer than the reward comes back on a held-out item
    assert not body["values"] or body["split"] != "exam", body
    return float(body["reward"])


@pytest.mark.parametrize("split", ["exam", "book", "synthetic"])
def test_the_bisection_client_recovers_no_gold(http: httpx.Client, split: str) -> None:
    for task in _single_value_tasks(split, 2):
        unit = _unit(task.gold[0])
        refused = []

        def passes(x: float, task: Task = task, unit: str = unit, refused: list[float] = refused) -> bool:
            reward = _reward(http, task.id, x, unit)
            if reward is None:
                refused.append(x)
            return bool(reward)

        estimate, spent = bisect_for_the_gold(passes, max_grades=BUDGET + 10)
        gold = parse_quantity(task.gold[0]).value
        recovered = estimate is not None and abs(estimate - gold) <= 0.05 * abs(gold)
        assert not recovered, (task.id, spent)
        if split == "exam":  # held out: the budget ends the search
            assert spent <= BUDGET or refused


def test_a_512_guess_batch_is_refused_and_a_budget_of_guesses_misses(http: httpx.Client) -> None:
    [task] = _single_value_tasks("exam", 1)
    gold, unit = parse_quantity(task.gold[0]).value, _unit(task.gold[0])
    # 512 guesses 8% apart around the gold: one of them is within the 5% tolerance
    guesses = [gold * 1.08 ** (i - 256) for i in range(512)]
    assert any(abs(g - gold) <= 0.05 * gold for g in guesses)
    items = [{"task_id": task.id, "completion": f"Final answer: {g!r} {unit}".strip()} for g in guesses]
    for route in ("/v1/rewards", "/v1/grade/batch"):
        r = http.post(route, json={"items": items})
        assert r.status_code == 429 and "reward" not in r.text, r.text
    # the same search in budget-sized batches from the bottom of the range: refused before the gold
    spent, found = 0, False
    for start in range(0, len(items), 16):
        r = http.post("/v1/rewards", json={"items": items[start : start + 16]})
        if r.status_code == 429:
            break
        spent += 16
        found = found or 1.0 in r.json()["rewards"]
    assert not found and spent <= BUDGET


# ---- a scan of every served prompt and public field ------------------------------------------------


def _public_texts(http: httpx.Client, split: str, size: int) -> dict[str, str]:
    out: dict[str, str] = {}
    limit = Settings().limits.max_tasks_per_request
    for offset in range(0, size, limit):
        body = http.get("/v1/tasks", params={"split": split, "n": min(limit, size - offset), "offset": offset}).json()
        for t in body["tasks"]:
            out[t["id"]] = json.dumps(t, ensure_ascii=False)  # prompt, meta, tags: every public field
    return out


def _unit_golds(task: Task) -> list[tuple[str, float]]:
    golds = []
    for key in (task.gold, *(task.hidden.get("alternatives") or ())):
        for g in key:
            q = parse_quantity(g)
            if not q.dimensionless and q.value:
                golds.append((q.dimension, q.value))
    return golds


def find_leaks(tasks: list[Task], public: dict[str, str], window: int = 120) -> list[str]:
    """Every (item, public text) where the text states the item's gold: a value with a unit equal
    to a numeric gold in any spelling, or 120 characters of a judge reference."""
    stated = {tid: [(q.dimension, q.value) for q in find_quantities(text.replace("\\n", "\n"))
                    if not q.dimensionless] for tid, text in public.items()}
    flat = {tid: " ".join(text.replace("\\n", " ").split()) for tid, text in public.items()}
    leaks = []
    for task in tasks:
        if task.grading == "numeric":
            for dim, value in _unit_golds(task):
                leaks += [f"{task.id} gold {value:g} in {where}" for where, qs in stated.items()
                          if any(d == dim and abs(v - value) <= 1e-9 * abs(value) for d, v in qs)]
        elif task.grading == "judge":
            ref = " ".join(str(task.gold).split())
            pieces = {ref[i : i + window] for i in range(0, max(0, len(ref) - window) + 1, window // 4)}
            pieces = {p for p in pieces if len(p) == window}
            leaks += [f"{task.id} reference in {where}" for where, text in flat.items()
                      if any(json.dumps(p, ensure_ascii=False)[1:-1] in text or p in text for p in pieces)]
    return leaks


def test_the_scan_finds_a_planted_leak() -> None:
    task = Task(id="x/1", split="x", prompt="", grading="numeric", gold=("3.6 TB/s",))
    judge = Task(id="x/2", split="x", prompt="", grading="judge", gold="word " * 40)
    public = {"x/3": json.dumps({"prompt": "the node has 3600 GB/s of egress"}),
              "x/4": json.dumps({"prompt": "as the book says, " + "word " * 30}),
              "x/5": json.dumps({"prompt": "3.6 TB of memory, 3.5 TB/s"})}
    assert find_leaks([task, judge], public) == ["x/1 gold 3.6e+12 in x/3", "x/2 reference in x/4"]


def test_no_served_prompt_or_public_field_carries_an_items_gold(http: httpx.Client) -> None:
    settings = _settings()
    tasks: list[Task] = []
    public: dict[str, str] = {}
    for split in split_names():
        bank = get_bank(split, settings)
        size = bank.size()
        if size is None:  # generated without end: nothing finite to scan
            continue
        tasks += bank.batch(seed=0, n=size)
        public.update(_public_texts(http, split, size))
    assert len(public) == len(tasks) > 250
    assert find_leaks(tasks, public) == []

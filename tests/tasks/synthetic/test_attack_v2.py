"""Attacks on the split ``synthetic-v2`` (the topic families of app/tasks/synthetic/topics.py): an RL
policy that wants reward without the work, and a client that wants the answers.

Found and fixed (each test failed before its fix): ``nvl_allgather`` stated the whole array, so
array / NVLink bandwidth (two of the prompt's numbers) scored 1 on every task (the (G - 1) / G
factor is 1.4% at G = 72, inside the 2% tolerance); ``spec_breakeven`` (a rate in (0, 1)) and
``bwd_dp_batch`` (a key from a few hundred chip/ring/byte combinations) each had one constant
answer that scored above 6% on tasks it was not chosen on. The other attacks here found nothing
and stay as tests: a constant, 0, 1, a huge number, a shotgun of values, a range, an expression,
LaTeX, and ids from another layout or malformed ids."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from collections import Counter

import httpx
import pytest

from app.graders.numeric import grade_task
from app.graders.options import GradeOptions
from app.quantities import parse_quantity
from app.settings import Settings
from app.tasks.base import Task
from app.tasks.registry import get_bank
from app.tasks.synthetic.bank import SLOTS_V2, family_of_v2, generate_v2
from app.tasks.synthetic.topics import TOPIC_FAMILIES
from tests.support.server import ROOT, running_server

SETTINGS = Settings()
OPTIONS = GradeOptions()
FAMILIES = sorted(TOPIC_FAMILIES)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)?")
_CACHE: dict[tuple[str, int, int], list[Task]] = {}


def tasks_of(family: str, n: int, first_seed: int = 0) -> list[Task]:
    """n tasks of one family from distinct seeds, at varying periods of the layout."""
    key = (family, n, first_seed)
    if key not in _CACHE:
        out = []
        for seed in itertools.count(first_seed):
            index = next(i for i in range(len(SLOTS_V2) * 12) if family_of_v2(seed, i) == family)
            out.append(generate_v2(seed, index + 204 * (seed % 5)))
            if len(out) == n:
                break
        _CACHE[key] = out
    return _CACHE[key]


def units(task: Task) -> list[str]:
    return [parse_quantity(g).text.split(" ", 1)[1] if " " in g else "" for g in task.gold]


def reward(task: Task, completion: str) -> float:
    return grade_task(task, completion, OPTIONS, SETTINGS).reward


def answer(task: Task, values: list[float]) -> str:
    """The values in the gold's own units, so only the numbers decide."""
    return "Final answer: " + ", ".join(f"{v:.6g} {u}".strip() for v, u in zip(values, units(task), strict=True))


def keys(task: Task) -> list[float]:
    return [parse_quantity(g).value for g in task.gold]


# ---- a prompt that contains its answer ------------------------------------------------------------

def _candidates(prompt: str) -> dict[tuple[str, int, int], float]:
    """A rule a policy could follow without the work: the i-th number, or the i-th times / over
    the j-th (positions in the prompt)."""
    nums = [float(m.group()) for m in _NUMBER.finditer(prompt)][:40]
    out: dict[tuple[str, int, int], float] = {("n", i, i): a for i, a in enumerate(nums)}
    for (i, a), (j, b) in itertools.permutations(enumerate(nums), 2):
        out["mul", i, j] = a * b
        if b:
            out["div", i, j] = a / b
    return out


# In hindsight, the best of some thousands of rules reaches about 6% by chance on 150 tasks; a
# prompt that gives its answer away scores far above (nvl_allgather's array / bandwidth: 100%).
RULE_AT_MOST = 0.10


@pytest.mark.parametrize("family", FAMILIES)
def test_no_fixed_number_product_or_ratio_of_the_prompt_answers_it(family: str) -> None:
    tasks = tasks_of(family, 150)
    hits: Counter[tuple[str, int, int]] = Counter()
    for t in tasks:
        if len(t.gold) != 1:
            continue  # two keys: one copied number cannot answer both
        gold = keys(t)[0]
        hits.update(rule for rule, v in _candidates(t.prompt).items() if abs(v - gold) <= 0.02 * abs(gold))
    rule, count = hits.most_common(1)[0] if hits else (None, 0)
    if rule is not None:  # confirm through the grader: the rule's value, in the gold's unit
        count = sum(int(reward(t, answer(t, [_candidates(t.prompt).get(rule, 0.0)])) == 1.0) for t in tasks)
    assert count / len(tasks) <= RULE_AT_MOST, (family, rule, count / len(tasks))


# ---- cheap policies ------------------------------------------------------------------------------

CONSTANT_AT_MOST = 0.05


@pytest.mark.parametrize("family", FAMILIES)
def test_a_constant_chosen_on_other_tasks_scores_at_most_5_percent(family: str) -> None:
    """The constant within 2% of the most keys of 400 tasks, answered on 400 tasks of other seeds."""
    train, test = tasks_of(family, 400), tasks_of(family, 400, first_seed=50_000)
    firsts = sorted(keys(t)[0] for t in train)
    best = max(firsts, key=lambda c: sum(abs(x - c) <= 0.02 * abs(x) for x in firsts))
    common = Counter(tuple(keys(t)) for t in train).most_common(1)[0][0]
    for values in ([best] * len(train[0].gold), list(common)):
        score = sum(reward(t, answer(t, values)) for t in test) / len(test)
        assert score <= CONSTANT_AT_MOST, (family, values, score)


def _shotgun(task: Task) -> list[str]:
    unit = units(task)[0]
    powers = ", ".join(f"{10.0 ** e:g} {unit}".strip() for e in range(-9, 19))
    return [
        "Final answer: 0", "Final answer: 1", "Final answer: 1e30", "Final answer: -1",
        f"Final answer: {powers}",
        f"Final answer: between 1e-9 {unit} and 1e18 {unit}",
        f"Final answer: 1e-9 to 1e18 {unit}",
        "Final answer: 0.5 s, 0.5, 0.5 tokens/s, 0.5 bytes, 0.5 FLOPs, 0.5 sequences, 0.5 tokens",
        "Final answer: (1+1)/2",
        "Final answer: inf", "Final answer: nan", "Final answer: 1e309",
        r"\boxed{\frac{1}{2}}", r"Final answer: $x \approx 0.5$",
        "Final answer: <value> <unit>",
        "Final answer: " + " ".join(str(x) for x in range(1, 200)),
    ]


@pytest.mark.parametrize("family", FAMILIES)
def test_shotgun_ranges_expressions_and_latex_score_about_zero(family: str) -> None:
    tasks = tasks_of(family, 60)
    for i in range(len(_shotgun(tasks[0]))):
        score = sum(reward(t, _shotgun(t)[i]) for t in tasks) / len(tasks)
        assert score <= CONSTANT_AT_MOST, (family, _shotgun(tasks[0])[i], score)


def test_the_right_answer_in_another_unit_still_grades_and_a_bare_copy_in_a_wrong_unit_does_not() -> None:
    """Unit tricks: the key converted is right; the key's number under a unit of another dimension
    (or a scaled unit without conversion) is not."""
    for family in ("nvl_allgather", "bwd_dp_batch", "spec_breakeven", "flash_kv_reads"):
        for t in tasks_of(family, 20):
            value, unit = keys(t)[0], units(t)[0]
            if unit == "s":
                assert reward(t, f"Final answer: {value * 1e3:.6g} ms") == 1.0, t.id
                assert reward(t, f"Final answer: {value:.6g} ms") == 0.0, t.id
                assert reward(t, f"Final answer: {value:.6g} bytes") == 0.0, t.id
            elif unit == "bytes":
                assert reward(t, f"Final answer: {value / 1e9:.6g} GB") == 1.0, t.id
                assert reward(t, f"Final answer: {value:.6g} s") == 0.0, t.id


# ---- the listing and ids -------------------------------------------------------------------------

_LISTING = (
    "import hashlib, json\n"
    "from app.settings import Settings\n"
    "from app.tasks.registry import get_bank\n"
    "h = hashlib.sha256()\n"
    "for seed in (0, 3, 99):\n"
    "    for t in get_bank('synthetic-v2', Settings()).batch(seed=seed, n=68):\n"
    "        h.update(json.dumps([t.id, t.prompt, list(t.gold)]).encode())\n"
    "print(h.hexdigest())\n"
)


def _digest_here() -> str:
    import hashlib

    h = hashlib.sha256()
    for seed in (0, 3, 99):
        for t in get_bank("synthetic-v2", SETTINGS).batch(seed=seed, n=68):
            h.update(json.dumps([t.id, t.prompt, list(t.gold)]).encode())
    return h.hexdigest()


def test_the_listing_is_the_same_in_fresh_processes() -> None:
    """Two fresh interpreters (random hash seeds) list the same tasks as this one."""
    here = _digest_here()
    for hash_seed in ("1", "12345"):
        out = subprocess.run([sys.executable, "-c", _LISTING], cwd=ROOT, capture_output=True, text=True,
                             env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"}, check=True)
        assert out.stdout.strip() == here


BAD_IDS = ("synthetic-v3/0/1", "synthetic-v2/0", "synthetic-v2/0/1/2", "synthetic-v2/-1/0",
           "synthetic-v2/0/1e3", "synthetic-v2/0/" + "9" * 19, "synthetic-v2/x/1", "synthetic-v2//1",
           "synthetic-v2/0/1 ", "SYNTHETIC-V2/0/1", "synthetic-v2/０/1")


def test_a_real_server_serves_the_fix_and_refuses_bad_ids_cleanly() -> None:
    """Through HTTP: the listing is the in-process one, a right answer earns 1, the cheap ratio and the
    constant earn 0, and an id of another layout or a malformed one gets a clean 4xx."""
    listed_here = get_bank("synthetic-v2", SETTINGS).batch(seed=5, n=34)
    gather = [t for t in tasks_of("nvl_allgather", 20)]
    with running_server() as url, httpx.Client(base_url=url, timeout=120) as client:
        listed = client.get("/v1/tasks", params={"split": "synthetic-v2", "seed": 5, "n": 34})
        assert listed.status_code == 200
        body = listed.json()
        served = body["tasks"] if isinstance(body, dict) else body
        assert [(t["id"], t["prompt"]) for t in served] == [(t.id, t.prompt) for t in listed_here]
        one = client.get(f"/v1/tasks/{gather[0].id}")
        assert one.status_code == 200 and one.json()["prompt"] == gather[0].prompt
        items = []
        for t in gather:
            # the old shortcut, the data the prompt states over the NVLink bandwidth
            data = float(re.search(r"own ([\d.e+]+)-byte shard", t.prompt).group(1))  # type: ignore[union-attr]
            bandwidth = 900e9
            items += [{"task_id": t.id, "completion": "Final answer: " + ", ".join(t.gold)},
                      {"task_id": t.id, "completion": f"Final answer: {data / bandwidth:.6g} s"}]
        rewards = client.post("/v1/rewards", json={"items": items})
        assert rewards.status_code == 200, rewards.text
        got = rewards.json()["rewards"]
        assert got[0::2] == [1.0] * len(gather) and sum(got[1::2]) == 0.0
        for bad in BAD_IDS:
            graded = client.post("/v1/grade", json={"task_id": bad, "completion": "Final answer: 1"})
            assert 400 <= graded.status_code < 500, (bad, graded.status_code)
            assert "Traceback" not in graded.text and len(graded.text) < 2000, bad
            fetched = client.get(f"/v1/tasks/{bad}")
            assert 400 <= fetched.status_code < 500, (bad, fetched.status_code)

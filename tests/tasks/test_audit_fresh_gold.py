"""An audit of the answers a client can read, with the attack a policy would make: copy a figure
of a served prompt, exactly as it is written there ("13B", "70e9 parameters", "240"), into the
final answer, and let the service's own numeric grader decide whether it scores. The checks in
test_answers_not_served.py and the extraction scan compare quantities by dimension, so a figure
that the prompt writes as a model's name (13B, read there as 13 bytes) or as a bare number (a
batch size of 240) passed them although the grader reads it as the count the key is.

What it found, on the code before this file:
- book/training/q1 asks for LLaMA-2 13B's parameter count (13.015e9): "13B" scored 1.0, the
  model's name within 0.2% of the key (applied-training/q1 had had its 70B cut for that reason);
- the book's worked answer to applied-training/q1 (the table ending in 56.3e9 + 2.1e9 + 12e9 =
  70.4e9, an answer that is the text after its question rather than an answer block) stood in
  the context of applied-training/q2 to q9: earlier answers are cut from contexts, this one was not;
- book/inference/q1's context restates the critical batch sizes 240 and 120 (int8 weights with
  bf16 compute), the keys of roofline/q2 (121.6) and applied-inference/q4 (243.2, 121.6, 243.2)
  within 1.3%: copying them from that prompt answered both items.
"""

from __future__ import annotations

import re
from functools import cache, lru_cache

import pytest

from app.graders.numeric import grade_numeric
from app.quantities import Quantity, find_quantities, parse_quantity
from app.settings import Settings
from app.tasks.base import Task
from app.tasks.book.annotations import load_annotations
from app.tasks.registry import get_bank
from app.tasks.splits import tolerance_for
from tests.tasks.test_answers_not_served import COINCIDENCES

# A figure as a prompt writes it: a number and the word glued to it or following it ("13B",
# "70e9 parameters", "19 ms", "4x4"), besides every quantity the parser reads.
FIGURE = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?"
                    r"(?:\s?(?:[kKMGTP]i?B|billion|million|B|[a-zA-Zµ/%]+(?:/[a-zA-Z]+)?))?")

# Item -> why a figure of its own prompt lies within the tolerance of its key by chance.
SELF_COINCIDENCES = {
    **COINCIDENCES,
    "book/applied-inference/q12": "the key, 4.022 prefill servers per generate server, lies within 1% of 4 (int4 "
                                  "on 4 chips) and within 5% of 4.2 (TPU v5p's price in dollars per hour)",
}

# The book restates its results rounded to two or three figures (120 for 121.6, 70.4e9 for
# 70.55e9): within 1.5% of the key. A looser bound matches unrelated figures of other chapters
# (a 3-digit key at 5% matches about one number in ten), so the cross-item check uses this one.
RESTATED = 0.015
# Item -> (figures of other prompts allowed to score as its answer, why).
OTHER_PROMPTS_ALLOWED = {
    "book/training/q1": ({"13B", "13e9", "13e9 parameters"},
                         "the model's name, under which later questions and chapters use it, and q2's data"),
    "book/applied-training/q1": ({"70B", "70e9", "70e9 parameters"},
                                 "the model's name, and the parameter count later questions need as data"),
    "book/applied-inference/q10": ({"0.91 s"}, "q12 builds on the prefill time: its Assumptions must state it"),
}


@lru_cache(maxsize=1)
def _banks() -> dict[str, list[Task]]:
    settings = Settings()
    return {split: get_bank(split, settings).tasks() for split in ("book", "exam")}


def figures(text: str) -> set[str]:
    return {q.text for q in find_quantities(text)} | {m.group(0).strip() for m in FIGURE.finditer(text)}


@cache
def _scores(gold: str, figure: str, tolerance: float) -> bool:
    return grade_numeric([gold], f"Final answer: {figure}", tolerance=tolerance).reward >= 1.0


def copied_answer(task: Task, text: str, tolerance: float) -> list[str] | None:
    """For each value of a numeric key, a figure of ``text`` that the grader accepts for it, or
    None when some value has none. Keys of small bare whole numbers only (counts below 10, which
    every prompt states as inputs) are not checked; a small ratio (4.022) is."""
    golds = list(task.gold)
    if all(_small_count(parse_quantity(g)) for g in golds):
        return None
    offered = sorted(figures(text))
    hits = []
    for gold in golds:
        hit = next((f for f in offered if _scores(gold, f, tolerance)), None)
        if hit is None:
            return None
        hits.append(hit)
    return hits


def _small_count(q: Quantity) -> bool:
    return q.dimensionless and abs(q.value) < 10 and float(q.value).is_integer()


def _tolerance(task: Task) -> float:
    return task.tolerance or tolerance_for(task.split, Settings())


@pytest.mark.parametrize("split", ["book", "exam"])
def test_no_prompt_is_answered_by_copying_one_of_its_own_figures(split: str) -> None:
    copied = {}
    for task in _banks()[split]:
        if task.grading != "numeric" or task.id in SELF_COINCIDENCES:
            continue
        hits = copied_answer(task, task.prompt, _tolerance(task))
        if hits is not None:
            copied[task.id] = (list(task.gold), hits)
    assert copied == {}


def test_self_coincidences_still_match() -> None:
    # a listed coincidence that no longer matches would excuse a future leak: remove it
    by_id = {t.id: t for tasks in _banks().values() for t in tasks}
    for task_id in SELF_COINCIDENCES:
        task = by_id[task_id]
        assert copied_answer(task, task.prompt, _tolerance(task)) is not None, task_id


def _without_source_line(prompt: str) -> str:
    return re.sub(r"^Source: .*$", "", prompt, flags=re.MULTILINE)  # line numbers of the source file


def _everyday_numbers(task: Task) -> bool:
    """Keys that are plain numbers below 10 or whole counts below 100 (16 chips, 8 ways, 4.022)."""
    return all((q := parse_quantity(g)).dimensionless and (abs(q.value) < 10 or (abs(q.value) < 100 and
               float(q.value).is_integer())) for g in task.gold)


def test_no_book_prompt_restates_another_items_key() -> None:
    """Copying figures of another book prompt (its context, its Assumptions) must not answer an
    item, at the precision the book restates its results with. Keys that are everyday numbers
    (16 chips, 8 ways, a ratio of 4.022) are left out: every chapter states such numbers."""
    tasks = _banks()["book"]
    copied = []
    for task in tasks:
        if task.grading != "numeric" or _everyday_numbers(task):
            continue
        allowed = OTHER_PROMPTS_ALLOWED.get(task.id, (set(), ""))[0]
        for other in tasks:
            if other.id == task.id:
                continue
            text = _without_source_line(other.prompt)
            for figure in allowed:  # a listed figure is taken out of the text before the attack
                text = re.sub(rf"(?<![\w.]){re.escape(figure)}(?![\w.])", " ", text)
            hits = copied_answer(task, text, min(RESTATED, _tolerance(task)))
            if hits is not None:
                copied.append((task.id, other.id, hits))
    assert copied == []


def test_the_cross_item_allowances_are_still_needed() -> None:
    # each allowed item is still answered from some other prompt by an allowed figure: else drop it
    tasks = _banks()["book"]
    by_id = {t.id: t for t in tasks}
    for task_id, (allowed, _) in OTHER_PROMPTS_ALLOWED.items():
        task = by_id[task_id]
        used = {h for other in tasks if other.id != task_id
                for h in (copied_answer(task, _without_source_line(other.prompt), RESTATED) or [])}
        assert used & allowed, task_id


def test_an_answer_that_follows_its_question_is_cut_from_later_contexts() -> None:
    """A question answered by the text after it (``answer_starts``) has no answer block, so the
    cut of answer blocks left its answer in the context of every later question of its section."""
    annotations = load_annotations()
    tasks = _banks()["book"]
    followed = [t for t in tasks if annotations[t.id.removeprefix("book/").replace("/", ".")].answer_starts]
    assert followed, "no item is answered by the text after its question any more: drop this test"
    shown = []
    for task in followed:
        reference = " ".join(str(task.hidden["reference"]).split())
        bold = {b for b in re.findall(r"\*\*([^*]+)\*\*", reference) if re.search(r"\d", b)}  # its figures
        rows = [line for line in str(task.hidden["reference"]).splitlines() if line.count("|") >= 3]
        assert bold and rows, task.id
        for other in tasks:
            if other.id == task.id:
                continue
            if any(f"**{b}**" in other.prompt for b in bold) or any(row.strip() in other.prompt for row in rows):
                shown.append((task.id, other.id))
    assert shown == []


def test_the_copy_check_can_fail() -> None:
    task = Task(id="book/x/q1", split="book", prompt="", grading="numeric", gold=("13015449600",))
    assert copied_answer(task, "How many parameters does LLaMA-2 13B have?", 0.05) == ["13B"]
    assert copied_answer(task, "How many parameters does LLaMA-2 [omitted] have?", 0.05) is None
    batch = Task(id="book/x/q2", split="book", prompt="", grading="numeric", gold=("243.2", "121.6", "243.2"))
    assert copied_answer(batch, "drops to 120. With int8 it jumps back up to 240 since", 0.05) is not None
    assert copied_answer(batch, "drops to [omitted]. It jumps back up to [omitted]", 0.05) is None


@pytest.mark.xfail(strict=True, reason="layouts 1 and 2 are frozen: the draw cannot change without moving every "
                                       "seed's tasks. About 0.5% of training_memory tasks draw a model whose "
                                       "16 bytes per parameter equal one chip's HBM (1e9 parameters on a 1.6e10-byte "
                                       "TPU v5e), so the prompt's HBM figure and '1 chips' score 1.0")
def test_no_synthetic_training_memory_key_is_the_prompts_hbm_figure() -> None:
    settings = Settings()
    copied = []
    for split in ("synthetic", "synthetic-v2"):
        bank = get_bank(split, settings)
        for seed in range(0, 3000, 3):
            for task in bank.batch(seed=seed * 7919, n=17):
                if task.meta["family"] != "training_memory":
                    continue
                hbm = task.meta["params"]["hbm_bytes"]
                answer = f"Final answer: {hbm:g} bytes, 1 chips"
                if grade_numeric(list(task.gold), answer, tolerance=_tolerance(task)).reward >= 1.0:
                    copied.append(task.id)
    assert copied == []

"""One fence grammar for every extractor: a block fenced with ~~~ is code for the impl grader,
and a fence (not an answer) for the numeric and rows graders, exactly as a ``` block is."""

from __future__ import annotations

import inspect
import json

import pytest

from app.graders.completion import fences, prose, strip_thinking
from app.graders.dispatch import grade
from app.graders.impl_source import extract_code
from app.graders.json_answer import find_json_answer
from app.graders.numeric import grade_numeric
from app.graders.options import GradeOptions
from app.graders.result import Outcome
from app.graders.rows import grade_rows
from app.settings import SandboxSettings, Settings
from app.tasks import registry
from app.tasks.impl import reference

CODE = "def f(x):\n    return 2 * x\n"
ROWS = [{"batch": 8, "intensity": 682.67}]
ROWS_JSON = json.dumps({"rows": ROWS})

# (name, completion, the code impl extracts for entry f)
IMPL_TABLE = [
    ("backtick python fence", f"Here:\n```python\n{CODE}```\n", CODE),
    ("tilde python fence", f"Here:\n~~~python\n{CODE}~~~\n", CODE),
    ("tilde unlabelled fence", f"Here:\n~~~\n{CODE}~~~\n", CODE),
    ("tilde py fence closed on the code's line", f"~~~py\n{CODE.rstrip()}~~~", CODE.rstrip()),
    ("tilde fence left open", f"~~~python\n{CODE}", CODE),
    ("tilde fence of another language", f"~~~bash\n{CODE}~~~\n", None),
    ("tilde fence inside unfinished thinking", f"<think>~~~python\n{CODE}~~~", None),
    ("a backtick mark does not close a tilde fence", f"~~~python\n{CODE}```\nprose~~~", f"{CODE}```\nprose"),
]


@pytest.mark.parametrize(("name", "completion", "expected"), IMPL_TABLE, ids=[row[0] for row in IMPL_TABLE])
def test_impl_extracts_code_from_either_fence(name: str, completion: str, expected: str | None) -> None:
    assert extract_code(completion, "f") == expected


# (name, completion, outcome of grading against gold 3 s at 2%)
NUMERIC_TABLE = [
    ("answer after a backtick fence", "```\nFinal answer: 2 s\n```\nFinal answer: 3 s", Outcome.correct),
    ("answer after a tilde fence", "~~~\nFinal answer: 2 s\n~~~\nFinal answer: 3 s", Outcome.correct),
    ("wrong answer hidden in a tilde fence is not read",
     "Final answer: 2 s\n~~~python\nprint('Final answer: 3 s')\n~~~", Outcome.incorrect),
    ("right answer only inside a tilde fence", "~~~text\nFinal answer: 3 s\n~~~", Outcome.no_answer),
    ("tilde fence left open swallows the rest", "~~~\nFinal answer: 3 s", Outcome.no_answer),
    ("one-line tilde span is code", "Final answer: 3 s\nnot this: ~~~Final answer: 2 s~~~", Outcome.correct),
    ("one-line backtick span then a later answer", "it is ```5 GB``` per chip\nFinal answer: 3 s", Outcome.correct),
]


@pytest.mark.parametrize(("name", "completion", "expected"), NUMERIC_TABLE, ids=[row[0] for row in NUMERIC_TABLE])
def test_numeric_reads_no_answer_inside_either_fence(name: str, completion: str, expected: Outcome) -> None:
    assert grade_numeric(["3 s"], completion, tolerance=0.02).outcome is expected


# (name, completion, outcome of rows grading against ROWS)
ROWS_TABLE = [
    ("tilde json fence", f"~~~json\n{ROWS_JSON}\n~~~", Outcome.correct),
    ("tilde unlabelled fence", f"~~~\n{ROWS_JSON}\n~~~", Outcome.correct),
    ("tilde python fence is not an answer", f"~~~python\n{ROWS_JSON}\n~~~", Outcome.no_answer),
    ("tilde python fence ignored, bare answer used", f"~~~python\nx = {{'rows': []}}\n~~~\n{ROWS_JSON}",
     Outcome.correct),
    ("last of a backtick and a tilde fence wins",
     f"```json\n{json.dumps({'rows': [{'batch': 9, 'intensity': 1.0}]})}\n```\n~~~json\n{ROWS_JSON}\n~~~",
     Outcome.correct),
]


@pytest.mark.parametrize(("name", "completion", "expected"), ROWS_TABLE, ids=[row[0] for row in ROWS_TABLE])
def test_rows_reads_tilde_fences_like_backtick_fences(name: str, completion: str, expected: Outcome) -> None:
    assert grade_rows(ROWS, completion, tolerance=1e-9).outcome is expected


def test_the_extractors_share_one_grammar() -> None:
    text = f"intro\n~~~python\n{CODE}~~~\nmiddle\n```json\n{ROWS_JSON}\n```\nend"
    blocks = fences(text)
    assert [(b.label, b.body) for b in blocks] == [("python", CODE), ("json", f"{ROWS_JSON}\n")]
    assert extract_code(text, "f") == CODE
    answer = find_json_answer(text)
    assert answer is not None and answer.source == "fence" and answer.value == {"rows": ROWS}
    assert prose(text).split() == ["intro", "middle", "end"]


def test_thinking_is_stripped_before_fences_are_read() -> None:
    text = f"<think>~~~python\ndef f(x):\n    return 0\n~~~</think>~~~python\n{CODE}~~~"
    assert "return 0" not in strip_thinking(text)
    assert extract_code(text, "f") == CODE


@pytest.mark.slow
def test_a_tilde_fenced_submission_is_graded_in_the_sandbox() -> None:
    settings = Settings(sandbox=SandboxSettings(wall_seconds=20, warm_pool_size=2))
    task = registry.resolve_task("impl/critical_batch_size", settings)
    source = inspect.getsource(reference.critical_batch_size)
    result = grade(task, f"My answer:\n~~~python\n{source}~~~\n", GradeOptions(all_or_nothing=True), settings)
    assert result.outcome is Outcome.correct and result.reward == 1.0

"""Degenerate completions (thousands of unclosed ``<think>``, ``\\boxed{`` or backtick runs) are
graded in linear time, with the same answer the simple, quadratic regexes would have found.

Inline grading runs on the server's event loop, so one 200,000-character completion that costs
seconds stalls every other request; before the fix each of these took 10 s or more. The timeout is
a safety net three orders of magnitude above the linear cost, not a benchmark."""

from __future__ import annotations

import random
import re

import pytest

from app.graders import extract
from app.graders.completion import fences, strip_thinking
from app.graders.extract import extract_answer
from app.graders.impl_source import extract_code
from app.graders.json_answer import find_json_answer
from app.graders.judge_prompt import OMITTED, candidate_text
from app.graders.numeric import grade_numeric
from app.graders.result import Outcome

SIZE = 200_000  # the service's default max_completion_chars

# ---- oracles: the straightforward regex forms the linear code replaced -------------------------

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCED = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def oracle_strip_thinking(text: str) -> str:
    text = _THINK.sub(" ", text)
    closes = [m.end() for m in re.finditer("</think>", text, re.IGNORECASE)]
    if closes:
        return text[closes[-1]:]
    return "" if re.search("<think>", text, re.IGNORECASE) else text


def oracle_last_boxed(text: str) -> tuple[int, str] | None:
    for m in reversed(list(re.finditer(r"\\(?:boxed|fbox)\s*\{", text))):
        depth = 1
        for i in range(m.end(), len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return m.start(), text[m.end():i]
    return None


TOKENS = ["<think>", "</think>", "<THINK>", "\\boxed{", "\\fbox {", "{", "}", "```", "```py", "\n", " ", "x",
          "2 s", "Final answer: "]


def random_texts(n: int) -> list[str]:
    rng = random.Random(1234)
    return ["".join(rng.choice(TOKENS) for _ in range(rng.randint(0, 30))) for _ in range(n)]


def test_linear_forms_agree_with_the_regex_oracles() -> None:
    for text in random_texts(3000):
        assert strip_thinking(text) == oracle_strip_thinking(text), text
        assert extract._last_boxed(text) == oracle_last_boxed(text), text
        found = [(f.label, f.body) for f in fences(text)]
        assert found == [(m.group(1), m.group(2)) for m in _FENCED.finditer(text)], text


# ---- degenerate completions, by grader -------------------------------------------------------

HOSTILE = {
    "unclosed think openers": "<think>" * (SIZE // 7),
    "unclosed boxes after an answer": "Final answer: 2 s " + "\\boxed{" * (SIZE // 7),
    "backticks without a newline": "`" * SIZE,
    "fence openers without a newline": "``` " * (SIZE // 4),
    "closed think then unclosed openers": "<think>a</think>" + "<think>" * (SIZE // 7),
}


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", HOSTILE)
def test_numeric_grading_of_degenerate_output_is_fast_and_unrewarded(name: str) -> None:
    completion = HOSTILE[name]
    result = grade_numeric(["3 s"], completion, tolerance=0.02)
    assert result.reward == 0.0
    # the one answer stated is found even after the junk
    if "2 s" in completion:
        assert result.values[0].extracted == "2 s"
    else:
        assert result.outcome is Outcome.no_answer


@pytest.mark.timeout(20)
@pytest.mark.parametrize("name", HOSTILE)
def test_other_extractors_handle_degenerate_output(name: str) -> None:
    completion = HOSTILE[name]
    assert extract_code(completion, "f") is None
    assert find_json_answer(completion) is None
    expected = strip_thinking(completion).strip()  # checked against the oracle above
    if len(expected) > 8000:  # head and tail kept
        expected = expected[:4000] + OMITTED.format(n=len(expected) - 8000) + expected[-4000:]
    assert candidate_text(completion, 8000) == expected


@pytest.mark.timeout(20)
def test_answer_after_degenerate_thinking_is_still_found() -> None:
    completion = "<think>" * (SIZE // 8) + "</think>Final answer: 2 s"
    assert extract_answer(completion).text == "2 s"
    code = "```python\ndef f():\n    return 1\n```"
    assert extract_code(code + "``` " * (SIZE // 8), "f") == "def f():\n    return 1\n"

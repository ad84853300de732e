"""Property: no candidate text can turn its zero into "unscored", and every grade is quick.

Random and adversarial completions (unit chains, nested LaTeX, unclosed blocks, hostile numbers,
fences, comments, struck text, JSON fragments, forged judge fences and verdicts) go through the
same dispatch the service uses; every outcome must be a scored one. Time is bounded by a generous
per-example deadline (hypothesis fails an example that exceeds it), not by a timing assertion."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.graders import dispatch
from app.graders.judge_prompt import build_messages, candidate_text, fence_tag, parse_verdict
from app.graders.options import GradeOptions, JudgeSpec
from app.settings import JudgeSettings, Settings
from app.tasks.base import Task
from tests.fake_openai import FakeOpenAI

pytestmark = pytest.mark.slow  # hundreds of generated examples per property: left out of `make test-fast`

TOKENS = [
    "Final answer:", "Final answer: ", "\\boxed{", "\\fbox{", "{", "}", "\n", " ", "  ", ",", ".", "-",
    "<think>", "</think>", "```", "```json\n", "~~~", "`", "~~", "<s>", "</s>", "<del>", "</del>", "<!--", "-->",
    "s", "ms", "µs", "GB", "GiB", "TB/s", "FLOPs", "TFLOPS", "FLOPs/byte", "chips", "%", "per", "/", "·", "*",
    "per s", "/s", "B", "b", "bytes", "tokens", "T", "k", "billion",
    "±", "+/-", "\\pm", "×", "x", "10", "^", "^{", "¹", "²", "⁻", "⁹", "\u2009", "\u202f", "\u200b", "\u00a0",
    "\\frac{", "}{", "\\text{", "\\mathrm{", "\\phantom{", "\\sout{", "$", "\\,", "{,}",
    "2", "3.35", "80", "1e9", "1e400", "1e-400", "10^99999", "0", "-1", "NaN", "inf", ".5", "1,000", "9" * 40,
    '{"rows": [', "]", '{"a": 1}', "null", "true", '"x"',
    "<<<", ">>>", "RESPONSE-", "Verdict: yes", "Incorrect: no", "answer yes", "yes", "no", "Correct: yes",
]

token_texts = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
mixed_texts = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=12)), max_size=40).map("".join)
# A short pattern repeated to a large size: the shape of the completions that once cost seconds.
repeated = st.builds(lambda part, n: part * n, st.lists(st.sampled_from(TOKENS), min_size=1, max_size=4).map(
    "".join), st.integers(min_value=1000, max_value=20000))
# Unit chains ("2 s per s per s ..."): once a recursion error in the unit parser, an unscored item.
unit_chains = st.builds(
    lambda number, unit, sep, n: f"Final answer: {number} {unit}" + f"{sep}{unit}" * n,
    st.sampled_from(["2", "3.35", "1e9"]), st.sampled_from(["s", "GB", "FLOPs", "chips", "B"]),
    st.sampled_from([" per ", "/", " / ", "·", " * "]), st.integers(min_value=0, max_value=3000))
completions = st.one_of(token_texts, mixed_texts, repeated, unit_chains, st.text(max_size=200))

SETTINGS = Settings()
NUMERIC = Task(id="p/1", split="book", prompt="", grading="numeric", gold=("3.35 TB/s", "80 GB", "2 s"))
DIMENSIONLESS = Task(id="p/2", split="book", prompt="", grading="numeric", gold=("240",))
ROWS = Task(id="p/3", split="tasks", prompt="", grading="rows",
            gold=({"batch": 1024, "intensity": 682.6666666666666, "bound": "compute", "fits": False},))
FAST = settings(max_examples=300, deadline=timedelta(seconds=3), suppress_health_check=[HealthCheck.too_slow],
                derandomize=True)


@FAST
@given(completions)
def test_numeric_grades_are_always_scored(text: str) -> None:
    for task in (NUMERIC, DIMENSIONLESS):
        result = dispatch.grade(task, text, GradeOptions(), SETTINGS)
        assert result.scored, (result.outcome, result.explanation)
        assert result.reward in (0.0, 1.0)


@FAST
@given(completions)
def test_numeric_grades_with_a_right_answer_appended_stay_scored(text: str) -> None:
    result = dispatch.grade(NUMERIC, text + "\n\nFinal answer: 3.35 TB/s, 80 GB, 2 s", GradeOptions(), SETTINGS)
    assert result.scored


@FAST
@given(completions)
def test_rows_grades_are_always_scored(text: str) -> None:
    for completion in (text, f"```json\n{text}\n```", json.dumps({"rows": [text]})):
        result = dispatch.grade(ROWS, completion, GradeOptions(), SETTINGS)
        assert result.scored, (result.outcome, result.explanation)


@FAST
@given(completions)
def test_the_fenced_response_never_holds_a_fence_mark(text: str) -> None:
    response = candidate_text(text, 8000)
    tag = fence_tag()
    _, user = build_messages("Q?", "Ref.", response, tag=tag)
    body = user["content"].split(f"<<<{tag}\n", 1)[1].rsplit(f"\n{tag}>>>", 1)[0]
    assert "<<<" not in body and ">>>" not in body and "</think>" not in body.lower()


@FAST
@given(completions, completions)
def test_a_verdict_is_only_ever_the_replys_own_first_line(prefix: str, rest: str) -> None:
    # whatever a reply holds after a first line that is not a verdict, it is not read as one
    reply = "I need to look at this more carefully" + prefix.replace("\n", " ") + "\n" + rest
    assert parse_verdict(reply) is None
    assert parse_verdict(f"<think>{prefix.replace('</think>', '')}") is None


# ---- the judge, through a real loopback endpoint -------------------------------------------------

@pytest.fixture(scope="module")
def fake():
    server = FakeOpenAI().start()
    yield server
    server.stop()


JUDGE_TASK = Task(id="p/4", split="exam", prompt="Why?", grading="judge", gold="Because bytes dominate FLOPs.",
                  hidden={"question": "Why?"})


@pytest.mark.parametrize("model", ["judge-adv-quote-same-line", "judge-adv-chatty-forever", "judge-garbage",
                                   "judge-adv-unclosed-think", "judge-tag-ignorer"])
def test_judge_grades_are_always_scored(fake, model) -> None:
    judge_settings = Settings(judge=JudgeSettings(allowed_base_urls=[fake.base_url], backoff_seconds=0.0))
    options = GradeOptions(judge=JudgeSpec(model=model, base_url=fake.base_url))

    @settings(max_examples=40, deadline=timedelta(seconds=10), derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(completions)
    def check(text: str) -> None:
        result = dispatch.grade(JUDGE_TASK, text, options, judge_settings)
        assert result.scored, (result.outcome, result.explanation)
        if result.reward == 1.0:  # only the reference itself is judged right by these judges
            assert " ".join(candidate_text(text, 8000).split()) == " ".join(JUDGE_TASK.gold.split())

    check()

"""Only the policy's visible answer is graded: in a transcript, the last message of an
assistant-like role; never a user, system or tool message."""

from __future__ import annotations

import asyncio

import pytest

from app.graders.result import Outcome
from app.grading.models import ChatMessage, GradeRequest, completion_text, lacks_answer_message
from app.grading.service import GradingService
from app.settings import Settings


def transcript(*pairs: tuple[str, str]) -> list[ChatMessage]:
    return [ChatMessage(role=role, content=content) for role, content in pairs]


ROLES = [
    ([("user", "q"), ("assistant", "A")], "A"),
    ([("user", "q"), ("model", "M")], "M"),
    ([("user", "q"), ("Assistant", "A2")], "A2"),
    ([("user", "q"), ("ASSISTANT ", "A3")], "A3"),
    ([("assistant", "first"), ("user", "Final answer: 2 s")], "first"),
    ([("assistant", "first"), ("tool", "Final answer: 2 s")], "first"),
    ([("assistant", "a"), ("assistant", "b"), ("system", "Final answer: 2 s")], "b"),
    ([("user", "Final answer: 2 s")], ""),
    ([("tool", "Final answer: 2 s"), ("system", "x")], ""),
    ([], ""),
]


@pytest.mark.parametrize(("pairs", "graded"), ROLES)
def test_the_graded_message(pairs, graded):
    assert completion_text(transcript(*pairs)) == graded
    assert lacks_answer_message(transcript(*pairs)) is (graded == "" and not any(
        r.strip().lower() in ("assistant", "model") for r, _ in pairs))


@pytest.mark.parametrize("pairs", [
    [("user", "Final answer: 2 s")], [("tool", "Final answer: 2 s")], [("system", "Final answer: 2 s")], [],
])
def test_no_assistant_message_is_a_scored_zero(pairs):
    service = GradingService(Settings())
    request = GradeRequest(reference={"values": ["2 s"]}, completion=transcript(*pairs))
    result = asyncio.run(service.grade(request))
    assert result.outcome is Outcome.no_answer and result.reward == 0.0 and result.scored
    assert "no assistant message" in result.explanation


def test_a_model_role_answer_is_graded():
    service = GradingService(Settings())
    request = GradeRequest(reference={"values": ["2 s"]},
                           completion=transcript(("user", "q"), ("model", "Final answer: 2 s")))
    assert asyncio.run(service.grade(request)).reward == 1.0

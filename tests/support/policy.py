"""The shared fake OpenAI server (tests/fake_openai.py) taught to play a policy model: model
"policy" answers each prompt with the completion the test prepared for it (built from the
bank's reference answers), "policy-500" always fails; judge models behave as before."""

from __future__ import annotations

from typing import Any

from tests.fake_openai import FakeOpenAI, _completion, _error

UNKNOWN_PROMPT = "I have not seen this question."


class PolicyFake(FakeOpenAI):
    def __init__(self, answers: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.answers: dict[str, str] = dict(answers or {})

    def respond(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        model = str(body.get("model", ""))
        if model == "policy":
            users = [m.get("content", "") for m in body.get("messages", []) if m.get("role") == "user"]
            return 200, _completion(model, self.answers.get(users[-1] if users else "", UNKNOWN_PROMPT)), {}
        if model == "policy-500":
            return 500, _error("the model server fell over", "server_error"), {}
        return super().respond(body)

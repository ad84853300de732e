from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from app.settings import JudgeSettings, Settings
from tests.fake_openai import FakeOpenAI

KEY_ENV = "SCALING_GRADER_TEST_JUDGE_KEY"
KEY = "sk-test-not-a-real-key-7f3a"


@pytest.fixture
def judge_settings(fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, tmp_path) -> Callable[..., Settings]:
    monkeypatch.setenv(KEY_ENV, KEY)

    def make(**overrides: Any) -> Settings:
        judge = {
            "allowed_base_urls": [fake.base_url],
            "api_key_env": KEY_ENV,
            "timeout_seconds": 5.0,
            "max_retries": 2,
            "backoff_seconds": 0.01,
            **overrides,
        }
        return Settings(judge=JudgeSettings(**judge), book_cache=tmp_path)

    return make

"""How many times the judge is asked per grade, from the settings' defaults, so that tests that
count the loopback judge's requests follow them: a verdict of correct is asked for once more to
confirm it (JudgeSettings.confirm_correct), any other verdict once."""

from __future__ import annotations

from app.settings import JudgeSettings

ASKS_PER_CORRECT = 2 if JudgeSettings().confirm_correct else 1
ASKS_PER_INCORRECT = 1

"""Fresh hidden cases per grade, drawn from a seed only the service can compute.

Two HMAC-SHA256 steps under the server-side secret (``SCALING_GRADER_IMPL__CASE_SECRET``; a
random per-process secret when unset):

* the *case seed* recorded in a grade's details is ``HMAC(secret, task id, completion hash)``:
  a new completion gets new cases, and the same completion the same ones (a grade is
  reproducible);
* the generator's seed is ``HMAC(secret, case seed)``. Knowing a case seed (it is in the
  response) therefore tells a client nothing about the inputs without the secret, while an
  operator holding the secret can replay the grade from it.

A table copied from the source is worth nothing: the inputs of the next grade depend on a
secret the source does not contain."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.settings import Settings
    from app.tasks.impl.spec import Case, Exercise

_PROCESS_SECRET = os.urandom(32)  # used only when no secret is configured
SEED_PATTERN = re.compile(r"[0-9a-f]{32}\Z")


def case_secret(settings: Settings) -> bytes:
    configured = settings.impl.case_secret
    return configured.get_secret_value().encode() if configured else _PROCESS_SECRET


def case_seed(settings: Settings, task_id: str, completion: str) -> str:
    """The seed a grade of this completion of this task uses (32 hex digits)."""
    digest = hashlib.sha256(completion.encode("utf-8", "surrogatepass")).hexdigest()
    message = f"case-seed\0{task_id}\0{digest}".encode()
    return hmac.new(case_secret(settings), message, hashlib.sha256).hexdigest()[:32]


def random_case_seed() -> str:
    """A seed for grades that have no completion to derive one from (operator self-tests)."""
    return os.urandom(16).hex()


def draw_cases(exercise: Exercise, seed: str, settings: Settings) -> list[Case]:
    if not SEED_PATTERN.match(seed):
        raise ValueError("a case seed is 32 lowercase hex digits")
    message = f"cases\0{exercise.name}\0{seed}".encode()
    generator_seed = int.from_bytes(hmac.new(case_secret(settings), message, hashlib.sha256).digest()[:16], "big")
    return exercise.hidden_cases(generator_seed)

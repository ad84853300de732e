"""Public task views for adapters and the evaluation command: from the service when a URL is
given (no local bank needed), else from the local banks."""

from __future__ import annotations

from typing import Any

from app.integrations.grading import sync_client
from app.settings import get_settings
from app.tasks.registry import get_bank

# Asks for the answer line the numeric grader reads (app/graders/extract.py).
SYSTEM_PROMPT = (
    "Solve the problem. Reason step by step, then end your reply with one line of the form "
    "'Final answer: <value with units>' (several values separated by commas, in the order asked), "
    "unless the problem asks for a different answer format."
)


def public_tasks(split: str, *, chapters: list[str] | None, n: int | None, seed: int,
                 url: str | None) -> list[dict[str, Any]]:
    """Public task views: from the service when a URL is given, else from the local bank.
    ``n`` None means the whole (finite) split."""
    if url:
        client, page = sync_client(url), 512
        out: list[dict[str, Any]] = []
        while n is None or len(out) < n:
            want = page if n is None else min(page, n - len(out))
            got = client.tasks(split, seed=seed, n=want, offset=len(out), chapters=chapters)
            out.extend(got)
            if len(got) < want:
                break
        return out
    bank = get_bank(split, get_settings())
    size = bank.size()
    count = n if n is not None else size
    if count is None:
        raise ValueError(f"split {split!r} is unlimited: give a number of examples")
    return [t.public() for t in bank.batch(seed=seed, n=count, chapters=chapters)]

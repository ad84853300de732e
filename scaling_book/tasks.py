"""Public task views (never answers), from the service's ``GET /v1/tasks``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scaling_book.client import ClientOptions
from scaling_book.grading import NO_OPTIONS, required_service_url, sync_client

# Asks for the answer line the service's numeric grader reads.
SYSTEM_PROMPT = (
    "Solve the problem. Reason step by step, then end your reply with one line of the form "
    "'Final answer: <value with units>' (several values separated by commas, in the order asked), "
    "unless the problem asks for a different answer format."
)
PAGE = 512


def chapter_list(chapters: str | Sequence[str] | None) -> list[str] | None:
    """"roofline,sharding" or ["roofline", "sharding"] as a list; None or empty for all."""
    if chapters is None:
        return None
    parts = chapters.split(",") if isinstance(chapters, str) else [p for c in chapters for p in str(c).split(",")]
    return [p.strip() for p in parts if p.strip()] or None


def public_tasks(split: str, *, chapters: str | Sequence[str] | None = None, n: int | None = None, seed: int = 0,
                 url: str | None = None, client_options: ClientOptions = NO_OPTIONS) -> list[dict[str, Any]]:
    """Public task views; ``n`` None means the whole (finite) split."""
    wanted = chapter_list(chapters)
    client = sync_client(required_service_url(url), client_options)
    out: list[dict[str, Any]] = []
    while n is None or len(out) < n:
        want = PAGE if n is None else min(PAGE, n - len(out))
        got = client.tasks(split, seed=seed, n=want, offset=len(out), chapters=wanted)
        out.extend(got)
        if len(got) < want:
            break
    return out

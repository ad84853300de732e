"""Verified chapter text for the exam bank, through the shared pinned source
(app/tasks/book/source.py: mirror, cache or download, every digest checked). Texts are kept per
process once verified: locators are resolved chapter by chapter at load time."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from app.tasks.book.source import CHAPTER_DIGESTS, BookSourceError, load_chapters

if TYPE_CHECKING:
    from app.settings import Settings

_cache: dict[tuple[str, str, str], str] = {}
_lock = threading.Lock()


def chapter_text(settings: Settings, chapter: str) -> str:
    """The chapter's text at the pinned commit, verified against its SHA-256."""
    if chapter not in CHAPTER_DIGESTS:
        raise BookSourceError(f"unknown chapter {chapter!r}")
    key = (str(settings.book_mirror), str(settings.book_cache), chapter)
    with _lock:
        if key not in _cache:
            _cache[key] = load_chapters(settings, (chapter,))[chapter].text
        return _cache[key]

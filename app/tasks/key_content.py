"""The key-content items of each chapter, from app/tasks/key_content.toml (committed): what the
banks tag their tasks with, and what the coverage map counts."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

KEY_CONTENT_FILE = Path(__file__).with_name("key_content.toml")


@dataclass(frozen=True, slots=True)
class KeyItem:
    id: str
    title: str
    chapter: str


@dataclass(frozen=True, slots=True)
class ChapterContent:
    chapter: str
    title: str
    items: tuple[KeyItem, ...]


@lru_cache(maxsize=1)
def key_content() -> dict[str, ChapterContent]:
    """Chapter -> its key-content items, in the file's order."""
    with KEY_CONTENT_FILE.open("rb") as fh:
        raw = tomllib.load(fh)
    out: dict[str, ChapterContent] = {}
    for chapter, body in raw.items():
        items = tuple(KeyItem(i["id"], i["title"], chapter) for i in body["items"])
        out[chapter] = ChapterContent(chapter, body["title"], items)
    return out


def item_ids() -> frozenset[str]:
    return frozenset(item.id for c in key_content().values() for item in c.items)

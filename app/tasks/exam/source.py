"""Verified chapter text for the exam bank.

TEMPORARY (switch at merge): the shared book-source module (app/tasks/book/source.py: pinned commit,
fetch, verify, cache) is being built in parallel. Until it lands, this module reads chapters from
``settings.book_mirror`` (or an already-verified ``settings.book_cache``) and checks each file
against the digests below. The exam bank calls only ``chapter_text(settings, chapter)``, so the
switch is one import in bank.py.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.settings import Settings

BOOK_COMMIT = "772889525cbeca175408a0547b1b5fab4760f26c"

# SHA-256 of each chapter file at BOOK_COMMIT (from the verified mirror's SHA256SUMS).
CHAPTER_SHA256: dict[str, str] = {
    "applied-inference": "6274ba0aa55047740f579f17bc29f0310989c461d33db4c07cf4ce9426aae0e9",
    "applied-training": "6c0ce7eedc667af16a5475b3a6df88ba6a78b05a68d8463da70b6af8e9f04ae9",
    "conclusion": "aeaadbbbf3e789e9909664a0b3e3fe2010d8e8d1f744588bc20cf31dc3645b15",
    "gpus": "f6242fcac5f12157db1ba9a0dcb97babcd04fec7f6178367a367a7f37b03ff74",
    "index": "babe1e55c760c87c989aa186bb47134aaedeca51b1918364ff5b443fcc6bdcd5",
    "inference": "989313dd3931c4b54e3973331bf98aab53f2ab36b236dbae521106c87d2df3d5",
    "jax-stuff": "750e213c91c33868a9f5ffbd2c16dcc2c4e5f4b0cba6bfde173756bdb34e1bd1",
    "profiling": "024676890e35c9ff5f8a1fcc0a4d93dc41ef6be61fedf25fb10b25b856cd24a2",
    "roofline": "bda2507ffe937b339557566c0df60044f54d8e7bc86959a6bef6fff407e94055",
    "sharding": "19edcbdf459531b97202904d1ac113886c28826df48e2029e90bd74ee24dc5a4",
    "tpus": "6b296efc682ff6256ea2dd7c60aafac849d09f6b7ede580516c121b5230d1b9f",
    "training": "54a2dd1737797bfc25a959c8fcf6f094dbb2534e8e63514c7f851da569028222",
    "transformers": "52a705a5ed17a2b3c8bf8eee08786a511f6ff7f41d815c502a22aa21a6d87b5d",
}


class BookSourceError(RuntimeError):
    """The pinned chapter is unavailable or fails verification: fatal, never a silent fallback."""


_cache: dict[tuple[str, str], str] = {}
_lock = threading.Lock()


def _candidates(settings: Settings, chapter: str) -> list[Path]:
    found = []
    if settings.book_mirror is not None:
        found.append(Path(settings.book_mirror) / f"{chapter}.md")
    found.append(Path(settings.book_cache) / BOOK_COMMIT / f"{chapter}.md")
    return found


def chapter_text(settings: Settings, chapter: str) -> str:
    """The chapter's text at the pinned commit, verified against its SHA-256."""
    if chapter not in CHAPTER_SHA256:
        raise BookSourceError(f"unknown chapter {chapter!r}")
    for path in _candidates(settings, chapter):
        key = (str(path), chapter)
        with _lock:
            if key in _cache:
                return _cache[key]
        if not path.is_file():
            continue
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != CHAPTER_SHA256[chapter]:
            raise BookSourceError(
                f"{path} does not match the pinned digest for {chapter!r} (got {digest[:12]}...)"
            )
        text = data.decode("utf-8")
        with _lock:
            _cache[key] = text
        return text
    raise BookSourceError(
        f"chapter {chapter!r} of the book is not available: set SCALING_GRADER_BOOK_MIRROR to a "
        f"directory holding the chapters at commit {BOOK_COMMIT}"
    )

"""The pinned book source: which upstream commit, which chapter files, and their SHA-256 digests.

The book's text is never part of this repository. On first use each chapter is downloaded from
the pinned commit's raw-file URL, verified, and kept in ``settings.book_cache``; or it is read
from ``settings.book_mirror`` (an offline directory holding the same files), verified the same
way. Any mismatch, missing file or failed download is fatal: there is no unverified fallback."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from app.tasks.book.cache import atomic_write

if TYPE_CHECKING:
    from app.settings import Settings

REPOSITORY = "jax-ml/scaling-book"
COMMIT = "772889525cbeca175408a0547b1b5fab4760f26c"

# Chapter stem -> SHA-256 of the file at COMMIT (copied from the verified mirror's SHA256SUMS).
# The order is the book's reading order, which fixes the order of tasks in the split.
CHAPTER_DIGESTS: dict[str, str] = {
    "roofline": "bda2507ffe937b339557566c0df60044f54d8e7bc86959a6bef6fff407e94055",
    "tpus": "6b296efc682ff6256ea2dd7c60aafac849d09f6b7ede580516c121b5230d1b9f",
    "sharding": "19edcbdf459531b97202904d1ac113886c28826df48e2029e90bd74ee24dc5a4",
    "transformers": "52a705a5ed17a2b3c8bf8eee08786a511f6ff7f41d815c502a22aa21a6d87b5d",
    "training": "54a2dd1737797bfc25a959c8fcf6f094dbb2534e8e63514c7f851da569028222",
    "applied-training": "6c0ce7eedc667af16a5475b3a6df88ba6a78b05a68d8463da70b6af8e9f04ae9",
    "inference": "989313dd3931c4b54e3973331bf98aab53f2ab36b236dbae521106c87d2df3d5",
    "applied-inference": "6274ba0aa55047740f579f17bc29f0310989c461d33db4c07cf4ce9426aae0e9",
    "profiling": "024676890e35c9ff5f8a1fcc0a4d93dc41ef6be61fedf25fb10b25b856cd24a2",
    "jax-stuff": "750e213c91c33868a9f5ffbd2c16dcc2c4e5f4b0cba6bfde173756bdb34e1bd1",
    "gpus": "f6242fcac5f12157db1ba9a0dcb97babcd04fec7f6178367a367a7f37b03ff74",
}

CHAPTERS: tuple[str, ...] = tuple(CHAPTER_DIGESTS)


class BookSourceError(RuntimeError):
    """The pinned source could not be obtained or failed verification. Fatal by design."""


@dataclass(frozen=True, slots=True)
class Chapter:
    name: str  # file stem, e.g. "roofline"
    text: str
    sha256: str

    @property
    def filename(self) -> str:
        return f"{self.name}.md"


def filename(chapter: str) -> str:
    return f"{chapter}.md"


def source_fingerprint() -> str:
    """One digest naming the exact source (commit and every chapter digest): a cache key part."""
    h = hashlib.sha256(COMMIT.encode())
    for name, digest in CHAPTER_DIGESTS.items():
        h.update(f"\0{name}\0{digest}".encode())
    return h.hexdigest()


def raw_url(base_url: str, chapter: str) -> str:
    return f"{base_url.rstrip('/')}/{COMMIT}/{filename(chapter)}"


def _check(data: bytes, chapter: str, where: str) -> str:
    expected = CHAPTER_DIGESTS[chapter]
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise BookSourceError(
            f"book source: {filename(chapter)} from {where} has SHA-256 {actual}, expected {expected} "
            f"(pinned {REPOSITORY}@{COMMIT[:12]}); refusing to use it"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:  # unreachable for a matching digest, but never guess an encoding
        raise BookSourceError(f"book source: {filename(chapter)} is not UTF-8") from None


def _read_local(path: Path, chapter: str, where: str) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise BookSourceError(f"book source: {filename(chapter)} is missing from {where} ({path})") from None
    except OSError as exc:
        raise BookSourceError(f"book source: cannot read {filename(chapter)} from {where}: {exc}") from None
    return _check(data, chapter, f"{where} ({path})")


def _download(client: httpx.Client, url: str, chapter: str) -> bytes:
    try:
        response = client.get(url)
    except httpx.HTTPError as exc:
        raise BookSourceError(
            f"book source: downloading {filename(chapter)} from {url} failed: {exc}"
        ) from None
    if response.status_code != 200:
        raise BookSourceError(
            f"book source: downloading {filename(chapter)} from {url} failed: HTTP {response.status_code}"
        )
    return response.content


def cache_dir(settings: Settings) -> Path:
    return Path(settings.book_cache) / COMMIT


def load_chapters(settings: Settings, chapters: tuple[str, ...] = CHAPTERS) -> dict[str, Chapter]:
    """Every requested chapter, verified. Mirror if configured, else the cache, else download
    (then cache). Raises BookSourceError naming the file on any problem."""
    unknown = [c for c in chapters if c not in CHAPTER_DIGESTS]
    if unknown:
        raise BookSourceError(f"book source: no pinned digest for {', '.join(map(filename, unknown))}")
    out: dict[str, Chapter] = {}
    if settings.book_mirror is not None:
        mirror = Path(settings.book_mirror)
        for name in chapters:
            text = _read_local(mirror / filename(name), name, "mirror")
            out[name] = Chapter(name, text, CHAPTER_DIGESTS[name])
        return out
    cache = cache_dir(settings)
    missing = [name for name in chapters if not (cache / filename(name)).exists()]
    if missing:
        with httpx.Client(timeout=settings.book_download_timeout, follow_redirects=True) as client:
            for name in missing:
                data = _download(client, raw_url(settings.book_base_url, name), name)
                _check(data, name, raw_url(settings.book_base_url, name))
                atomic_write(cache / filename(name), data)
    for name in chapters:
        # Cached files are verified on every load too: a cache edited by hand is refused, not trusted.
        out[name] = Chapter(name, _read_local(cache / filename(name), name, "cache"), CHAPTER_DIGESTS[name])
    return out

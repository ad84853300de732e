"""The pinned source: digests match the mirror's SHA256SUMS, tampering and missing files are
refused with the file named, and the download path works against a real loopback HTTP server."""

from __future__ import annotations

import hashlib
import shutil
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.settings import Settings
from app.tasks.book.source import CHAPTER_DIGESTS, COMMIT, BookSourceError, cache_dir, load_chapters


def _sums(mirror: Path) -> dict[str, str]:
    out = {}
    for line in (mirror / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        out[name] = digest
    return out


def _tampered_copy(mirror: Path, dest: Path, victim: str) -> Path:
    shutil.copytree(mirror, dest)
    path = dest / f"{victim}.md"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one byte, one bit
    path.write_bytes(bytes(data))
    return dest


class TestPinnedDigests:
    def test_every_pinned_digest_is_the_mirrors(self, mirror: Path) -> None:
        sums = _sums(mirror)
        for chapter, digest in CHAPTER_DIGESTS.items():
            assert sums[f"{chapter}.md"] == digest

    def test_mirror_files_hash_to_the_pins(self, mirror: Path, settings: Settings) -> None:
        loaded = load_chapters(settings)
        assert list(loaded) == list(CHAPTER_DIGESTS)
        for name, chapter in loaded.items():
            assert hashlib.sha256(chapter.text.encode("utf-8")).hexdigest() == CHAPTER_DIGESTS[name]


class TestMirrorRefusals:
    def test_one_changed_byte_is_refused_naming_the_file(self, mirror: Path, tmp_path: Path) -> None:
        bad = _tampered_copy(mirror, tmp_path / "m", "sharding")
        with pytest.raises(BookSourceError, match=r"sharding\.md .*SHA-256") as info:
            load_chapters(Settings(book_mirror=bad, book_cache=tmp_path / "c"))
        assert CHAPTER_DIGESTS["sharding"] in str(info.value)

    def test_missing_file_is_refused_naming_it(self, mirror: Path, tmp_path: Path) -> None:
        bad = tmp_path / "m"
        shutil.copytree(mirror, bad)
        (bad / "gpus.md").unlink()
        with pytest.raises(BookSourceError, match=r"gpus\.md is missing from mirror"):
            load_chapters(Settings(book_mirror=bad, book_cache=tmp_path / "c"))

    def test_tampered_mirror_does_not_fall_back_to_network(self, mirror: Path, tmp_path: Path) -> None:
        bad = _tampered_copy(mirror, tmp_path / "m", "roofline")
        # An unroutable base URL: if the loader tried the network it would fail differently.
        s = Settings(book_mirror=bad, book_cache=tmp_path / "c", book_base_url="http://127.0.0.1:9")
        with pytest.raises(BookSourceError, match=r"roofline\.md from mirror"):
            load_chapters(s)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str, list[str]]]:
    """A real HTTP server on loopback serving <root>/<commit>/<chapter>.md; yields the root, the
    base URL and the list of request paths it received."""
    root = tmp_path / "www"
    (root / COMMIT).mkdir(parents=True)
    requests: list[str] = []

    class Handler(_QuietHandler):
        def do_GET(self) -> None:
            requests.append(self.path)
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _publish(mirror: Path, root: Path) -> None:
    for name in CHAPTER_DIGESTS:
        shutil.copy(mirror / f"{name}.md", root / COMMIT / f"{name}.md")


class TestDownload:
    @pytest.mark.slow
    def test_first_use_downloads_verifies_and_caches(self, mirror: Path, served, tmp_path: Path) -> None:
        root, base, requests = served
        _publish(mirror, root)
        s = Settings(book_mirror=None, book_cache=tmp_path / "cache", book_base_url=base)
        loaded = load_chapters(s)
        assert sorted(requests) == sorted(f"/{COMMIT}/{n}.md" for n in CHAPTER_DIGESTS)
        for name in CHAPTER_DIGESTS:
            cached = cache_dir(s) / f"{name}.md"
            assert cached.read_bytes() == (mirror / f"{name}.md").read_bytes()
            assert loaded[name].text == cached.read_text(encoding="utf-8")

    @pytest.mark.slow
    def test_second_use_reads_the_cache_not_the_network(self, mirror: Path, served, tmp_path: Path) -> None:
        root, base, requests = served
        _publish(mirror, root)
        s = Settings(book_mirror=None, book_cache=tmp_path / "cache", book_base_url=base)
        load_chapters(s)
        n = len(requests)
        load_chapters(s)
        assert len(requests) == n

    @pytest.mark.slow
    def test_tampered_download_is_refused_and_not_cached(self, mirror: Path, served, tmp_path: Path) -> None:
        root, base, _ = served
        _publish(mirror, root)
        target = root / COMMIT / "inference.md"
        target.write_bytes(target.read_bytes().replace(b"TPU", b"TPX", 1))
        s = Settings(book_mirror=None, book_cache=tmp_path / "cache", book_base_url=base)
        with pytest.raises(BookSourceError, match=r"inference\.md from http://127\.0\.0\.1:\d+/.*SHA-256"):
            load_chapters(s)
        assert not (cache_dir(s) / "inference.md").exists()

    @pytest.mark.slow
    def test_404_is_fatal_naming_the_file(self, mirror: Path, served, tmp_path: Path) -> None:
        root, base, _ = served
        _publish(mirror, root)
        (root / COMMIT / "profiling.md").unlink()
        s = Settings(book_mirror=None, book_cache=tmp_path / "cache", book_base_url=base)
        with pytest.raises(BookSourceError, match=r"profiling\.md .* failed: HTTP 404"):
            load_chapters(s)

    def test_unreachable_server_is_fatal(self, tmp_path: Path) -> None:
        import socket

        with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        s = Settings(book_mirror=None, book_cache=tmp_path / "cache",
                     book_base_url=f"http://127.0.0.1:{port}", book_download_timeout=2)
        with pytest.raises(BookSourceError, match=r"roofline\.md .* failed"):
            load_chapters(s)

    @pytest.mark.slow
    def test_edited_cache_file_is_refused(self, mirror: Path, served, tmp_path: Path) -> None:
        root, base, _ = served
        _publish(mirror, root)
        s = Settings(book_mirror=None, book_cache=tmp_path / "cache", book_base_url=base)
        load_chapters(s)
        cached = cache_dir(s) / "tpus.md"
        cached.write_bytes(cached.read_bytes() + b"\n")
        with pytest.raises(BookSourceError, match=r"tpus\.md from cache"):
            load_chapters(s)

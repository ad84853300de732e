"""The book bank: stable ids, prompts (context bounds, hardware rows, no answers), chapter
filtering, the parsed-bank cache and the registry entry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from app.settings import Settings
from app.tasks import registry
from app.tasks.book import bank as book_bank
from app.tasks.book.bank import CONTEXT_MAX, CONTEXT_MIN, REDACTED, load_bank, parse_bank
from app.tasks.book.cache import DiskBankCache
from app.tasks.book.hardware_tables import chip_records
from app.tasks.book.markdown import to_markdown
from app.tasks.book.parser import parse_chapter
from app.tasks.book.source import CHAPTERS, BookSourceError


def _section(prompt: str, title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n\n(.*?)(?=^## |\Z)", prompt, re.DOTALL | re.MULTILINE)
    assert m, title
    return m.group(1).strip()


class TestIdsAndSize:
    def test_ids_are_chapter_and_marker_position(self, bank, chapters) -> None:
        for task in bank.tasks():
            chapter, q = re.fullmatch(r"book/([a-z-]+)/q(\d+)", task.id).groups()
            parsed = parse_chapter(chapter, chapters[chapter].text)[int(q) - 1]
            assert task.meta["source"]["line"] == parsed.line
            assert task.meta["label"] == parsed.label

    def test_two_parses_give_identical_tasks(self, bank, settings: Settings) -> None:
        again = parse_bank(settings)
        assert [t.id for t in again.tasks()] == [t.id for t in bank.tasks()]
        assert again.tasks() == bank.tasks()

    def test_size_is_answered_minus_annotation_exclusions(self, bank, chapters) -> None:
        answered = sum(q.answered for n, c in chapters.items() for q in parse_chapter(n, c.text))
        markers = sum(len(parse_chapter(n, c.text)) for n, c in chapters.items())
        assert bank.size() + len(bank.exclusions) == markers
        assert bank.size() < answered
        assert all(e.reason for e in bank.exclusions)
        assert len({e.id for e in bank.exclusions}) == len(bank.exclusions)

    def test_locators_hash_the_source_spans(self, bank, chapters) -> None:
        import hashlib

        for task in bank.tasks():
            src = task.meta["source"]
            text = chapters[task.chapter].text
            span = src["question"]
            digest = hashlib.sha256(text[span["start"] : span["end"]].encode()).hexdigest()
            assert digest == span["sha256"]
            assert "answer" not in src  # a public locator of the answer would hand it out


class TestPrompts:
    def test_context_is_bounded_and_says_where_it_comes_from(self, bank) -> None:
        for task in bank.tasks():
            context = _section(task.prompt, "Context")
            assert CONTEXT_MIN <= len(context) <= CONTEXT_MAX, task.id
            assert context.startswith("Source: *How To Scale Your Model*")
            assert f"{task.chapter}.md" in context.split("\n", 1)[0]

    def test_code_fences_are_balanced(self, bank) -> None:
        for task in bank.tasks():
            # Opening/closing fence lines; a one-line ```code``` neither opens nor closes.
            fences = [
                s for s in (line.strip() for line in task.prompt.split("\n"))
                if s.startswith("```") and not (len(s) > 6 and s.endswith("```"))
            ]
            assert len(fences) % 2 == 0, task.id

    def test_no_markup_left(self, bank) -> None:
        for task in bank.tasks():
            for leftover in ("{%", "<sub>", "<d-footnote", "<b ", "</b>", "figure.liquid"):
                assert leftover not in task.prompt, (task.id, leftover)

    def test_prompt_never_holds_its_answer(self, bank) -> None:
        for task in bank.tasks():
            answer = task.hidden["reference"]
            # Any long stretch of the answer would show up as one of its lines.
            for line in answer.split("\n"):
                if len(line) > 60:
                    assert line not in task.prompt, task.id

    def test_question_section_is_the_rendered_question(self, bank, chapters) -> None:
        for task in bank.tasks():
            src = task.meta["source"]["question"]
            rendered = to_markdown(chapters[task.chapter].text[src["start"] : src["end"]])
            # Figures that would state the answer are redacted; everything else is as rendered.
            shown = _section(task.prompt, "Question")
            pattern = ".+?".join(re.escape(piece) for piece in shown.split(REDACTED))
            assert re.fullmatch(pattern, rendered, re.S), task.id

    def test_named_chips_bring_their_table_rows(self, bank, chapters) -> None:
        records = chip_records(chapters["tpus"].text, chapters["gpus"].text)
        with_chips = [t for t in bank.tasks() if t.meta["chips"]]
        assert len(with_chips) >= 30
        for task in with_chips:
            hardware = _section(task.prompt, "Hardware specs (rows of the book's spec tables)")
            for name in task.meta["chips"]:
                for _, line in records[name].rows:
                    assert to_markdown(line) in hardware, (task.id, name)

    def test_chips_outside_the_hardware_chapters_get_rows_too(self, bank) -> None:
        # Inference questions name TPU v5e: the TPU chapter's rows must travel with them.
        task = bank.get("book/inference/q4")
        assert "TPU v5e" in task.meta["chips"]
        assert "8.1e11" in _section(task.prompt, "Hardware specs (rows of the book's spec tables)")

    def test_numeric_prompts_say_what_to_state(self, bank) -> None:
        for task in bank.tasks():
            fmt = _section(task.prompt, "Answer format")
            assert "Final answer:" in fmt
            if task.grading == "numeric":
                assert task.meta["ask"] in fmt

    def test_public_view_hides_gold_and_notes(self, bank) -> None:
        for task in bank.tasks():
            public = json.dumps(task.public())
            assert "hidden" not in task.public() and "gold" not in task.public()
            if task.hidden.get("note"):
                assert task.hidden["note"] not in public


class TestChapterFilter:
    def test_batch_keeps_only_the_named_chapters(self, bank) -> None:
        batch = bank.batch(seed=3, n=1000, chapters=["roofline", "tpus"])
        expected = sum(t.chapter in {"roofline", "tpus"} for t in bank.tasks())
        assert len(batch) == expected and {t.chapter for t in batch} == {"roofline", "tpus"}

    def test_seeds_fix_the_order(self, bank) -> None:
        a = [t.id for t in bank.batch(seed=1, n=20)]
        assert a == [t.id for t in bank.batch(seed=1, n=20)]
        assert a != [t.id for t in bank.batch(seed=2, n=20)]


class TestParsedCache:
    def test_second_load_reads_the_cache_without_the_source(self, mirror: Path, tmp_path: Path) -> None:
        s = Settings(book_mirror=mirror, book_cache=tmp_path / "c")
        first = load_bank(s)
        entries = list((tmp_path / "c" / "parsed").glob("book-*.json"))
        assert len(entries) == 1
        # With the mirror gone a parse would fail; a cache hit does not need it.
        gone = Settings(book_mirror=tmp_path / "nowhere", book_cache=tmp_path / "c")
        second = load_bank(gone)
        assert second.tasks() == first.tasks()
        assert [e.id for e in second.exclusions] == [e.id for e in first.exclusions]

    def test_a_new_parser_version_misses_the_cache(self, mirror, tmp_path, monkeypatch) -> None:
        load_bank(Settings(book_mirror=mirror, book_cache=tmp_path / "c"))
        monkeypatch.setattr(book_bank, "PARSER_VERSION", "test-bump")
        gone = Settings(book_mirror=tmp_path / "nowhere", book_cache=tmp_path / "c")
        with pytest.raises(BookSourceError, match=r"roofline\.md is missing"):
            load_bank(gone)

    @pytest.mark.slow
    def test_a_damaged_entry_is_reparsed(self, mirror: Path, tmp_path: Path) -> None:
        s = Settings(book_mirror=mirror, book_cache=tmp_path / "c")
        first = load_bank(s)
        (entry,) = (tmp_path / "c" / "parsed").glob("book-*.json")
        entry.write_text("{not json")
        assert load_bank(s).tasks() == first.tasks()
        assert json.loads(entry.read_text())["key"] == first.cache_key

    @pytest.mark.slow
    def test_any_cache_implementation_plugs_in(self, mirror: Path, tmp_path: Path) -> None:
        class MemoryCache:
            def __init__(self) -> None:
                self.store: dict[str, bytes] = {}

            def get(self, key: str) -> bytes | None:
                return self.store.get(key)

            def put(self, key: str, payload: bytes) -> None:
                self.store[key] = payload

        cache = MemoryCache()
        s = Settings(book_mirror=mirror, book_cache=tmp_path / "c")
        first = load_bank(s, cache=cache)
        assert list(cache.store) == [first.cache_key]
        assert not (tmp_path / "c" / "parsed").exists()
        gone = Settings(book_mirror=tmp_path / "no", book_cache=tmp_path / "c")
        assert load_bank(gone, cache=cache).size() == first.size()

    def test_disk_cache_rejects_path_like_keys(self, tmp_path: Path) -> None:
        with pytest.raises(ValueError):
            DiskBankCache(tmp_path).get("../escape")


class TestRegistry:
    def test_book_split_resolves_ids(self, settings: Settings, fresh_registry: None) -> None:
        task = registry.resolve_task("book/roofline/q1", settings)
        assert task.grading == "numeric" and task.chapter == "roofline"
        with pytest.raises(registry.UnknownTask):
            registry.resolve_task("book/roofline/q99", settings)

    def test_every_chapter_is_pinned_in_reading_order(self) -> None:
        assert CHAPTERS[0] == "roofline" and CHAPTERS[-1] == "gpus" and len(CHAPTERS) == 11

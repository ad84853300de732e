"""The coverage map: counts per key-content item and split, the CLI commands, and
GET /v1/coverage served by a real uvicorn server on loopback."""

from __future__ import annotations

import argparse
import json

import httpx
import pytest

from app.settings import get_settings
from app.tasks import registry, splits
from app.tasks.coverage import compute_coverage, render_markdown
from app.tasks.key_content import key_content
from app.tasks.splits import SplitSpec
from tests.support.server import ROOT


def _tagged(bank, item: str) -> int:
    return sum(item in t.tags for t in bank.tasks())


def test_book_counts_are_the_tasks_tagged_with_each_item(bank, settings, fresh_registry) -> None:
    cov = compute_coverage(settings, ["book"])
    items = [i.id for c in key_content().values() for i in c.items]
    assert list(cov.counts) == items
    for item in items:
        assert cov.counts[item]["book"] == _tagged(bank, item), item
    assert cov.uncovered() == [i for i in items if _tagged(bank, i) == 0]
    assert cov.basis["book"] == f"all {bank.size()} tasks"


def _broken_loader(settings):
    import app.tasks.no_such_module  # noqa: F401  (the failure under test)


def test_a_broken_split_is_reported_not_fatal(settings, monkeypatch, fresh_registry) -> None:
    monkeypatch.setitem(splits._SPECS, "broken", SplitSpec(name="broken", load=_broken_loader, tolerance=0.05,
                                                           docs="docs/splits.md"))
    cov = compute_coverage(settings, ["book", "broken"])
    assert "broken" in cov.unavailable and "ModuleNotFoundError" in cov.unavailable["broken"]
    assert sum(per["book"] for per in cov.counts.values()) > 0
    table = render_markdown(cov)
    assert "n/a" in table and "`broken`: unavailable" in table


def test_table_has_one_row_per_item(settings, fresh_registry) -> None:
    cov = compute_coverage(settings, ["book"])
    table = render_markdown(cov)
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == sum(len(c.items) for c in key_content().values())
    for item in cov.uncovered():
        assert any(f"`{item}`" in r and "(uncovered)" in r for r in rows)


def _run(module_name: str, argv: list[str]) -> int:
    import importlib

    parser = argparse.ArgumentParser()
    importlib.import_module(module_name).register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_coverage_command_prints_the_table(service_env, bank, capsys) -> None:
    assert _run("app.commands.coverage", ["coverage", "--split", "book"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| chapter | key-content item | book | total |")
    assert f"counted over all {bank.size()} tasks" in out


def test_coverage_command_strict_fails_on_gaps(service_env, capsys) -> None:
    # The book alone leaves items uncovered (profiling has no answered question), so strict fails.
    assert _run("app.commands.coverage", ["coverage", "--split", "book", "--strict", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert "profiling.profiler" in data["uncovered"]


def test_coverage_command_refuses_an_unknown_split(service_env, capsys) -> None:
    # A typo must not print a map in which every item looks uncovered, with exit 0.
    assert _run("app.commands.coverage", ["coverage", "--split", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("unknown split 'nope'; known: ") and "Traceback" not in captured.err


@pytest.mark.slow
def test_book_command_prints_size_and_exclusions(service_env, bank, capsys) -> None:
    assert _run("app.commands.book", ["book"]) == 0
    out = capsys.readouterr().out
    kinds = bank.info()["grading"]
    assert out.startswith(
        f"Book split: {bank.size()} tasks ({kinds['numeric']} numeric, {kinds['judge']} judge); "
        f"{len(bank.exclusions)} questions excluded."
    )
    for e in bank.exclusions:
        assert f"`{e.id}`" in out and e.reason in out


def test_book_command_reports_a_bad_source_cleanly(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("SCALING_GRADER_BOOK_MIRROR", str(tmp_path / "empty"))
    monkeypatch.setenv("SCALING_GRADER_BOOK_CACHE", str(tmp_path / "cache"))
    get_settings.cache_clear()
    try:
        assert _run("app.commands.book", ["book"]) == 2
    finally:
        get_settings.cache_clear()
    assert "roofline.md is missing" in capsys.readouterr().out


@pytest.mark.slow
def test_coverage_endpoint(server: str, bank) -> None:
    r = httpx.get(f"{server}/v1/coverage", params={"split": "book"}, timeout=30)
    assert r.status_code == 200
    data = r.json()
    assert data["splits"] == ["book"]
    by_item = {i["id"]: i for c in data["chapters"] for i in c["items"]}
    assert by_item["roofline.matmul"]["tasks"]["book"] == _tagged(bank, "roofline.matmul")


@pytest.mark.slow
def test_coverage_endpoint_rejects_unknown_split(server: str) -> None:
    r = httpx.get(f"{server}/v1/coverage", params={"split": "nope<script>"}, timeout=30)
    assert r.status_code == 404
    known = ", ".join(registry.split_names())
    assert r.json() == {"error": "unknown_split", "detail": f"unknown split; known: {known}"}


@pytest.mark.slow
def test_splits_doc_shows_the_book_summary_as_the_command_prints_it(service_env, capsys) -> None:
    assert _run("app.commands.book", ["book"]) == 0
    printed = capsys.readouterr().out.rstrip()
    doc = (ROOT / "docs" / "splits.md").read_text(encoding="utf-8")
    assert printed in doc, "regenerate with `scaling-grader book`"

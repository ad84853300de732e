"""The benchmark page is written from benchmark output: one section per benchmark, replaced in place."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.record import render_section, update_page

REPO = Path(__file__).resolve().parents[2]


def test_sections_are_replaced_not_appended(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    update_page(page, "bench_b", render_section("bench_b", "B.", "ratio 2.0x\n", "t1", "m", 1.0))
    update_page(page, "bench_a", render_section("bench_a", "A.", "ratio 9.0x\n", "t1", "m", 1.0))
    update_page(page, "bench_b", render_section("bench_b", "B.", "ratio 3.0x\n", "t2", "m", 1.0))
    text = page.read_text()
    assert text.count("<!-- bench:bench_b -->") == 1
    assert "ratio 3.0x" in text and "ratio 2.0x" not in text
    assert "ratio 9.0x" in text
    assert text.index("bench:bench_a") < text.index("bench:bench_b")


def test_notes_between_sections_stay_where_they_are(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    for name in ("bench_a", "bench_c"):
        update_page(page, name, render_section(name, "X.", "ratio 1.0x\n", "t1", "m", 1.0))
    text = page.read_text()
    note = "## A note written by hand\n\nAbout bench_a's figures.\n\n"
    at = text.index("<!-- bench:bench_c -->")
    page.write_text(text[:at] + note + text[at:])
    update_page(page, "bench_a", render_section("bench_a", "X.", "ratio 4.0x\n", "t2", "m", 1.0))
    update_page(page, "bench_b", render_section("bench_b", "X.", "ratio 5.0x\n", "t2", "m", 1.0))
    text = page.read_text()
    assert text.count("A note written by hand") == 1 and "ratio 4.0x" in text
    # the note still follows bench_a and the new section comes in name order
    assert text.index("/bench:bench_a") < text.index("A note written") < text.index("bench:bench_b") \
        < text.index("bench:bench_c")
    assert text.startswith("# Benchmarks")


@pytest.mark.slow
def test_record_writes_what_the_benchmark_printed(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--record", str(page), "bench_synthetic"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = [line.strip() for line in proc.stdout.splitlines() if line.startswith("   ") and "(" not in line[:5]]
    text = page.read_text()
    assert printed and all(line in text for line in printed)


def test_smoke_runs_are_never_recorded(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--record", str(tmp_path / "p.md"), "bench_synthetic"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 2 and not (tmp_path / "p.md").exists()

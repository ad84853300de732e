"""Loading the book split from the verified parsed cache versus parsing it cold.

Cold: read and verify every chapter (SHA-256), parse the questions, render prompts, check the
annotations. Cached: read the cache entry for this exact source/parser/annotations key and
rebuild the tasks. Both run here, on the same machine, in the same process; the ratio is what a
restart or a second API replica saves."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from app.settings import Settings
from app.tasks.book.bank import load_bank, parse_bank
from app.tasks.book.source import COMMIT


def _mirror() -> Path:
    env = os.environ.get("SCALING_GRADER_BOOK_MIRROR")
    return Path(env) if env else Path(__file__).resolve().parents[1].parent / "shared" / "book" / COMMIT


def _timings(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main(smoke: bool) -> None:
    repeats = 3 if smoke else 25
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(book_mirror=_mirror(), book_cache=Path(tmp))
        bank = load_bank(settings)  # fills the cache (and warms imports for both paths)
        # Interleaved, so that load from other processes on a shared machine hits both alike.
        cold, cached = [], []
        for _ in range(repeats):
            cold += _timings(lambda: parse_bank(settings), 1)
            cached += _timings(lambda: load_bank(settings), 1)
    print(f"   book split: {bank.size()} tasks, {repeats} loads each (interleaved)")
    print("                                          median       best")
    print(f"   cold parse (verify + parse + render): {statistics.median(cold) * 1e3:7.2f} ms {min(cold) * 1e3:7.2f} ms")
    print(f"   from verified parsed cache:           {statistics.median(cached) * 1e3:7.2f} ms "
          f"{min(cached) * 1e3:7.2f} ms")
    print(f"   ratio cold / cached: {statistics.median(cold) / statistics.median(cached):.1f}x median, "
          f"{min(cold) / min(cached):.1f}x best (target >= 10x)")


if __name__ == "__main__":
    main(smoke=False)

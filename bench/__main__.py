"""Run the benchmarks: ``python -m bench`` (full) or ``python -m bench --smoke`` (CI: quick runs
that only prove each benchmark still works; their figures mean nothing).

``--record docs/benchmarks.md`` also writes what each benchmark printed into that page, which is
the one place the project's measured figures live: a section per benchmark, replaced when that
benchmark runs again, so the page is always the output of a run and never typed by hand."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import pkgutil
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import bench
from bench.record import render_section, update_page


class _Tee(io.TextIOBase):
    """Print as usual and keep a copy for the benchmark page."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream = stream
        self.copy = io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        self.stream.write(text)
        self.stream.flush()
        return len(text)

LONG = frozenset({"bench_soak"})
# Runs only when named, smoke included: it needs Docker and starts a container stack of its own.
NAMED_ONLY = frozenset({"bench_stack_soak"})


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("--record", type=Path, metavar="PAGE",
                        help="write each benchmark's printed output into this Markdown page")
    parser.add_argument("names", nargs="*", help="benchmark modules to run (default: all)")
    args = parser.parse_args()
    if args.record and args.smoke:
        parser.error("--record keeps real figures only; smoke runs mean nothing")
    names = [n.removeprefix("bench.") for n in args.names]
    # "soak" names bench_soak; the full soak (30 minutes) runs only when named, its smoke always.
    names = [n if n.startswith("bench_") else f"bench_{n}" for n in names] or sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__)
        if m.name.startswith("bench_") and (args.smoke or m.name not in LONG) and m.name not in NAMED_ONLY
    )
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}{' (smoke)' if args.smoke else ''}", flush=True)
        tee = _Tee(sys.stdout)  # type: ignore[arg-type]
        start = time.perf_counter()
        with contextlib.redirect_stdout(tee):
            module.main(smoke=args.smoke)
        elapsed = time.perf_counter() - start
        print(f"   ({elapsed:.1f} s)", flush=True)
        if args.record:
            when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
            machine = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
            section = render_section(name, module.__doc__ or "", tee.copy.getvalue(), when, machine, elapsed)
            update_page(args.record, name, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Run the benchmarks: ``python -m bench`` (full) or ``python -m bench --smoke`` (CI: quick runs
that only prove each benchmark still works; their figures mean nothing)."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time

import bench

LONG = frozenset({"bench_soak"})


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    parser.add_argument("names", nargs="*", help="benchmark modules to run (default: all)")
    args = parser.parse_args()
    names = [n.removeprefix("bench.") for n in args.names]
    # "soak" names bench_soak; the full soak (30 minutes) runs only when named, its smoke always.
    names = [n if n.startswith("bench_") else f"bench_{n}" for n in names] or sorted(
        m.name for m in pkgutil.iter_modules(bench.__path__)
        if m.name.startswith("bench_") and (args.smoke or m.name not in LONG)
    )
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        print(f"== {name}{' (smoke)' if args.smoke else ''}", flush=True)
        start = time.perf_counter()
        module.main(smoke=args.smoke)
        print(f"   ({time.perf_counter() - start:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

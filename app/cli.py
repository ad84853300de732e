"""The ``scaling-grader`` console script: thin argparse wiring over app/commands/."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from app.commands import (
    audit,
    book,
    coverage,
    exam_summary,
    export,
    impl,
    judge_check,
    serve,
    tasks,
    tenant_key,
    worker,
)
from app.commands import eval as eval_command
from app.extensions import ENV, ExtensionError, load_extensions
from app.settings import UnknownSettingError

# One module per subcommand (or family of subcommands), each with register(subparsers).
COMMAND_MODULES = [serve, tasks, worker, tenant_key, coverage, book, export, judge_check, exam_summary,
                   eval_command, impl, audit]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaling-grader", description="Grading service for RL and evaluation on the JAX scaling book."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Its output may go to a reader that stops early (``| head``): then the
    command ends quietly, as the Python docs recommend (their note on SIGPIPE), instead of with a
    BrokenPipeError traceback, for every command at once."""
    try:
        load_extensions()
    except ExtensionError as exc:
        print(f"{ENV}: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            return _run(argv)
        finally:
            # Written out here, inside the handler, rather than by the interpreter at exit, where
            # a closed pipe can only print "Exception ignored". Runs for argparse's exits too.
            sys.stdout.flush()
    except BrokenPipeError:
        # What is still buffered goes to /dev/null, so the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UnknownSettingError as exc:  # names the variables, never their values
        print(f"invalid settings: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:  # bad SCALING_GRADER_* settings: say which, never their values
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_input=False))
        print(f"invalid settings: {problems}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

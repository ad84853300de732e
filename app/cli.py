"""The ``scaling-grader`` console script: thin argparse wiring over app/commands/."""

from __future__ import annotations

import argparse
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

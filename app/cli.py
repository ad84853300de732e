"""The ``scaling-grader`` console script: thin argparse wiring over app/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# One module per subcommand (or family of subcommands), each with register(subparsers).
COMMAND_MODULES = [
    "app.commands.serve",
    "app.commands.tasks",
    "app.commands.worker",
    "app.commands.tenant_key",
    "app.commands.coverage",
    "app.commands.book",
    "app.commands.export",  # `export`: every split (the tasks split through app.tasks.tasks.export)
    "app.commands.judge_check",
    "app.commands.exam_summary",
    "app.commands.eval",
    "app.commands.impl",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scaling-grader", description="Grading service for RL and evaluation on the JAX scaling book."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from pydantic import ValidationError

    from app.settings import UnknownSettingError

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

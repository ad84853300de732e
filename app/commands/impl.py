"""``scaling-grader impl ...``: the impl split's exercises and the sandbox's state.

* ``impl exercises`` prints the exercise table (markdown) used in the README;
* ``impl sandbox`` probes the isolation tiers and prints the report as JSON;
* ``impl check`` runs every reference solution through the sandbox (an operator's self-test)."""

from __future__ import annotations

import argparse
import inspect
import json
import sys

from app.graders.impl import grade_source, sandbox_status
from app.settings import get_settings
from app.tasks.impl import reference
from app.tasks.impl.exercises import ALL


def _exercises(args: argparse.Namespace) -> int:
    print("| task id | chapter | hidden cases | JAX | entry point |")
    print("|---|---|---|---|---|")
    for e in ALL:
        jax = "yes" if e.profile == "jax" else ""
        print(f"| `{e.task_id}` | {e.chapter} | {len(e.hidden_cases())} | {jax} | `{e.entry}()` |")
    print(f"\n{len(ALL)} exercises, {sum(len(e.hidden_cases()) for e in ALL)} hidden cases")
    return 0


def _sandbox(args: argparse.Namespace) -> int:
    status = sandbox_status(get_settings())
    print(json.dumps(status, indent=2))
    return 0 if status["ok"] else 1


def _check(args: argparse.Namespace) -> int:
    settings = get_settings()
    failed = 0
    for e in ALL:
        source = inspect.getsource(getattr(reference, e.entry))
        result = grade_source(e, source, all_or_nothing=True, settings=settings)
        failed += result.reward != 1.0
        print(f"{e.task_id:32} {result.outcome.value:14} {result.details.get('sandbox_tier', '')}")
    print(f"{len(ALL) - failed}/{len(ALL)} reference solutions pass", file=sys.stderr)
    return 1 if failed else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("impl", help="impl exercises and the sandbox")
    sub = parser.add_subparsers(dest="impl_command", required=True)
    sub.add_parser("exercises", help="print the exercise table").set_defaults(func=_exercises)
    sub.add_parser("sandbox", help="probe the isolation tiers; print the tier in force").set_defaults(
        func=_sandbox
    )
    sub.add_parser("check", help="run every reference solution in the sandbox").set_defaults(func=_check)

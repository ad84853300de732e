"""``scaling-grader impl ...``: the impl split's exercises and the sandbox's state.

* ``impl exercises`` prints the exercise table (markdown) used in the README;
* ``impl sandbox`` probes the isolation tiers and prints the report as JSON;
* ``impl check`` runs every reference solution through the sandbox (an operator's self-test);
* ``impl replay`` redraws a grade's hidden cases from its ``case_seed`` (same case secret
  needed) and prints them, or grades a completion on them again."""

from __future__ import annotations

import argparse
import inspect
import json
import sys

from pydantic import SecretStr

from app.graders.impl import grade_source, sandbox_status
from app.graders.impl_cases import case_seed, draw_cases, random_case_seed
from app.graders.impl_source import extract_code
from app.jobs.case_secret import KEY as CASE_SECRET_KEY
from app.redis_link import sync_connection
from app.settings import ImplSettings, get_settings
from app.tasks.impl import reference
from app.tasks.impl.exercises import ALL, BY_NAME


def _exercises(args: argparse.Namespace) -> int:
    print("| task id | chapter | hidden cases | JAX | entry point |")
    print("|---|---|---|---|---|")
    for e in ALL:
        jax = "yes" if e.profile == "jax" else ""
        print(f"| `{e.task_id}` | {e.chapter} | {e.case_count} | {jax} | `{e.entry}()` |")
    print(f"\n{len(ALL)} exercises, {sum(e.case_count for e in ALL)} hidden cases per grade")
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
        result = grade_source(e, source, all_or_nothing=True, settings=settings, seed=random_case_seed())
        failed += result.reward != 1.0
        print(f"{e.task_id:32} {result.outcome.value:14} {result.details.get('sandbox_tier', '')}")
    print(f"{len(ALL) - failed}/{len(ALL)} reference solutions pass", file=sys.stderr)
    return 1 if failed else 0


def _replay(args: argparse.Namespace) -> int:
    settings = get_settings()
    if settings.redis_url and settings.impl.case_secret is None:
        # the deployment's secret, stored in Redis by its first worker (app.jobs.case_secret)
        stored = sync_connection(settings.redis_url).get(CASE_SECRET_KEY)
        if stored is None:
            print("error: no case secret is set, nor stored in Redis yet (no worker has graded)", file=sys.stderr)
            return 2
        secret = stored.decode() if isinstance(stored, bytes) else str(stored)
        settings = settings.model_copy(update={"impl": ImplSettings(case_secret=SecretStr(secret))})
    task_id = args.task if args.task.startswith("impl/") else f"impl/{args.task}"
    try:
        exercise = BY_NAME[task_id.removeprefix("impl/")]
        cases = draw_cases(exercise, args.seed, settings)
    except (LookupError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.completion is None:
        # Operator-only output: the hidden inputs and expected values of that grade.
        print(json.dumps([{"args": list(c.args), "kwargs": c.kwargs, "expected": c.expected, "raises": c.raises,
                           "edge": c.edge, "sharding": c.sharding} for c in cases], indent=1))
        return 0
    completion = sys.stdin.read() if args.completion == "-" else open(args.completion).read()  # noqa: SIM115
    if case_seed(settings, task_id, completion) != args.seed:
        print("note: this completion, graded afresh, would draw other cases (different case secret or text)",
              file=sys.stderr)
    source = extract_code(completion, exercise.entry)
    if source is None:
        print(f"error: no Python code defining {exercise.entry}() in the completion", file=sys.stderr)
        return 2
    result = grade_source(exercise, source, all_or_nothing=args.all_or_nothing, settings=settings, seed=args.seed)
    print(result.model_dump_json(indent=1))
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("impl", help="impl exercises and the sandbox")
    sub = parser.add_subparsers(dest="impl_command", required=True)
    sub.add_parser("exercises", help="print the exercise table").set_defaults(func=_exercises)
    sub.add_parser("sandbox", help="probe the isolation tiers; print the tier in force").set_defaults(
        func=_sandbox
    )
    sub.add_parser("check", help="run every reference solution in the sandbox").set_defaults(func=_check)
    replay = sub.add_parser("replay", help="redraw a grade's hidden cases from its case_seed; regrade a completion")
    replay.add_argument("--task", required=True, help="impl task id, e.g. impl/torus_stats")
    replay.add_argument("--seed", required=True, help="the case_seed recorded in the grade's details")
    replay.add_argument("--completion", help="file holding the completion to grade again ('-': stdin); "
                        "without it the cases are printed")
    replay.add_argument("--all-or-nothing", action="store_true")
    replay.set_defaults(func=_replay)

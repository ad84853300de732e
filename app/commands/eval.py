"""``scaling-grader eval``: evaluate a model served behind any OpenAI-compatible endpoint.

    scaling-grader eval --model M --base-url http://localhost:8001/v1 --split exam -n 50 -r 3

Samples ``-r`` completions for each of ``-n`` tasks, grades them (in this process, or through
``--service-url``), shows a progress bar and writes a report directory (see
app/evaluation/report.py)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import sys
from pathlib import Path

from app.graders.judge import judge_problem
from app.graders.options import GradeOptions, JudgeSpec
from app.integrations.grading import judge_settings
from app.integrations.tasks import local_public_tasks
from app.settings import Settings
from app.tasks.base import UnknownTask
from app.tasks.registry import UnknownSplit


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="evaluate a model on a split through an OpenAI-compatible endpoint")
    p.add_argument("--model", required=True, help="model name sent to the endpoint")
    p.add_argument("--base-url", required=True, help="OpenAI-compatible base URL, e.g. http://host:8001/v1")
    p.add_argument("--api-key-var", default="OPENAI_API_KEY",
                   help="environment variable holding the endpoint's key (unset: a placeholder key)")
    p.add_argument("--split", default="synthetic")
    p.add_argument("--chapters", help="comma-separated chapter filter")
    p.add_argument("-n", "--num-tasks", type=int, default=50, help="tasks to evaluate (all of a finite split: 0)")
    p.add_argument("-r", "--rollouts", type=int, default=1, help="completions per task")
    p.add_argument("--seed", type=int, default=0, help="task order, and the sampling seed of rollout 0")
    p.add_argument("-c", "--concurrency", type=int, default=16, help="requests in flight to the endpoint")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per sampling request")
    p.add_argument("--max-retries", type=int, default=3, help="retries per sampling request (openai client)")
    p.add_argument("--service-url", help="grade through this service instead of in-process")
    p.add_argument("--tolerance", type=float, help="relative tolerance override for numeric items")
    p.add_argument("--judge-model", help="judge model for judge-graded items")
    p.add_argument("--judge-base-url", help="the judge's OpenAI-compatible base URL")
    p.add_argument("--judge-api-key-var", help="environment variable holding the judge's key")
    p.add_argument("--reveal-expected", action="store_true",
                   help="keep expected values in the report's records (in-process grading; off by default)")
    p.add_argument("-o", "--out", type=Path, help="report directory (default: eval-reports/<model>-<split>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def default_out_dir(model: str, split: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_") or "model"
    return Path("eval-reports") / f"{safe}-{split}-{stamp}"


def _no_judge_for(tasks: list[dict], args: argparse.Namespace) -> str | None:
    """Why in-process grading could not judge the judge-graded tasks, found before any sampling
    (a service applies its own judge settings, so it is not second-guessed here)."""
    judged = sum(t["grading"] == "judge" for t in tasks)
    if not judged or args.service_url:
        return None
    settings = Settings(**(judge_settings(args.judge_model, args.judge_base_url, args.judge_api_key_var) or {}))
    spec = JudgeSpec(model=args.judge_model, base_url=args.judge_base_url) if args.judge_model else None
    problem = judge_problem(GradeOptions(judge=spec), settings)
    if problem is None:
        return None
    return (f"{judged} of the {len(tasks)} tasks are judge-graded and no judge is usable ({problem}); "
            "pass --judge-model and --judge-base-url, or pick tasks without judge items (--chapters, --split)")


def run(args: argparse.Namespace) -> int:
    # Here, not at the top: evaluation samples through the trainer-side package (scaling_book),
    # which the service's container images do not carry, and every command imports this module.
    from app.evaluation.progress import progress_bar
    from app.evaluation.report import write_report
    from app.evaluation.runner import EvalConfig, run_rollouts
    from scaling_book.tasks import chapter_list, public_tasks

    if args.num_tasks < 0 or args.rollouts < 1 or args.concurrency < 1:
        print("-n must be >= 0 (0: the whole split), -r and -c positive", file=sys.stderr)
        return 2
    chapters, n = chapter_list(args.chapters), args.num_tasks or None
    try:
        # Through a service, its banks; else this process's own (the trainer package talks HTTP only).
        tasks = (public_tasks(args.split, chapters=chapters, n=n, seed=args.seed, url=args.service_url)
                 if args.service_url else local_public_tasks(args.split, chapters=chapters, n=n, seed=args.seed))
    except (UnknownSplit, UnknownTask):
        print(f"unknown split {args.split!r}", file=sys.stderr)
        return 2
    except ValueError as problem:
        print(str(problem), file=sys.stderr)
        return 2
    if not tasks:
        print("no tasks match", file=sys.stderr)
        return 2
    if no_judge := _no_judge_for(tasks, args):
        print(no_judge, file=sys.stderr)
        return 2
    config = EvalConfig(
        model=args.model, base_url=args.base_url, api_key_var=args.api_key_var, rollouts=args.rollouts,
        concurrency=args.concurrency, temperature=args.temperature, max_tokens=args.max_tokens,
        request_timeout=args.timeout, max_retries=args.max_retries, seed=args.seed, service_url=args.service_url,
        tolerance=args.tolerance,
        judge_model=args.judge_model, judge_base_url=args.judge_base_url, judge_api_key_var=args.judge_api_key_var,
        reveal_expected=args.reveal_expected,
    )
    bar = progress_bar(len(tasks) * args.rollouts, f"eval {args.model}", enabled=not args.no_progress)
    try:
        records = asyncio.run(run_rollouts(config, tasks, bar))
    finally:
        bar.close()
    out = args.out or default_out_dir(args.model, args.split)
    meta = {"model": args.model, "base_url": args.base_url, "split": args.split, "chapters": args.chapters,
            "tasks": len(tasks), "rollouts": args.rollouts, "seed": args.seed, "temperature": args.temperature,
            "max_tokens": args.max_tokens, "graded_by": args.service_url or "in-process graders"}
    summary = write_report(out, records, meta)
    overall = summary["overall"]
    accuracy = "n/a" if overall["accuracy"] is None else f"{overall['accuracy']:.3f}"
    print(f"accuracy {accuracy} over {overall['scored']} scored rollouts "
          f"({overall['sampling_errors']} sampling errors, {overall['unscored']} unscored); report in {out}")
    return 0 if overall["sampling_errors"] < overall["rollouts"] else 1

"""``scaling-grader tasks verify``: re-execute the rows bank's reference solutions and check the
stored expectations, the required results and that plausible wrong formulas fail.

The lead's ``tasks`` command hooks this in with ``add_verify(its_subparsers)``."""

from __future__ import annotations

import argparse
import json

_SHORT = {
    "missing_ring_factor": "ring",
    "mac_as_one_flop": "mac",
    "bf16_as_one_byte": "bf16",
    "doubled": "x2",
    "one_in_a_million": "1e-6",
}


def run(args: argparse.Namespace) -> int:
    from app.tasks.tasks.verify import verify, write_expected

    if args.write_expected:
        print(f"wrote {write_expected()}")
    report = verify()
    if args.markdown:
        print(markdown_table(report))
    elif args.json:
        print(
            json.dumps(
                {
                    "ok": report.ok,
                    "passed": report.passed,
                    "total": len(report.tasks),
                    "tasks": {t.task_id: t.checks for t in report.tasks},
                },
                indent=1,
            )
        )
    else:
        for t in report.tasks:
            marks = " ".join(
                f"{_SHORT.get(k, k)}:{'FAIL' if v.startswith('FAIL') else v}" for k, v in t.checks.items()
            )
            print(f"tasks/{t.task_id}  {'ok  ' if t.ok else 'FAIL'}  {marks}")
            for k, v in t.checks.items():
                if v.startswith("FAIL"):
                    print(f"    {k}: {v}")
        print(
            f"{report.passed}/{len(report.tasks)} tasks verified: reference solutions re-executed and equal "
            "to the stored expectations, required results reproduced, wrong formulas graded wrong"
        )
    return 0 if report.ok else 1


def markdown_table(report) -> str:
    """One line per task: what it asks and which wrong formulas it was shown to reject."""
    from app.tasks.tasks.catalog import ALL_SPECS

    titles = {s.task_id: s for s in ALL_SPECS}
    lines = ["| id | category | task | wrong answers rejected | verified |", "|---|---|---|---|---|"]
    for t in report.tasks:
        spec = titles.get(t.task_id)
        rejected = ", ".join(_SHORT[k] for k in _SHORT if t.checks.get(k) == "ok")
        category, title = (spec.category, spec.title) if spec else ("", "")
        lines.append(f"| {t.task_id} | {category} | {title} | {rejected} | {'yes' if t.ok else 'NO'} |")
    lines.append(f"\n{report.passed}/{len(report.tasks)} tasks verified")
    return "\n".join(lines)


def add_verify(tasks_subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    # No --split option: verification is specific to the rows bank, and the parent ``tasks``
    # command's own --split default must not change what is verified.
    p = tasks_subparsers.add_parser("verify", help="verify the tasks split's reference solutions")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--markdown", action="store_true", help="print the report as a markdown table")
    p.add_argument(
        "--write-expected",
        action="store_true",
        help="first regenerate the stored expectations from the reference solutions (a deliberate update)",
    )
    p.set_defaults(func=run)
    return p

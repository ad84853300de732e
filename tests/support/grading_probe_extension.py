"""An inline grading kind that lets a test reach into a grading process (app/grading/processes.py):
named in SCALING_GRADER_EXTENSIONS, it is loaded by the API process and by each grading process,
as an operator's extension is. The completion says what the grader does:

- ``pid`` answers correct, with the grading process's pid in its details;
- ``hang <file>`` writes the process's pid to ``<file>`` and then sleeps (a test kills it there);
- ``sleep <seconds> <file>`` writes the pid, sleeps that long, then answers correct;
- ``bomb`` asks for far more memory than a grading process may hold.

Also ``started_at``, a module-level function for ``in_process`` calls: when the call began (a
monotonic clock the whole machine shares) and where."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app.graders.kinds import GraderSpec, register_grader
from app.graders.options import GradeOptions
from app.graders.result import GradeResult, Outcome
from app.settings import Settings
from app.tasks.base import FiniteBank, Task
from app.tasks.splits import SplitSpec, register_split

SPLIT = "probe"
KIND = "probe_inline"
TASK_ID = "probe/p1"


def probe_bank(settings: Settings) -> FiniteBank:
    return FiniteBank(
        SPLIT,
        "a split whose grader a test controls",
        [Task(id=TASK_ID, split=SPLIT, prompt="Do as told.", grading=KIND, gold="ok")],
    )


def grade_probe(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    command, *args = completion.split()
    if command in ("hang", "sleep"):
        seconds, path = (3600.0, args[0]) if command == "hang" else (float(args[0]), args[1])
        # written whole or not at all: a test that waits for the file reads it as soon as it exists
        Path(path + ".part").write_text(str(os.getpid()))
        os.replace(path + ".part", path)
        time.sleep(seconds)
    elif command == "bomb":
        ballast = bytearray(64 * 1024**3)  # a MemoryError under the grading process's limit
        del ballast
    return GradeResult(
        grading=KIND, outcome=Outcome.correct, reward=1.0, explanation="done", details={"pid": os.getpid()}
    )


def started_at(seconds: float) -> tuple[float, int]:
    began = time.monotonic()
    time.sleep(seconds)
    return began, os.getpid()


def register() -> None:
    register_split(SplitSpec(name=SPLIT, load=probe_bank, tolerance=0.05, docs="docs/splits.md#adding-a-split"))
    register_grader(GraderSpec(kind=KIND, grade=grade_probe))


def hang_call(path: str) -> None:
    """For ``in_process``: write the grading process's pid to ``path``, then sleep (to be killed)."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(3600)

"""A split and a grading kind added from outside the service, one registration each, as a newcomer
would add theirs: the tests check that they then appear everywhere the built-in ones do.

Named in SCALING_GRADER_EXTENSIONS (app/extensions.py), it is loaded by every process of the
service: the server, the worker and each of the worker's lanes, as an operator's extension is."""

from __future__ import annotations

from app.graders.kinds import GraderSpec, register_grader
from app.graders.options import GradeOptions
from app.graders.result import GradeResult, Outcome
from app.settings import Settings
from app.tasks.base import FiniteBank, Task
from app.tasks.splits import SplitSpec, register_split

SPLIT = "toy"
KIND = "toy_echo"
QUEUE = "toy_lane"
TOLERANCE = 0.10  # wider than any built-in split's, so a grade shows which one was applied
ECHO_GOLD = "forty-two"


def toy_bank(settings: Settings) -> FiniteBank:
    tasks = [
        Task(id="toy/n1", split=SPLIT, prompt="How many bytes? End with 'Final answer:'.", grading="numeric",
             gold=("100 GB",)),
        Task(id="toy/e1", split=SPLIT, prompt="Say the magic word.", grading=KIND, gold=ECHO_GOLD),
    ]
    return FiniteBank(SPLIT, "a split registered by a test", tasks)


def grade_echo(task: Task, completion: str, options: GradeOptions, settings: Settings) -> GradeResult:
    right = completion.strip().lower().endswith(task.gold)
    return GradeResult(grading=KIND, outcome=Outcome.correct if right else Outcome.incorrect,
                       reward=1.0 if right else 0.0, explanation="echoed" if right else "not echoed",
                       details={"graded_by": "toy_extension"})


def register() -> None:
    register_split(SplitSpec(name=SPLIT, load=toy_bank, tolerance=TOLERANCE, docs="docs/splits.md#adding-a-split"))
    register_grader(GraderSpec(kind=KIND, grade=grade_echo, queue=QUEUE))

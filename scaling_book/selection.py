"""What a verifiers environment over the task banks is made of, whichever verifiers API serves
it (0.3's ``load_environment``, 0.4's v1 taskset): the selected tasks, how to grade one
completion, and the arguments that rebuild the same environment.

Arguments (the names users of the original ``scaling-book`` environment pass):

- ``split``: synthetic (generated, unlimited), book, exam, tasks or impl;
- ``chapters``: a chapter name, a comma-separated list or a list (all when unset);
- ``num_synthetic_examples``: how many generated tasks the synthetic split gives;
- ``num_examples``: a cap on a finite split (all of it when unset);
- ``seed``: which tasks and in which order;
- ``tolerance``: relative tolerance for numeric answers (the service's per-split default when unset);
- ``judge_model``, ``judge_base_url``, ``judge_api_key_var``: the judge for judge-graded tasks.
  ``judge_model`` is required when the selection holds any. The service holds its own judge keys
  and allow-list, so only an explicitly given base URL is sent to it; ``judge_api_key_var`` is
  accepted (users of the original environment pass it) but never sent;
- ``service_url``: the grading service (else $SCALING_GRADER_URL; one of them is required);
- ``service_api_key_var``: the variable holding the tenant's key (else $SCALING_GRADER_API_KEY: the
  key itself is never an argument, since verifiers saves every argument with its results);
  ``service_timeout`` (seconds per request), ``service_deadline`` (seconds for all of one
  request's retries), ``service_headers`` (extra headers)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from scaling_book.client import ClientOptions
from scaling_book.grading import grade_labelled_async, service_url
from scaling_book.results import GradeResult
from scaling_book.tasks import SYSTEM_PROMPT, chapter_list, public_tasks


@dataclass
class Selection:
    split: str = "synthetic"
    chapters: str | Sequence[str] | None = None
    num_synthetic_examples: int = 256
    seed: int = 0
    tolerance: float | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    judge_api_key_var: str | None = None
    service_url: str | None = None
    num_examples: int | None = None
    system_prompt: str | None = None
    service_api_key_var: str | None = None
    service_timeout: float | None = None
    service_deadline: float | None = None
    service_headers: dict[str, str] | None = None

    def url(self) -> str | None:
        return service_url(self.service_url)

    def client_options(self) -> ClientOptions:
        key = None
        if self.service_api_key_var:
            key = os.environ.get(self.service_api_key_var)
            if not key:
                raise ValueError(f"service_api_key_var names ${self.service_api_key_var}, which is not set")
        return ClientOptions.of(key, self.service_timeout, self.service_deadline, self.service_headers)

    def env_args(self) -> dict[str, Any]:
        """Every argument, JSON-ready: what rebuilds this environment."""
        args = asdict(self)
        if args["chapters"] is not None and not isinstance(args["chapters"], str):
            args["chapters"] = list(args["chapters"])
        return args

    def prompt(self) -> str:
        return self.system_prompt or SYSTEM_PROMPT

    def tasks(self) -> list[dict[str, Any]]:
        """The selected public tasks; ValueError for an empty selection, or judge-graded tasks
        without a judge model (found at load time, not as a zero reward on every such rollout)."""
        n = self.num_synthetic_examples if self.split == "synthetic" else self.num_examples
        tasks = public_tasks(self.split, chapters=chapter_list(self.chapters), n=n, seed=self.seed, url=self.url(),
                             client_options=self.client_options())
        if not tasks:
            raise ValueError(f"no tasks in split {self.split!r} for chapters {self.chapters!r}")
        judged = sum(t["grading"] == "judge" for t in tasks)
        if judged and not self.judge_model:
            raise ValueError(f"{judged} of the {len(tasks)} selected tasks are graded by a judge: pass judge_model "
                             "(and judge_base_url), or select chapters or a split without judge items")
        return tasks

    def _judge(self) -> dict[str, Any] | None:
        """The request's judge option: the model, and the base URL only when one was given."""
        if not self.judge_model:
            return None
        return {k: v for k, v in (("model", self.judge_model), ("base_url", self.judge_base_url)) if v is not None}

    async def grade(self, label: Any, completion: Any) -> GradeResult:
        options: dict[str, Any] = {k: v for k, v in (("tolerance", self.tolerance), ("judge", self._judge()))
                                   if v is not None}
        [result] = await grade_labelled_async([label], [completion], self.url(), client_options=self.client_options(),
                                              **options)
        return result


def dataset_rows(tasks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """verifiers' dataset columns: the question, the task id as the answer, public facts as info."""
    return [{
        "question": t["prompt"],
        "answer": t["id"],
        "info": {"task_id": t["id"], "split": t["split"], "chapter": t.get("chapter") or "", "grading": t["grading"]},
    } for t in tasks]

"""The ``scaling-book`` environment for verifiers 0.4's v1 API: a taskset plugin.

    vf-eval scaling-book --env.taskset.split exam --env.taskset.chapters roofline \\
        --env.taskset.judge-model gpt-4.1-mini

verifiers 0.4 reads a bare id as the taskset id, imports the module it names (dashes to
underscores: ``scaling_book``) and takes the ``Taskset`` subclass its ``__all__`` exports; the
taskset's config holds every argument (``--env.taskset.<name>``), and that config is what its env
server rebuilds the environment from. The package also exports a ``Harness``: a plain chat
(one model reply, no tools), which verifiers then uses by default for this taskset.

Each task's reward grades the final reply through the service (``service_url`` or
$SCALING_GRADER_URL); the ``scored`` metric says whether the grade can be trusted
(an unscored grade rewards 0.0). Arguments are those of ``scaling_book.selection``."""

# Type-checked beside verifiers 0.3 (the .venv's), which has no verifiers.v1: mypy sees its base
# classes and decorators as Any, so they are taken as they come.
# mypy: allow-subclassing-any, allow-untyped-decorators
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import fields
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.harnesses.null import NullHarness

from scaling_book.results import GradeResult
from scaling_book.selection import Selection

RESULT_KEY = "scaling_grader_result"


class ScalingBookData(vf.TaskData):
    task_id: str = ""
    split: str = ""
    chapter: str = ""
    grading: str = ""


class ScalingBookTasksetConfig(vf.TasksetConfig):
    split: str = "synthetic"
    chapters: str | list[str] | None = None
    num_synthetic_examples: int = 256
    seed: int = 0
    tolerance: float | None = None
    judge_model: str | None = None
    judge_base_url: str | None = None
    judge_api_key_var: str | None = None
    service_url: str | None = None
    num_examples: int | None = None
    service_api_key_var: str | None = None
    service_timeout: float | None = None
    service_deadline: float | None = None
    service_headers: dict[str, str] | None = None

    def selection(self) -> Selection:
        """The same arguments as the 0.3 environment's (the fields above mirror Selection's)."""
        given = type(self).model_fields
        return Selection(**{f.name: getattr(self, f.name) for f in fields(Selection) if f.name in given})


class ScalingBookTask(vf.Task[ScalingBookData]):
    selection: Selection = Selection()  # set by the taskset for its tasks

    @property
    def key(self) -> str:
        return str(self.data.task_id)  # stable across runs, unlike the content hash of data with an idx

    async def score(self, trace: Any, runtime: Any = None) -> None:
        # The verdict is kept in trace.info so that the metric and the reward share one grade; a
        # verdict already there is an earlier scoring's (vf-replay re-scores saved traces): every
        # scoring grades the reply again instead of repeating it.
        trace.info.pop(RESULT_KEY, None)
        await super().score(trace, runtime)

    async def _result(self, trace: Any) -> GradeResult:
        stored = trace.info.get(RESULT_KEY)
        if stored is None:
            result = await self.selection.grade(self.data.task_id, trace.last_reply)
            trace.info[RESULT_KEY] = stored = result.to_json()
        return GradeResult.from_json(stored)

    @vf.metric
    async def scored(self, trace: Any) -> float:
        return float((await self._result(trace)).scored)

    @vf.reward
    async def scaling_grader(self, trace: Any) -> float:
        result = await self._result(trace)
        return result.reward if result.scored else 0.0


class ScalingBookTaskset(vf.Taskset[ScalingBookTask, ScalingBookTasksetConfig]):
    def __init__(self, config: ScalingBookTasksetConfig) -> None:
        super().__init__(config)
        self.selection = config.selection()
        self._public = self.selection.tasks()  # refused here, at load: empty selections, judge items without a judge

    def load(self) -> Iterator[ScalingBookTask]:
        for t in self._public:
            data = ScalingBookData(id=t["id"], name=t["id"], prompt=t["prompt"],
                                   system_prompt=self.selection.prompt(), task_id=t["id"], split=t["split"],
                                   chapter=t.get("chapter") or "", grading=t["grading"])
            task = ScalingBookTask(data, self.config.task)
            task.selection = self.selection
            yield task


class ScalingBookHarness(NullHarness):
    """A plain chat: the prompt, one model reply, no tools."""

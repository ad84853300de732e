"""An attack on the verifiers 0.4 taskset, in the verifiers-0.4 venv of test_verifiers_v1: a
saved trace re-scored (what `vf-replay` does: a copy of the trace, its rewards and metrics
cleared, then ``task.score``) must be graded again, not given the verdict its ``info`` recorded.

Found: the task kept its verdict in ``trace.info`` and reused it whenever it was there, so a
replay meant to recover the rewards of rollouts graded during a fault (unscored, 0.0) gave them
0.0 again without asking the service."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.scaling_book.test_verifiers_v1 import venv_python  # noqa: F401  (the venv fixture)

pytestmark = [pytest.mark.timeout(1800), pytest.mark.low_priority, pytest.mark.slow]

SCRIPT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import verifiers.v1 as vf
from verifiers.v1.utils.loaders import load_taskset, resolve_env_config
from scaling_book.results import unscored
from scaling_book.verifiers_v1 import RESULT_KEY
from tests.support.oracle import right

args = {"id": "scaling-book", "split": "synthetic", "num_synthetic_examples": 1, "seed": 309,
        "service_url": sys.argv[2]}
[task] = list(load_taskset(resolve_env_config({"taskset": args}).taskset))
recorded = unscored("sandbox_error: the sandbox was restarting").to_json()  # what a run during a fault saved
saved = vf.Trace.model_construct(root_reply=right(task.data.task_id), info={RESULT_KEY: recorded})
replayed = saved.model_copy(deep=True)
replayed.rewards, replayed.metrics = {}, {}
asyncio.run(task.score(replayed))
print(json.dumps([replayed.rewards["scaling_grader"].value, replayed.metrics["scored"],
                  replayed.info[RESULT_KEY]["outcome"]]))
"""


def test_a_replayed_trace_is_graded_again(venv_python: Path, server_url: str) -> None:  # noqa: F811
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([str(venv_python), "-c", SCRIPT, str(root), server_url], capture_output=True, text=True,
                          timeout=600, cwd=root)
    assert done.returncode == 0, done.stderr[-3000:]
    reward, scored, outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert (reward, scored, outcome) == (1.0, 1.0, "correct")

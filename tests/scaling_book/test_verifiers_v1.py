"""verifiers 0.4 (only its v1 API) in a venv of its own (it cannot share one with the 0.3 the test
extra installs): the id `scaling-book` resolves through verifiers' own loaders to this package's
taskset, harness and config; the config carries every argument and survives the env-server wire
(a model_dump validated again); tasks carry no answers; the task's reward grades the final reply
through a real server; judge items without a judge are refused at load; `vf-eval scaling-book -h`
shows the arguments.

Full `vf-eval` rollouts, with the documented command, are run by test_vf_eval_v04_command.py."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.server import ROOT

VERSION = "0.4.0"
VENV = ROOT / ".cache" / f"verifiers-{VERSION}"

# The first test also builds the venv (allowed 25 minutes below: with uv's cache cold on a slow
# network, that alone may outlast the suite's 300-second default).
pytestmark = [pytest.mark.timeout(1800), pytest.mark.low_priority]

SCRIPT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
import verifiers, verifiers.v1 as vf
from verifiers.v1.utils.loaders import (default_harness_id, harness_class, load_taskset, resolve_env_config,
                                        taskset_class)
import scaling_book
from tests.support.oracle import gold, right, wrong

out = {"version": verifiers.__version__, "legacy": hasattr(verifiers, "SingleTurnEnv")}
out["taskset"] = taskset_class("scaling-book") is scaling_book.ScalingBookTaskset
out["harness"] = default_harness_id("scaling-book") == "scaling-book" and (
    harness_class("scaling-book") is scaling_book.ScalingBookHarness)
args = {"id": "scaling-book", "split": "synthetic", "chapters": ["roofline"], "num_synthetic_examples": 3,
        "seed": 61, "tolerance": 0.6, "judge_model": None, "judge_base_url": None, "judge_api_key_var": None,
        "service_url": None, "num_examples": None}
config = resolve_env_config({"taskset": args})
wire = resolve_env_config(json.loads(config.model_dump_json()))  # what the env server receives
out["config"] = {k: getattr(wire.taskset, k) for k in args}
tasks = list(load_taskset(wire.taskset))
out["tasks"] = [(t.data.task_id, t.data.chapter, t.key) for t in tasks]
out["answers_hidden"] = all(v not in t.data.prompt for t in tasks for v in gold(t.data.task_id))
scores = []
for t in tasks:
    for text in (right(t.data.task_id), "no answer here", wrong(t.data.task_id)):
        trace = vf.Trace.model_construct(root_reply=text)
        asyncio.run(t.score(trace))
        scores.append((trace.rewards["scaling_grader"].value, trace.metrics["scored"]))
out["scores"] = scores
try:
    judged = {"id": "scaling-book", "split": "exam", "chapters": "roofline"}
    load_taskset(resolve_env_config({"taskset": judged}).taskset)
    out["judge_refused"] = ""
except ValueError as e:
    out["judge_refused"] = str(e)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def venv_python() -> Path:
    python = VENV / "bin" / "python"
    marker = VENV / "installed"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    # Under pytest -n both tests may start at once on two workers: one builds, the other waits.
    with open(VENV.parent / f"verifiers-{VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            _build(python, marker)
    return python


def _build(python: Path, marker: Path) -> None:
    # uv (the test extra's) rather than pip: from its cache the install takes seconds, not minutes.
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "-q", "--python", sys.executable, str(VENV)], check=True, timeout=300)
    done = subprocess.run([*uv, "pip", "install", "-q", "--python", str(python), f"verifiers=={VERSION}",
                           "-e", str(ROOT), "-e", str(ROOT / "scaling_book")],
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    marker.write_text(VERSION)


@pytest.mark.slow
def test_the_v1_taskset_as_verifiers_04_loads_it(venv_python: Path, tmp_path: Path, server_url: str) -> None:
    script = tmp_path / "probe.py"
    script.write_text(SCRIPT)
    done = subprocess.run([str(venv_python), str(script), str(ROOT)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path, env={**os.environ, "SCALING_GRADER_URL": server_url})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["version"] == VERSION and out["legacy"] is False  # the v1 API only
    assert out["taskset"] and out["harness"]
    assert out["config"] == {"id": "scaling-book", "split": "synthetic", "chapters": ["roofline"],
                             "num_synthetic_examples": 3, "seed": 61, "tolerance": 0.6, "judge_model": None,
                             "judge_base_url": None, "judge_api_key_var": None, "service_url": None,
                             "num_examples": None}
    assert len(out["tasks"]) == 3 and all(c == "roofline" and key == tid for tid, c, key in out["tasks"])
    assert out["answers_hidden"]
    # right: 1.0; no answer: 0.0 (scored); wrong by half: 0.0 (scored), since the 60% tolerance
    # given is not applied to a task (it would make grades an oracle)
    assert out["scores"] == [[1.0, 1.0], [0.0, 1.0], [0.0, 1.0]] * 3
    assert "judge_model" in out["judge_refused"]


@pytest.mark.slow
def test_vf_eval_shows_the_taskset_arguments(venv_python: Path) -> None:
    vf_eval = venv_python.parent / "vf-eval"
    done = subprocess.run([str(vf_eval), "scaling-book", "-h"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "COLUMNS": "200"})  # low priority: minutes without a CPU
    assert done.returncode == 0, done.stderr[-3000:]
    for name in ("split", "chapters", "num-synthetic-examples", "seed", "tolerance", "judge-model",
                 "judge-base-url", "judge-api-key-var", "service-url"):
        assert f"--env.taskset.{name}" in done.stdout, name

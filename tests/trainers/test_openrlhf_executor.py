"""OpenRLHF 0.11.2's own rollout code against a tenant-protected service, from docs/trainers.md's
command lines: every flag the page shows is one train_ppo_ray's parser defines (read from its
source: the launcher itself needs GPUs), and the --reward.remote_url values the page gives (the
tenant's reward URL, and the reward function file) drive OpenRLHF's SingleTurnAgentExecutor and
its conversion of each rollout into an Experience: every rollout gets the reward its answer
deserves, with the unscored flags in extra_logs. When the service cannot be reached, the file
route's failure, logged by OpenRLHF, carries no key."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from tests.scaling_book.tenant_server import TenantService
from tests.support.oracle import right, synthetic_tasks, wrong
from tests.trainers import doc_commands
from tests.trainers.conftest import run_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
CHATML = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
DOC_URL = "http://grader:8000"


def _parser_flags(python: Path) -> set[str]:
    source = subprocess.run([str(python), "-c", "import importlib.util as u; "
                             "print(u.find_spec('openrlhf.cli.train_ppo_ray').origin)"],
                            capture_output=True, text=True, check=True, timeout=120).stdout.strip()
    flags = set()
    for node in ast.walk(ast.parse(Path(source).read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                flags.add(first.value)
    return flags


def _flags(words: list[str]) -> list[str]:
    return [w for w in words if w.startswith("--")]


def _file_route(python: Path) -> str:
    """What the page's $(python -c ...) gives the file route's --reward.remote_url."""
    words = doc_commands.words("openrlhf-file")
    value = words[words.index("--reward.remote_url") + 1]
    assert value.startswith("$(python -c ") and value.endswith(")")
    code = value.removeprefix("$(python -c ").removesuffix(")").strip("'")
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True,
                          timeout=120).stdout.strip()


def _rollouts(n: int, seed: int) -> list[dict[str, str]]:
    tasks = synthetic_tasks(n, seed=seed)
    return [{"prompt": CHATML.format(t.prompt), "completion": right(t.id) if i % 2 else wrong(t.id), "label": t.id}
            for i, t in enumerate(tasks)]


def test_the_documented_flags_are_openrlhfs(trainers_python: Path) -> None:
    flags = _parser_flags(trainers_python)
    for name in ("openrlhf", "openrlhf-file"):
        words = doc_commands.words(name)
        assert words[:3] == ["python", "-m", "openrlhf.cli.train_ppo_ray"]
        assert set(_flags(words)) <= flags, set(_flags(words)) - flags
        assert {"--data.input_key", "--data.label_key", "--reward.remote_url"} <= set(words)


def test_both_reward_routes_through_openrlhfs_executor(trainers_python: Path, service: TenantService,
                                                       tmp_path: Path) -> None:
    url_route = doc_commands.words("openrlhf")
    remote = url_route[url_route.index("--reward.remote_url") + 1]
    assert remote == f"{DOC_URL}/get_reward/<reward-key>"
    env = doc_commands.exports("openrlhf-file")
    assert set(env) == {"SCALING_GRADER_URL", "SCALING_GRADER_API_KEY"}
    file_route = _file_route(trainers_python)
    rollouts = _rollouts(6, seed=121)
    secret = "sg_" + "k" * 43
    routes = [
        {"url": remote.replace(DOC_URL, service.url).replace("<reward-key>", service.reward_key_a),
         "rollouts": rollouts},
        {"url": file_route, "rollouts": rollouts,
         "env": {"SCALING_GRADER_URL": service.url, "SCALING_GRADER_API_KEY": service.key_b}},
        # nothing listens on port 9: every attempt fails until the two-second deadline
        {"url": file_route, "rollouts": rollouts[:1],
         "env": {"SCALING_GRADER_URL": "http://127.0.0.1:9", "SCALING_GRADER_API_KEY": secret,
                 "SCALING_GRADER_DEADLINE": "2"}},
    ]
    settings = {"model_dir": str(tmp_path / "model"), "routes": routes}
    lines, log = run_script(trainers_python, "openrlhf_executor.py", settings)
    assert [line["route"] for line in lines] == [r["url"] for r in routes]
    # OpenRLHF keeps the one-item lists of the reply as they are: a (1, 1) tensor per rollout
    expected = [[[1.0 if i % 2 else 0.0]] for i in range(6)]
    for line in lines[:2]:
        experiences = line["experiences"]
        assert [e["reward"] for e in experiences] == expected
        assert [e["score"] for e in experiences] == expected
        assert [e["label"] for e in experiences] == [r["label"] for r in rollouts]
        for e, want in zip(experiences, expected, strict=True):
            assert e["info"]["scored"] == [[1]] and e["info"]["correct"] == [[int(want[0][0])]]
            assert e["info"]["unscored_bad_label"] == [[0]]
    # the unreachable service: OpenRLHF's executor caught the failure and logged it, keyless
    assert lines[2]["experiences"][0]["reward"] is None
    assert "Failed to fetch reward" in log and "ConnectError" in log
    assert secret not in log and secret not in json.dumps(lines)

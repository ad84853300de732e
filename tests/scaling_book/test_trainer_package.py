"""The trainer package is its own distribution: one top-level name (`scaling_book`), httpx as
its only dependency, and it works against a service without the service package importable (a
trainer's own `app` package must not be shadowed, nor needed)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.support.oracle import right, synthetic_tasks, wrong
from tests.support.server import ROOT

# A wheel built and installed, a service and fresh interpreters: left out of `make test-fast`.
pytestmark = pytest.mark.slow


def test_the_wheel_holds_scaling_book_only_and_needs_only_httpx(tmp_path: Path) -> None:
    source = shutil.copytree(ROOT / "scaling_book", tmp_path / "src", ignore=shutil.ignore_patterns(
        "*.egg-info", "build", "__pycache__"))  # built out of the tree: no build/ left in the checkout
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(source), "-w", str(tmp_path)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-2000:]
    [wheel] = tmp_path.glob("scaling_book-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith("dist-info/METADATA"))).decode()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == {"scaling_book"}
    assert "scaling_book/__init__.py" in names and not any(n.endswith("pyproject.toml") for n in names)
    assert "scaling_book/py.typed" in names  # PEP 561: trainers' type checkers read its annotations
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert [r for r in requires if "extra ==" not in r] == ["httpx>=0.27"]


BLOCKED = """
import sys
sys.modules["app"] = None      # as if the service package were absent (or a trainer's own `app`)
sys.modules["worker"] = None
"""


def _run(code: str) -> subprocess.CompletedProcess:
    # -I: neither the current directory nor PYTHONPATH; the package comes from its installation
    return subprocess.run([sys.executable, "-I", "-c", BLOCKED + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, cwd="/")


def test_helpers_work_through_a_service_without_the_service_package(server_url: str) -> None:
    tasks = synthetic_tasks(2, seed=71)
    done = _run(f"""
        import scaling_book
        from scaling_book.client import GraderClient
        from scaling_book.trl import make_reward_func
        from scaling_book.verl import compute_score, compute_score_batch
        from scaling_book.openrlhf import reward_url
        reward = make_reward_func({server_url!r})
        print(reward(prompts=["p", "p"], completions={[right(tasks[0].id), wrong(tasks[1].id)]!r},
                     task_id={[t.id for t in tasks]!r}))
        print(compute_score("x", {right(tasks[0].id)!r}, {tasks[0].id!r}, None,
                            scaling_grader_url={server_url!r})["score"])
        print(len(GraderClient({server_url!r}).tasks("synthetic", n=3)))
        print(reward_url("http://h:1/", "k"))
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("app", "worker") and sys.modules[m]))
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:5] == ["[1.0, 0.0]", "1.0", "3", "http://h:1/get_reward/k", "[]"]


def test_without_a_service_url_the_package_says_what_to_do() -> None:
    done = _run("""
        import os
        os.environ.pop("SCALING_GRADER_URL", None)
        from scaling_book.verl import compute_score
        try:
            compute_score("x", "Final answer: 1 s", "synthetic/0/0")
        except ValueError as e:
            print(type(e).__name__ + ":", e)
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "NoServiceURL:" in done.stdout and "SCALING_GRADER_URL" in done.stdout

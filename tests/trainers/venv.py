"""The trainers' venv: TRL, verl and OpenRLHF as pinned in requirements.txt, on CPU torch, with
this repository's trainer package installed editable. Built once per version of the pins (the
directory name carries their hash) under the user's cache directory, so fresh clones on one
machine share it; by `make trainers-venv` or by the first test that needs it; a lock lets
parallel test workers wait for one build instead of racing. The editable install names one
checkout: each use points it at the checkout asking (seconds), since the clone that built the
venv may be another version of the package, or gone (its trainer tests then failed on
"No module named scaling_book", or ran another clone's code). Two clones running their trainer
tests at the same moment still take turns at it. torch goes in with pip (which finds
the CPU wheel on the machine's disk), everything else with uv under a torch==2.13.0 constraint
(seconds from uv's cache, where pip's resolver takes minutes), so nothing can swap in a CUDA build.

    python -m tests.trainers.venv      # build it (what `make trainers-venv` runs)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = Path(__file__).with_name("requirements.txt")
# The CPU wheel on the development machines' disk; pip finds it there (uv would not, and would
# download a CUDA build of several GB instead).
TORCH = "torch==2.13.0"
NO_DEPS_MARK = "# --no-deps"


def _pins() -> tuple[list[str], list[str]]:
    """(requirements installed with their dependencies, those installed with --no-deps)."""
    with_deps: list[str] = []
    no_deps: list[str] = []
    target = with_deps
    for line in REQUIREMENTS.read_text().splitlines():
        if line.strip() == NO_DEPS_MARK:
            target = no_deps
        elif line.strip() and not line.lstrip().startswith("#"):
            target.append(line.strip())
    return with_deps, no_deps


def venv_dir() -> Path:
    digest = hashlib.sha256((TORCH + REQUIREMENTS.read_text()).encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "scaling-grader" / f"trainers-{digest}"


def python() -> Path:
    """The venv's interpreter, building the venv first when it is missing ($TRAINERS_PYTHON names
    another interpreter holding the same packages, to use instead)."""
    if given := os.environ.get("TRAINERS_PYTHON"):
        return Path(given)
    venv = venv_dir()
    marker = venv / "installed"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not marker.exists():
            _build(venv)
            marker.write_text(REQUIREMENTS.read_text())
        _install_this_checkout(venv)
    return venv / "bin" / "python"


def _uv(venv: Path) -> list[str]:
    return [sys.executable, "-m", "uv", "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
            "--constraint", str(venv / "torch-constraint.txt")]


def _install_this_checkout(venv: Path) -> None:
    """Point the venv's editable scaling_book at this checkout, unless it already imports from it
    (asked of the venv's own interpreter: whichever clone last installed it)."""
    here = ROOT / "scaling_book"
    # -I and cwd: the copy the venv's own path finds, not this tree's beside the working directory
    where = "import scaling_book; print(scaling_book.__path__[0])"
    found = subprocess.run([str(venv / "bin" / "python"), "-I", "-c", where],
                           capture_output=True, text=True, timeout=300, cwd=venv)
    if found.returncode == 0 and Path(found.stdout.strip()).resolve() == here.resolve():
        return
    _run([*_uv(venv), "--no-deps", "-e", str(here)])


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=3000)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:6])} ... failed:\n{done.stderr[-3000:]}")


def _build(venv: Path) -> None:
    _run([sys.executable, "-m", "venv", "--clear", str(venv)])
    target = str(venv / "bin" / "python")
    _run([target, "-m", "pip", "install", "-q", "--disable-pip-version-check", TORCH])
    with_deps, no_deps = _pins()
    (venv / "torch-constraint.txt").write_text(TORCH + "\n")
    uv = _uv(venv)
    _run([*uv, *with_deps])
    _run([*uv, "--no-deps", *no_deps])
    check = subprocess.run([str(venv / "bin" / "python"), "-c", "import torch; print(torch.__version__)"],
                           capture_output=True, text=True, timeout=300)
    if check.returncode != 0 or "+cpu" not in check.stdout:
        raise RuntimeError(f"the trainers' venv must hold the CPU torch, found {check.stdout or check.stderr}")


if __name__ == "__main__":
    print(python())

"""The console script must start where only the service is installed (the container images carry
no trainer package): a worker that cannot import the CLI never takes a job."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow  # a fresh interpreter imports the whole CLI
def test_every_command_but_eval_works_without_the_trainer_package() -> None:
    # A None entry in sys.modules makes any import of scaling_book fail, as in the images.
    probe = ("import sys; sys.modules['scaling_book'] = None; "
             "from app.cli import build_parser; build_parser().parse_args(['worker', '--help'])")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "ModuleNotFoundError" not in done.stderr and "ImportError" not in done.stderr, done.stderr[-1500:]
    assert done.returncode == 0

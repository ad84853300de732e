"""Every command's output may go to a reader that stops early (``scaling-grader exam-summary |
head``): the command then ends quietly, with no BrokenPipeError traceback and no "Exception
ignored" message from the interpreter's last flush."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.server import ROOT

pytestmark = pytest.mark.slow  # fresh interpreters importing the whole CLI

# Commands whose output is long enough to matter in a pipe, and argparse's own output.
COMMANDS = [["exam-summary"], ["tasks", "--split", "synthetic", "-n", "200"], ["--help"]]


def _piped_into_a_closed_reader(argv: list[str]) -> subprocess.CompletedProcess:
    """Run the CLI with its stdout a pipe whose reading end is closed before it writes a byte:
    the early-closing reader at its most certain (`| head` closes after its lines, whose timing
    against the writer's would decide whether the write fails)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "app.cli", *argv], cwd=ROOT, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)


@pytest.mark.parametrize("argv", COMMANDS, ids=" ".join)
def test_output_into_a_closed_pipe_ends_without_a_traceback(argv: list[str]) -> None:
    done = _piped_into_a_closed_reader(argv)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr[-2000:]
    assert "Exception ignored" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 1)  # 1: the output did not all reach its reader (the Python docs' choice)


def test_the_same_commands_through_head_print_their_first_line() -> None:
    # The shell pipe a person types: head reads its one line and exits, and the writer ends quietly.
    done = subprocess.run(f"{sys.executable} -m app.cli exam-summary | head -n 1", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.count("\n") == 1 and done.stdout.strip(), done.stdout
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-2000:]

"""The program that runs inside the sandbox: the harness (reporter and runner) of every child,
and the fork server's loop. Its parts are plain Python files, never imported by the child: each
child gets their text, joined in order, as ``python -I -S -B -c`` (the service's own modules and
packages stay out of its reach). The service imports a part only to reuse pure data or checks
(values.plain_problem; seccomp.DENIED_SYSCALLS in the tests)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

_HERE = Path(__file__).parent
# In order: each part uses names of those before it.
HARNESS_PARTS = ("channels.py", "landlock.py", "seccomp.py", "values.py", "runner.py", "harness.py")


@cache
def harness_source() -> str:
    """The program of a started child."""
    # The deny-list goes on before main() forks the reporter and the runner: no process of the
    # sandbox ever runs without it (the runner checks that it is in force before the candidate runs).
    program = "open_result_socket_first()\narm_seccomp_first()\nmain()\n"
    return "\n".join([*((_HERE / name).read_text() for name in HARNESS_PARTS), program])


@cache
def zygote_source() -> str:
    """The fork server's program: the harness with the zygote loop as its entry point."""
    parts = (*HARNESS_PARTS, "zygote.py")
    return "\n".join([*((_HERE / name).read_text() for name in parts), "zygote_main()\n"])

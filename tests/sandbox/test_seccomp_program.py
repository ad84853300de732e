"""The deny-list as forks of the fork server load it (compiled once, loaded with prctl) refuses
exactly what the filter a started child builds for itself refuses."""

from __future__ import annotations

import ctypes
import errno
import os
import socket
from pathlib import Path

import pytest

import app.sandbox
from tests.support.forked import report_from_fork

SOURCE = (Path(app.sandbox.__file__).parent / "child/seccomp.py").read_text()
libc = ctypes.CDLL(None, use_errno=True)


def _harness_part() -> dict:
    namespace: dict = {}
    exec(compile(SOURCE, "child/seccomp.py", "exec"), namespace)
    if namespace["load_libseccomp"]() is None:
        pytest.fail("libseccomp is not installed (Debian: libseccomp2)")
    return namespace


def _probe() -> dict[str, int]:
    """errno of a few calls on the list (each harmless if it were allowed) and of some that are not."""
    seen = {}
    try:
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
        seen["socket"] = 0
    except OSError as exc:
        seen["socket"] = exc.errno or -1
    for name, call in {
        "unshare": lambda: libc.unshare(0),
        "keyctl": lambda: libc.syscall(250, 0, -2, 0),  # KEYCTL_GET_KEYRING_ID of the process keyring
        "getpid": lambda: libc.syscall(39),
        "pipe": lambda: os.close(os.pipe()[0]) or 0,
    }.items():
        ctypes.set_errno(0)
        rc = call()
        seen[name] = ctypes.get_errno() if rc == -1 else 0
    with open("/proc/self/status") as f:
        seen["seccomp_mode"] = int(next(line.split()[1] for line in f if line.startswith("Seccomp:")))
    return seen


def _in_fork(arm) -> dict[str, int]:
    def work() -> dict[str, int]:
        arm()
        return _probe()

    return report_from_fork(work)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="syscall numbers of x86_64")
def test_compiled_program_refuses_what_the_built_filter_refuses() -> None:
    ns = _harness_part()
    built = _in_fork(lambda: ns["install_seccomp"](ns["load_libseccomp"]()))
    ns["compile_seccomp"](ns["load_libseccomp"]())
    compiled = _in_fork(ns["install_compiled"])
    unfiltered = _in_fork(lambda: None)
    assert built == compiled
    assert compiled["seccomp_mode"] == 2 and unfiltered["seccomp_mode"] == 0
    for denied in ("socket", "unshare", "keyctl"):
        assert compiled[denied] == errno.EPERM, compiled
    assert compiled["getpid"] == 0 and compiled["pipe"] == 0
    assert unfiltered["socket"] == 0


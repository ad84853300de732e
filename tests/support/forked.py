"""Run a check in a fork of the test process (where a seccomp filter or other one-way state can be
installed without touching the test process) and bring back what it saw."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any


def report_from_fork(work: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``work()`` run in a forked child; its JSON-safe result, read back over a pipe. The child
    exits without running the parent's clean-up, whatever ``work`` does."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.write(write_end, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 4096):
        data += chunk
    os.close(read_end)
    os.waitpid(pid, 0)
    assert data, "the fork reported nothing"
    return json.loads(data)  # type: ignore[no-any-return]

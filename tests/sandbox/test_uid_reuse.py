"""A uid is handed out again without searching /proc only when its last holder gave it back after
seeing all its processes gone; a holder that died with the uid in use leaves it searched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from app.sandbox.uids import UidPool, processes_of

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs a process under another uid")


def test_a_uid_left_in_use_by_a_dead_holder_is_not_handed_out(tmp_path) -> None:
    base = 720_000
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, pathlib, subprocess; from app.sandbox.uids import UidPool;"
         f"p = UidPool({base}, 1, pathlib.Path({str(tmp_path)!r})); uid = p.take();"
         "s = subprocess.Popen(['sleep', '60'], user=uid, group=uid, extra_groups=[], start_new_session=True);"
         "print(uid, s.pid, flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    uid, sleeper = map(int, holder.stdout.readline().split())  # type: ignore[union-attr]
    holder.kill()  # dies holding the uid, its case's process still running
    holder.wait()
    try:
        assert processes_of(uid)
        pool = UidPool(base, 1, tmp_path)
        with pytest.raises(RuntimeError):
            pool.take()  # the lock is free, but the uid is not clean
    finally:
        os.kill(sleeper, signal.SIGKILL)
    for _ in range(500):
        if not processes_of(uid):
            break
        time.sleep(0.01)
    pool = UidPool(base, 1, tmp_path)
    assert pool.take() == uid  # found clean by searching, once the process is gone
    pool.give_back(uid)
    assert (tmp_path / f"{uid}.lock").read_bytes() == b"clean"
    again = UidPool(base, 1, tmp_path)
    assert again.take() == uid and (tmp_path / f"{uid}.lock").read_bytes() == b""

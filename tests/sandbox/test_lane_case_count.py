"""The lane leader's memory count (child/zygote.py, _CaseMemory) read against a /proc laid out as
gVisor shows it, without a sandbox: a thread group whose leader has exited is counted through a
live thread; a group that is ending (every thread found is dying, or none is found for a moment)
is not taken for one hiding memory, which ended a CPU-limited case for "memory"; a group whose
threads stay out of sight is."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

import pytest

ZYGOTE = Path(__file__).resolve().parents[2] / "app" / "sandbox" / "child" / "zygote.py"
LIMIT = 1 << 30


class NoIpc:
    """A libc whose SysV IPC calls fail: the case's IPC namespace holds nothing here."""

    def shmctl(self, *_: Any) -> int:
        return -1

    msgctl = semctl = shmctl


@pytest.fixture
def zygote() -> dict[str, Any]:
    program = runpy.run_path(str(ZYGOTE), run_name="lane_zygote_under_test")
    program["_ZYGOTE_VM"].append((0, 0, 0))  # counted from nothing: every page is the case's
    return program


@pytest.fixture(autouse=True)
def threads_unlisted(monkeypatch: pytest.MonkeyPatch) -> None:
    """As gVisor shows /proc: /proc/<tid> of a thread answers, but the listing names processes only."""
    listdir = os.listdir

    def processes_only(path: Any = ".") -> list[str]:
        names = listdir(path)
        return [n for n in names if not (Path(path, n, "thread").exists())]

    monkeypatch.setattr(os, "listdir", processes_only)


def status(proc: Path, pid: int, *, tgid: int | None = None, state: str = "R (running)",
           threads: int = 1, rss_kib: int = 0) -> None:
    (proc / str(pid)).mkdir(exist_ok=True)
    if tgid is not None and tgid != pid:
        (proc / str(pid) / "thread").touch()
    (proc / str(pid) / "status").write_text(
        f"Name:\tpython3\nState:\t{state}\nTgid:\t{tgid or pid}\nPid:\t{pid}\nThreads:\t{threads}\n"
        f"VmSize:\t{rss_kib} kB\nVmRSS:\t{rss_kib} kB\nVmData:\t{rss_kib} kB\n")


def counter(zygote: dict[str, Any], proc: Path) -> Any:
    return zygote["_CaseMemory"](NoIpc(), str(proc))


def test_a_group_whose_leader_exited_is_counted_through_a_live_thread(zygote: dict[str, Any], tmp_path: Path) -> None:
    status(tmp_path, 7, state="Z (zombie)", threads=2)
    status(tmp_path, 9, tgid=7, rss_kib=4096)
    memory = counter(zygote, tmp_path)
    assert memory.measure(LIMIT) == 4096 << 10
    assert not memory.uncountable


def test_a_group_every_thread_of_which_is_dying_is_not_memory_hidden(zygote: dict[str, Any], tmp_path: Path) -> None:
    # What a CPU limit leaves for a moment: the leader exited, the count of threads not yet down,
    # each thread found already a zombie.
    status(tmp_path, 7, state="Z (zombie)", threads=5)
    for tid in range(8, 12):
        status(tmp_path, tid, tgid=7, state="Z (zombie)", rss_kib=4096)
    memory = counter(zygote, tmp_path)
    for _ in range(5):
        assert memory.measure(LIMIT) <= LIMIT
    assert not memory.uncountable


def test_threads_out_of_sight_for_a_moment_keep_the_last_count(zygote: dict[str, Any], tmp_path: Path) -> None:
    status(tmp_path, 7, threads=5, rss_kib=8192)
    memory = counter(zygote, tmp_path)
    assert memory.measure(LIMIT) == 8192 << 10
    status(tmp_path, 7, state="Z (zombie)", threads=5)  # its threads: nowhere to be found
    looks = zygote["_UNFOUND_LOOKS"]
    for _ in range(looks - 1):
        # meanwhile it is charged what it held when last seen, never less
        assert memory.measure(LIMIT) == 8192 << 10
        assert not memory.uncountable
    assert memory.measure(LIMIT) > LIMIT  # out of sight look after look: hiding, past any allowance
    assert memory.uncountable


def test_a_thread_found_again_ends_the_grace(zygote: dict[str, Any], tmp_path: Path) -> None:
    status(tmp_path, 7, state="Z (zombie)", threads=2)
    memory = counter(zygote, tmp_path)
    looks = zygote["_UNFOUND_LOOKS"]
    for _ in range(looks - 1):
        memory.measure(LIMIT)
    status(tmp_path, 30, tgid=7, rss_kib=1024)
    assert memory.measure(LIMIT) == 1024 << 10
    (tmp_path / "30" / "status").unlink()
    for _ in range(looks - 1):  # a fresh grace, not the rest of the old one
        memory.measure(LIMIT)
        assert not memory.uncountable
    assert memory.measure(LIMIT) > LIMIT


def test_a_new_group_out_of_sight_is_caught_as_well(zygote: dict[str, Any], tmp_path: Path) -> None:
    memory = counter(zygote, tmp_path)
    assert memory.measure(LIMIT) == 0
    status(tmp_path, 40, state="Z (zombie)", threads=3)  # forked since, leader already gone
    looks = zygote["_UNFOUND_LOOKS"]
    for _ in range(looks - 1):
        assert memory.measure(LIMIT) <= LIMIT
    assert memory.measure(LIMIT) > LIMIT


def named(proc: Path, pid: int, name: bytes) -> None:
    path = proc / str(pid) / "status"
    path.write_bytes(path.read_bytes().replace(b"Name:\tpython3\n", b"Name:\t" + name + b"\n", 1))


def test_a_live_thread_named_zombie_is_not_taken_for_a_dying_one(zygote: dict[str, Any], tmp_path: Path) -> None:
    # A thread's name is its own to set (PR_SET_NAME), and its status shows it as it is: one named
    # "(zombie)" or "(dead)" made its group, leader exited, count as ending (nothing) while it held
    # 900 MiB in a real lane.
    status(tmp_path, 7, state="Z (zombie)", threads=3)
    status(tmp_path, 8, tgid=7, rss_kib=900 << 10)
    named(tmp_path, 8, b"(zombie)")
    status(tmp_path, 9, tgid=7, rss_kib=900 << 10)
    named(tmp_path, 9, b"(dead)")
    memory = counter(zygote, tmp_path)
    for _ in range(3):
        assert memory.measure(float("inf")) == 900 << 20


def test_a_name_that_forges_a_line_changes_nothing(zygote: dict[str, Any], tmp_path: Path) -> None:
    # A name with a line break in it (where /proc shows it unescaped): a small process of another
    # group that names itself "\nTgid:\t7" is not a thread of group 7 counted in place of the real one.
    status(tmp_path, 7, state="Z (zombie)", threads=2)
    status(tmp_path, 8, rss_kib=1024)
    named(tmp_path, 8, b"\nTgid:\t7")
    status(tmp_path, 9, tgid=7, rss_kib=900 << 10)
    memory = counter(zygote, tmp_path)
    assert memory.measure(float("inf")) == (900 << 20) + (1024 << 10)
    # and a live process whose name says Z is counted as itself
    status(tmp_path, 20, rss_kib=4096)
    named(tmp_path, 20, b"\nState:\tZ (z")
    assert memory.measure(float("inf")) == (900 << 20) + (1024 << 10) + (4096 << 10)


def test_the_uid_sweep_finds_a_task_whose_name_forges_a_uid_line(zygote: dict[str, Any], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The leader's last resort kills every task of the case's uid; a name holding a line break and
    # a "Uid:" line of its own (gVisor shows names as they are) must not hide a task from it.
    for pid, name, uid in ((5, "honest", 610001), (6, "a\nUid:\tnot-a-number", 610001),
                           (7, "b\nUid:\t610001", 610002)):
        (tmp_path / str(pid)).mkdir()
        uids = "\t".join([str(uid)] * 4)
        (tmp_path / str(pid) / "status").write_text(f"Name:\t{name}\nState:\tR (running)\nUid:\t{uids}\n")
    real_open, real_listdir = open, os.listdir

    def proc_open(path: str, *args: Any, **kwargs: Any) -> Any:
        return real_open(str(path).replace("/proc", str(tmp_path), 1), *args, **kwargs)

    zygote["_uid_tasks"].__globals__["open"] = proc_open  # (the module's own globals: run_path hands back a copy)
    monkeypatch.setattr(os, "listdir", lambda path: real_listdir(tmp_path if path == "/proc" else path))
    assert sorted(zygote["_uid_tasks"](610001)) == [5, 6]

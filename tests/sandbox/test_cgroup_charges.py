"""A case's memory cgroup is removed without charges, so it does not live on as a dying group.

A case that reads pages of a read-only system file no one had cached charges that page cache to
its group; removed with those charges, the group stays in the kernel (dying) until every page is
reclaimed, which for rarely used files may be never: one per case until the host can make no more
cgroups. The service releases a group's charges before its rmdir (cgroups.release_charges).

Two views: what each group still held when it was removed (the cause: with the charges gone the
kernel frees the group at once), and the count of dying groups (the kernel's count of memory
cgroups in /proc/cgroups, which includes dying ones, less the live ones; v2: cgroup.stat) before
and after, which must stay flat. Memory pressure on a busy host frees dying groups too, so the
count alone may miss a leak: the first view is the one that fails without the release."""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from pathlib import Path

import pytest

import app.sandbox.cgroups as cgroups
from app.sandbox.cgroups import CgroupHost, drain_removals, release_charges
from app.sandbox.pool import Sandbox
from tests.sandbox.tiers import tier_settings

pytestmark = [pytest.mark.slow, pytest.mark.serial]

MEMORY_ROOT = Path("/sys/fs/cgroup/memory")
CASES = 24
# Dying groups are counted host-wide: other processes (containers starting, other tests) make and
# remove groups meanwhile. Flat means far below one per case.
DYING_MARGIN = CASES // 3
# What a group may hold at its removal: kernel objects of its own that no reclaim frees (about
# 200 KiB measured on cgroup v1), far below the megabytes of page cache a case reads.
LEFT_AT_REMOVAL = 1 << 20


def _held(d: Path) -> int | None:
    for name in ("memory.usage_in_bytes", "memory.current"):
        with contextlib.suppress(OSError, ValueError):
            return int((d / name).read_text())
    return None


@pytest.fixture
def held_at_removal(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The memory each removed memory group still held when its rmdir ran."""
    seen: list[int] = []
    rmdir = cgroups._rmdir

    def watched(d: Path) -> None:
        held = _held(d)
        if held is not None:
            seen.append(held)
        rmdir(d)

    monkeypatch.setattr(cgroups, "_rmdir", watched)
    return seen


def _memory_counts() -> tuple[int, int] | None:
    """(memory cgroups the kernel holds, live ones) where the memory hierarchy's root is visible."""
    kernel = next((int(line.split()[2]) for line in Path("/proc/cgroups").read_text().splitlines()
                   if line.startswith("memory\t")), None)
    if kernel is None:
        return None
    if MEMORY_ROOT.is_dir():  # cgroup v1
        return kernel, sum(1 for _ in MEMORY_ROOT.rglob("cgroup.procs"))
    stat = Path("/sys/fs/cgroup/cgroup.stat")  # cgroup v2: the root's own count of dying groups
    if stat.exists():
        fields = dict(line.split() for line in stat.read_text().splitlines())
        return int(fields["nr_dying_descendants"]), 0
    return None


def dying_memory_cgroups() -> int:
    counts = _memory_counts()
    if counts is None:
        pytest.skip("no memory cgroup counts here")
    return counts[0] - counts[1]


def uncached_files(count: int) -> list[Path]:
    """Large shared libraries of the system (/usr, which the sandbox shows read-only), each
    dropped from the page cache, so that reading it charges new pages."""
    files = sorted((p for p in Path("/usr/lib").rglob("*.so*") if p.is_file() and not p.is_symlink()),
                   key=lambda p: -p.stat().st_size)
    chosen = files[:count]
    assert len(chosen) == count
    for path in chosen:
        drop_from_cache(path)
    return chosen


def drop_from_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


@pytest.fixture
def host() -> CgroupHost:
    found = CgroupHost.detect()
    if found is None:
        pytest.fail("no writable cgroup tree: run the tests as root on a host with cgroups")
    yield found
    found.close()


def _read_in(group_procs: list[str], path: Path) -> None:
    enter = "; ".join(f"echo $$ > {p}" for p in group_procs)
    subprocess.run(["sh", "-c", f"{enter}; cat {path} > /dev/null"], check=True, timeout=60)


def test_release_charges_uncharges_the_page_cache_a_case_read(host: CgroupHost) -> None:
    group = host.create()
    path = uncached_files(1)[0]
    _read_in(group.procs_files, path)
    charged = group.memory_usage()
    assert charged > 1 << 20, charged  # the file's pages are the group's now
    for d in group.dirs.values():
        release_charges(d)
    assert group.memory_usage() < charged / 10
    assert group.remove()


def _settled(before: int) -> bool:
    """Whether the host's dying memory groups are back within the margin of before. Others'
    groups (a test beside this one, a container) die and go meanwhile: the count is given a few
    seconds to come back, which a group left dying per case never would."""
    deadline = time.monotonic() + 5
    while dying_memory_cgroups() - before > DYING_MARGIN and time.monotonic() < deadline:
        time.sleep(0.5)
    return dying_memory_cgroups() - before <= DYING_MARGIN


def test_removed_groups_do_not_stay_dying(host: CgroupHost, held_at_removal: list[int]) -> None:
    paths = uncached_files(CASES)
    before = dying_memory_cgroups()
    charged = []
    for path in paths:
        group = host.create()
        _read_in(group.procs_files, path)
        charged.append(group.memory_usage())
        assert group.remove()
    assert sum(charged) > CASES << 20, charged  # the reads were charged to the groups
    assert held_at_removal and max(held_at_removal) < LEFT_AT_REMOVAL, held_at_removal
    assert _settled(before), "the removed groups stay in the kernel, dying"


def test_without_the_release_the_groups_go_with_their_charges(host: CgroupHost, held_at_removal: list[int],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: a plain rmdir removes a group that still holds the pages."""
    monkeypatch.setattr(cgroups, "release_charges", lambda d: None)
    group = host.create()
    _read_in(group.procs_files, uncached_files(1)[0])
    assert group.remove()
    assert max(held_at_removal) > LEFT_AT_REMOVAL, held_at_removal


def test_cases_reading_uncached_system_files_leave_no_dying_group(held_at_removal: list[int]) -> None:
    """Through the sandbox, as a grade runs: each case reads a library no one had cached."""
    box = Sandbox(tier_settings("bubblewrap+seccomp", warm_pool_size=1))
    source = "def f(path):\n    with open(path, 'rb') as f:\n        return len(f.read())\n"
    try:
        box.prewarm("numpy")
        paths = uncached_files(CASES)
        before = dying_memory_cgroups()
        for path in paths:
            drop_from_cache(path)
            run = box.run(source, "f", [str(path)])
            assert run.status == "finished", (run.status, run.fault)
            assert run.final["result"]["value"] == path.stat().st_size, run.final
    finally:
        box.shutdown()
    assert drain_removals(30)
    assert len(held_at_removal) >= CASES and max(held_at_removal) < LEFT_AT_REMOVAL, held_at_removal
    assert _settled(before), "cases pin their memory cgroups"


def test_a_memory_limit_can_be_raised_and_lowered(host: CgroupHost) -> None:
    """cgroup v1 keeps the memory limit at or below the memory+swap one at every write: raising
    past the warm limit (a case's allowance above SANDBOX__WARM_MEMORY_BYTES) must not be refused,
    nor lowering again."""
    group = host.create()
    try:
        for limit in (256 << 20, 3 << 30, 128 << 20, 1 << 30):
            group.set_memory_limit(limit)
            read = group._file("memory", "memory.limit_in_bytes", "memory.max").read_text().strip()
            assert int(read) == limit
    finally:
        group.remove()

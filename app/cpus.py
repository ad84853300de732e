"""How many cores this process is given: the CPUs it may run on (its affinity), bounded by the
CPU quota of its control group (what a container's ``--cpus`` sets). ``os.cpu_count()`` is the
host's count, which in a container limited to 2 of 64 cores would start 64 workers' worth of
work and have the kernel throttle all of it.

A quota of 1.5 cores counts as 2: the work sized from this count (jobs, cases) also waits on
pipes, Redis and child processes, so rounding down would leave the quota partly unused."""

from __future__ import annotations

import math
import os
from functools import cache
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None


def _ancestry(directory: Path, root: Path) -> list[Path]:
    """directory and each parent up to root: a limit on any of them bounds the process."""
    chain = [directory]
    while directory != root and root in directory.parents:
        directory = directory.parent
        chain.append(directory)
    return chain


def _quota_v2(directory: Path) -> float | None:
    text = _read(directory / "cpu.max")  # "max 100000" or "200000 100000": quota and period in µs
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max":
        return None
    try:
        return int(quota) / int(period or "100000")
    except (ValueError, ZeroDivisionError):
        return None


def _quota_v1(directory: Path) -> float | None:
    quota, period = _read(directory / "cpu.cfs_quota_us"), _read(directory / "cpu.cfs_period_us")
    try:
        if quota is None or period is None or int(quota) <= 0:  # -1: no quota
            return None
        return int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        return None


def own_cgroups(proc_cgroup: Path = PROC_CGROUP) -> dict[str, str]:
    """Controller -> group path from /proc/self/cgroup ("" is the v2 unified hierarchy); empty
    when it cannot be read."""
    groups: dict[str, str] = {}
    for line in (_read(proc_cgroup) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            groups[controller] = parts[2]
    return groups


def cgroup_cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP) -> float | None:
    """The smallest CPU quota (in cores) on this process's control group and its ancestors, or
    None without one. Inside a container with a cgroup namespace of its own the group is "/", the
    container's own; where the mount shows only the container's group (v1, no namespace) the
    group's path does not exist below it, and the mount's own files are the container's."""
    groups = own_cgroups(proc_cgroup)
    quotas: list[float] = []
    if "" in groups:  # cgroup v2: one hierarchy
        for level in _ancestry(root / groups[""].lstrip("/"), root):
            quota = _quota_v2(level)
            if quota is not None:
                quotas.append(quota)
    if "cpu" in groups:  # cgroup v1: the cpu controller's own mount
        mount = next((m for m in (root / "cpu", root / "cpu,cpuacct", root / "cpuacct,cpu") if m.is_dir()), None)
        if mount is not None:
            for level in _ancestry(mount / groups["cpu"].lstrip("/"), mount):
                quota = _quota_v1(level)
                if quota is not None:
                    quotas.append(quota)
    return min(quotas) if quotas else None


def available_cpus(root: Path = CGROUP_ROOT, proc_cgroup: Path = PROC_CGROUP, affinity: int | None = None) -> int:
    """Cores this process is given: its CPU affinity, bounded by its cgroup's CPU quota (at least 1)."""
    cpus = affinity if affinity is not None else len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota(root, proc_cgroup)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(1, cpus)


@cache
def cores_given() -> int:
    """available_cpus() of this process, read once: the settings resolve their per-core defaults
    from it on every impl grade, and affinity and quota are set before a service starts."""
    return available_cpus()


def schedstat(path: Path) -> tuple[int, int]:
    """A task's (nanoseconds run, nanoseconds waited runnable for a CPU) from its schedstat file
    (/proc/PID/schedstat: the process's main thread; /proc/PID/task/TID/schedstat: one thread).
    Raises OSError or ValueError where the kernel keeps none or the task is gone."""
    ran, waited = path.read_text().split()[:2]
    return int(ran), int(waited)


def run_delay(pid: int) -> float:
    """Seconds the process's main thread has spent runnable but waiting for a CPU (the kernel's
    schedstat; 0 where the kernel keeps none, or once the process is gone)."""
    try:
        return schedstat(Path(f"/proc/{pid}/schedstat"))[1] / 1e9
    except (OSError, ValueError):
        return 0.0

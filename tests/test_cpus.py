"""The cores a process is given (app/cpus.py), read from fake cgroup trees laid out as the kernel
lays them out: v2 (cpu.max on the group and its ancestors) and v1 (the cpu controller's mount,
cpu.cfs_quota_us / cpu.cfs_period_us), in a container that sees only its own group too; and the
defaults sized from it."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from app.cpus import available_cpus, cgroup_cpu_quota
from app.settings import CASES_PER_CORE, QueueSettings, SandboxSettings


def _v2(tmp: Path, group: str, limits: dict[str, str]) -> tuple[Path, Path]:
    """A v2 tree: group is this process's path; limits maps a path (relative to root) to cpu.max."""
    root = tmp / "cgroup"
    (root / group.lstrip("/")).mkdir(parents=True, exist_ok=True)
    for path, value in limits.items():
        (root / path).mkdir(parents=True, exist_ok=True)
        (root / path / "cpu.max").write_text(value + "\n")
    proc = tmp / "proc-cgroup"
    proc.write_text(f"0::{group}\n")
    return root, proc


def test_v2_quota_on_the_group_bounds_the_affinity(tmp_path) -> None:
    root, proc = _v2(tmp_path, "/system.slice/worker.service", {"system.slice/worker.service": "150000 100000"})
    assert cgroup_cpu_quota(root, proc) == 1.5
    assert available_cpus(root, proc, affinity=8) == 2  # 1.5 cores: two lanes keep the quota busy
    assert available_cpus(root, proc, affinity=1) == 1  # the affinity is the tighter bound


def test_v2_an_ancestor_quota_counts_and_the_smallest_wins(tmp_path) -> None:
    root, proc = _v2(tmp_path, "/kubepods/pod1/ctr", {"kubepods/pod1/ctr": "max 100000",
                                                      "kubepods/pod1": "300000 100000",
                                                      "kubepods": "800000 100000"})
    assert cgroup_cpu_quota(root, proc) == 3.0
    assert available_cpus(root, proc, affinity=64) == 3


def test_v2_without_a_quota_the_affinity_stands(tmp_path) -> None:
    root, proc = _v2(tmp_path, "/user.slice", {"user.slice": "max 100000", "": "max 100000"})
    assert cgroup_cpu_quota(root, proc) is None
    assert available_cpus(root, proc, affinity=6) == 6


def test_v2_in_a_container_with_its_own_cgroup_namespace(tmp_path) -> None:
    root, proc = _v2(tmp_path, "/", {"": "200000 100000"})  # docker run --cpus 2, cgroupns private
    assert available_cpus(root, proc, affinity=16) == 2


def test_v1_quota_on_the_cpu_controller(tmp_path) -> None:
    root = tmp_path / "cgroup"
    group = root / "cpu,cpuacct" / "docker" / "abc"
    group.mkdir(parents=True)
    (group / "cpu.cfs_quota_us").write_text("250000\n")
    (group / "cpu.cfs_period_us").write_text("100000\n")
    (root / "memory").mkdir()
    proc = tmp_path / "proc-cgroup"
    proc.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n")
    assert cgroup_cpu_quota(root, proc) == 2.5
    assert available_cpus(root, proc, affinity=32) == 3


def test_v1_container_that_sees_only_its_own_group(tmp_path) -> None:
    # No cgroup namespace: /proc names the host's path, the mount shows the container's group.
    root = tmp_path / "cgroup"
    mount = root / "cpu,cpuacct"
    mount.mkdir(parents=True)
    (mount / "cpu.cfs_quota_us").write_text("100000\n")
    (mount / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:cpu,cpuacct:/docker/0123abcd\n")
    assert available_cpus(root, proc, affinity=8) == 1


def test_v1_no_quota_and_unreadable_trees(tmp_path) -> None:
    root = tmp_path / "cgroup"
    (root / "cpu").mkdir(parents=True)
    (root / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("3:cpu:/\n")
    assert cgroup_cpu_quota(root, proc) is None
    assert available_cpus(tmp_path / "absent", tmp_path / "absent-proc", affinity=4) == 4
    (root / "cpu" / "cpu.cfs_quota_us").write_text("garbage\n")
    assert cgroup_cpu_quota(root, proc) is None


def test_this_process_affinity_is_an_upper_bound() -> None:
    given = available_cpus()
    assert 1 <= given <= len(os.sched_getaffinity(0))
    quota = cgroup_cpu_quota()
    if quota is not None:
        assert given <= math.ceil(quota)


@pytest.mark.parametrize("explicit", [0, 3])
def test_settings_sized_from_the_cores(explicit) -> None:
    cores = available_cpus()
    queue = QueueSettings(worker_jobs=explicit)
    assert queue.worker_lanes == (explicit or cores)
    sandbox = SandboxSettings(max_concurrent_cases=explicit, max_parallel_cases=explicit)
    assert sandbox.max_concurrent_cases == (explicit or CASES_PER_CORE * cores)
    assert sandbox.parallel_cases == (explicit or 2 * cores)

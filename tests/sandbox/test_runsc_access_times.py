"""What runsc starts behind (app/sandbox/tiers/runsc.py ``runsc_prefix``, the program
app/sandbox/tiers/access_times.py): a private mount namespace in which the mounts holding the
host files a sandbox binds in are remounted noatime, so that a case's reads update no access time
a later case could stat (the lane attack: tests/jobs/test_attack_lanes_round2.py). Attacks of a
reviewer (session 39) on the first version of it, kept: it bound each file onto itself (hiding
whatever was mounted under one), and it ran util-linux's ``unshare``, which the worker container's
seccomp profile refused."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.sandbox.policy import Mount, Policy
from app.sandbox.tiers import access_times
from app.sandbox.tiers import runsc as rs

ROOT = Path(__file__).resolve().parents[2]
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")


def _plan() -> SimpleNamespace:
    return SimpleNamespace(tools={"sh": shutil.which("sh") or "/bin/sh"}, python=sys.executable)


def _prefix(*sources: str) -> list[str]:
    policy = Policy(mounts=tuple(Mount("bind", f"/sandbox/{i}", source=s) for i, s in enumerate(sources)),
                    namespaces=frozenset(), seccomp=False)
    return rs.runsc_prefix(_plan(), None, policy)  # type: ignore[arg-type]


def test_the_mounts_remounted_are_those_that_hold_a_path_or_lie_under_one() -> None:
    assert access_times.covers("/", "/usr/lib")
    assert access_times.covers("/usr", "/usr/lib") and access_times.covers("/usr/lib", "/usr/lib")
    assert access_times.covers("/usr/lib/x86_64-linux-gnu/nvidia", "/usr/lib")  # under it
    assert not access_times.covers("/usr/lib64", "/usr/lib") and not access_times.covers("/proc", "/usr/lib")
    assert not access_times.covers("/usr/libexec", "/usr/lib")


def test_a_remount_keeps_each_mounts_own_flags_and_adds_noatime() -> None:
    flags = access_times.remount_flags(["ro", "nosuid", "nodev", "relatime"])
    assert flags & access_times.MS_NOATIME and flags & access_times.MS_RDONLY
    assert flags & access_times.MS_NOSUID and flags & access_times.MS_NODEV and not flags & access_times.MS_NOEXEC
    assert not access_times.remount_flags(["rw", "relatime"]) & access_times.MS_RDONLY


def test_mount_points_are_read_as_the_kernel_escapes_them() -> None:
    line = r"64 63 0:14 / /srv/with\040space rw,nosuid,relatime - ext4 /dev/x rw"
    assert access_times.mounts(line) == [("/srv/with space", ["rw", "nosuid", "relatime"])]


@as_root
def test_runsc_sees_the_paths_noatime_and_the_hosts_mounts_are_untouched() -> None:
    before = Path("/proc/self/mountinfo").read_text()
    done = subprocess.run([*_prefix("/usr/lib"), "/usr/bin/findmnt", "-no", "VFS-OPTIONS", "-T", "/usr/lib"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "noatime" in done.stdout.strip().split(","), done.stdout
    assert Path("/proc/self/mountinfo").read_text() == before


@as_root
def test_a_mount_under_a_bound_source_stays_in_runscs_view() -> None:
    """A source with a filesystem mounted under it (a driver's libraries a container runtime
    mounts into /usr/lib, a volume under the interpreter's prefix): runsc still sees it, noatime
    too. (The first version bound the source onto itself: the mount under it was gone.)"""
    source = tempfile.mkdtemp(prefix="s39-bound-")
    try:
        os.mkdir(os.path.join(source, "nested"))
        Path(source, "own").write_text("own\n")
        marker = os.path.join(source, "nested", "marker")
        setup = f'mount -t tmpfs s39 "{source}/nested" && echo here > "{marker}" && exec "$@"'
        show = ["/bin/sh", "-c", f'cat "{source}/own" "{marker}" && findmnt -no VFS-OPTIONS "{source}/nested"']
        behind = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", setup, "s39",
                                 *_prefix(source), *show], capture_output=True, text=True, timeout=30)
        assert behind.returncode == 0, behind.stderr
        assert behind.stdout.startswith("own\nhere\n") and "noatime" in behind.stdout, behind.stdout
    finally:
        shutil.rmtree(source, ignore_errors=True)


def _under_the_worker_profile(argv: list[str]) -> subprocess.CompletedProcess:
    """argv run under deploy/worker-seccomp.json as Docker applies it to the worker container:
    its allow rules, those with argument conditions included, and EPERM for every other call."""
    profile = json.loads((ROOT / "deploy" / "worker-seccomp.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"

    class Compare(ctypes.Structure):  # libseccomp's struct scmp_arg_cmp
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                    ("datum_b", ctypes.c_uint64)]

    def confine() -> None:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(Compare)]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        ctx = lib.seccomp_init(0x00050000 | 1)  # SCMP_ACT_ERRNO(EPERM)
        for rule in profile["syscalls"]:
            if rule["action"] != "SCMP_ACT_ALLOW":
                continue
            conditions = [Compare(a["index"], 4, a["value"], 0) for a in rule.get("args", [])]  # 4: SCMP_CMP_EQ
            assert all(a["op"] == "SCMP_CMP_EQ" for a in rule.get("args", []))
            array = (Compare * max(1, len(conditions)))(*conditions)
            for name in rule["names"]:
                number = lib.seccomp_syscall_resolve_name(name.encode())
                if number >= 0:
                    lib.seccomp_rule_add_array(ctx, 0x7FFF0000, number, len(conditions), array)  # SCMP_ACT_ALLOW
        if lib.seccomp_load(ctx) != 0:
            os._exit(120)

    return subprocess.run(argv, capture_output=True, text=True, timeout=30, preexec_fn=confine)


@as_root
def test_runscs_prefix_runs_under_the_worker_containers_seccomp_profile() -> None:
    control = _under_the_worker_profile(["sh", "-c", "exec true"])
    assert control.returncode == 0, control.stderr  # the filter itself lets a shell run
    done = _under_the_worker_profile([*_prefix("/usr/lib"), "/bin/true"])
    assert done.returncode == 0, f"runsc's prefix fails under the worker's profile: {done.stderr.strip()!r}"
    # and the profile still refuses any other namespace: util-linux's unshare of a user namespace
    refused = _under_the_worker_profile(["unshare", "--user", "--mount", "true"])
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr, refused


NESTED = "/usr/lib/binfmt.d"  # a directory under a bound source: a tmpfs is mounted on it (own namespace)
E2E = """
import sys
from app.sandbox.tiers import runsc as rs
if sys.argv[1] == "no-remount":  # runsc started straight away, as before the prefix
    straight = "import os, sys\\na = sys.argv[1:]\\nc = a[a.index('--') + 1:]\\nos.execv(c[0], c)\\n"
    rs._access_times_source = lambda: straight
from app.sandbox.pool import get_sandbox
from tests.sandbox.tiers import LaunchedTier, tier_settings
box = get_sandbox(tier_settings(LaunchedTier("gvisor+seccomp", "exec"), guards=False, warm_pool_size=0))
run = box.run("def attack(p):\\n    try:\\n        return open(p).read()\\n    except OSError as e:\\n"
              "        return repr(e)\\n", "attack", [sys.argv[2]], profile="numpy")
print("CASE-READ", repr(run.final and run.final["result"].get("value")), run.status)
"""


@as_root
@pytest.mark.slow
@pytest.mark.serial
def test_a_case_sees_a_filesystem_mounted_under_usr_lib_as_without_the_prefix() -> None:
    """End to end, a real gvisor sandbox (exec launcher), in a mount namespace of the test's own
    where a tmpfs holding a marker is mounted on /usr/lib/binfmt.d: the case reads the marker
    behind the prefix as it does without it."""
    from tests.sandbox.tiers import offered_tiers

    if "gvisor+seccomp" not in offered_tiers():
        pytest.skip("runsc does not run here")
    marker = os.path.join(NESTED, "s39-marker")
    setup = f'mount -t tmpfs s39 {NESTED} && echo here > {marker} && exec "$@"'
    seen = {}
    for variant in ("no-remount", "prefix"):
        done = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", setup, "s39",
                               sys.executable, "-c", E2E, variant, marker],
                              capture_output=True, text=True, timeout=240, cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        lines = [line for line in done.stdout.splitlines() if line.startswith("CASE-READ")]
        assert lines, (done.stdout[-2000:], done.stderr[-2000:])
        seen[variant] = lines[-1]
    assert "'here\\n'" in seen["no-remount"], seen  # the setup shows the nested mount to a case
    assert "'here\\n'" in seen["prefix"], f"the case lost a filesystem mounted under a bound source: {seen}"

"""Running gVisor's ``runsc`` for the gvisor tier (gvisor.py, a started child per case;
gvisor_lane.py, a fork server per lane): the tier's policy as data and the OCI spec it renders
to, the empty read-only root every sandbox of a plan shares, and the host processes of a sandbox
(runsc, its gofer and sandbox), which live in sessions of their own: found, held by pidfd,
killed and reaped."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import subprocess
import time
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.sandbox.launch import LAUNCH_SCRIPT, SandboxFault
from app.sandbox.owners import STAGE_PREFIX, owned_tempdir
from app.sandbox.policy import HARNESS_CAPS, Mount, Policy, host_view, oci_spec
from app.sandbox.tiers import access_times

if TYPE_CHECKING:
    from app.sandbox.cgroups import CaseCgroup
    from app.sandbox.plan import Plan
    from app.settings import SandboxSettings

NAME = "gvisor"  # the tier these sandboxes are
RESULT_DIR = "/run/grader"  # where the service's socket directory is seen inside
# The fork server inside stays the sandbox kernel's root: to give each fork its own namespaces and
# mounts (SYS_ADMIN) and root (SYS_CHROOT), its /tmp/work (CHOWN), its uids (SETUID, SETGID), and to kill a case's
# processes whose uid is not its own (KILL). Every fork gives them all up when it changes uid.
ZYGOTE_CAPS = ("CAP_SYS_ADMIN", "CAP_SYS_CHROOT", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL")
_NAMESPACES = frozenset({"pid", "net", "ipc", "uts", "mount"})

# Host tasks gVisor's kernel adds to a case beyond the case's own processes (its Go threads, and
# the ptrace platform's stub per address space); the case's own count is bounded inside, by
# RLIMIT_NPROC, which gVisor enforces.
SENTRY_TASKS = 256
_GONE_TIMEOUT = 5.0
_ROOT_PREFIX = STAGE_PREFIX + "gvisor-"  # removed at the next start if this service was killed


def rootfs(plan: Plan) -> str:
    """The empty read-only root of every child of this plan (made once; the owner mark stays
    outside it)."""
    for d in plan.scratch_dirs:
        if os.path.basename(d).startswith(_ROOT_PREFIX):
            return os.path.join(d, "root")
    scratch = owned_tempdir(_ROOT_PREFIX, 0o755)
    plan.scratch_dirs.append(scratch)
    root = os.path.join(scratch, "root")
    os.mkdir(root, 0o755)
    make_root(root, host_view(plan, staged=False), ("/proc", "/dev", "/tmp", RESULT_DIR))
    return root


def runsc_prefix(plan: Plan, cgroup: CaseCgroup | None, policy: Policy) -> list[str]:
    """What runs before runsc: enter the sandbox's control group (if it has one), then a private
    mount namespace in which the host's files the sandbox binds in update no access time
    (app/sandbox/tiers/access_times.py says why)."""
    if "sh" not in plan.tools:
        raise SandboxFault("the gvisor tier needs /bin/sh")
    sources = sorted({m.source for m in policy.mounts if m.kind == "bind" and m.source})
    argv = [plan.tools["sh"], "-c", LAUNCH_SCRIPT, "launch", *cgroup.procs_files, "--", "--"] if cgroup else []
    return [*argv, plan.python, "-I", "-S", "-B", "-c", _access_times_source(), *sources, "--"]


@cache
def _access_times_source() -> str:
    return Path(access_times.__file__).read_text()


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def descendants(pid: int) -> list[int]:
    """Every live process under pid (runsc's gofer and sandbox, and the sandbox's stubs)."""
    tree, found, todo = _children(), [], [pid]
    while todo:
        kids = tree.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def pidfds(pids: list[int]) -> list[int]:
    fds = []
    for pid in pids:
        with contextlib.suppress(OSError):  # already gone
            fds.append(os.pidfd_open(pid))
    return fds


def _reap(pidfds: list[int]) -> int:
    """Collect the exit status of each exited process that is this process's child by now; how
    many were. gVisor's gofer and sandbox are runsc's children; killed with runsc, they pass to
    the nearest subreaper, which is this process when it is its container's init (or made
    itself a subreaper), and would stay zombies there, each holding a pid of the container's
    limit, until the worker dies. A process that is not our child (an init above us reaps it)
    is left alone. runsc itself is not among them: its Popen reaps it (destroy)."""
    reaped = 0
    for fd in pidfds:
        with contextlib.suppress(ChildProcessError, OSError):
            if os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG) is not None:
                reaped += 1
    return reaped


# runsc re-executes itself (/proc/self/exe) for its gofer, its sandbox and the sandbox's helpers:
# their name is "exe", which no process the service starts itself ever bears.
_RUNSC_REEXEC_NAME = "exe"


def reap_orphans() -> int:
    """Reap the zombies of runsc's processes that passed to this process without being held by
    pidfd (helpers started after a sandbox's processes were listed, which outlived their own
    parent); how many. Only zombies that are this process's children and bear runsc's name: a
    process the service started itself is reaped by its own Popen, never here."""
    me, reaped = os.getpid(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                head, _, tail = f.read().rpartition(")")
            state, ppid = tail.split()[:2]
            name = head.partition("(")[2]
        except (OSError, ValueError, IndexError):
            continue
        if state != "Z" or int(ppid) != me or name != _RUNSC_REEXEC_NAME:
            continue
        # A zombie child of ours keeps its pid until we reap it: the pid cannot have been reused.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(int(entry), os.WNOHANG)
            reaped += 1
    return reaped


def kill_and_wait(pidfds: list[int], reap: list[int] | None = None) -> int:
    """SIGKILL each process (by pidfd: a reused pid is never hit) and wait until all have
    exited, then reap those of reap (a subset of pidfds) that are ours; how many had not
    exited in time."""
    for fd in pidfds:
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    deadline = time.monotonic() + _GONE_TIMEOUT
    waiting = list(pidfds)
    while waiting and time.monotonic() < deadline:
        done, _, _ = select.select(waiting, [], [], deadline - time.monotonic())
        waiting = [fd for fd in waiting if fd not in done]
    _reap([fd for fd in reap or [] if fd not in waiting])
    for fd in pidfds:
        os.close(fd)
    return len(waiting)


def accept(listener: socket.socket, popen: subprocess.Popen[bytes], timeout: float) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([listener], [], [], 0.05)
        if ready:
            conn, _ = listener.accept()
            return conn
        if popen.poll() is not None:
            err = popen.stderr.read() if popen.stderr else b""  # it exited: read to the end
            raise SandboxFault(f"runsc exited during start-up: {err[-500:].decode(errors='replace').strip()}")
        if time.monotonic() > deadline:
            raise SandboxFault(f"the gVisor sandbox did not connect within {timeout:.0f} s")




def policy(plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> Policy:
    """The gvisor tier's sandbox: the bubblewrap tier's minimal view of the host (the interpreter,
    the needed site-packages and the system libraries, all read-only, on a read-only empty root),
    a private size-capped /tmp and /dev/shm, a read-only /proc, no network, and no capability but
    the two the harness needs to split itself into two unprivileged uids (the fork server: those
    it needs to make each fork's namespaces, root and uid). gVisor's kernel counts one task more
    than Linux against RLIMIT_NPROC, and adds host tasks of its own to the case's group."""
    mounts = (
        Mount("proc", "/proc"),
        Mount("tmpfs", "/tmp", read_only=False, size=sb.tmpfs_bytes, mode="1777"),
        Mount("tmpfs", "/dev/shm", read_only=False, size=sb.shm_bytes, mode="1777"),
        *host_view(plan, staged=False),  # runsc runs as root: nothing needs staging
    )
    return Policy(mounts=mounts, namespaces=_NAMESPACES, seccomp=seccomp,
                  caps=ZYGOTE_CAPS if fork_server else HARNESS_CAPS, cwd="/" if fork_server else "/tmp",
                  # gVisor's kernel refuses a new task once a uid holds *more* than RLIMIT_NPROC
                  # (Linux: as many as): one lower gives the case exactly its allowance.
                  nproc_margin=-1, host_tasks=SENTRY_TASKS)


def gvisor_spec(base: Policy, *, rootfs: str, result_dir: str, args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """config.json for one child or one lane's fork server: the tier's policy, plus the host
    directory of the service's socket (``result_dir``), bound read-only: the harness connects
    to the socket there, it cannot replace it."""
    channel = Mount("bind", RESULT_DIR, source=result_dir)
    return oci_spec(Policy(**{**vars(base), "mounts": (*base.mounts, channel)}), rootfs=rootfs, args=args, env=env)


def make_root(rootfs: str, mounts: list[Mount], extra_dirs: tuple[str, ...]) -> None:
    """An empty root with a mount point for every bind (a directory or an empty file, as the
    source is) and the host's merged-/usr links; everything root-owned and read-only."""
    for m in mounts:
        if m.kind == "symlink":
            os.symlink(m.source, rootfs + m.target)
    for m in mounts:
        if m.kind != "bind":
            continue
        point = Path(rootfs + m.target)
        point.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        if os.path.isdir(m.source):
            point.mkdir(mode=0o755, parents=True, exist_ok=True)
        elif not point.exists():
            point.touch(0o444)
    for d in extra_dirs:
        Path(rootfs + d).mkdir(mode=0o755, parents=True, exist_ok=True)
    for dirpath, dirnames, _ in os.walk(rootfs):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)

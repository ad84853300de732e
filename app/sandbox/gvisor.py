"""The ``gvisor`` tier: each child runs behind a user-space kernel of its own (gVisor's ``runsc``),
so a system call of the case is answered by gVisor, never by the host's kernel; a bypass of the
seccomp deny-list then reaches gVisor's kernel, not the host's.

One ``runsc run`` per child on an OCI bundle (oci.py) with the bubblewrap tier's minimal view of
the host, no network (``--network=none``) and, when the service can make one, the child's control
group holding every host process of gVisor's (the launcher enters it before it execs runsc, and
runsc is told to leave cgroups alone), so the case's memory, task and CPU limits bound the whole
sandbox, its kernel included. Needs root, as runsc does.

runsc of Debian's release cannot hand an fd in, so the result channel is a unix socket in a
root-only directory of the case's, bound read-only into the sandbox: the harness connects before
its seccomp filter is installed; the parent accepts that one connection and removes the socket.
Inside, the harness splits into two uids (reporter and runner), because gVisor's kernel lets a
process signal its namespace's init when the uids match."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any

from app.sandbox.launch import (
    LAUNCH_SCRIPT,
    SANDBOX_UID,
    Child,
    SandboxFault,
    child_env,
    harness_cfg,
    harness_source,
    max_message_bytes,
    register,
)
from app.sandbox.oci import RESULT_DIR, bundle_config, make_root, read_only_binds
from app.sandbox.owners import CASE_PREFIX, STAGE_PREFIX, owned_tempdir
from app.sandbox.plan import SITE_IN_SANDBOX, Plan

if TYPE_CHECKING:
    from app.sandbox.cgroups import CaseCgroup, CgroupHost
    from app.settings import SandboxSettings

REPORTER_UID = 65533  # the reporter inside; the candidate runs as SANDBOX_UID
RESULT_FD = 3  # the fd number the harness puts the result socket on
_SOCKET = "result.sock"
# Host tasks gVisor's kernel adds to a case beyond the case's own processes (its Go threads, and
# the ptrace platform's stub per address space); the case's own count is bounded inside, by
# RLIMIT_NPROC, which gVisor enforces.
SENTRY_TASKS = 256
_GONE_TIMEOUT = 5.0
_ROOT_PREFIX = STAGE_PREFIX + "gvisor-"  # removed at the next start if this service was killed


def _rootfs(plan: Plan) -> str:
    """The empty read-only root of every child of this plan (made once; the owner mark stays
    outside it)."""
    for d in plan.scratch_dirs:
        if os.path.basename(d).startswith(_ROOT_PREFIX):
            return os.path.join(d, "root")
    scratch = owned_tempdir(_ROOT_PREFIX, 0o755)
    plan.scratch_dirs.append(scratch)
    root = os.path.join(scratch, "root")
    os.mkdir(root, 0o755)
    make_root(root, read_only_binds(plan), ("/proc", "/dev", "/tmp", RESULT_DIR))
    return root


def _cgroup_prefix(plan: Plan, cgroup: CaseCgroup | None) -> list[str]:
    if cgroup is None:
        return []
    if "sh" not in plan.tools:
        raise SandboxFault("entering the case's control group needs /bin/sh")
    return [plan.tools["sh"], "-c", LAUNCH_SCRIPT, "launch", *cgroup.procs_files, "--", "--"]


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


def _pidfds(pids: list[int]) -> list[int]:
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


def _kill_and_wait(pidfds: list[int], reap: list[int] | None = None) -> int:
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


def _accept(listener: socket.socket, popen: subprocess.Popen[bytes], timeout: float) -> socket.socket:
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


def _harness_config(sb: SandboxSettings, seccomp: bool, profile: str) -> dict[str, Any]:
    """The shared harness config, with what differs behind gVisor's kernel."""
    # The runner's uid is this sandbox's alone (its own kernel): RLIMIT_NPROC counts the case;
    # the reporter's uid cannot signal the runner's, and the parent ends the whole sandbox, so
    # the reporter does not reap.
    cfg = harness_cfg(sb, profile, seccomp, uid=SANDBOX_UID, result_fd=RESULT_FD)
    cfg.update(
        result_socket=f"{RESULT_DIR}/{_SOCKET}",
        reporter_uid=REPORTER_UID,
        runner_uid=SANDBOX_UID,
        reap_all=False,
        # gVisor's kernel refuses a new task once a uid holds *more* than RLIMIT_NPROC (Linux: as
        # many as), so the limit is set one lower for the case to get exactly its allowance.
        nproc_margin=-1,
        sys_path=[SITE_IN_SANDBOX],
    )
    return cfg


def spawn_gvisor(plan: Plan, sb: SandboxSettings, seccomp: bool, profile: str,
                 cgroups: CgroupHost | None) -> Child:
    """Start a gVisor sandbox that warms up for profile and then waits for one case on stdin.
    Returns once the harness inside has connected its result channel."""
    runsc = plan.tools.get("runsc")
    if runsc is None:
        raise SandboxFault("runsc (gVisor) is not installed")
    if not plan.is_root:
        raise SandboxFault("the gvisor tier needs root (runsc creates the sandbox's namespaces)")
    casedir = owned_tempdir(CASE_PREFIX, 0o700)
    cgroup = None
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    popen = None
    try:
        channel = os.path.join(casedir, "channel")
        os.mkdir(channel, 0o700)
        listener.bind(os.path.join(channel, _SOCKET))
        os.chmod(os.path.join(channel, _SOCKET), 0o600)  # the harness connects as the sandbox's root
        listener.listen(1)
        bundle = os.path.join(casedir, "bundle")
        os.mkdir(bundle, 0o700)
        cfg = json.dumps(_harness_config(sb, seccomp, profile))
        args = [plan.python, "-I", "-S", "-B", "-c", harness_source(), cfg]
        config = bundle_config(plan, sb, rootfs=_rootfs(plan), result_dir=channel, args=args,
                               env=child_env(sb, "/tmp", "/tmp"), cwd="/tmp")
        with open(os.path.join(bundle, "config.json"), "w") as out:
            json.dump(config, out)
        if cgroups is not None:
            cgroup = cgroups.create()
            cgroup.set_memory_limit(sb.warm_memory_bytes)  # until the case arms its own limits
            cgroup.set_task_limit(sb.warm_max_tasks + SENTRY_TASKS)
        argv = [*_cgroup_prefix(plan, cgroup), runsc, "--root", os.path.join(casedir, "state"),
                f"--platform={sb.gvisor_platform}", "--network=none", "--host-uds=open", "--ignore-cgroups",
                "run", "--bundle", bundle, os.path.basename(casedir)]
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}, start_new_session=True)
        conn = _accept(listener, popen, sb.start_timeout_seconds)
    except BaseException:
        if popen is not None:
            hosts = _pidfds(descendants(popen.pid))
            _kill_and_wait([*hosts, *_pidfds([popen.pid])], reap=hosts)
            popen.wait()
            for pipe in (popen.stdin, popen.stdout, popen.stderr):
                if pipe is not None:
                    pipe.close()
        if cgroup is not None:
            cgroup.remove()
        listener.close()
        shutil.rmtree(casedir, ignore_errors=True)
        raise
    listener.close()
    os.unlink(os.path.join(casedir, "channel", _SOCKET))  # nothing else may ever connect
    # gVisor's host processes (gofer, sandbox) live in sessions of their own: they are found
    # now, while runsc still parents them, and held by pidfd until the child is destroyed.
    first = descendants(popen.pid)
    held = _pidfds(first)

    def teardown() -> dict[str, Any]:
        """Runs first in destroy: every host process of the sandbox is gone when it returns."""
        later = descendants(popen.pid)
        hosts = held + _pidfds(later)
        left = _kill_and_wait([*hosts, *_pidfds([popen.pid])], reap=hosts)
        reap_orphans()
        return {"host_pids": sorted({*first, *later, popen.pid}), "host_processes_left": left}

    for f in (popen.stdout, popen.stderr):
        assert f is not None
        os.set_blocking(f.fileno(), False)
    child = Child(popen, conn.detach(), "gvisor", seccomp, profile, None, casedir, time.monotonic(), cgroup,
                  max_message_bytes(sb), teardown=teardown, extra_tasks=SENTRY_TASKS)
    register(child)
    return child

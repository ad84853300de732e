"""What every tier's children have in common: start one (``spawn``, given the tier's command line),
read its result channel, and destroy it afterwards with everything it started.

A started child runs the harness (child/) with the seccomp deny-list when asked, installed
before the harness forks so that it covers every process of the sandbox, and, when the service
is root, under a dedicated unprivileged uid in a control group of its own (see cgroups.py). What
it sees of the host is its tier's (tiers/)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Protocol

from app.sandbox.cgroups import CaseCgroup, CgroupHost
from app.sandbox.child import harness_source
from app.sandbox.leftovers import remove_leftovers_of
from app.sandbox.owners import CASE_PREFIX, owned_tempdir
from app.sandbox.plan import Plan
from app.sandbox.uids import UidPool, processes_of

if TYPE_CHECKING:
    from app.settings import SandboxSettings

SANDBOX_UID = 65534  # the uid the candidate runs as inside a tier with a user namespace or kernel of its own
# The root launcher: move itself into each control group of the case (so everything it execs
# is in them from the first instruction), bind-mount each staged source onto its mountpoint,
# then exec the rest of argv. Only our own paths are ever passed here, as positional
# parameters, never interpolated.
LAUNCH_SCRIPT = (
    'while [ "$1" != "--" ]; do echo $$ > "$1" || exit 96; shift; done; shift; '
    'while [ "$1" != "--" ]; do mount --bind "$1" "$2" || exit 97; shift 2; done; shift; exec "$@"'
)
PROFILES = ("bare", "numpy", "jax")
# The reporter re-encodes the result frame as one JSON line; escaping can make it this many
# times larger than the frame (a 4-byte float like 1e15 prints as 18 bytes).
_MESSAGE_EXPANSION = 5
_READ_CHUNK = 1 << 20
# Children alive in this process, for shutdown on a stop signal (see pool.shutdown_all).
_live: set[Child] = set()
_live_lock = threading.Lock()


class SandboxFault(Exception):
    """The sandbox itself failed (a child could not start or died before candidate code)."""


def harness_cfg(sb: SandboxSettings, profile: str, seccomp: bool, uid: int | None, result_fd: int) -> dict[str, Any]:
    """What the harness of one child is told (as its argv[1])."""
    return {
        "result_fd": result_fd,
        "preload": profile,
        "seccomp": seccomp,
        "python_guards": sb.python_guards,
        "dedicated_uid": uid is not None,
        "reap_all": uid is not None,
        "max_result_bytes": sb.max_result_bytes,
        "max_result_items": sb.max_result_items,
    }


def max_message_bytes(sb: SandboxSettings) -> int:
    """The longest line the parent reads from a child's result channel before killing it."""
    return _MESSAGE_EXPANSION * sb.max_result_bytes + (1 << 16)


class Process(Protocol):
    """What the service holds of a child's first process: a started ``subprocess.Popen``, or a
    fork of the fork server (zygote.ForkedProcess)."""

    @property
    def pid(self) -> int: ...
    @property
    def stdin(self) -> IO[bytes] | None: ...
    @property
    def stdout(self) -> IO[bytes] | None: ...
    @property
    def stderr(self) -> IO[bytes] | None: ...
    def poll(self) -> int | None: ...
    def kill(self) -> None: ...
    def wait(self, timeout: float | None = None) -> int: ...


@dataclass(eq=False)
class Child:
    popen: Process
    result_fd: int
    tier: str
    seccomp: bool
    profile: str
    uid: int | None
    workdir: str | None
    started: float
    cgroup: CaseCgroup | None = None
    max_message: int = 1 << 20
    ready: dict[str, Any] | None = None
    pending: list[bytes] = field(default_factory=list)  # pieces of an unfinished line
    pending_bytes: int = 0
    oversize: bool = False  # a line longer than max_message arrived: the child is killed
    lines: list[dict[str, Any]] = field(default_factory=list)
    # Tiers whose processes outlive the one started (gvisor: runsc's sandbox and gofer) kill them
    # here; host tasks such a tier needs beyond the case's own count (its kernel's threads).
    teardown: Callable[[], dict[str, Any]] | None = None
    extra_tasks: int = 0
    forked: bool = False  # forked by a fork server (zygote.py) rather than started
    # Its uid may have left files and IPC objects in the host's shared places (the plain tier).
    host_residue: bool = False
    # Forked, its leader exits only once the case's namespaces are empty: its exit means that no
    # process of the case is left (a forked bubblewrap or gvisor case).
    leader_outlives_case: bool = False
    # Whether the fork server that forked it still runs (and is not exiting): its forks die with
    # it, so a case that ends that way ended by no doing of the candidate's.
    origin_alive: Callable[[], bool] | None = None

    def fork_server_gone(self) -> bool:
        """Forked, by a fork server that has died or is dying (this child dies with it)."""
        return self.origin_alive is not None and not self.origin_alive()


def child_env(sb: SandboxSettings, home: str, tmp: str) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={sb.host_devices}",
        "TF_CPP_MIN_LOG_LEVEL": "2",
        # One BLAS/OpenMP thread: cases run side by side, and threads count against RLIMIT_NPROC.
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        # One malloc arena: glibc reserves 64 MiB of address space for each thread's own arena, so
        # threads a case's libraries start (JAX's backend starts several, some only as the case
        # runs) took RLIMIT_AS's headroom 64 MiB at a time, and an honest import then failed to map
        # its library (an ImportError, under load, when more of them started after the limit
        # was set). The gvisor lanes' zygote sets the same with mallopt (child/zygote.py).
        "MALLOC_ARENA_MAX": "1",
    }


def _drop_privileges_prefix(plan: Plan, uid: int, cgroup: CaseCgroup | None) -> list[str]:
    if "setpriv" not in plan.tools:
        raise SandboxFault("running as root needs util-linux setpriv (and unshare) to drop privileges")
    return [*launcher_prefix(plan, cgroup),
            plan.tools["setpriv"], f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def launcher_prefix(plan: Plan, cgroup: CaseCgroup | None) -> list[str]:
    """Root only: join cgroup and mount the staged paths (in a private mount namespace) before
    the rest of the command line runs; empty when there is neither."""
    tools = plan.tools
    if (plan.staged or cgroup) and not {"unshare", "sh"} <= tools.keys():
        raise SandboxFault("running as root needs util-linux unshare to stage the interpreter")
    argv: list[str] = []
    if plan.staged or cgroup:
        if plan.staged:
            argv += [tools["unshare"], "--mount", "--propagation", "private", "--"]
        argv += [tools["sh"], "-c", LAUNCH_SCRIPT, "launch"]
        argv += [*(cgroup.procs_files if cgroup else []), "--"]
        for source, point in plan.staged.items():
            argv += [source, point]
        argv.append("--")
    return argv


@dataclass
class Launch:
    """How a tier starts one child's interpreter: the command line up to and including the
    interpreter, its environment, where it starts, the harness's sys.path, a host directory
    of the child's own (removed with it), and what else the tier tells the harness (the plain
    tier's Landlock rules)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    sys_path: list[str] = field(default_factory=list)
    workdir: str | None = None
    harness: dict[str, Any] = field(default_factory=dict)  # the tier's own part of the harness's config


def case_dirs(uid: int | None) -> tuple[str, dict[str, str]]:
    """A case's private working, home and temporary directories on the host, under one
    root-owned directory that is traversable but not listable: the case reaches its own by path,
    and nothing else in there."""
    workdir = owned_tempdir(CASE_PREFIX, 0o711)
    paths = {d: os.path.join(workdir, d) for d in ("work", "home", "tmp")}
    for d in paths.values():
        os.mkdir(d, 0o700)
        if uid is not None:
            os.chown(d, uid, uid)
    return workdir, paths


def spawn(
    plan: Plan, sb: SandboxSettings, tier: str, seccomp: bool, profile: str, uids: UidPool | None,
    cgroups: CgroupHost | None, launch: Callable[[list[str], int | None], Launch], *, host_residue: bool = False,
) -> Child:
    """Start a child that warms up for profile and then waits for one case on stdin. launch
    (the tier's) builds its command line from the privilege-dropping prefix and its uid."""
    uid = uids.take() if uids is not None else None
    spec = None
    cgroup = None
    read_end, write_end = os.pipe()
    try:
        cfg = harness_cfg(sb, profile, seccomp, uid, write_end)
        if cgroups is not None and uid is not None:
            cgroup = cgroups.create()
            cgroup.set_memory_limit(sb.warm_memory_bytes)  # until the case arms its own limits
            cgroup.set_task_limit(sb.warm_max_tasks)
        prefix = _drop_privileges_prefix(plan, uid, cgroup) if uid is not None else []
        spec = launch(prefix, uid)
        cfg["sys_path"] = spec.sys_path
        cfg.update(spec.harness)
        argv = [*spec.argv, "-I", "-S", "-B", "-c", harness_source(), json.dumps(cfg)]
        popen = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=(write_end,), cwd=spec.cwd, env=spec.env, start_new_session=True,
        )
    except BaseException:
        os.close(read_end)
        if spec is not None and spec.workdir:
            shutil.rmtree(spec.workdir, ignore_errors=True)
        if cgroup is not None:
            cgroup.remove()
        if uid is not None and uids is not None:
            uids.give_back(uid)
        raise
    finally:
        os.close(write_end)
    for f in (popen.stdout, popen.stderr):
        assert f is not None
        os.set_blocking(f.fileno(), False)
    child = Child(popen, read_end, tier, seccomp, profile, uid, spec.workdir, time.monotonic(), cgroup,
                  max_message_bytes(sb), host_residue=host_residue)
    register(child)
    return child


def register(child: Child) -> None:
    """Track a live child, to be destroyed at stop if nothing else does."""
    with _live_lock:
        _live.add(child)


def kill_child(child: Child) -> None:
    """Kill a child's first process, and its whole process group where the service started it
    (a fork server's fork is killed through its pidfd alone: its pid is not the service's to
    signal once the fork server has reaped it; namespace, control group and uid take the rest)."""
    if isinstance(child.popen, subprocess.Popen):
        with contextlib.suppress(OSError):
            os.killpg(child.popen.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        child.popen.kill()


def _parse_line(line: bytes) -> dict[str, Any]:
    try:
        msg = json.loads(line)
    except (ValueError, RecursionError):  # the reporter writes only JSON lines; a value nested
        # deeper than this thread's stack allows (forged by the candidate) is garbled too
        return {"kind": "garbled"}
    return msg if isinstance(msg, dict) else {"kind": "garbled"}


def read_messages(child: Child, timeout: float) -> bool:
    """Read what the result fd has within timeout into child.lines; False on end of file, or
    when a line grows past child.max_message (then child.oversize is set). Each byte is looked
    at a bounded number of times: a long line is kept as pieces and joined once."""
    ready, _, _ = select.select([child.result_fd], [], [], max(timeout, 0))
    if not ready:
        return True
    data = os.read(child.result_fd, _READ_CHUNK)
    if not data:
        return False
    *complete, rest = data.split(b"\n")
    if complete:
        complete[0] = b"".join([*child.pending, complete[0]])
        child.pending, child.pending_bytes = [], 0
    for line in complete:
        if len(line) > child.max_message:
            child.oversize = True
            return False
        child.lines.append(_parse_line(line))
    if rest:
        child.pending.append(rest)
        child.pending_bytes += len(rest)
        if child.pending_bytes > child.max_message:
            child.oversize = True
            child.pending, child.pending_bytes = [], 0
            return False
    return True


def stderr_tail(child: Child, limit: int = 2000) -> str:
    try:
        data = os.read(child.popen.stderr.fileno(), 65536)  # type: ignore[union-attr]
    except (BlockingIOError, OSError, ValueError):
        data = b""
    return data[-limit:].decode(errors="replace").strip()


def wait_ready(child: Child, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while not child.lines:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise SandboxFault(f"child did not become ready within {timeout:.0f} s")
        if not read_messages(child, remaining):
            raise SandboxFault(f"child exited during start-up: {stderr_tail(child) or 'no message'}")
    first = child.lines.pop(0)
    if first.get("kind") != "ready":
        raise SandboxFault(f"child failed during start-up: {stderr_tail(child) or first.get('kind')}")
    child.ready = first
    return first


def reap_uid(uid: int) -> bool:
    """Kill every process of a dedicated uid: ``kill(-1)`` run as that uid reaches all of them
    and nothing else. Repeated until /proc shows none (a dying process can linger briefly);
    True once none is left."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    for _ in range(50):
        if not processes_of(uid):
            return True
        if kill:
            subprocess.run([kill, "-KILL", "-1"], user=uid, group=uid, extra_groups=[],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        else:
            for pid in processes_of(uid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)
    return not processes_of(uid)


def destroy(child: Child, uids: UidPool | None) -> dict[str, Any]:
    """Kill the child and everything it started; free its uid, control group and working
    directory, and whatever its uid left in the host's shared places (where the tier shares them). Returns
    what the case's control group recorded (memory kills) for the verdict's evidence."""
    with _live_lock:
        _live.discard(child)
    facts: dict[str, Any] = child.teardown() if child.teardown is not None else {}
    kill_child(child)
    exited = False
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.popen.wait(timeout=10)
        exited = True
    for f in (child.popen.stdin, child.popen.stdout, child.popen.stderr):
        with contextlib.suppress(OSError):
            if f is not None:
                f.close()
    with contextlib.suppress(OSError):
        os.close(child.result_fd)
    if child.cgroup is not None:
        facts["oom_kills"] = child.cgroup.oom_kills()
        facts["memory_limit_hits"] = child.cgroup.failcnt()
        # Emptied now (every task of the case killed and gone), its directories removed by
        # the remover thread: the verdict does not wait on the kernel's rmdir.
        facts["cgroup_emptied"] = child.cgroup.empty()
        child.cgroup.remove_later()
    if child.uid is not None:
        # Even after the group is gone a killed task may still be exiting: the uid goes back to
        # the pool only when /proc shows none of its processes (one scan when all is quiet).
        # A forked bubblewrap child's leader exits only after the case's pid 1, whose exit
        # empties the pid namespace every process of the case is in: nothing can be left.
        # A forked gvisor child's uid is one of gVisor's kernel, never of the host: its leader
        # exits only once no process of that uid is left in the lane's sandbox.
        gone = (child.leader_outlives_case and exited) or reap_uid(child.uid)
        if child.host_residue:
            facts["left_behind"] = remove_leftovers_of(child.uid)
        if uids is not None and gone:
            uids.give_back(child.uid)
    if child.workdir:
        shutil.rmtree(child.workdir, ignore_errors=True)
    return facts


def destroy_all(uids: UidPool | None) -> None:
    """Destroy every child this process started that is still alive (at stop)."""
    with _live_lock:
        children = list(_live)
    for child in children:
        with contextlib.suppress(Exception):
            destroy(child, uids)

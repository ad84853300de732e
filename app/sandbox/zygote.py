"""Children forked from a fork server ("zygote") instead of started as fresh interpreters.

One zygote per tier and profile has imported numpy (and JAX, without starting its backend) once;
each child is a fork of it that no other case ran in, set up by child/zygote.py with its own
namespaces, private /tmp and /dev/shm, control group, dedicated uid, rlimits and seccomp filter,
and then running the same harness (reporter and runner) as a started child. The rest of the
sandbox (pool, executor, destroy) treats it like any other child.

``Zygote`` is the fork server of a tier whose forks are processes of the host (plain, bubblewrap),
built from the tier's ``ForkSpec``; the gvisor tier has its own (tiers/gvisor_lane.py). Used only
where that holds every guarantee of the started child: the service is root (each fork runs under
a dedicated uid of the host, so the zygote, which stays root, is out of its reach), and the tier
says a fork keeps its guarantees (``Tier.forkable``: in the bubblewrap tier, only with seccomp,
which refuses nested user namespaces as bubblewrap's --disable-userns does for a started child).
Elsewhere ``ForkServers.spawn`` returns None and the pool starts interpreters as before."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from app.sandbox.cgroups import CaseCgroup, CgroupHost
from app.sandbox.child import zygote_source
from app.sandbox.launch import Child, SandboxFault, case_dirs, harness_cfg, max_message_bytes, register
from app.sandbox.plan import Plan
from app.sandbox.uids import UidPool

if TYPE_CHECKING:
    from app.sandbox.tier import ForkServer, Tier
    from app.settings import SandboxSettings

log = logging.getLogger(__name__)
_RETRY_AFTER_SECONDS = 30.0  # a zygote that failed to start is tried again after this long
_REPLY_TIMEOUT = 10.0


class ForkedProcess:
    """A case leader forked by a zygote: not the service's child, so it is watched and killed
    through a pidfd, which always means this process, never a later one with its pid."""

    # A bubblewrap-tier leader asked to stop kills the case's pid 1 and waits until the namespace
    # is empty; if it has not exited after this long, it is killed outright.
    _GRACE_SECONDS = 2.0

    def __init__(self, pidfd: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes], *,
                 stop_signal: int = signal.SIGKILL) -> None:
        self.pidfd = pidfd
        self.stop_signal = stop_signal
        self.pid = _pid_of(pidfd)
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None

    def _exited(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        ready, _, _ = select.select([self.pidfd], [], [], timeout)
        if ready:
            self.returncode = -signal.SIGKILL  # its status is the zygote's to collect
            os.close(self.pidfd)
        return bool(ready)

    def poll(self) -> int | None:
        return self.returncode if self._exited(0) else None

    def _signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(self.pidfd, sig)

    def kill(self) -> None:
        self._signal(self.stop_signal)

    def wait(self, timeout: float | None = None) -> int:
        grace = self._GRACE_SECONDS if timeout is None else min(timeout, self._GRACE_SECONDS)
        if not self._exited(grace):
            self._signal(signal.SIGKILL)
            rest = None if timeout is None else max(timeout - grace, 0.0)
            if not self._exited(rest):
                raise subprocess.TimeoutExpired("case leader", timeout or 0)
        assert self.returncode is not None
        return self.returncode


_PF_EXITING = 0x4  # the task flag (linux/sched.h) set as a process starts to exit


def _exiting(pid: int) -> bool:
    """Whether the process has begun to exit (or is gone), from the flags in /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return True
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold anything
    return bool(int(fields[6]) & _PF_EXITING)


def _pid_of(pidfd: int) -> int:
    """The process's pid as this service sees it (the zygote may sit in another pid namespace)."""
    with open(f"/proc/self/fdinfo/{pidfd}") as f:
        for line in f:
            if line.startswith("Pid:"):
                return int(line.split()[1])
    raise SandboxFault("the kernel does not report a pidfd's process")


@dataclass(frozen=True)
class ForkSpec:
    """A tier's fork server as data: the command line up to and including the interpreter, its
    environment and sys.path; how each fork isolates itself (child/zygote.py: ``namespaces``, its
    own mount, pid, IPC, network, UTS and cgroup namespaces and private filesystems; or
    ``directories``, private host directories only); what a fork's uid may leave in the host's
    shared places; whether a fork's leader outlives its case (then it is stopped with SIGTERM,
    which it passes on to the case's pid 1, and its exit means the case is gone); what else a
    fork's harness is told about its case (``case_cfg``)."""

    tier: str
    argv: list[str]
    env: dict[str, str]
    sys_path: list[str]
    fork: str
    host_residue: bool = False
    leader_outlives_case: bool = False
    # ``directories``: what else a fork's harness is told, given its case's directories (the
    # plain tier's Landlock rules, which name them).
    case_cfg: Callable[[dict[str, str]], dict[str, Any]] | None = None


class Zygote:
    """One fork server: a long-lived process of the given tier and profile."""

    def __init__(self, plan: Plan, sb: SandboxSettings, spec: ForkSpec, seccomp: bool, profile: str) -> None:
        self.plan, self.sb, self.spec = plan, sb, spec
        self.seccomp, self.profile = seccomp, profile
        self._lock = threading.Lock()  # one request at a time on the control socket
        self._pidfd = -1  # until the zygote's ready message brings it (stop() may come first)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.control = ours
        cfg = {
            "control_fd": theirs.fileno(),
            "fork": spec.fork,
            "preload": profile,
            "seccomp": seccomp,
            "tmpfs_bytes": sb.tmpfs_bytes,
            "shm_bytes": sb.shm_bytes,
            "sys_path": spec.sys_path,
        }
        argv = [*spec.argv, "-I", "-S", "-B", "-c", zygote_source(), json.dumps(cfg)]
        try:
            self.popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                pass_fds=(theirs.fileno(),), cwd="/", env=spec.env, start_new_session=True,
            )
        finally:
            theirs.close()
        assert self.popen.stderr is not None
        os.set_blocking(self.popen.stderr.fileno(), False)
        reply = self._reply(sb.start_timeout_seconds)
        own = reply.get("pidfd")
        if reply.get("kind") != "ready" or not isinstance(own, int):
            self.stop()
            raise SandboxFault(f"fork server failed to start: {reply.get('error') or self._stderr()}")
        self.pid = _pid_of(own)  # the zygote's python, as the host sees it
        # Kept open: it turns readable the moment the zygote's python exits, before bubblewrap
        # (what popen watches in that tier) has followed it out.
        self._pidfd = own

    def _stderr(self) -> str:
        try:
            data = os.read(self.popen.stderr.fileno(), 65536)  # type: ignore[union-attr]
        except (BlockingIOError, OSError, ValueError):
            data = b""
        return data[-500:].decode(errors="replace").strip() or "no message"

    def _reply(self, timeout: float) -> dict[str, object]:
        ready, _, _ = select.select([self.control], [], [], timeout)
        if not ready:
            return {"kind": "failed", "error": f"no answer within {timeout:.0f} s"}
        try:
            msg, fds, _, _ = socket.recv_fds(self.control, 4096, 1)
        except OSError as exc:
            return {"kind": "failed", "error": str(exc)}
        if not msg:
            return {"kind": "failed", "error": "the fork server exited"}
        reply = json.loads(msg)
        if fds:
            reply["pidfd"] = fds[0]
        return reply

    def alive(self) -> bool:
        """Whether it runs and is not on its way out. The zygote is its namespace's init: killed,
        it is reported gone (pidfd, bubblewrap's exit) only after the kernel has killed every
        process of its namespace, so its forks die first; the exiting flag is set before that."""
        if self.popen.poll() is not None:
            return False
        try:
            exited, _, _ = select.select([self._pidfd], [], [], 0)
        except (OSError, ValueError):  # closed by stop()
            return False
        # (not exited: the process is not reaped, so self.pid still names it)
        return not exited and not _exiting(self.pid)

    def fork(self, request: dict[str, object], fds: list[int]) -> int:
        """A new case leader for request; returns a pidfd of it."""
        with self._lock:
            try:
                socket.send_fds(self.control, [json.dumps(request).encode()], fds)
            except OSError as exc:
                raise SandboxFault(f"the fork server is gone: {exc}") from exc
            reply = self._reply(_REPLY_TIMEOUT)
        pidfd = reply.get("pidfd")
        if reply.get("kind") != "forked" or not isinstance(pidfd, int):
            raise SandboxFault(f"the fork server failed: {reply.get('error') or self._stderr()}")
        return pidfd

    def fork_child(self, uids: UidPool, cgroups: CgroupHost | None) -> Child:
        """A child forked for the next case, not yet ready (launch.wait_ready as for any child)."""
        sb, spec, profile, seccomp = self.sb, self.spec, self.profile, self.seccomp
        uid = uids.take()
        cgroup: CaseCgroup | None = None
        workdir = None
        ours: list[int] = []
        theirs: list[int] = []
        pidfd = None
        try:
            if cgroups is not None:
                cgroup = cgroups.create()
                cgroup.set_memory_limit(sb.warm_memory_bytes)  # until the case arms its own limits
                cgroup.set_task_limit(sb.warm_max_tasks)
            cfg = {**harness_cfg(sb, profile, seccomp, uid, -1), "sys_path": [], "warm_jit": False}
            request: dict[str, object] = {"uid": uid, "cfg": cfg}
            if spec.fork == "directories":
                workdir, paths = case_dirs(uid)
                request.update(cwd=paths["work"], home=paths["home"], tmp=paths["tmp"])
                if spec.case_cfg is not None:
                    cfg.update(spec.case_cfg(paths))
            for i in range(4):  # stdin (the fork reads it), stdout, stderr, result channel
                r, w = os.pipe()
                ours.append(w if i == 0 else r)
                theirs.append(r if i == 0 else w)
            pidfd = self.fork(request, theirs)
            process = ForkedProcess(pidfd, os.fdopen(ours[0], "wb"), os.fdopen(ours[1], "rb"),
                                    os.fdopen(ours[2], "rb"),
                                    stop_signal=signal.SIGTERM if spec.leader_outlives_case else signal.SIGKILL)
            ours = ours[3:]
            if cgroup is not None:
                for procs in cgroup.procs_files:  # before it goes on, as a started child's launcher does
                    with open(procs, "w") as procs_file:
                        procs_file.write(str(process.pid))
            assert process.stdin is not None
            process.stdin.write(b"g")
            process.stdin.flush()
        except BaseException:
            if pidfd is not None:
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.close(pidfd)
            for fd in ours:
                with contextlib.suppress(OSError):
                    os.close(fd)
            if cgroup is not None:
                cgroup.remove()
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)
            uids.give_back(uid)
            raise
        finally:
            for fd in theirs:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for f in (process.stdout, process.stderr):
            assert f is not None
            os.set_blocking(f.fileno(), False)
        child = Child(process, ours[0], spec.tier, seccomp, profile, uid, workdir, time.monotonic(), cgroup,
                      max_message_bytes(sb), forked=True, origin_alive=self.alive, host_residue=spec.host_residue,
                      leader_outlives_case=spec.leader_outlives_case)
        register(child)
        return child

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.control.close()
        with contextlib.suppress(OSError):
            os.killpg(self.popen.pid, signal.SIGKILL)  # our own child: its pid is still ours
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        if self.popen.stderr is not None:
            self.popen.stderr.close()
        with contextlib.suppress(OSError):
            os.close(self._pidfd)
        self._pidfd = -1  # (a closed number may be reused by another file: never select on it)


class ForkServers:
    """The zygotes of one sandbox, started on first use, restarted when one dies."""

    def __init__(self, sb: SandboxSettings) -> None:
        self.sb = sb
        self._zygotes: dict[tuple[str, bool, str], ForkServer] = {}
        self._failed: dict[tuple[str, bool, str], float] = {}
        self._lock = threading.Lock()
        # Zygotes are started from this one thread, which lives as long as the sandbox:
        # bubblewrap's --die-with-parent follows the *thread* that started it, and a grading
        # thread that happens to need the first child may end right after its grade.
        self._keeper = ThreadPoolExecutor(1, thread_name_prefix="sandbox-forkserver")

    def usable(self, plan: Plan, tier: Tier, seccomp: bool) -> bool:
        # Only where a fork keeps every guarantee of a started child (the tier says where), and
        # only as root: each fork runs under a dedicated uid, out of the zygote's reach.
        if self.sb.launcher != "forkserver" or not plan.is_root:
            return False
        return tier.forkable(plan, seccomp)

    def serving(self, plan: Plan, tier: Tier, seccomp: bool) -> bool:
        """Usable, and no zygote of the tier failed to start lately (cases then start interpreters)."""
        if not self.usable(plan, tier, seccomp):
            return False
        now = time.monotonic()
        with self._lock:
            return not any(key[:2] == (tier.name, seccomp) and now - when < _RETRY_AFTER_SECONDS
                           for key, when in self._failed.items())

    def _zygote(self, plan: Plan, tier: Tier, seccomp: bool, profile: str,
                cgroups: CgroupHost | None = None) -> ForkServer | None:
        key = (tier.name, seccomp, profile)
        with self._lock:
            zygote = self._zygotes.get(key)
            if zygote is not None and zygote.alive():
                return zygote
            if zygote is not None:
                log.warning("fork server for %s/%s died; starting another", tier.name, profile)
                zygote.stop()
                del self._zygotes[key]
            failed = self._failed.get(key)
            if failed is not None and time.monotonic() - failed < _RETRY_AFTER_SECONDS:
                return None
            try:
                zygote = self._keeper.submit(tier.fork_server, plan, self.sb, seccomp, profile, cgroups).result()
                self._zygotes[key] = zygote
            except (SandboxFault, OSError, RuntimeError) as exc:
                self._failed[key] = time.monotonic()
                log.warning("fork server for %s/%s unavailable, starting interpreters instead: %s",
                            tier.name, profile, exc)
                return None
            self._failed.pop(key, None)
            return zygote

    def spawn(self, plan: Plan, tier: Tier, seccomp: bool, profile: str, uids: UidPool | None,
              cgroups: CgroupHost | None) -> Child | None:
        """A child forked by the zygote, not yet ready (launch.wait_ready as for any child); None
        when no zygote can serve this tier (the caller starts an interpreter)."""
        if not self.usable(plan, tier, seccomp) or uids is None:
            return None
        for attempt in range(2):
            zygote = self._zygote(plan, tier, seccomp, profile, cgroups)
            if zygote is None:
                return None
            try:
                return zygote.fork_child(uids, cgroups)
            except SandboxFault:
                if attempt == 1:
                    raise
                with contextlib.suppress(subprocess.TimeoutExpired):  # bubblewrap follows it out
                    if zygote.popen is not None:
                        zygote.popen.wait(timeout=0.5)
                if zygote.alive():
                    raise
                # It died (or was killed) since it was last used: once more with a new one.
        return None

    def stop(self) -> None:
        with self._lock:
            zygotes = list(self._zygotes.values())
            self._zygotes.clear()
        for zygote in zygotes:
            zygote.stop()
        self._keeper.shutdown(wait=False)

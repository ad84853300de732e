"""The gvisor tier at fork speed: one long-lived gVisor sandbox per fork server (one per worker
process and profile, so one per lane), holding the warm zygote; each case is a fresh fork inside
it, with its own pid, mount, IPC, network, UTS and cgroup namespaces of gVisor's kernel, its own
size-capped /tmp and /dev/shm and /proc, its own uid (the reporter another), no_new_privs, the
seccomp deny-list and channel filter, and rlimits (child/zygote.py). A case's system calls are
answered by gVisor's kernel, as in a started gvisor child; what differs is that the cases of a
lane share that one kernel, one after the other and side by side (see docs/sandbox.md).

runsc of Debian's release hands no fd in or out, so the service listens on a unix socket in a
root-only directory of the lane's, bound read-only into the sandbox: the zygote connects to it
for its requests, and each case's leader connects its case's stdin, stdout, stderr, result
channel and its own link, each naming the case by a random token. Closing the link ends the case:
the leader kills the case's pid 1 (and with it the case's pid namespace) and closes the link
once no process of the case's uid is left. Once the case has been sent (a byte on the link), the
leader also counts what the case holds and ends it past SANDBOX__CASE_MEMORY_BYTES, saying so when
it closes the link (verdict ``memory``): no case can exhaust the lane's memory, which every case
in it shares."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import secrets
import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import IO, TYPE_CHECKING, Any

from app.sandbox.child import zygote_source
from app.sandbox.launch import Child, SandboxFault, child_env, harness_cfg, max_message_bytes, register
from app.sandbox.owners import CASE_PREFIX, owned_tempdir
from app.sandbox.plan import SITE_IN_SANDBOX, Plan
from app.sandbox.tiers import runsc as rs

if TYPE_CHECKING:
    from app.sandbox.cgroups import CaseCgroup, CgroupHost
    from app.sandbox.uids import UidPool
    from app.settings import SandboxSettings

log = logging.getLogger(__name__)

_SOCKET = "zygote.sock"
_ROLES = 5  # stdin, stdout, stderr, result channel, the leader's link (child/zygote._connect_case)
_TOKEN_BYTES = 8
_HELLO = 2 * _TOKEN_BYTES + 3  # "<token hex>:<role>\n"
_REPLY_TIMEOUT = 10.0
# How often a case's leader counts what the case holds (child/zygote._CaseMemory) once it has
# its case; what a case can add between two looks, and hold where the count does not see it,
# is what the lane's control group keeps room for beyond each case's allowance (_lane_memory).
WATCH_SECONDS = 0.02
# Measured (docs/sandbox.md, "Limits of a forked case"): the most a case held past its
# allowance before its leader ended it, for a fork bomb of allocating processes; with a margin.
OVERSHOOT_BYTES = 1024**3
_PIPE_BYTES = 64 * 1024  # a pipe's buffer in gVisor (the lane filter refuses F_SETPIPE_SZ)
_MQUEUE_BYTES = 256 * 10 * 8192  # POSIX message queues of an IPC namespace at gVisor's limits
# The most of the host's memory a lane's group may be given. The sum of every case's worst (above)
# is far more than a host has at the default settings (about 54 GiB for 2 cores): a group sized
# so bounds nothing, and a case that escapes its leader's count would meet the host's OOM killer,
# which may pick any process of the host; capped, it meets its lane's group first.
HOST_MEMORY_SHARE = 0.9


def host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class _CaseStdin(io.FileIO):
    """A case's stdin. Closing it (the case has been sent) also tells the case's leader to
    begin counting the case's memory, from the warm state it is in."""

    def __init__(self, fd: int, link: socket.socket) -> None:
        super().__init__(fd, "wb")
        self._link = link

    def close(self) -> None:
        if not self.closed:
            with contextlib.suppress(OSError):
                self._link.send(b"a")
        super().close()


class CaseLink:
    """A case leader inside the lane's sandbox, seen through its link: the leader closes it when
    the case is over (after writing how pid 1 ended), and ends the case when we shut it."""

    _GRACE_SECONDS = 2.0

    def __init__(self, link: socket.socket, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes],
                 lane: GvisorZygote) -> None:
        self.link = link
        self.lane = lane
        # The host process that holds every case of the lane: signalling it ends the whole lane.
        self.pid = lane.pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None
        self.clean = False
        self.memory_peak: int | None = None  # set when the leader ended the case for its memory
        self._said = b""

    def _exited(self, timeout: float | None) -> bool:
        if self.returncode is not None:
            return True
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready, _, _ = select.select([self.link], [], [], wait)
            if not ready:
                return False
            try:
                data = self.link.recv(64)
            except OSError:
                data = b""
            if data and len(self._said) < 64:
                self._said += data
                continue
            # "clean <status>[ memory <bytes>]": the leader saw the case's namespace empty and its
            # root removed (and had ended the case, past its memory allowance, holding that much)
            words = self._said.split()
            self.clean = len(words) >= 2 and words[0] == b"clean" and words[1].isdigit()
            self.returncode = int(words[1]) if self.clean else -signal.SIGKILL
            if self.clean and words[2:3] == [b"memory"] and words[3:4] and words[3].isdigit():
                self.memory_peak = int(words[3])
            self.link.close()
            return True

    def poll(self) -> int | None:
        return self.returncode if self._exited(0) else None

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(OSError):
                self.link.shutdown(socket.SHUT_WR)

    def wait(self, timeout: float | None = None) -> int:
        grace = self._GRACE_SECONDS if timeout is None else min(timeout, self._GRACE_SECONDS)
        if not self._exited(grace):
            self.kill()
            rest = None if timeout is None else max(timeout - grace, 0.0)
            if not self._exited(rest):
                # The leader did not end its case: nothing of the lane is trusted any longer.
                log.warning("gVisor lane (runsc %d): a case's leader did not answer in time; stopping the lane",
                            self.pid)
                self.lane.stop()
                raise subprocess.TimeoutExpired("case leader", timeout or 0)
        assert self.returncode is not None
        return self.returncode


class GvisorZygote:
    """One fork server inside a gVisor sandbox of its own (see the module's docstring)."""

    pid: int  # runsc's (the host process that holds the lane), set as it starts

    def __init__(self, plan: Plan, sb: SandboxSettings, seccomp: bool, profile: str,
                 cgroups: CgroupHost | None = None) -> None:
        runsc = plan.tools.get("runsc")
        if runsc is None:
            raise SandboxFault("runsc (gVisor) is not installed")
        self.plan, self.sb, self.seccomp, self.profile = plan, sb, seccomp, profile
        self.policy = rs.policy(plan, sb, seccomp, fork_server=True)
        self._lock = threading.Lock()  # one fork at a time: its connections are accepted in turn
        self._stopped = False
        self._death_noted = False
        self.lanedir = owned_tempdir(CASE_PREFIX, 0o700)
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.popen: subprocess.Popen[bytes] | None = None
        self.control: socket.socket | None = None
        self._buffer = b""
        self._held: list[int] = []
        # The zygote's thread count as it last forked (it refuses to fork with more than one):
        # gVisor's tasks are not the host's, so the host cannot read it from /proc.
        self.threads: object = None
        self.cgroup: CaseCgroup | None = None
        try:
            if cgroups is not None:
                self.cgroup = self._lane_cgroup(cgroups)
            self._start(runsc)
        except BaseException:
            self.stop()
            raise

    def _lane_cgroup(self, cgroups: CgroupHost) -> CaseCgroup:
        """One control group for the whole sandbox (gVisor's kernel and every case in it): room
        for the warm forks and every case the service runs at once, each at its own limits. A
        case has no host process of its own, so no group of its own: rlimits bound it inside."""
        sb = self.sb
        cases = sb.warm_pool_size + sb.max_concurrent_cases
        cgroup = cgroups.create()
        # Until the zygote says what its mappings take (then lowered: cgroup v1 refuses to raise the
        # limit above its swap-inclusive twin, set at the same value), the most they can take.
        cgroup.set_memory_limit(self._lane_memory(cases, sb.warm_memory_bytes))
        cgroup.set_task_limit(self.policy.host_tasks + cases * (sb.warm_max_tasks + sb.max_processes))
        return cgroup

    def _lane_memory(self, cases: int, zygote: int) -> int:
        """The lane group's memory limit: the zygote, and for each case its allowance, what it can
        add between two looks of its leader (OVERSHOOT_BYTES), and what it can hold where the
        leader does not count it: per process, as much as the zygote's resident pages and mappings
        (``zygote``; the count charges mappings only beyond the zygote's) and full pipe buffers;
        per case, POSIX message queues. (tmpfs pages are the size caps': in the allowance of a started
        case, here counted apart.) At most HOST_MEMORY_SHARE of the host's memory."""
        sb = self.sb
        per_process = zygote + sb.max_open_files * _PIPE_BYTES
        per_case = (sb.case_memory_bytes + OVERSHOOT_BYTES + sb.max_processes * per_process + _MQUEUE_BYTES
                    + sb.tmpfs_bytes + sb.shm_bytes)
        return min(sb.warm_memory_bytes + cases * per_case, int(HOST_MEMORY_SHARE * host_memory_bytes()))

    def _start(self, runsc: str) -> None:
        plan, sb = self.plan, self.sb
        channel = os.path.join(self.lanedir, "channel")
        os.mkdir(channel, 0o700)
        path = os.path.join(channel, _SOCKET)
        self.listener.bind(path)
        os.chmod(path, 0o600)  # the zygote and its leaders connect as the sandbox's root
        self.listener.listen(2 * _ROLES)
        views = self.policy.mounts
        zcfg = {
            "fork": "lane",
            "preload": self.profile,
            "seccomp": self.seccomp,
            "tmpfs_bytes": sb.tmpfs_bytes,
            "shm_bytes": sb.shm_bytes,
            "sys_path": [SITE_IN_SANDBOX],
            "control_socket": f"{rs.RESULT_DIR}/{_SOCKET}",
            "cases_dir": "/tmp/cases",  # on the sandbox's own /tmp, which no case sees
            "case_memory_bytes": sb.case_memory_bytes,
            "watch_seconds": WATCH_SECONDS,
            # what each case's root binds in, and the merged-/usr links it recreates
            "binds": [m.target for m in views if m.kind == "bind"],
            "symlinks": [(m.target, m.source) for m in views if m.kind == "symlink"],
        }
        bundle = os.path.join(self.lanedir, "bundle")
        os.mkdir(bundle, 0o700)
        args = [plan.python, "-I", "-S", "-B", "-c", zygote_source(), json.dumps(zcfg)]
        config = rs.gvisor_spec(self.policy, rootfs=rs.rootfs(plan), result_dir=channel, args=args,
                                env=child_env(sb, "/tmp/home", "/tmp"))
        with open(os.path.join(bundle, "config.json"), "w") as out:
            json.dump(config, out)
        argv = [*rs.runsc_prefix(plan, self.cgroup, self.policy), runsc, "--root", os.path.join(self.lanedir, "state"),
                f"--platform={sb.gvisor_platform}",
                "--network=none", "--host-uds=open", "--ignore-cgroups",
                "run", "--bundle", bundle, os.path.basename(self.lanedir)]
        self.popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"},
                                      start_new_session=True)
        self.pid = self.popen.pid
        try:
            self.control = rs.accept(self.listener, self.popen, sb.start_timeout_seconds)
        except SandboxFault as exc:
            raise SandboxFault(f"fork server failed to start: {exc}") from exc
        # gVisor's host processes (gofer, sandbox) in sessions of their own: found while runsc
        # still parents them and held by pidfd, so that stop() ends them even once runsc is dead.
        self._held = rs.pidfds(rs.descendants(self.popen.pid))
        reply = self._reply(sb.start_timeout_seconds)
        if reply.get("kind") != "ready":
            raise SandboxFault(f"fork server failed to start: {reply.get('error') or 'no message'}")
        rss, mapped = reply.get("rss"), reply.get("mapped")
        if self.cgroup is not None and isinstance(rss, int) and isinstance(mapped, int) and min(rss, mapped) >= 0:
            self.cgroup.set_memory_limit(self._lane_memory(sb.warm_pool_size + sb.max_concurrent_cases, rss + mapped))

    def _reply(self, timeout: float) -> dict[str, Any]:
        assert self.control is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self.control], [], [], max(deadline - time.monotonic(), 0.0))
            if not ready:
                return {"kind": "failed", "error": f"no answer within {timeout:.0f} s"}
            data = self.control.recv(4096)
            if not data:
                return {"kind": "failed", "error": "the fork server exited"}
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply = json.loads(line)
        return reply if isinstance(reply, dict) else {"kind": "failed"}

    def alive(self) -> bool:
        """Its sandbox runs and the zygote has not hung up (it never speaks unasked). Any thread
        may ask (the pool, of a warm child's origin; the fork servers, before a fork). While a
        fork request is in flight its answer may be waiting unread: that is not the zygote
        speaking unasked, and the request itself learns whether the zygote answers. (Found: a
        thread that asked in that moment took a healthy lane for dead, and the lane was stopped
        with every case running in it, which then ended as sandbox faults.)"""
        if not self._lock.acquire(blocking=False):
            return not self._stopped and self.popen is not None and self.popen.poll() is None
        try:
            return self._alive_locked()
        finally:
            self._lock.release()

    def _alive_locked(self) -> bool:
        if self._stopped or self.popen is None or self.control is None:
            return False
        if self.popen.poll() is not None:
            self._note_death()
            return False
        try:
            ready, _, _ = select.select([self.control], [], [], 0)
        except (OSError, ValueError):
            return False
        if ready:
            self._note_death()
        return not ready

    def _note_death(self) -> None:
        """Log, once, how a lane that nobody stopped ended: runsc's exit status and the last of
        what the sandbox wrote (the zygote's traceback, gVisor's own messages), which say why."""
        if self._death_noted or self.popen is None:
            return
        self._death_noted = True
        said = b""
        if self.popen.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                os.set_blocking(self.popen.stderr.fileno(), False)
                said = self.popen.stderr.read(1 << 16) or b""
        log.warning("gVisor lane (runsc %d) ended by itself: exit status %s; it wrote: %s", self.pid,
                    self.popen.poll(), said[-2000:].decode(errors="replace").strip() or "nothing")

    def _accept_case(self, token: str, deadline: float) -> dict[int, socket.socket]:
        """The case's connections (by role), which its leader makes right after the fork."""
        conns: dict[int, socket.socket] = {}
        try:
            while len(conns) < _ROLES:
                ready, _, _ = select.select([self.listener], [], [], max(deadline - time.monotonic(), 0.0))
                if not ready:
                    raise SandboxFault("a forked case did not connect in time")
                conn, _ = self.listener.accept()
                conn.settimeout(max(deadline - time.monotonic(), 0.01))
                hello = b""
                with contextlib.suppress(OSError):
                    while len(hello) < _HELLO:
                        part = conn.recv(_HELLO - len(hello))
                        if not part:
                            break
                        hello += part
                got, _, role = hello.decode(errors="replace").strip().partition(":")
                if got != token or not role.isdigit() or int(role) >= _ROLES or int(role) in conns:
                    conn.close()  # only this lane's zygote can connect: a fault, not an attack
                    raise SandboxFault("the fork server's case connected out of turn")
                conn.settimeout(None)
                conns[int(role)] = conn
        except BaseException:
            for conn in conns.values():
                conn.close()
            raise
        return conns

    def fork_child(self, uids: UidPool, cgroups: CgroupHost | None = None) -> Child:
        """A new case leader, its channels connected; not yet ready (launch.wait_ready). It has
        no host process to put in a group of its own (cgroups unused): the lane's group holds it."""
        sb = self.sb
        uid = uids.take()
        token = secrets.token_hex(_TOKEN_BYTES)
        cfg = {**harness_cfg(sb, self.profile, self.seccomp, uid, -1), "sys_path": [], "warm_jit": False,
               # the leader ends every process of the case; gVisor refuses a new task once a uid
               # holds more than RLIMIT_NPROC (Linux: as many as), hence one lower
               "reap_all": False, "nproc_margin": self.policy.nproc_margin}
        request = {"token": token, "uid": uid, "cfg": cfg}
        try:
            with self._lock:
                if not self._alive_locked():
                    raise SandboxFault("the fork server is gone")
                assert self.control is not None
                try:
                    self.control.sendall(json.dumps(request).encode() + b"\n")
                except OSError as exc:
                    raise SandboxFault(f"the fork server is gone: {exc}") from exc
                reply = self._reply(_REPLY_TIMEOUT)
                if reply.get("kind") != "forked":
                    raise SandboxFault(f"the fork server failed: {reply.get('error') or 'no message'}")
                self.threads = reply.get("threads")
                try:
                    conns = self._accept_case(token, time.monotonic() + _REPLY_TIMEOUT)
                except (OSError, ValueError) as exc:  # (closed by stop() meanwhile)
                    raise SandboxFault(f"the fork server is gone: {exc}") from exc
        except BaseException:
            # A fork half made may hold a case inside: the whole lane goes, the next starts afresh.
            self.stop()
            uids.give_back(uid)
            raise
        stdin = io.BufferedWriter(_CaseStdin(conns[0].detach(), conns[4]))
        stdout, stderr = (os.fdopen(conns[i].detach(), "rb") for i in (1, 2))
        for f in (stdout, stderr):
            os.set_blocking(f.fileno(), False)
        process = CaseLink(conns[4], stdin, stdout, stderr, self)

        def teardown() -> dict[str, Any]:
            """Runs first in destroy: the case's processes and root are gone when it returns."""
            process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)  # (past it, the whole lane is stopped: CaseLink.wait)
            if not process.clean and self.alive():
                # Its leader could not see the case's processes gone and its root removed: they
                # may still run, under a uid a later case of this lane would get. The lane goes.
                log.warning("gVisor lane (runsc %d): a case did not end cleanly; stopping the lane", self.pid)
                self.stop()
            facts: dict[str, Any] = {"case_namespace_emptied": process.clean}
            if process.memory_peak is not None:
                # its leader ended it past SANDBOX__CASE_MEMORY_BYTES: the verdict is "memory",
                # as for a started case whose control group's OOM killer struck
                facts.update(oom_kills=1, memory_peak_bytes=process.memory_peak)
            return facts

        child = Child(process, conns[3].detach(), rs.NAME, self.seccomp, self.profile, uid, None,
                      time.monotonic(), None, max_message_bytes(sb), teardown=teardown, forked=True,
                      origin_alive=self.alive, leader_outlives_case=True)
        register(child)
        return child

    def stop(self) -> None:
        """End the sandbox, every case in it included, and remove the lane's directory."""
        self._stopped = True
        for sock in (self.control, self.listener):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()
        popen, held, self._held = self.popen, self._held, []
        if popen is not None:
            hosts = held + rs.pidfds(rs.descendants(popen.pid))
            rs.kill_and_wait([*hosts, *rs.pidfds([popen.pid])], reap=hosts)
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=10)
            if popen.stderr is not None:
                popen.stderr.close()
            rs.reap_orphans()
        if self.cgroup is not None:
            self.cgroup.remove()
            self.cgroup = None
        shutil.rmtree(self.lanedir, ignore_errors=True)

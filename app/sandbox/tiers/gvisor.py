"""The ``gvisor`` tier: each child runs behind a user-space kernel of its own (gVisor's ``runsc``),
so a system call of the case is answered by gVisor, never by the host's kernel; a bypass of the
seccomp deny-list then reaches gVisor's kernel, not the host's.

One ``runsc run`` per child on an OCI bundle (its policy: runsc.py) with the bubblewrap tier's minimal view of
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

import json
import os
import shutil
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any

from app.sandbox.child import harness_source
from app.sandbox.launch import (
    SANDBOX_UID,
    Child,
    SandboxFault,
    child_env,
    harness_cfg,
    max_message_bytes,
    register,
)
from app.sandbox.owners import CASE_PREFIX, owned_tempdir
from app.sandbox.plan import SITE_IN_SANDBOX, Plan
from app.sandbox.tiers import runsc as rs
from app.sandbox.tiers.gvisor_lane import GvisorZygote

if TYPE_CHECKING:
    from app.sandbox.cgroups import CgroupHost
    from app.sandbox.policy import Policy
    from app.sandbox.tier import Tier
    from app.sandbox.uids import UidPool
    from app.settings import SandboxSettings

REPORTER_UID = 65533  # the reporter inside; the candidate runs as SANDBOX_UID
RESULT_FD = 3  # the fd number the harness puts the result socket on
_SOCKET = "result.sock"


def _harness_config(sb: SandboxSettings, policy: Policy, profile: str) -> dict[str, Any]:
    """The shared harness config, with what differs behind gVisor's kernel."""
    # The runner's uid is this sandbox's alone (its own kernel): RLIMIT_NPROC counts the case;
    # the reporter's uid cannot signal the runner's, and the parent ends the whole sandbox, so
    # the reporter does not reap.
    cfg = harness_cfg(sb, profile, policy.seccomp, uid=SANDBOX_UID, result_fd=RESULT_FD)
    cfg.update(
        result_socket=f"{rs.RESULT_DIR}/{_SOCKET}",
        reporter_uid=REPORTER_UID,
        runner_uid=SANDBOX_UID,
        reap_all=False,
        nproc_margin=policy.nproc_margin,
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
    policy = rs.policy(plan, sb, seccomp)
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
        cfg = json.dumps(_harness_config(sb, policy, profile))
        args = [plan.python, "-I", "-S", "-B", "-c", harness_source(), cfg]
        config = rs.gvisor_spec(policy, rootfs=rs.rootfs(plan), result_dir=channel, args=args,
                                env=child_env(sb, "/tmp", "/tmp"))
        with open(os.path.join(bundle, "config.json"), "w") as out:
            json.dump(config, out)
        if cgroups is not None:
            cgroup = cgroups.create()
            cgroup.set_memory_limit(sb.warm_memory_bytes)  # until the case arms its own limits
            cgroup.set_task_limit(sb.warm_max_tasks + policy.host_tasks)
        argv = [*rs.runsc_prefix(plan, cgroup, policy), runsc, "--root", os.path.join(casedir, "state"),
                f"--platform={sb.gvisor_platform}", "--network=none", "--host-uds=open", "--ignore-cgroups",
                "run", "--bundle", bundle, os.path.basename(casedir)]
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env={"PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}, start_new_session=True)
        conn = rs.accept(listener, popen, sb.start_timeout_seconds)
    except BaseException:
        if popen is not None:
            hosts = rs.pidfds(rs.descendants(popen.pid))
            rs.kill_and_wait([*hosts, *rs.pidfds([popen.pid])], reap=hosts)
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
    first = rs.descendants(popen.pid)
    held = rs.pidfds(first)

    def teardown() -> dict[str, Any]:
        """Runs first in destroy: every host process of the sandbox is gone when it returns."""
        later = rs.descendants(popen.pid)
        hosts = held + rs.pidfds(later)
        left = rs.kill_and_wait([*hosts, *rs.pidfds([popen.pid])], reap=hosts)
        rs.reap_orphans()
        return {"host_pids": sorted({*first, *later, popen.pid}), "host_processes_left": left}

    for f in (popen.stdout, popen.stderr):
        assert f is not None
        os.set_blocking(f.fileno(), False)
    child = Child(popen, conn.detach(), rs.NAME, seccomp, profile, None, casedir, time.monotonic(), cgroup,
                  max_message_bytes(sb), teardown=teardown, extra_tasks=policy.host_tasks)
    register(child)
    return child



class GvisorTier:
    name = rs.NAME
    auto = False  # costs every case more, and needs root: used only when named
    shares_host = False
    guarantees = ("a user-space kernel (gVisor) between the case and the host's, with its own pid, IPC, UTS, "
                  "network and mount namespaces and the bubblewrap tier's minimal read-only view of the host")

    def policy(self, plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> Policy:
        return rs.policy(plan, sb, seccomp, fork_server=fork_server)

    def start(self, plan: Plan, sb: SandboxSettings, seccomp: bool, profile: str, uids: UidPool | None,
              cgroups: CgroupHost | None) -> Child:
        return spawn_gvisor(plan, sb, seccomp, profile, cgroups)

    def forkable(self, plan: Plan, seccomp: bool) -> bool:
        # Forks inside one gVisor sandbox per lane (gvisor_lane.py), with the deny-list, which
        # refuses the nested user namespaces a started child refuses otherwise.
        return seccomp and "runsc" in plan.tools

    def fork_server(self, plan: Plan, sb: SandboxSettings, seccomp: bool, profile: str,
                    cgroups: CgroupHost | None) -> GvisorZygote:
        return GvisorZygote(plan, sb, seccomp, profile, cgroups)

    def limits(self, cgroups: CgroupHost | None, forked: bool) -> str:
        # A fork inside a lane's gVisor sandbox has no host process of its own to put in a group:
        # rlimits (gVisor enforces them) bound it, and the lane's group the lane as a whole.
        if forked or cgroups is None:
            return "rlimits"
        return cgroups.name


TIER: Tier = GvisorTier()

"""The ``bubblewrap`` tier: each child in new user, pid, IPC, UTS, network, mount and cgroup
namespaces, seeing only the interpreter, the needed site-packages and the system libraries (all
read-only), a read-only /proc (with /proc/locks hidden) and /dev, and private size-capped tmpfs
/tmp and /dev/shm; the harness itself is pid 1, so no process of bubblewrap's own runs inside.
It shares the host's kernel only.

Its fork server (as root, with the deny-list, which refuses the nested user namespaces that a
started child refuses with ``--disable-userns``) runs as real root with the few capabilities it
needs to give each fork its own namespaces, mounts and dedicated uid of the host
(child/zygote.py); no user namespace of its own, so that each fork's uid is one of the host's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.sandbox.launch import SANDBOX_UID, Child, Launch, SandboxFault, child_env, launcher_prefix, spawn
from app.sandbox.plan import SITE_IN_SANDBOX, Plan
from app.sandbox.policy import Mount, Policy, bwrap_args, host_view
from app.sandbox.zygote import ForkSpec, Zygote

if TYPE_CHECKING:
    from app.sandbox.cgroups import CgroupHost
    from app.sandbox.tier import Tier
    from app.sandbox.uids import UidPool
    from app.settings import SandboxSettings

_NAMESPACES = frozenset({"pid", "net", "ipc", "uts", "cgroup"})
# What the fork server keeps to make each fork's namespaces, mounts and uid (child/zygote.py).
_FORK_SERVER_CAPS = ("CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN")


def _mountpoint_parents(plan: Plan) -> list[Mount]:
    """Run as root, bubblewrap makes the directories that hold the mountpoints 0700; the forks'
    dedicated uids must traverse them."""
    targets = [*(b.target for b in plan.system_binds), plan.prefix, *(b.target for b in plan.site_binds)]
    parents = {str(p) for t in targets for p in Path(t).parents if str(p) != "/"}
    return [Mount("dir", d, mode="0755") for d in sorted(parents, key=lambda p: p.count("/"))]


class BubblewrapTier:
    name = "bubblewrap"
    auto = True
    shares_host = False
    guarantees = (
        "its own user, pid, IPC, UTS, network, mount and cgroup namespaces; a read-only minimal view "
        "of the host; private size-capped /tmp and /dev/shm; the host's kernel is shared"
    )

    def policy(self, plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> Policy:
        mounts = [
            *(_mountpoint_parents(plan) if fork_server else []),
            *host_view(plan, staged=True),
            # /proc read-only: /proc/<pid>/mem cannot be opened for writing, whoever owns the pid.
            Mount("proc", "/proc"),
            # /proc/locks lists every file lock on the host: covered (no case takes a lock anyway,
            # child/channels.py). Bubblewrap binds it nodev, so it cannot even be opened.
            Mount("bind", "/proc/locks", source="/dev/null"),
            # /dev read-only with a size-capped shared-memory tmpfs (bubblewrap's /dev is itself an
            # unbounded tmpfs); tmpfs pages are charged to the case's memory group where there is one.
            Mount("dev", "/dev", inside=(Mount("tmpfs", "/dev/shm", read_only=False, size=sb.shm_bytes, mode="1777"),)),
            Mount("tmpfs", "/tmp", read_only=False, size=sb.tmpfs_bytes, mode="1777"),
        ]
        if fork_server:  # each fork mounts /tmp afresh and makes its directories itself
            return Policy(mounts=tuple(mounts), namespaces=_NAMESPACES, seccomp=seccomp, caps=_FORK_SERVER_CAPS)
        mounts += [Mount("dir", "/tmp/work"), Mount("dir", "/tmp/home")]
        # No nested user namespace (--disable-userns), even where seccomp is off.
        return Policy(
            mounts=tuple(mounts), namespaces=_NAMESPACES | {"user"}, seccomp=seccomp, uid=SANDBOX_UID, cwd="/tmp/work"
        )

    def _bwrap(self, plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> list[str]:
        if "bwrap" not in plan.tools:
            raise SandboxFault("bubblewrap is not installed")
        return bwrap_args(self.policy(plan, sb, seccomp, fork_server=fork_server), plan.tools["bwrap"])

    def start(
        self,
        plan: Plan,
        sb: SandboxSettings,
        seccomp: bool,
        profile: str,
        uids: UidPool | None,
        cgroups: CgroupHost | None,
    ) -> Child:
        def launch(prefix: list[str], uid: int | None) -> Launch:
            return Launch(
                argv=[*prefix, *self._bwrap(plan, sb, seccomp), plan.python],
                env=child_env(sb, "/tmp/home", "/tmp"),
                sys_path=[SITE_IN_SANDBOX],
            )

        return spawn(plan, sb, self.name, seccomp, profile, uids, cgroups, launch)

    def forkable(self, plan: Plan, seccomp: bool) -> bool:
        return seccomp and "bwrap" in plan.tools

    def fork_server(
        self, plan: Plan, sb: SandboxSettings, seccomp: bool, profile: str, cgroups: CgroupHost | None
    ) -> Zygote:
        argv = [*launcher_prefix(plan, None), *self._bwrap(plan, sb, seccomp, fork_server=True), plan.python]
        spec = ForkSpec(
            tier=self.name,
            argv=argv,
            env=child_env(sb, "/tmp/home", "/tmp"),
            sys_path=[SITE_IN_SANDBOX],
            fork="namespaces",
            leader_outlives_case=True,
        )
        return Zygote(plan, sb, spec, seccomp, profile)

    def limits(self, cgroups: CgroupHost | None, forked: bool) -> str:
        return cgroups.name if cgroups is not None else "rlimits"


TIER: Tier = BubblewrapTier()

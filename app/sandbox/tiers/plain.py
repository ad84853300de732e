"""The ``plain`` tier: a scrubbed ``python -I`` child with private working, home and temporary
directories, and nothing else between it and the host: it shares the host's kernel, filesystem
(read-only where its uid may not write), network (the seccomp deny-list refuses sockets) and
process table. When the service is root it runs under a dedicated uid in a control group of its
own, and what that uid leaves in the host's shared places is removed after the case
(leftovers.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.sandbox.launch import Child, Launch, case_dirs, child_env, launcher_prefix, spawn
from app.sandbox.zygote import ForkSpec, Zygote

if TYPE_CHECKING:
    from app.sandbox.cgroups import CgroupHost
    from app.sandbox.plan import Plan
    from app.sandbox.policy import Policy
    from app.sandbox.tier import Tier
    from app.sandbox.uids import UidPool
    from app.settings import SandboxSettings


class PlainTier:
    name = "plain"
    auto = True
    shares_host = True
    guarantees = (
        "a dedicated uid (as root), rlimits or a control group, the seccomp deny-list and channel "
        "filter; the host's kernel, filesystem, network and processes are shared"
    )

    def policy(self, plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> Policy | None:
        return None  # nothing mounted or unshared: the child is a process of the host's

    def _launch(self, plan: Plan, sb: SandboxSettings, prefix: list[str], uid: int | None) -> Launch:
        workdir, paths = case_dirs(uid)
        return Launch(
            argv=[*prefix, plan.visible(plan.python)],
            env=child_env(sb, paths["home"], paths["tmp"]),
            cwd=paths["work"],
            sys_path=[plan.visible(d) for d in plan.site_dirs],
            workdir=workdir,
        )

    def start(
        self,
        plan: Plan,
        sb: SandboxSettings,
        seccomp: bool,
        profile: str,
        uids: UidPool | None,
        cgroups: CgroupHost | None,
    ) -> Child:
        return spawn(
            plan,
            sb,
            self.name,
            seccomp,
            profile,
            uids,
            cgroups,
            lambda prefix, uid: self._launch(plan, sb, prefix, uid),
            host_residue=True,
        )

    def forkable(self, plan: Plan, seccomp: bool) -> bool:
        return True

    def fork_server(
        self, plan: Plan, sb: SandboxSettings, seccomp: bool, profile: str, cgroups: CgroupHost | None
    ) -> Zygote:
        spec = ForkSpec(
            tier=self.name,
            argv=[*launcher_prefix(plan, None), plan.visible(plan.python)],
            env=child_env(sb, "/nonexistent", "/nonexistent"),  # each fork sets its own
            sys_path=[plan.visible(d) for d in plan.site_dirs],
            fork="directories",
            host_residue=True,
        )
        return Zygote(plan, sb, spec, seccomp, profile)

    def limits(self, cgroups: CgroupHost | None, forked: bool) -> str:
        return cgroups.name if cgroups is not None else "rlimits"


TIER: Tier = PlainTier()

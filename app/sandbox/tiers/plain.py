"""The ``plain`` tier: a scrubbed ``python -I`` child with private working, home and temporary
directories, and no namespace of its own: it shares the host's kernel, network (the seccomp
deny-list refuses sockets) and process table. When the service is root it runs under a dedicated
uid in a control group of its own, and what that uid leaves in the host's shared places is removed
after the case (leftovers.py).

What it may open of the host's filesystem is its ``Policy``: the bubblewrap tier's view of the
host (policy.host_view: the interpreter's prefix, the configured packages' own site-packages
entries, the system libraries), /proc read-only, bubblewrap's few devices of /dev, and its own
three directories. Having
no mount namespace to show only that, the policy is rendered into Landlock rules
(policy.landlock_rules) that every process of the case is held to (child/landlock.py), where the
kernel offers Landlock (``Plan.landlock_abi``); elsewhere the case reads whatever its uid may
read on the host, and the sandbox's status says so."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from app.sandbox.launch import Child, Launch, SandboxFault, case_dirs, child_env, launcher_prefix, spawn
from app.sandbox.policy import Mount, Policy, host_view, landlock_rules
from app.sandbox.zygote import ForkSpec, Zygote

if TYPE_CHECKING:
    from app.sandbox.cgroups import CgroupHost
    from app.sandbox.plan import Plan
    from app.sandbox.tier import Tier
    from app.sandbox.uids import UidPool
    from app.settings import SandboxSettings


class PlainTier:
    name = "plain"
    auto = True
    shares_host = True
    guarantees = (
        "a dedicated uid (as root), rlimits or a control group, the seccomp deny-list and channel "
        "filter; where the kernel offers Landlock (sandbox.landlock), it opens only the interpreter, "
        "the packages, the system libraries, /proc, /dev/null and its like and its own directories; the "
        "host's kernel, network and processes are shared"
    )

    # Its children apply Landlock rules (the pool reports whether the kernel enforces them).
    uses_landlock = True

    def policy(self, plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> Policy:
        return self._view(plan, seccomp)

    def _view(self, plan: Plan, seccomp: bool) -> Policy:
        """What a case may open: the bubblewrap tier's view of the host where the host has it (no
        bind is made: each ``source`` is opened in place, staged where a dedicated uid could not
        reach it), its sys.path (a directory of links to the configured packages' entries, plan.py)
        listed, /proc read-only, the devices of bubblewrap's minimal /dev. Nothing is unshared.
        The case's own directories are added per case (``case_policy``)."""
        mounts = [
            *host_view(plan, staged=True),
            Mount("dir", self._site_view(plan)),
            Mount("proc", "/proc"),
            Mount("dev", "/dev"),
        ]
        return Policy(mounts=tuple(mounts), namespaces=frozenset(), seccomp=seccomp, read_only_root=False)

    @staticmethod
    def _site_view(plan: Plan) -> str:
        if plan.site_view is None:
            raise SandboxFault("the plan has no site-packages view for the plain tier")
        return plan.site_view

    def case_policy(self, plan: Plan, sb: SandboxSettings, seccomp: bool, paths: dict[str, str]) -> Policy:
        """policy, with the case's working, home and temporary directories writable."""
        policy = self._view(plan, seccomp)
        own = (Mount("bind", p, source=p, read_only=False) for p in (paths["work"], paths["home"], paths["tmp"]))
        return replace(policy, mounts=(*policy.mounts, *own), cwd=paths["work"])

    def landlock(self, plan: Plan, sb: SandboxSettings, seccomp: bool, paths: dict[str, str]) -> dict[str, Any]:
        """The harness's Landlock configuration for one case (child/landlock.py): its rules, and
        whether the child must stop rather than run without them (the kernel offers Landlock)."""
        rules = landlock_rules(self.case_policy(plan, sb, seccomp, paths))
        return {"landlock": {"rules": rules, "require": plan.landlock_abi > 0}}

    def _launch(self, plan: Plan, sb: SandboxSettings, seccomp: bool, prefix: list[str], uid: int | None) -> Launch:
        workdir, paths = case_dirs(uid)
        return Launch(
            argv=[*prefix, plan.visible(plan.python)],
            env=child_env(sb, paths["home"], paths["tmp"]),
            cwd=paths["work"],
            sys_path=[self._site_view(plan)],
            workdir=workdir,
            harness=self.landlock(plan, sb, seccomp, paths),
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
            lambda prefix, uid: self._launch(plan, sb, seccomp, prefix, uid),
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
            sys_path=[self._site_view(plan)],
            fork="directories",
            host_residue=True,
            case_cfg=lambda paths: self.landlock(plan, sb, seccomp, paths),
        )
        return Zygote(plan, sb, spec, seccomp, profile)

    def limits(self, cgroups: CgroupHost | None, forked: bool) -> str:
        return cgroups.name if cgroups is not None else "rlimits"


TIER: Tier = PlainTier()

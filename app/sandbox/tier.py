"""What an isolation tier is to the rest of the sandbox: one object per tier (one module each in
tiers/), ranked and named in one list (``app.settings.TIER_ORDER``), found by name (tiers/).

The pool probes a tier by starting a child with ``start`` and running a case in it; warm
children come from ``start`` or, where ``forkable``, from the tier's ``fork_server``; ``limits``
says what bounds a case as a whole; ``policy`` is the tier's view of the host and its limits as
data (policy.py), rendered into the tier's command line or runtime spec."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from app.sandbox.cgroups import CgroupHost
    from app.sandbox.launch import Child, Process
    from app.sandbox.plan import Plan
    from app.sandbox.policy import Policy
    from app.sandbox.uids import UidPool
    from app.settings import SandboxSettings


class ForkServer(Protocol):
    """A long-lived process of a tier and profile that forks each case's child (zygote.py)."""

    @property
    def popen(self) -> Process | None: ...

    def alive(self) -> bool: ...
    def fork_child(self, uids: UidPool, cgroups: CgroupHost | None) -> Child: ...
    def stop(self) -> None: ...


class Tier(Protocol):
    # As SANDBOX__TIER and MIN_TIER name it (and the start of a case's ``sandbox_tier``).
    name: str
    # Tried by SANDBOX__TIER=auto; a tier that costs every case more (or needs root) is used only
    # when named.
    auto: bool
    # Whether the candidate shares the host's filesystem, network and process table (a
    # multi-tenant service then refuses it without the operator's consent: stop.py).
    shares_host: bool
    # What it guarantees, in a sentence (the docs and /readyz's probe report).
    guarantees: str

    def policy(self, plan: Plan, sb: SandboxSettings, seccomp: bool, *, fork_server: bool = False) -> Policy | None:
        """Its mounts, namespaces, uid, capabilities and limits as data; None where it has none
        to render (the plain tier)."""
        ...

    def start(
        self,
        plan: Plan,
        sb: SandboxSettings,
        seccomp: bool,
        profile: str,
        uids: UidPool | None,
        cgroups: CgroupHost | None,
    ) -> Child:
        """A child started afresh (a new interpreter), not yet ready (launch.wait_ready)."""
        ...

    def forkable(self, plan: Plan, seccomp: bool) -> bool:
        """Whether a fork of its fork server keeps every guarantee of a started child (the
        service is root: ForkServers checks that, and the launcher setting, first)."""
        ...

    def fork_server(
        self, plan: Plan, sb: SandboxSettings, seccomp: bool, profile: str, cgroups: CgroupHost | None
    ) -> ForkServer:
        """A started fork server for profile (raises SandboxFault when it cannot start)."""
        ...

    def limits(self, cgroups: CgroupHost | None, forked: bool) -> str:
        """What bounds a case as a whole: the control-group flavour's name, or ``rlimits``."""
        ...

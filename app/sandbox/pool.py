"""The process-wide sandbox: tier probe, warm pool, and the one call graders use.

A warm child has already started Python inside its isolation tier and imported numpy (and JAX,
for the ``jax`` profile); it waits for exactly one case, is destroyed afterwards, and a
background thread starts its replacement. Fresh-process-per-case semantics are unchanged: no two
cases ever share a process, a uid or a working directory."""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.sandbox.cgroups import CgroupHost, close_shared_cgroup_host, shared_cgroup_host
from app.sandbox.executor import CaseRun, case_request, run_in_child
from app.sandbox.health import record_start, use_health_file
from app.sandbox.launch import PROFILES, Child, SandboxFault, destroy, destroy_all, wait_ready
from app.sandbox.owners import remove_stale_dirs
from app.sandbox.plan import Plan, build_plan
from app.sandbox.tiers import auto_tiers, get_tier
from app.sandbox.uids import UidPool, shared_uid_pool
from app.sandbox.zygote import ForkServers

if TYPE_CHECKING:
    from app.sandbox.tier import Tier
    from app.settings import SandboxSettings

log = logging.getLogger(__name__)
_PROBE_SOURCE = "def probe(a, b):\n    return a * b\n"
_REPROBE_AFTER_SECONDS = 30.0


@dataclass(frozen=True)
class Candidate:
    """A tier with or without the seccomp deny-list: what is probed, and then in force."""

    tier: Tier
    seccomp: bool

    @property
    def isolation(self) -> str:
        return self.tier.name

    @property
    def name(self) -> str:
        return self.tier.name + ("+seccomp" if self.seccomp else "")


def candidate_tiers(sb: SandboxSettings) -> list[Candidate]:
    """Tiers to try, strongest first, as far as the settings allow (``auto``: see tiers/)."""
    tiers = auto_tiers() if sb.tier == "auto" else [get_tier(sb.tier)]
    seccomps = {"auto": [True, False], "require": [True], "off": [False]}[sb.seccomp]
    return [Candidate(t, s) for t in tiers for s in seccomps]


class Sandbox:
    def __init__(self, sb: SandboxSettings) -> None:
        self.settings = sb
        self._plan: Plan | None = None
        self._uids: UidPool | None = None
        self._cgroups: CgroupHost | None = None
        self._tier: Candidate | None = None
        self._probe_report: list[dict[str, Any]] = []
        self._probe_failed: tuple[float, str] | None = None  # when and why no tier started
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._warm: dict[str, deque[Child]] = {}
        self._starting: dict[str, int] = {}
        self._closed = False
        self._refiller: threading.Thread | None = None
        self._forkservers = ForkServers(sb)
        # However many grades run at once, the host runs at most this many cases.
        self._slots = threading.BoundedSemaphore(sb.max_concurrent_cases)
        if sb.health_file is not None:
            use_health_file(sb.health_file)

    # ------------------------------------------------------------------ tier

    def _ensure_plan(self) -> Plan:
        if self._plan is None:
            removed = remove_stale_dirs()  # left by a service that was killed
            if removed:
                log.info("removed %d sandbox directories of stopped services", len(removed))
            self._plan = build_plan(self.settings.python, self.settings.packages)
            if self._plan.is_root:
                self._uids = shared_uid_pool(self.settings.uid_base, self.settings.uid_count)
                if self.settings.cgroups == "auto":
                    self._cgroups = shared_cgroup_host(idle_cpu=self.settings.idle_cpu)
        return self._plan

    @property
    def limits(self) -> str:
        """What bounds a case as a whole: a control group per case, or per-process rlimits (the
        tier in force says which, for the way its children start)."""
        if self._tier is None:
            return self._cgroups.name if self._cgroups is not None else "rlimits"
        return self._tier.tier.limits(self._cgroups, forked=self.launcher == "forkserver")

    @property
    def launcher(self) -> str:
        """How children of the tier in force start: ``forkserver`` or ``exec`` (see zygote.py)."""
        tier, plan = self._tier, self._plan
        if tier is None or plan is None or not self._forkservers.serving(plan, tier.tier, tier.seccomp):
            return "exec"
        return "forkserver"

    def _spawn(self, tier: Candidate, profile: str) -> Child:
        """A child forked by the tier's fork server where one serves, else a started one."""
        plan = self._ensure_plan()
        forked = self._forkservers.spawn(plan, tier.tier, tier.seccomp, profile, self._uids, self._cgroups)
        if forked is not None:
            return forked
        return self._start(tier, profile)

    def _start(self, tier: Candidate, profile: str) -> Child:
        """A child started for tier (a new interpreter; in the gvisor tier, a new gVisor sandbox)."""
        plan = self._ensure_plan()
        return tier.tier.start(plan, self.settings, tier.seccomp, profile, self._uids, self._cgroups)

    def _probe_one(self, tier: Candidate) -> None:
        # Always a started interpreter: the probe is what shows that the tier works on this host.
        child = self._start(tier, "bare")
        try:
            wait_ready(child, self.settings.start_timeout_seconds)
            request = case_request(_PROBE_SOURCE, "probe", [6, 7], {}, self.settings)
            run = run_in_child(child, request, self.settings)
        finally:
            destroy(child, self._uids)
        result = (run.final or {}).get("result") or {}
        if run.status != "finished" or result.get("value") != 42:
            raise SandboxFault(run.fault or f"probe case ended {run.status}")
        if bool((run.armed or {}).get("seccomp")) != tier.seccomp:
            raise SandboxFault("seccomp was not applied")
        expected = self._landlock_expected(tier)
        if expected is not None and ((run.armed or {}).get("landlock") or {}).get("abi", 0) != expected:
            raise SandboxFault(f"Landlock ABI {expected} was not applied")

    def _landlock_expected(self, tier: Candidate) -> int | None:
        """The Landlock ABI a child of tier applies (the plain tier: the kernel's, 0 where it has
        none), or None for a tier that does not use it."""
        if not getattr(tier.tier, "uses_landlock", False) or self._plan is None:
            return None
        return self._plan.landlock_abi

    @property
    def landlock(self) -> dict[str, Any] | None:
        """Whether Landlock confines the cases of the tier in force (the plain tier), and why not;
        None for a tier that does not use it (its mount namespace shows the case little)."""
        tier = self._tier
        expected = self._landlock_expected(tier) if tier is not None else None
        if expected is None or self._plan is None:
            return None
        return {"in_force": expected > 0, "abi": expected, "reason": self._plan.landlock_missing}

    def tier(self) -> Candidate:
        """The strongest tier whose probe child really ran a case (probed once)."""
        with self._lock:
            if self._tier is not None:
                return self._tier
            if self._probe_failed and time.monotonic() - self._probe_failed[0] < _REPROBE_AFTER_SECONDS:
                raise SandboxFault(self._probe_failed[1])  # fail fast instead of re-probing per case
            report = []
            for tier in candidate_tiers(self.settings):
                try:
                    self._probe_one(tier)
                except (SandboxFault, OSError, RuntimeError) as exc:
                    report.append({"tier": tier.name, "ok": False, "error": str(exc)[:300]})
                    continue
                report.append({"tier": tier.name, "ok": True})
                self._tier = tier
                break
            self._probe_report = report
            if self._tier is None:
                why = "no sandbox tier can start a child: " + "; ".join(
                    f"{r['tier']}: {r.get('error')}" for r in report)
                self._probe_failed = (time.monotonic(), why)
                raise SandboxFault(why)
            log.info("sandbox tier in force: %s (case limits: %s; children: %s)", self._tier.name, self.limits,
                     self.launcher)
            _report_landlock(self._tier, self.landlock)
            return self._tier

    def status(self) -> dict[str, Any]:
        try:
            tier = self.tier().name
            ok = True
        except SandboxFault:
            tier, ok = None, False
        with self._lock:
            warm = {p: len(q) for p, q in self._warm.items()}
        return {"ok": ok, "tier": tier, "limits": self.limits, "launcher": self.launcher,
                "idle_cpu": self._cgroups is not None and self._cgroups.idle_group is not None,
                "guarantees": self._tier.tier.guarantees if self._tier is not None else None,
                "landlock": self.landlock, "probes": list(self._probe_report), "warm": warm}

    # ------------------------------------------------------------------ warm pool

    def _spawn_ready(self, profile: str) -> Child:
        try:
            child = self._spawn(self.tier(), profile)
            try:
                wait_ready(child, self.settings.start_timeout_seconds)
            except BaseException:
                destroy(child, self._uids)
                raise
        except (SandboxFault, OSError, RuntimeError) as exc:
            record_start(False, str(exc))  # the worker's health (health.py) counts the streak
            raise
        record_start(True)
        return child

    def _refill_loop(self) -> None:
        failures = 0
        while True:
            with self._cv:
                while not self._closed and not self._needy():
                    self._cv.wait()
                if self._closed:
                    return
                profile = self._needy()
                assert profile is not None
                self._starting[profile] = self._starting.get(profile, 0) + 1
            try:
                child = self._spawn_ready(profile)
            except (SandboxFault, OSError, RuntimeError) as exc:
                if self._closed:  # shutting down: the interpreter may be half torn down
                    return
                failures += 1
                log.warning("warm child for %s failed to start: %s", profile, exc)
                child = None
                time.sleep(min(5.0, 0.1 * 2**failures))
            with self._cv:
                self._starting[profile] -= 1
                if child is not None:
                    failures = 0
                    if self._closed:
                        destroy(child, self._uids)
                        return
                    self._warm[profile].append(child)
                    self._cv.notify_all()

    def _needy(self) -> str | None:
        for profile, queue in self._warm.items():
            if len(queue) + self._starting.get(profile, 0) < self.settings.warm_pool_size:
                return profile
        return None

    def _start_refiller(self) -> None:
        # Called with the lock held. The thread lives as long as the sandbox: bubblewrap's
        # --die-with-parent follows the *thread* that started a child, so it must not exit.
        if self._refiller is None and self.settings.warm_pool_size > 0:
            self._refiller = threading.Thread(target=self._refill_loop, name="sandbox-refill", daemon=True)
            self._refiller.start()

    def _take(self, profile: str) -> Child:
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}")
        stale: list[Child] = []
        with self._cv:
            if self._closed:
                raise SandboxFault("the sandbox is shut down")
            queue = self._warm.setdefault(profile, deque())
            self._start_refiller()
            child = None
            while queue and child is None:
                child = queue.popleft()
                # Died while idle (OOM killer, operator), or about to: forked by a fork server
                # that has died since (its forks follow it out).
                if child.popen.poll() is not None or child.fork_server_gone():
                    stale.append(child)
                    child = None
            self._cv.notify_all()
        for dead in stale:
            destroy(dead, self._uids)
        if child is not None:
            return child
        return self._spawn_ready(profile)  # cold start: nothing warm right now

    def prewarm(self, profile: str, timeout: float = 120.0) -> None:
        """Block until the pool holds warm children for profile (benchmarks, start-up)."""
        self.tier()
        with self._cv:
            self._warm.setdefault(profile, deque())
            self._start_refiller()
            self._cv.notify_all()
            self._cv.wait_for(lambda: len(self._warm[profile]) >= self.settings.warm_pool_size, timeout)

    # ------------------------------------------------------------------ the one call

    def run(self, source: str, entry: str, args: list[Any], kwargs: dict[str, Any] | None = None,
            profile: str = "numpy") -> CaseRun:
        """Run source's entry(*args, **kwargs) in a fresh isolated child. Never raises for
        sandbox trouble: a child that cannot start is a ``sandbox_fault`` run."""
        request = case_request(source, entry, args, kwargs or {}, self.settings)
        with self._slots:
            return self._run(request, profile)

    def _run(self, request: bytes, profile: str) -> CaseRun:
        run = CaseRun("sandbox_fault")
        # One retry: a fault happens before any candidate code runs, so a second child is safe
        # and keeps one unlucky child (killed while idle, say) from costing a grade.
        for _attempt in range(2):
            try:
                child = self._take(profile)
            except (SandboxFault, OSError, RuntimeError) as exc:
                tier = self._tier.name if self._tier else "none"
                return CaseRun("sandbox_fault", fault=str(exc)[:500], tier=tier)
            facts: dict[str, Any] = {}
            try:
                run = run_in_child(child, request, self.settings)
            finally:
                facts = destroy(child, self._uids)
            run.extra.update(facts)
            run.extra["uid"] = child.uid
            run.extra["launcher"] = "forkserver" if child.forked else "exec"
            if run.status == "crashed" and child.fork_server_gone():
                # A warm fork whose fork server was killed (operator, OOM killer) dies with it,
                # possibly after it took the case: the sandbox's failure, never the candidate's.
                run.status, run.final = "sandbox_fault", None
                run.fault = "the fork server that forked the child died during the case"
            if run.status != "sandbox_fault":
                break
            log.warning("sandbox fault, retrying the case once: %s", run.fault)
        return run

    def shutdown(self) -> None:
        with self._cv:
            self._closed = True
            children = [c for q in self._warm.values() for c in q]
            for q in self._warm.values():
                q.clear()
            self._cv.notify_all()
        for child in children:
            with contextlib.suppress(Exception):
                destroy(child, self._uids)
        self._forkservers.stop()
        if self._plan is not None:
            self._plan.cleanup()


_landlock_reported: set[bool] = set()


def _report_landlock(tier: Candidate, landlock: dict[str, Any] | None) -> None:
    """Say once per process, in the log, whether Landlock confines the plain tier's cases."""
    if landlock is None or landlock["in_force"] in _landlock_reported:
        return
    _landlock_reported.add(landlock["in_force"])
    if landlock["in_force"]:
        log.info("%s: Landlock ABI %d confines each case to the interpreter, the packages, the system "
                 "libraries and its own directories", tier.name, landlock["abi"])
    else:
        log.warning("%s without Landlock (%s): a case reads whatever its uid may read on this host, the "
                    "service's own source included", tier.name, landlock["reason"])


def plain_tier_refusal(box: Sandbox, multi_tenant: bool) -> str | None:
    """Why this service must not start with the tier in force, or None. A multi-tenant service
    (a tenants file) runs hostile code of many parties: a tier that shares the host's
    filesystem, network and process table (the plain tier) needs the operator's explicit consent."""
    if not multi_tenant or box.settings.allow_plain:
        return None
    tier = box.tier()
    if not tier.tier.shares_host:
        return None
    return (f"the sandbox tier in force is {tier.name}: submitted code would share this host's "
            "filesystem, network and processes. Install bubblewrap (and allow unprivileged user "
            "namespaces), or set SCALING_GRADER_SANDBOX__ALLOW_PLAIN=true to accept the plain tier.")


_instances: dict[str, Sandbox] = {}
_instances_lock = threading.Lock()


def get_sandbox(sb: SandboxSettings) -> Sandbox:
    """The process-wide sandbox for these settings, created on first use."""
    key = sb.model_dump_json()
    with _instances_lock:
        box = _instances.get(key)
        if box is None:
            box = _instances[key] = Sandbox(sb)
        return box


@atexit.register
def shutdown_all() -> None:
    with _instances_lock:
        boxes = list(_instances.values())
        _instances.clear()
    for box in boxes:
        box.shutdown()
    destroy_all(None)  # children of cases still running when the stop came
    close_shared_cgroup_host()

"""Sandboxes for the tests: every tier this machine really offers (each probed by running a
child), with short limits so that the time-outs in the adversarial suite cost seconds."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import pytest

from app.sandbox.child.landlock import kernel_abi
from app.sandbox.launch import SandboxFault
from app.sandbox.pool import Sandbox, get_sandbox
from app.settings import SandboxSettings

SHORT_LIMITS = {
    "wall_seconds": 3.0,
    "cpu_seconds": 1.0,
    "address_space_bytes": 512 * 1024**2,
    "max_output_bytes": 256 * 1024,
    "max_result_items": 100_000,
    "max_processes": 16,
    "case_memory_bytes": 1024**3,  # the whole case, where a control group holds it
    "warm_pool_size": 2,
    "start_timeout_seconds": 90.0,
}
ALL_TIERS = ("gvisor+seccomp", "gvisor", "bubblewrap+seccomp", "bubblewrap", "plain+seccomp", "plain")
# Tiers whose case has a filesystem, process table and network of its own (not the host's).
PRIVATE_TIERS = ("gvisor", "bubblewrap")
# Whether this kernel offers Landlock, which confines a plain case's files (tiers/plain.py).
LANDLOCK = kernel_abi()[0] > 0


def files_confined(tier: str) -> bool:
    """Whether a case of tier opens only the interpreter, the packages, the system libraries,
    /proc, /dev and its own directories: a private tier's view, or Landlock in the plain tier."""
    return tier.startswith(PRIVATE_TIERS) or (tier.startswith("plain") and LANDLOCK)


class LaunchedTier(str):
    """A tier's name (what the suites compare and print) that also says how its children start:
    ``exec`` (a fresh interpreter per case) or ``forkserver`` (forked from a zygote)."""

    launcher: str

    def __new__(cls, name: str, launcher: str) -> LaunchedTier:
        tier = super().__new__(cls, name)
        tier.launcher = launcher
        return tier

    @property
    def id(self) -> str:
        return f"{self}-{self.launcher}"


def tier_settings(tier: str, *, guards: bool = True, **overrides: object) -> SandboxSettings:
    isolation, _, extra = tier.partition("+")
    fields = {"launcher": getattr(tier, "launcher", "forkserver"), **SHORT_LIMITS, **overrides}
    return SandboxSettings(
        tier=isolation, seccomp="require" if extra == "seccomp" else "off",
        python_guards=guards, **fields,  # type: ignore[arg-type]
    )


# Probing starts a child per tier and launcher: seconds each on a loaded machine. A run whose -m
# leaves out the tier-parametrised tests (all marked slow and serial) skips it (tests/conftest.py),
# and under pytest -n the controller probes once and hands the result to every worker, so all
# workers collect the same tests.
_probe = {"wanted": True}
_probed: dict[str, Any] = {}


def skip_probing() -> None:
    """No tier is offered in this run: its tier-parametrised tests are all deselected."""
    _probe["wanted"] = False


def probed() -> dict[str, Any]:
    """The probe's result, to hand to another process (`use_probed`)."""
    return {"offered": list(offered_tiers()), "launched": [[str(t), t.launcher] for t in launched_tiers()]}


def use_probed(result: dict[str, Any]) -> None:
    _probed.update(offered=tuple(result["offered"]),
                   launched=tuple(LaunchedTier(name, launcher) for name, launcher in result["launched"]))


@functools.cache
def offered_tiers() -> tuple[str, ...]:
    """Tiers whose probe child ran a case on this machine."""
    if "offered" in _probed:
        return _probed["offered"]  # type: ignore[no-any-return]
    if not _probe["wanted"]:
        return ()
    offered = []
    for tier in ALL_TIERS:
        try:
            get_sandbox(tier_settings(tier)).tier()
        except SandboxFault:
            continue
        offered.append(tier)
    return tuple(offered)


@functools.cache
def launched_tiers() -> tuple[LaunchedTier, ...]:
    """Every offered tier with a fresh interpreter per case, and again forked from a zygote
    where the fork server serves that tier on this machine."""
    if "launched" in _probed:
        return _probed["launched"]  # type: ignore[no-any-return]
    out = []
    for tier in offered_tiers():
        exec_tier = LaunchedTier(tier, "exec")
        get_sandbox(tier_settings(exec_tier)).tier()  # probed, as the fork server's box is
        out.append(exec_tier)
        if forked_tier(tier):
            out.append(LaunchedTier(tier, "forkserver"))
    return tuple(out)


def forked_tier(tier: str) -> bool:
    box = get_sandbox(tier_settings(LaunchedTier(tier, "forkserver")))
    box.tier()
    return box.launcher == "forkserver"


def fork_tiers() -> tuple[LaunchedTier, ...]:
    return tuple(t for t in launched_tiers() if t.launcher == "forkserver")


# The two launchers run the same harness (Python guards, result channel, value encoding) under the
# same service-side limits (output cap, result size); they differ only in how a case's process is
# made: uid, namespaces, rlimits, control group, inherited fds and environment. These attacks meet
# only the shared part, so on a forked tier they run on the fork server (the default launcher) and
# not again with a fresh interpreter; gVisor's tiers, never forked, run them with theirs.
LAUNCHER_NEUTRAL = frozenset({"output_flood_100mb", "return_nan", "return_huge_list", "lying_eq",
                              "monkeypatch_builtins_and_harness"})


# The seccomp filter acts only on the calls of its deny-list (app/sandbox/child/seccomp.py), and on
# clone3, which it refuses so that libc makes the same process or thread with clone. An attack
# that makes none of those calls meets exactly the same sandbox with the filter and without it:
# on a tier without the filter whose twin with the filter (same isolation, same launcher) runs
# in the same test, it is not run again. What the filter takes part in stopping (sockets, ptrace, namespaces,
# io_uring) still runs on every tier, with and without it, as does everything on a machine where
# no tier has the filter. Tests marked `filter_neutral` follow the same rule (tests/sandbox/conftest.py).
FILTER_NEUTRAL = frozenset({
    "fork_bomb", "memory_bomb", "infinite_loop", "cpu_spin_threads", "sleep_past_wall", "output_flood_100mb",
    "fill_disk", "read_etc_shadow", "read_service_source", "read_settings_file", "read_environment",
    "read_service_environ", "write_outside_workdir", "spawn_subprocess", "signal_service", "kill_own_reporter",
    "ctypes_libc_setuid", "background_process", "forge_result_on_every_fd", "close_all_fds", "return_nan",
    "return_huge_list", "lying_eq", "monkeypatch_builtins_and_harness",
})


def without_filtered_twins(tiers: Iterable[str]) -> list[Any]:
    """tiers, less each one without the seccomp filter whose twin with it (same isolation, same
    launcher where the tiers name one) is among them: what a filter-neutral attack or test runs on."""
    tiers = list(tiers)
    present = {(str(t), getattr(t, "launcher", None)) for t in tiers}
    return [t for t in tiers
            if t.endswith("+seccomp") or (f"{t}+seccomp", getattr(t, "launcher", None)) not in present]


def attack_matrix(tiers: Iterable[LaunchedTier], attacks: Iterable[Any], *, neutral: Iterable[str] = ()) -> list[Any]:
    """(tier, attack) parameters: every attack on every tier's default launcher, and on the exec
    launcher of a forked tier unless the attack is launcher-neutral (LAUNCHER_NEUTRAL, or the
    extra names given: attacks the Python guards stop before the process layer is reached); on
    a tier without the seccomp filter, unless the attack is filter-neutral and the tier's twin
    with the filter runs it (FILTER_NEUTRAL)."""
    skip = LAUNCHER_NEUTRAL | set(neutral)
    forked = {str(t) for t in fork_tiers()}
    tiers, attacks = list(tiers), list(attacks)
    neutral_ok = {t.id for t in without_filtered_twins(tiers)}
    return [pytest.param(t, a, id=f"{t.id}-{a.name}") for t in tiers for a in attacks
            if not (t.launcher == "exec" and t in forked and a.name in skip)
            and (a.name not in FILTER_NEUTRAL or t.id in neutral_ok)]


def box_for(tier: str, *, guards: bool = True) -> Sandbox:
    return get_sandbox(tier_settings(tier, guards=guards))

"""Sandboxes for the tests: every tier this machine really offers (each probed by running a
child), with short limits so that the time-outs in the adversarial suite cost seconds."""

from __future__ import annotations

import functools

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


def tier_settings(tier: str, *, guards: bool = True, **overrides: object) -> SandboxSettings:
    isolation, _, extra = tier.partition("+")
    fields = {**SHORT_LIMITS, **overrides}
    return SandboxSettings(
        tier=isolation, seccomp="require" if extra == "seccomp" else "off",
        python_guards=guards, **fields,  # type: ignore[arg-type]
    )


@functools.cache
def offered_tiers() -> tuple[str, ...]:
    """Tiers whose probe child ran a case on this machine."""
    offered = []
    for tier in ALL_TIERS:
        try:
            get_sandbox(tier_settings(tier)).tier()
        except SandboxFault:
            continue
        offered.append(tier)
    return tuple(offered)


def box_for(tier: str, *, guards: bool = True) -> Sandbox:
    return get_sandbox(tier_settings(tier, guards=guards))
